"""The service: takes tool calls from a request topic and answers them.

The contract is the Go SDK's (``toolservice``): replies where the request
asks (``reply-to``, within the response namespace), numbered chunks under
the caller's credit, receipts and kept replies for requests published
again, the cancel topic, an announcement per instance with a lease, and a
stop that withdraws first and ends within its grace.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import announce as ann
from . import wire
from .chunks import ChunkSender
from .errors import Abandoned, CallerGone, PublishError, QueueFull, ToolError
from .state import Calls, RateLog, RecentReplies
from .text import to_text
from .transport import Broker, Message, Subscription

DEFAULT_MAX_CONCURRENCY = 64
"""Calls handled at once, by default."""
DEFAULT_STOP_GRACE = 10.0
"""How long (s) a stop waits for the calls in flight before cancelling them."""
STOP_MARGIN = 2.0
"""How long (s) past the grace a stop may take: for the calls cancelled at
its end to answer, and for subscriptions, producers and client to close."""
CALLS_END_WAIT = 1.0
"""How long (s) calls cancelled at the end of the grace have to answer."""
WITHDRAW_SETTLE = 0.25
"""How long (s) a stopping instance keeps taking calls after it withdrew,
for gateways to see the withdrawal."""
DEFAULT_MAX_REQUEST_BYTES = 5 << 20
"""The largest request payload taken (Pulsar's own default message bound)."""
MAX_ID_LENGTH = 256
"""The longest call id taken: ids are kept (running calls, early cancels,
kept replies), so their length is bounded like their number."""
REPLY_PUBLISH_BOUND = 30.0
"""How long (s) a call's last reply, or its chunks' receipts, are waited for."""
MAX_SCHEMA_BYTES = 64 << 10
"""The largest input schema a gateway takes (its JSON encoding)."""
MAX_SCHEMA_DEPTH = 32
"""The deepest nesting of objects and lists in an input schema a gateway takes."""


@dataclass
class Config:
    """Which topics a service uses and how it behaves; the defaults are the
    Go SDK's.

    ``topic`` is the short form: requests on ``non-persistent://tg/request/<topic>``,
    replies on ``non-persistent://tg/response/<topic>``. ``request_topic`` and
    ``response_topic``, when set, override it (full names, or TrustGraph's
    ``request:tg:joke``). ``request_queue`` (0: ``max(10000, 4 *
    max_concurrency)``) is how many requests the consumer takes ahead of
    the tools: the request topic is non-persistent, so what is beyond it
    the broker drops. ``announce``, when set, announces the service's tools
    to gateways while it runs.
    """

    id: str
    topic: str = ""
    request_topic: str = ""
    response_topic: str = ""
    pulsar_url: str = ""
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    request_queue: int = 0
    stop_grace: float = DEFAULT_STOP_GRACE
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    announce: ann.Announcement | None = None
    logger: logging.Logger | None = None


@dataclass(frozen=True)
class Stats:
    """A service's counters since it was made."""

    handled: int = 0
    """Calls whose tool returned (or failed)."""
    dropped: int = 0
    """Requests dropped because their deadline had passed before their turn."""
    cancelled: int = 0
    """Calls the caller gave up, while they ran here or before they began."""
    resent: int = 0
    """Replies published again at a caller's request."""
    repeated: int = 0
    """Requests published again for a call taken here already: not run
    again, a receipt or the kept reply sent instead."""


class Call:
    """One call as the tool sees it."""

    def __init__(
        self,
        *,
        call_id: str,
        tool: str,
        user: str,
        config: dict[str, Any],
        arguments: dict[str, Any],
        properties: Mapping[str, str],
        deadline: float | None,
        send: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.id = call_id
        """The caller's correlation id."""
        self.tool = tool
        """The name of the tool called."""
        self.user = user
        """The caller's identity, as the gateway authenticated it."""
        self.config = config
        """The configuration values of the tool that was called."""
        self.arguments = arguments
        """The call's arguments, as JSON decodes them."""
        self.properties = properties
        """The request message's properties (id, deadline, traceparent, …)."""
        self.deadline = deadline
        """The call's absolute deadline, Unix seconds; None without one."""
        self._send = send

    async def send(self, chunk: Any) -> None:
        """Stream one chunk of the reply before the tool returns the last.

        It waits only for the caller's credit, or while 64 chunks await
        the broker's receipt; raises :class:`CallerGone` once the caller
        has given the call up, and the publish failure once a chunk is lost
        (the caller then receives an error instead of the last reply).
        """
        if self._send is None:
            raise RuntimeError("send on a Call that no service delivered")
        await self._send(to_text(chunk))

    async def log(self, level: str, data: Any) -> None:
        """Send a log record to the caller while the call runs: a chunk
        ``{"log": {"level": level, "data": data}}``, which a gateway's MCP
        door hands to MCP clients as a log message for tools whose result
        is MCP content. ``level`` is one of RFC 5424's, as MCP names them."""
        if level not in _LOG_LEVELS:
            raise ValueError(f"log level {level!r} is not one of {', '.join(_LOG_LEVELS)}")
        await self.send(json.dumps({"log": {"level": level, "data": data}}, ensure_ascii=False, separators=(",", ":")))


_LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

UnaryTool = Callable[[Call], Awaitable[Any]]
StreamTool = Callable[[Call], AsyncIterator[Any]]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Tool:
    """A tool of the service: its handler and what gateways are told of it.

    ``handler`` is a coroutine function taking the :class:`Call` (unary:
    what it returns is the reply; it may stream with ``call.send`` first)
    or an async generator function (a stream: each item is a chunk).
    ``input_schema`` is the JSON Schema of the arguments object ("type":
    "object" at its root; gateways check every call against it).
    """

    name: str
    handler: Callable[[Call], Any]
    description: str = ""
    input_schema: Mapping[str, Any] | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    task_support: str = ""
    result: str = ""

    @property
    def streams(self) -> bool:
        """Whether the handler is an async generator."""
        return _is_async_gen(self.handler)


def _is_async_gen(fn: Any) -> bool:
    # A callable object's __call__ counts too.
    return inspect.isasyncgenfunction(fn) or inspect.isasyncgenfunction(type(fn).__call__)


def _is_coroutine(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _depth(v: Any, limit: int) -> int:
    """The nesting of v's objects and lists, counted up to limit + 1."""
    best = 0
    stack: list[tuple[Any, int]] = [(v, 0)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            items: Iterable[Any] = x.values()
        elif isinstance(x, list):
            items = x
        else:
            continue
        best = max(best, d + 1)
        if best > limit:
            return best
        stack.extend((y, d + 1) for y in items)
    return best


def _check_schema(name: str, schema: Mapping[str, Any]) -> None:
    if schema.get("type") != "object":
        raise ValueError(f'tool {name!r}: the input schema needs "type": "object" at its root')
    try:
        b = json.dumps(schema, allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise ValueError(f"tool {name!r}: the input schema is not JSON: {e}") from e
    if len(b) > MAX_SCHEMA_BYTES:
        raise ValueError(f"tool {name!r}: the input schema is {len(b)} bytes, over the {MAX_SCHEMA_BYTES} gateways take")
    if _depth(dict(schema), MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise ValueError(f"tool {name!r}: the input schema nests deeper than {MAX_SCHEMA_DEPTH}")


class _Running:
    """A call running here: its handler's task and why it was ended."""

    __slots__ = ("chunks", "reason", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.reason = ""
        self.chunks: ChunkSender | None = None

    def end(self, reason: str) -> None:
        if not self.reason:
            self.reason = reason
        if self.task is not None:
            self.task.cancel()

    def give_up(self) -> None:
        """The caller gave the call up."""
        self.end("caller")
        if self.chunks is not None:
            self.chunks.cancel()


@dataclass(eq=False)
class _ReceiptWait:
    """A call taken here that asked for a receipt."""

    id: str
    topic: str
    done: bool = False
    timer: asyncio.TimerHandle | None = None
    sending: asyncio.Task[None] | None = None

    def replied(self) -> None:
        self.done = True


class Service:
    """A tool service: its tools, served from its request topic by :meth:`run`.

    A minimal one::

        svc = Service(Config(id="joke-service", topic="joke", pulsar_url="pulsar://127.0.0.1:6650"))

        @svc.tool(description="Tell a joke", input_schema={"type": "object"})
        async def tell_joke(call: Call) -> str:
            return "Why did the snake cross the road?"

        serve(svc)  # until SIGTERM; then finishes the calls in flight

    ``broker`` replaces the Pulsar client made from ``config.pulsar_url``
    (a :class:`~toolgate_service.pulsar_broker.PulsarBroker` with
    authentication or a client of the program's, or a test's broker); the
    service closes it when it stops.
    """

    def __init__(self, config: Config, *, broker: Broker | None = None, tools: Iterable[Tool] = ()) -> None:
        if not config.id:
            raise ValueError("toolgate_service: empty id")
        if config.request_topic or config.response_topic:
            req = wire.expand_queue(config.request_topic)
            resp = wire.expand_queue(config.response_topic)
        elif config.topic:
            req, resp = wire.request_topic(config.topic), wire.response_topic(config.topic)
            wire.validate_topic(req)
        else:
            raise ValueError("toolgate_service: set topic, or request_topic and response_topic")
        if broker is None and not config.pulsar_url:
            raise ValueError("toolgate_service: empty pulsar_url")
        self.config = config
        self.request_topic = req
        """The topic the service listens on."""
        self.response_topic = resp
        """Where it answers, unless a request names a reply topic of its own in
        the response namespace (``reply-to``): then there, and only there."""
        self.instance = secrets.token_hex(6)
        """This instance (replica) of the service: random per Service."""
        self._max_concurrency = config.max_concurrency if config.max_concurrency > 0 else DEFAULT_MAX_CONCURRENCY
        self._request_queue = config.request_queue if config.request_queue > 0 else max(10000, 4 * self._max_concurrency)
        self._stop_grace = config.stop_grace if config.stop_grace > 0 else DEFAULT_STOP_GRACE
        self._max_request_bytes = config.max_request_bytes if config.max_request_bytes > 0 else DEFAULT_MAX_REQUEST_BYTES
        self._log = (config.logger or logging.getLogger("toolgate_service")).getChild(config.id)
        self._slow = RateLog(self._log)
        self._broker = broker
        self._flow_topic = wire.flow_topic(req, self.instance)
        self._cancel_topic = wire.cancel_topic(req)
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add_tool(t)

        self._calls = Calls()
        self._recent = RecentReplies()
        self._receipts: dict[str, _ReceiptWait] = {}
        self._flows: dict[str, ChunkSender] = {}
        self._waiting: deque[tuple[Message, _ReceiptWait | None]] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._states: set[_Running] = set()
        self._aux: set[asyncio.Task[None]] = set()
        self._sub: Subscription | None = None
        self._paused = False
        self._stopped = False
        self._ready = asyncio.Event()
        self._stop_event = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._announcer: asyncio.Task[None] | None = None
        self._announced = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stats = {"handled": 0, "dropped": 0, "cancelled": 0, "resent": 0, "repeated": 0}

    # --- tools ------------------------------------------------------------

    def add_tool(self, tool: Tool) -> None:
        """Add a tool; raises ValueError for one gateways would refuse."""
        if not tool.name:
            raise ValueError("a tool needs a name")
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} added twice")
        if not (_is_coroutine(tool.handler) or _is_async_gen(tool.handler)):
            raise TypeError(f"tool {tool.name!r}: the handler must be a coroutine function or an async generator function")
        if tool.input_schema is not None:
            _check_schema(tool.name, tool.input_schema)
        if tool.task_support not in ("", "forbidden", "optional", "required"):
            raise ValueError(f"tool {tool.name!r}: task_support must be forbidden, optional or required")
        if tool.result not in ("", "text", wire.RESULT_MCP_CONTENT):
            raise ValueError(f"tool {tool.name!r}: result must be text or {wire.RESULT_MCP_CONTENT}")
        if ann.TOOL_PARAM in tool.config:
            raise ValueError(f"tool {tool.name!r}: config key {ann.TOOL_PARAM!r} is the SDK's own")
        self._tools[tool.name] = tool

    def tool(
        self,
        name: str = "",
        *,
        description: str = "",
        input_schema: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        task_support: str = "",
        result: str = "",
    ) -> Callable[[F], F]:
        """A decorator adding the function as a tool (named after it by default)."""

        def register(fn: F) -> F:
            self.add_tool(
                Tool(
                    name=name or fn.__name__,
                    handler=fn,
                    description=description or inspect.getdoc(fn) or "",
                    input_schema=input_schema,
                    config=dict(config or {}),
                    task_support=task_support,
                    result=result,
                )
            )
            return fn

        return register

    @property
    def tools(self) -> list[Tool]:
        """The service's tools."""
        return list(self._tools.values())

    def stats(self) -> Stats:
        """The service's counters."""
        return Stats(**self._stats)

    async def wait_ready(self) -> None:
        """Return once :meth:`run` has subscribed: calls published from
        then on reach the service (the request topic is non-persistent)."""
        await self._ready.wait()

    def stop(self) -> None:
        """Make :meth:`run` stop gracefully (call it on the service's loop,
        e.g. from a signal handler)."""
        self._stop_event.set()

    # --- run and stop -----------------------------------------------------

    async def run(self) -> None:
        """Subscribe and serve calls until :meth:`stop`, then stop.

        The stop withdraws the announcement, keeps taking calls for a
        moment while gateways see that, closes the request subscription
        (running what it had taken), waits up to ``stop_grace`` for the
        calls in flight and cancels them then, and closes the rest — all
        within ``stop_grace`` + :data:`STOP_MARGIN`. Raises
        :class:`Abandoned` when something had not closed by then (the
        broker does not answer), and the error when it cannot subscribe.
        """
        if not self._tools:
            raise ValueError(f"toolgate_service {self.config.id}: no tools")
        self._loop = asyncio.get_running_loop()
        if self._broker is None:
            from .pulsar_broker import PulsarBroker

            self._broker = PulsarBroker(self.config.pulsar_url, logger=self._log)
        broker = self._broker
        sid = self.config.id
        try:
            sub = await broker.subscribe(
                self.request_topic, f"{sid}-request", shared=True, on_message=self._on_request, queue_size=self._request_queue
            )
        except Exception:
            await broker.close(self._stop_grace)
            raise
        self._sub = sub
        # The flow topic before the first call: a caller's grants must find it.
        flow_sub: Subscription | None = None
        try:
            flow_sub = await broker.subscribe(
                self._flow_topic, f"{sid}-flow", shared=False, on_message=self._grant, queue_size=self._request_queue
            )
        except Exception as e:
            self._log.warning(
                "cannot subscribe to the flow topic %s; streams are sent without flow control: %s", self._flow_topic, e
            )
            self._flow_topic = ""
        # Cancels of calls whose instance the caller does not know: each
        # instance hears them all, on a subscription of its own.
        cancel_sub: Subscription | None = None
        try:
            cancel_sub = await broker.subscribe(
                self._cancel_topic,
                f"{sid}-cancel-{self.instance}",
                shared=False,
                on_message=self._grant,
                queue_size=self._request_queue,
            )
        except Exception as e:
            self._log.warning(
                "cannot subscribe to the cancel topic %s; calls given up before their first chunk run to their end: %s",
                self._cancel_topic,
                e,
            )
            self._cancel_topic = ""
        self._ready.set()
        self._log.info(
            "tool service listening: request_topic=%s response_topic=%s subscription=%s-request instance=%s"
            " max_concurrency=%d flow_topic=%s cancel_topic=%s",
            self.request_topic,
            self.response_topic,
            sid,
            self.instance,
            self._max_concurrency,
            self._flow_topic,
            self._cancel_topic,
        )
        try:
            await self._announce_on_start()
            await self._stop_event.wait()
        except asyncio.CancelledError:
            await self._stop(sub, flow_sub, cancel_sub)
            raise
        await self._stop(sub, flow_sub, cancel_sub)

    async def _stop(self, sub: Subscription, flow_sub: Subscription | None, cancel_sub: Subscription | None) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        grace_end = start + self._stop_grace
        deadline = grace_end + STOP_MARGIN

        def left(until: float) -> float:
            return max(0.0, until - loop.time())

        await self._withdraw_on_stop(grace_end)  # gateways stop routing calls here first
        # What the consumer holds is handed over before it closes; it
        # closes within the grace, or is left closing.
        if self._paused:
            sub.resume()
            self._paused = False
        await _within(sub.close(), left(grace_end))
        # The requests taken begin while the grace lasts; then no more.
        await _within(self._drained.wait(), left(grace_end))
        self._stopped = True
        while self._waiting:
            _, rw = self._waiting.popleft()
            if rw is not None:
                self._spawn(self._end_receipted(rw))
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=left(grace_end))
            if pending:
                self._log.warning("stop grace period over; cancelling %d call(s) in flight", len(pending))
                for state in list(self._states):
                    state.end("stop")
                await asyncio.wait(pending, timeout=CALLS_END_WAIT)
        # The flow and cancel subscriptions after the calls, whose streams
        # and cancels they serve; replies being sent again before the close.
        closes = [s.close() for s in (flow_sub, cancel_sub) if s is not None]
        await _within(asyncio.gather(*closes, return_exceptions=True), left(deadline))
        if self._aux:
            await asyncio.wait(set(self._aux), timeout=left(deadline))
        assert self._broker is not None
        abandoned = await self._broker.close(left(deadline))
        running = sum(1 for t in self._tasks if not t.done())
        s = self._stats
        if not abandoned and not running:
            self._log.info("tool service stopped: handled=%d dropped=%d cancelled=%d", s["handled"], s["dropped"], s["cancelled"])
            return
        self._log.warning(
            "tool service stopped at its deadline, abandoning what had not closed (the broker does not answer):"
            " took=%.3fs left=%s calls=%d handled=%d",
            loop.time() - start,
            abandoned,
            running,
            s["handled"],
        )
        raise Abandoned(
            f"toolgate_service {self.config.id}: stopped at its deadline; {len(abandoned)} close(s) and {running} call(s) left"
        )

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        """A task of the service's own, waited for before the broker closes."""
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._aux.add(task)
        task.add_done_callback(self._aux.discard)
        return task

    # --- requests ---------------------------------------------------------

    def _on_request(self, m: Message) -> None:
        """Take a request (on the loop, from the subscription)."""
        if self._stopped:
            # Handed over by a subscription whose close the stop no longer
            # waited for: nobody waits for the call now. A gateway hears
            # the instance is gone and publishes it again.
            return
        # toolgate's words in one property, as properties of their own.
        m.properties = wire.expand_call(m.properties)
        rw: _ReceiptWait | None = None
        if m.properties.get(wire.PROP_RECEIPT):
            # Before waiting for a slot: the receipt's clock starts when the
            # request is taken, not when it runs.
            rw, repeated = self._take_receipted(m)
            if repeated:
                return
        if len(self._tasks) < self._max_concurrency and not self._waiting:
            self._start(m, rw)
            return
        self._waiting.append((m, rw))
        self._drained.clear()
        if not self._paused and self._sub is not None and len(self._waiting) >= self._max_concurrency:
            # The rest waits in the consumer's queue (request_queue deep).
            self._sub.pause()
            self._paused = True

    def _start(self, m: Message, rw: _ReceiptWait | None) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(m, rw))
        self._tasks.add(task)
        task.add_done_callback(self._served)

    def _served(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error("serving a call failed", exc_info=task.exception())
        while self._waiting and len(self._tasks) < self._max_concurrency and not self._stopped:
            m, rw = self._waiting.popleft()
            self._start(m, rw)
        if not self._waiting:
            self._drained.set()
        if self._paused and len(self._waiting) <= self._max_concurrency // 2 and self._sub is not None:
            self._sub.resume()
            self._paused = False

    def _reply_topic_of(self, props: Mapping[str, str], warn: bool) -> str:
        """Where the replies of a request go: its reply-to (a gateway's own
        topic) when that is in the response namespace, else the response
        topic."""
        rt = props.get(wire.PROP_REPLY_TO, "")
        if not rt:
            return self.response_topic
        if wire.reply_to_allowed(rt, self.response_topic):
            return rt
        if warn:
            self._slow.warning(
                "reply-to",
                "ignoring a reply-to outside the response namespace; answering on the response topic:"
                " id=%.64s reply_to=%.200s response_topic=%s",
                props.get(wire.PROP_ID, ""),
                rt,
                self.response_topic,
            )
        return self.response_topic

    async def _publish_retrying(self, topic: str, msg: Message, bound: float) -> None:
        """Publish, waiting for room in a full producer queue a little longer
        each time, for ``bound`` seconds at most."""
        loop = asyncio.get_running_loop()
        end = loop.time() + bound
        wait = 0.005
        assert self._broker is not None
        while True:
            try:
                await asyncio.wait_for(self._broker.publish(topic, msg), timeout=max(0.001, end - loop.time()))
                return
            except QueueFull:
                if loop.time() + wait >= end:
                    raise
                await asyncio.sleep(wait)
                wait = min(2 * wait, 0.25)

    def _pick(self, config: dict[str, Any]) -> Tool:
        name = config.pop(ann.TOOL_PARAM, None)
        if name is None or name == "":
            if len(self._tools) == 1:
                return next(iter(self._tools.values()))
            raise ToolError(
                "invalid-argument", f"the call names no tool (config {ann.TOOL_PARAM!r}); this service has {len(self._tools)}"
            )
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            raise ToolError("not-found", f"this service has no tool {str(name)[:200]!r}")
        return tool

    async def _serve(self, m: Message, rw: _ReceiptWait | None) -> None:
        try:
            await self._serve_call(m, rw)
        finally:
            if rw is not None:
                await self._end_receipted(rw)

    async def _serve_call(self, m: Message, rw: _ReceiptWait | None) -> None:
        props = m.properties
        call_id = props.get(wire.PROP_ID) or wire.UNKNOWN_ID  # what the Python base class answers with
        deadline = wire.parse_deadline(props.get(wire.PROP_DEADLINE, ""))
        if deadline is not None and time.time() > deadline:
            self._stats["dropped"] += 1
            self._log.debug("dropping request past its deadline: id=%s", call_id)
            return
        reply_topic = self._reply_topic_of(props, True)
        tracked = call_id != wire.UNKNOWN_ID and len(call_id) <= MAX_ID_LENGTH
        state = _Running()

        async def reply(r: wire.Response) -> None:
            if rw is not None:
                rw.replied()  # no receipt needed now
            seq = state.chunks.seq if state.chunks is not None else 0
            # Keyed by the id, and naming the instance: who answered, by
            # which a caller also learns that this service sends receipts.
            msg = Message(
                payload=wire.encode_response(r),
                properties={wire.PROP_ID: call_id, wire.PROP_SEQ: str(seq), wire.PROP_INSTANCE: self.instance},
                key=call_id,
            )
            if r.end_of_stream and tracked:
                # Kept a minute, should the caller miss it; kept first, as
                # the caller may ask as soon as it is out.
                self._recent.keep(call_id, reply_topic, msg)
            await self._publish_retrying(reply_topic, msg, REPLY_PUBLISH_BOUND)

        async def fail(typ: str, text: str) -> None:
            try:
                await reply(wire.Response(error=wire.Error(typ, text), end_of_stream=True))
            except Exception as e:
                self._slow.warning("error-reply", "cannot send an error reply: id=%.64s err=%s", call_id, e)

        if len(call_id) > MAX_ID_LENGTH:
            await fail("invalid-argument", f"the request's id is longer than {MAX_ID_LENGTH} characters")
            return
        if tracked and not self._calls.start(call_id, state.give_up):
            # Given up before its turn came: the tool does not run.
            self._stats["cancelled"] += 1
            await fail("cancelled", "the caller gave the call up before it started")
            return
        self._states.add(state)
        try:
            await self._run_call(m, call_id, deadline, reply_topic, tracked, state, reply, fail, rw)
        finally:
            self._states.discard(state)
            if tracked:
                self._calls.end(call_id, state.give_up)
            if state.chunks is not None and self._flows.get(call_id) is state.chunks:
                del self._flows[call_id]

    async def _run_call(
        self,
        m: Message,
        call_id: str,
        deadline: float | None,
        reply_topic: str,
        tracked: bool,
        state: _Running,
        reply: Callable[[wire.Response], Awaitable[None]],
        fail: Callable[[str, str], Awaitable[None]],
        rw: _ReceiptWait | None,
    ) -> None:
        props = m.properties
        if len(m.payload) > self._max_request_bytes:
            size, most = len(m.payload), self._max_request_bytes
            await fail("invalid-argument", f"the request is {size} bytes, over the {most} this service takes")
            return
        try:
            req = wire.decode_request(m.payload)
        except wire.MalformedError as e:
            self._slow.warning("malformed", "malformed request: id=%.64s err=%s", call_id, e)
            await fail("invalid-argument", f"request is not a tool-service request: {e}")
            return
        try:
            config = wire.decode_object(req.config)
        except wire.MalformedError as e:
            await fail("invalid-argument", f"config: {e}")
            return
        try:
            arguments = wire.decode_object(req.arguments)
        except wire.MalformedError as e:
            await fail("invalid-argument", f"arguments: {e}")
            return
        try:
            tool = self._pick(config)
        except ToolError as e:
            await fail(e.type, e.message)
            return

        async def send(text: str) -> None:
            if rw is not None:
                rw.replied()
            if state.chunks is None:
                state.chunks = self._new_chunks(reply_topic, call_id, tracked, props.get(wire.PROP_CREDIT, ""))
                if state.reason == "caller":
                    state.chunks.cancel()
            await state.chunks.send(text)

        call = Call(
            call_id=call_id,
            tool=tool.name,
            user=req.user,
            config=config,
            arguments=arguments,
            properties=props,
            deadline=deadline,
            send=send,
        )
        loop = asyncio.get_running_loop()
        body = _stream(tool, call) if tool.streams else tool.handler(call)
        task: asyncio.Task[Any] = loop.create_task(body)
        state.task = task
        timer = None
        if deadline is not None:
            timer = loop.call_at(loop.time() + (deadline - time.time()), state.end, "deadline")
        try:
            await asyncio.wait({task})
        finally:
            if timer is not None:
                timer.cancel()
        err: BaseException | None
        out: Any = None
        if task.cancelled():
            err = asyncio.CancelledError()
        else:
            err = task.exception()
            if err is None:
                out = task.result()
        if state.chunks is not None:
            # The last reply must not claim a whole stream when a chunk was
            # lost: every chunk's receipt first.
            try:
                await asyncio.wait_for(state.chunks.wait(), REPLY_PUBLISH_BOUND)
            except (PublishError, TimeoutError) as e:
                if err is None:
                    err = PublishError(f"a reply chunk could not be published: {e}")
        self._stats["handled"] += 1
        if err is not None:
            if state.reason == "caller" or isinstance(err, CallerGone):
                # Nobody reads it; sent all the same, so that a cancel the
                # caller did not send shows as an error.
                await fail("cancelled", "the caller gave the call up")
            elif isinstance(err, ToolError):
                await fail(err.type, err.message)
            elif state.reason == "deadline":
                await fail("timeout", "the request's deadline passed")
            elif state.reason == "stop":
                await fail("unavailable", "the service stopped before the call ended")
            else:
                if not isinstance(err, asyncio.CancelledError):
                    self._log.debug("tool %s failed: id=%s", tool.name, call_id, exc_info=err)
                await fail(wire.ERROR_TYPE_TOOL_SERVICE, str(err) or type(err).__name__)
            return
        try:
            text = to_text(out)
        except (TypeError, ValueError) as e:
            await fail(wire.ERROR_TYPE_TOOL_SERVICE, f"cannot encode the reply: {e}")
            return
        try:
            await reply(wire.Response(response=text, end_of_stream=True))
        except Exception as e:
            self._slow.warning("reply", "cannot send a reply: id=%.64s err=%s", call_id, e)

    def _new_chunks(self, reply_topic: str, call_id: str, tracked: bool, credit: str) -> ChunkSender:
        """The chunk sender of a call; flow-controlled when the caller asked
        (credit: its first window) and the flow topic is up."""
        assert self._broker is not None
        n = wire.parse_int(credit) if credit else None
        if n is None or n <= 0 or not self._flow_topic or not tracked:
            return ChunkSender(self._broker, reply_topic, call_id, instance=self.instance)
        cs = ChunkSender(self._broker, reply_topic, call_id, flow=self._flow_topic, limit=n, instance=self.instance)
        self._flows[call_id] = cs
        return cs

    # --- grants, cancels, resends -------------------------------------------

    def _grant(self, m: Message) -> None:
        """A message of the flow topic (a grant, or the caller gone) or of
        the cancel topic (a cancel, or a request for a reply again)."""
        props = m.properties
        call_id = props.get(wire.PROP_ID, "")
        credit = props.get(wire.PROP_CREDIT, "")
        if not call_id or call_id == wire.UNKNOWN_ID or len(call_id) > MAX_ID_LENGTH:
            return
        if credit == wire.CREDIT_RESEND:
            self._resend(call_id)
            return
        if credit == wire.CREDIT_CANCEL:
            if self._calls.cancel(call_id):
                self._stats["cancelled"] += 1
                self._log.debug("call given up by the caller; cancelled: id=%s", call_id)
            cs = self._flows.get(call_id)
            if cs is not None:
                cs.cancel()
            return
        cs = self._flows.get(call_id)
        if cs is None:
            return
        n = wire.parse_int(credit)
        if n is not None:
            cs.grant(n)

    def _resend(self, call_id: str) -> bool:
        """Publish once more the last reply of a call answered here within
        the last minute; reports whether there was one."""
        kept = self._recent.take(call_id)
        if kept is None:
            return False
        self._stats["resent"] += 1

        async def again() -> None:
            assert self._broker is not None
            try:
                await asyncio.wait_for(self._broker.publish(kept.topic, kept.msg), 10.0)
            except Exception as e:
                self._slow.warning("resend", "cannot send a reply again: id=%.64s topic=%s err=%s", call_id, kept.topic, e)

        self._spawn(again())
        return True

    # --- receipts -----------------------------------------------------------

    def _take_receipted(self, m: Message) -> tuple[_ReceiptWait | None, bool]:
        """Note a request that asks for a receipt and start the receipt's
        clock; True when the call is not new here (a receipt, or its kept
        reply, is sent instead and it is not run)."""
        call_id = m.properties.get(wire.PROP_ID, "")
        if not call_id or call_id == wire.UNKNOWN_ID or len(call_id) > MAX_ID_LENGTH:
            return None, False
        rw = _ReceiptWait(call_id, self._reply_topic_of(m.properties, False))
        if call_id in self._receipts:
            self._stats["repeated"] += 1
            self._log.debug("request published again for a call taken here; sending a receipt: id=%s", call_id)
            self._spawn(self._send_receipt(rw))
            return None, True
        if self._resend(call_id):  # it ended here already: its reply again
            self._stats["repeated"] += 1
            self._log.debug("request published again for a call answered here; its reply again: id=%s", call_id)
            return None, True
        self._receipts[call_id] = rw
        rw.timer = asyncio.get_running_loop().call_later(wire.RECEIPT_AFTER, self._receipt_due, rw)
        return rw, False

    def _receipt_due(self, rw: _ReceiptWait) -> None:
        if not rw.done:
            rw.sending = self._spawn(self._send_receipt(rw))

    async def _end_receipted(self, rw: _ReceiptWait) -> None:
        """Forget a call that asked for a receipt once it has ended (its last
        reply is kept by then), after any receipt being sent is out."""
        rw.done = True
        if rw.timer is not None:
            rw.timer.cancel()
        if rw.sending is not None:
            await asyncio.wait({rw.sending})
        if self._receipts.get(rw.id) is rw:
            del self._receipts[rw.id]

    async def _send_receipt(self, rw: _ReceiptWait) -> None:
        assert self._broker is not None
        msg = Message(properties={wire.PROP_ID: rw.id, wire.PROP_RECEIPT: "1", wire.PROP_INSTANCE: self.instance}, key=rw.id)
        try:
            await asyncio.wait_for(self._broker.publish(rw.topic, msg), 10.0)
        except Exception as e:
            self._slow.warning("receipt", "cannot send a receipt: id=%.64s topic=%s err=%s", rw.id, rw.topic, e)

    # --- announcements ------------------------------------------------------

    def announcement_payload(self) -> bytes:
        """The message announcing this service and its tools."""
        a = self.config.announce or ann.Announcement()
        specs = [
            ann.ToolSpec(t.name, t.description, t.input_schema, t.config, t.task_support, t.result) for t in self._tools.values()
        ]
        return ann.payload(self.config.id, self.request_topic, self.response_topic, a, specs)

    async def announce(self) -> None:
        """Announce this instance (again): its tools, with its lease."""
        assert self._broker is not None
        a = self.config.announce or ann.Announcement()
        props = {wire.PROP_INSTANCE: self.instance}
        lease = a.effective_lease()
        if lease > 0:
            props[wire.PROP_LEASE] = wire.format_duration(lease)
        msg = Message(payload=self.announcement_payload(), properties=props, key=wire.announce_key(self.config.id, self.instance))
        await self._broker.publish(a.topic, msg)
        if not self._announced:
            lease_text = props.get(wire.PROP_LEASE, "none")
            self._log.info(
                "announced: topic=%s tools=%d instance=%s lease=%s", a.topic, len(self._tools), self.instance, lease_text
            )
        self._announced = True

    async def withdraw(self) -> None:
        """Withdraw this instance: an empty message with its key. Gateways
        drop it, and the tools when no other instance is left."""
        assert self._broker is not None
        a = self.config.announce or ann.Announcement()
        # The property keeps the empty message decodable by every client.
        msg = Message(
            properties={wire.PROP_WITHDRAWN: "true", wire.PROP_INSTANCE: self.instance},
            key=wire.announce_key(self.config.id, self.instance),
        )
        await self._broker.publish(a.topic, msg)
        self._announced = False
        self._log.info("withdrawn: topic=%s instance=%s", a.topic, self.instance)

    async def _announce_on_start(self) -> None:
        if self.config.announce is None:
            return
        ok = True
        try:
            await asyncio.wait_for(self.announce(), 10.0)
        except Exception as e:
            self._log.warning("cannot announce yet; retrying: %s", e)
            ok = False
        self._announcer = asyncio.get_running_loop().create_task(self._keep_announced(ok))

    async def _keep_announced(self, announced: bool) -> None:
        """Announce until that succeeds, then renew every third of the lease;
        a renewal that fails is tried again at the next (the lease leaves
        room for two)."""
        assert self.config.announce is not None
        lease = self.config.announce.effective_lease()
        backoff = 1.0
        while True:
            if announced and lease == 0:
                return  # nothing to renew
            await asyncio.sleep(lease / 3 if announced else backoff)
            try:
                await asyncio.wait_for(self.announce(), 10.0)
                announced, backoff = True, 1.0
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if announced:
                    self._slow.warning("renew", "cannot renew the announcement; trying again: %s", e)
                else:
                    backoff = min(2 * backoff, 30.0)

    async def _withdraw_on_stop(self, grace_end: float) -> None:
        loop = asyncio.get_running_loop()
        if self._announcer is not None:
            self._announcer.cancel()
            await asyncio.wait({self._announcer})
        if not self._announced:
            return
        try:
            await asyncio.wait_for(self.withdraw(), max(0.001, min(5.0, grace_end - loop.time())))
        except Exception as e:
            self._log.warning("cannot withdraw the announcement; gateways list the service until its lease ends: %s", e)
            return
        # Still subscribed: calls gateways routed before they saw the
        # withdrawal are served, not lost.
        await asyncio.sleep(WITHDRAW_SETTLE)


async def _stream(tool: Tool, call: Call) -> None:
    """Run a stream tool: each item it yields is a chunk."""
    gen = tool.handler(call)
    try:
        async for item in gen:
            await call.send(item)
    finally:
        await gen.aclose()


async def _within(aw: Awaitable[Any], bound: float) -> bool:
    """Wait for aw at most ``bound`` seconds (left running after that);
    reports whether it ended. Its failure counts as ended."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=max(0.0, bound))
    if task in done:
        if not task.cancelled():
            task.exception()
        return True
    return False
