"""An echo service on toolgate-service: the Go echo-service's answers, in Python.

Run it (the broker's URL from --pulsar-url or TOOLGATE_PULSAR_URL)::

    python sdk/python/examples/echo.py --pulsar-url pulsar://127.0.0.1:6650

It announces two tools to gateways and stops on SIGTERM or Ctrl-C, finishing
the calls in flight. What ``echo`` does is chosen by the call's arguments::

    {"msg": "hi"}                          -> "hi"
    {"mode": "stream", "n": 1000}          -> chunks "0,", "1,", ... "999"
    {"mode": "sleep", "ms": 250, "msg": …} -> sleeps (until the deadline at most), then answers msg
    {"mode": "fail", "type": "not-found", "message": "…"} -> that error
    {"mode": "user"}                       -> the envelope's user
    {"mode": "config"}                     -> the tool's config values, as JSON
    {"mode": "property", "name": "traceparent"} -> that property of the request message
    anything else                          -> the arguments, as JSON

``count`` streams from an async generator: ``{"n": 3}`` -> "0,", "1,", "2,".
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import pulsar

from toolgate_service import (
    DEFAULT_LEASE,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_STOP_GRACE,
    Announcement,
    Call,
    Config,
    Service,
    ToolError,
    serve,
)
from toolgate_service.pulsar_broker import PulsarBroker
from toolgate_service.wire import DEFAULT_ANNOUNCE_TOPIC

ECHO_SCHEMA = {
    "type": "object",
    "properties": {
        "msg": {"description": "what to answer"},
        "mode": {"type": "string", "enum": ["stream", "sleep", "fail", "user", "config", "property"]},
        "n": {"type": "integer", "minimum": 1},
        "gap_ms": {"type": "integer", "minimum": 0},
        "ms": {"type": "integer", "minimum": 0},
        "type": {"type": "string"},
        "message": {"type": "string"},
        "name": {"type": "string"},
    },
}

COUNT_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 1000000}},
    "required": ["n"],
    "additionalProperties": False,
}


def int_arg(a: dict[str, Any], key: str, default: int) -> int:
    v = a.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return default
    return int(v)


async def echo(call: Call) -> Any:
    """Echo the arguments back (see sdk/python/examples/echo.py for its modes)."""
    a = call.arguments
    mode = a.get("mode")
    if mode == "stream":
        n = int_arg(a, "n", 10)
        if n < 1:
            raise ToolError("invalid-argument", "n must be at least 1")
        gap = int_arg(a, "gap_ms", 0) / 1000
        for i in range(n - 1):
            await call.send(f"{i},")
            if gap > 0:
                await asyncio.sleep(gap)
        return str(n - 1)
    if mode == "sleep":
        await asyncio.sleep(int_arg(a, "ms", 100) / 1000)
        return a.get("msg", "slept")
    if mode == "fail":
        message = a.get("message") or "failed as asked"
        if a.get("type"):
            raise ToolError(str(a["type"]), str(message))
        raise RuntimeError(message)  # reported as tool-service-error
    if mode == "user":
        return call.user
    if mode == "config":
        return call.config
    if mode == "property":
        return call.properties.get(str(a.get("name", "")), "")
    return a.get("msg", a)


async def count(call: Call) -> AsyncIterator[str]:
    """Count from 0 to n - 1, one chunk each."""
    for i in range(int_arg(call.arguments, "n", 0)):
        yield f"{i},"


def main() -> int:
    p = argparse.ArgumentParser(description="An echo tool service on toolgate-service.")
    p.add_argument("--pulsar-url", default=os.environ.get("TOOLGATE_PULSAR_URL", "pulsar://127.0.0.1:6650"))
    p.add_argument(
        "--pulsar-token-file",
        default=os.environ.get("TOOLGATE_PULSAR_TOKEN_FILE", ""),
        help="a file holding the broker's token, read again on every connection",
    )
    p.add_argument("--pulsar-tls-ca", default=os.environ.get("TOOLGATE_PULSAR_TLS_CA", ""), help="CA for pulsar+ssl:// URLs")
    p.add_argument("--id", default="echo-service", help="service id; the request subscription is <id>-request")
    p.add_argument("--topic", default="echo", help="short topic name: non-persistent://tg/request/<topic>")
    p.add_argument("--tool-prefix", default="", help="put before the tools' names (echo, count)")
    p.add_argument("--concurrency", type=int, default=max(256, DEFAULT_MAX_CONCURRENCY), help="calls handled at once")
    p.add_argument("--stop-grace", type=float, default=DEFAULT_STOP_GRACE, help="seconds a stop waits for calls in flight")
    p.add_argument("--announce", action=argparse.BooleanOptionalAction, default=True, help="announce the tools to gateways")
    p.add_argument("--announce-topic", default=os.environ.get("TOOLGATE_ANNOUNCE_TOPIC", DEFAULT_ANNOUNCE_TOPIC))
    p.add_argument("--announce-lease", type=float, default=DEFAULT_LEASE, help="seconds; renewed every third of it")
    p.add_argument("--log-level", default="INFO")
    a = p.parse_args()
    logging.basicConfig(level=a.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    auth = None
    if a.pulsar_token_file:
        path = a.pulsar_token_file

        def token() -> str:
            with open(path) as f:
                return f.read().strip()

        try:
            token()  # unreadable or missing: fail now, not at the first connection
        except OSError as e:
            p.error(f"--pulsar-token-file: {e}")
        auth = pulsar.AuthenticationToken(token)
    svc = Service(
        Config(
            id=a.id,
            topic=a.topic,
            pulsar_url=a.pulsar_url,
            max_concurrency=a.concurrency,
            stop_grace=a.stop_grace,
            announce=Announcement(topic=a.announce_topic, lease=a.announce_lease) if a.announce else None,
        ),
        broker=PulsarBroker(a.pulsar_url, authentication=auth, tls_trust_certs_file=a.pulsar_tls_ca),
    )
    svc.tool(a.tool_prefix + "echo", input_schema=ECHO_SCHEMA)(echo)
    svc.tool(a.tool_prefix + "count", input_schema=COUNT_SCHEMA)(count)
    return serve(svc)


if __name__ == "__main__":
    raise SystemExit(main())
