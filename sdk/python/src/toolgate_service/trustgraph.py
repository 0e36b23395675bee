"""A drop-in for TrustGraph's ``DynamicToolService``, on toolgate's contract.

A TrustGraph tool service subclasses ``trustgraph.base.DynamicToolService``
and implements ``async def invoke(self, config, arguments)``. Changing its
import to this module's class::

    from toolgate_service.trustgraph import DynamicToolService

keeps its code, its command line (``-p/--pulsar-host``, ``-t/--topic``,
``--id``, ``--concurrency``, ``--pulsar-api-key``; TrustGraph's logging and
metrics flags are taken and ignored) and its wire format (TrustGraph's agents
still call it), and gives it toolgate's contract: replies on the caller's
``reply-to`` topic, numbered chunks, receipts and kept replies for requests
published again, cancels, deadlines, an announcement of the instance with a
lease, withdrawn on a graceful stop (SIGTERM). It needs no TrustGraph package.

The service answers one tool, announced as ``--tool-name`` (default: the
service id) with the ``--config-param`` names it takes and the
``--tool-config NAME=VALUE`` values its calls carry (TrustGraph's tool
descriptor's own, such as the joke service's ``style``). A subclass may set
:attr:`DynamicToolService.tool_description`,
:attr:`DynamicToolService.input_schema` and
:attr:`DynamicToolService.config_params` instead of the flags.

Differences from TrustGraph's class: ``invoke`` may also stream, by awaiting
``self.send(chunk)`` (see :meth:`DynamicToolService.send`); an exception
named ``TooManyRequests`` (TrustGraph's) answers ``too-many-requests``
instead of leaving the request to the consumer's retry; ``--concurrency``
defaults to the SDK's 64, not 1; no Prometheus metrics; the Kafka and
RabbitMQ backends are not offered (tool services run on Pulsar only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from typing import Any

from . import wire
from .announce import DEFAULT_LEASE, Announcement, ConfigParam
from .errors import Abandoned, ToolError
from .main import EXIT_ABANDONED, exit_now
from .pulsar_broker import PulsarBroker
from .service import DEFAULT_MAX_CONCURRENCY, DEFAULT_STOP_GRACE, Call, Config, Service, Tool
from .transport import Broker

__all__ = ["DynamicToolService", "TooManyRequests"]

DEFAULT_TOPIC = "tool"
"""TrustGraph's default ``--topic``."""
DEFAULT_PULSAR_HOST = os.getenv("PULSAR_HOST", "pulsar://pulsar:6650")
"""TrustGraph's default ``--pulsar-host`` (env ``PULSAR_HOST``)."""

logger = logging.getLogger(__name__)

_current: contextvars.ContextVar[Call] = contextvars.ContextVar("toolgate_trustgraph_call")


class TooManyRequests(Exception):
    """Raised by ``invoke`` when the service is overloaded: the caller gets
    ``too-many-requests``. TrustGraph's own ``TooManyRequests`` does the same."""


class DynamicToolService:
    """TrustGraph's ``DynamicToolService`` on toolgate-service.

    Subclasses override :meth:`invoke`. ``params`` are TrustGraph's (what
    :meth:`launch` parses: ``id``, ``topic``, ``pulsar_host``,
    ``pulsar_api_key``, ``concurrency``, …) and toolgate's (``tool_name``,
    ``tool_description``, ``config_param``, ``tool_config``, ``announce``,
    ``announce_topic``, ``announce_lease``, ``stop_grace``); unknown ones
    are ignored. ``broker`` replaces the Pulsar client (a test's
    :class:`~toolgate_service.testing.MemoryBroker`).
    """

    tool_description: str = ""
    """The announced tool's description (``--tool-description`` wins)."""
    input_schema: Mapping[str, Any] | None = None
    """The JSON Schema of the arguments; None announces ``{"type": "object"}``."""
    config_params: Sequence[str] = ()
    """The config values the service takes (``--config-param`` adds to them)."""

    def __init__(self, **params: Any) -> None:
        self.id: str = params.get("id") or "tool-service"
        self._topic: str = params.get("topic") or DEFAULT_TOPIC
        names = list(self.config_params) + [n for n in params.get("config_param") or () if n not in self.config_params]
        announcement = None
        if params.get("announce", True):
            announcement = Announcement(
                topic=params.get("announce_topic") or wire.DEFAULT_ANNOUNCE_TOPIC,
                lease=float(params.get("announce_lease") or 0.0),
                config_params=tuple(ConfigParam(n) for n in names),
            )
        url = params.get("pulsar_host") or DEFAULT_PULSAR_HOST
        broker: Broker | None = params.get("broker")
        if broker is None:
            key = params.get("pulsar_api_key")
            auth = None
            if key:
                import pulsar

                auth = pulsar.AuthenticationToken(key)
            broker = PulsarBroker(url, authentication=auth)
        self.service = Service(
            Config(
                id=self.id,
                topic=self._topic,
                pulsar_url=url,
                max_concurrency=int(params.get("concurrency") or DEFAULT_MAX_CONCURRENCY),
                stop_grace=float(params.get("stop_grace") or DEFAULT_STOP_GRACE),
                announce=announcement,
                logger=logger,
            ),
            broker=broker,
        )
        """The toolgate-service :class:`Service` that serves :meth:`invoke`."""
        self.service.add_tool(
            Tool(
                name=params.get("tool_name") or self.id,
                handler=self._handle,
                description=params.get("tool_description") or self.tool_description or type(self).__doc__ or "",
                input_schema=self.input_schema,
                config=_tool_config(params.get("tool_config")),
            )
        )

    async def invoke(self, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
        """Answer one call: ``config`` holds the tool's config values,
        ``arguments`` the caller's. A string is the reply as it is; anything
        else is sent as JSON. An exception answers ``tool-service-error``
        with its text (a :class:`~toolgate_service.ToolError` its own type)."""
        raise NotImplementedError("Subclasses must implement invoke()")

    async def send(self, chunk: Any) -> None:
        """Stream a chunk of the current call's reply before ``invoke``
        returns the last (toolgate's; TrustGraph's class has none)."""
        await _current.get().send(chunk)

    @property
    def call(self) -> Call:
        """The call ``invoke`` is answering (its id, properties, deadline, user)."""
        return _current.get()

    async def _handle(self, call: Call) -> Any:
        _current.set(call)  # the tool's task is the call's own: its context too
        try:
            return await self.invoke(call.config, call.arguments)
        except ToolError:
            raise
        except Exception as e:
            if type(e).__name__ == "TooManyRequests":
                raise ToolError("too-many-requests", str(e) or "too many requests") from e
            raise

    async def start(self) -> None:
        """Called before the service subscribes; a subclass may override it
        (calling ``super().start()``) to prepare what ``invoke`` needs."""

    async def run(self) -> None:
        """Start, then serve until :meth:`stop`; then stop gracefully."""
        await self.start()
        await self.service.run()

    def stop(self) -> None:
        """Make :meth:`run` stop gracefully (on the service's event loop)."""
        self.service.stop()

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        """TrustGraph's flags that a tool service uses, and toolgate's."""
        parser.add_argument("-p", "--pulsar-host", default=DEFAULT_PULSAR_HOST, help="Pulsar URL (env PULSAR_HOST)")
        parser.add_argument("--pulsar-api-key", default=os.getenv("PULSAR_API_KEY"), help="Pulsar token (env PULSAR_API_KEY)")
        parser.add_argument(
            "-t", "--topic", default=DEFAULT_TOPIC, help=f"request/response topic name (default: {DEFAULT_TOPIC})"
        )
        parser.add_argument("--concurrency", type=int, default=DEFAULT_MAX_CONCURRENCY, help="calls handled at once")
        parser.add_argument("-l", "--log-level", default="INFO")
        parser.add_argument(
            "--stop-grace", type=float, default=DEFAULT_STOP_GRACE, help="seconds a stop waits for calls in flight"
        )
        parser.add_argument("--tool-name", default="", help="the announced tool's name (default: the service id)")
        parser.add_argument("--tool-description", default="", help="the announced tool's description")
        parser.add_argument("--config-param", action="append", default=[], help="a config value the tool takes (repeat)")
        parser.add_argument(
            "--tool-config", action="append", default=[], metavar="NAME=VALUE", help="a config value the tool sets (repeat)"
        )
        parser.add_argument(
            "--announce", action=argparse.BooleanOptionalAction, default=True, help="announce the tool to gateways"
        )
        parser.add_argument("--announce-topic", default=os.getenv("TOOLGATE_ANNOUNCE_TOPIC", wire.DEFAULT_ANNOUNCE_TOPIC))
        parser.add_argument("--announce-lease", type=float, default=DEFAULT_LEASE, help="seconds; renewed every third of it")
        # TrustGraph's, taken so that its command lines still work; nothing here uses them.
        ignored = parser.add_argument_group("TrustGraph flags taken and ignored")
        ignored.add_argument("--pubsub-backend", default="pulsar", help=argparse.SUPPRESS)
        ignored.add_argument("--pulsar-admin-url", help=argparse.SUPPRESS)
        ignored.add_argument("--pulsar-listener", help=argparse.SUPPRESS)
        ignored.add_argument("--config-push-queue", help=argparse.SUPPRESS)
        ignored.add_argument("--config-timeout", type=int, help=argparse.SUPPRESS)
        ignored.add_argument("--metrics", action=argparse.BooleanOptionalAction, default=False, help=argparse.SUPPRESS)
        ignored.add_argument("-P", "--metrics-port", type=int, help=argparse.SUPPRESS)
        ignored.add_argument("--loki-enabled", dest="loki_enabled", action="store_true", help=argparse.SUPPRESS)
        ignored.add_argument("--no-loki-enabled", dest="loki_enabled", action="store_false", help=argparse.SUPPRESS)
        for flag in ("--loki-url", "--loki-username", "--loki-password"):
            ignored.add_argument(flag, help=argparse.SUPPRESS)

    @classmethod
    def launch(cls, ident: str, doc: str | None) -> None:
        """Parse the command line, run the service until SIGTERM or Ctrl-C,
        stop gracefully and exit (TrustGraph's entry point)."""
        parser = argparse.ArgumentParser(prog=ident, description=doc)
        parser.add_argument(
            "--id", default=ident, help=f"service id; the request subscription is <id>-request (default: {ident})"
        )
        cls.add_args(parser)
        args = vars(parser.parse_args())
        level = str(args.get("log_level") or "INFO").upper()
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if args.get("pubsub_backend", "pulsar") != "pulsar":
            parser.error("tool services run on Pulsar only (--pubsub-backend pulsar)")
        try:
            processor = cls(**args)
        except (ValueError, TypeError) as e:
            parser.error(str(e))

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, processor.stop)
            await processor.run()

        try:
            asyncio.run(main())
        except Abandoned:
            exit_now(EXIT_ABANDONED)
        exit_now(0)  # not through the interpreter's finalization: see serve()


def _tool_config(v: Mapping[str, Any] | Sequence[str] | None) -> dict[str, Any]:
    """The announced tool's config values: a mapping, or ``NAME=VALUE`` strings."""
    if not v:
        return {}
    if isinstance(v, Mapping):
        return dict(v)
    out: dict[str, Any] = {}
    for item in v:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise ValueError(f"--tool-config {item!r}: want NAME=VALUE")
        out[name] = value
    return out
