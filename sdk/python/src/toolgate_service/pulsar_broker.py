"""The Apache Pulsar broker of a service, on the ``pulsar-client`` package.

Producers are made on first use per topic and closed after five idle
minutes (a service answers each gateway instance on a topic of its own);
messages are published without waiting on the event loop (the client's
callbacks are handed back to it), and consumers hand their messages to the
loop from the client's listener thread. The client's blocking calls
(creating producers and consumers, closing them) run on threads of their
own, so that a broker that does not answer never holds up the loop, nor
the interpreter's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pulsar

from .errors import PublishError, QueueFull
from .transport import Message, OnDone, OnMessage

T = TypeVar("T")

DEFAULT_OPERATION_TIMEOUT = 10.0
"""Bounds creating producers and consumers and a publish's receipt (s)."""
DEFAULT_CONNECTION_TIMEOUT = 5.0
"""Bounds dialling the broker (s)."""
DEFAULT_MAX_PENDING = 10000
"""Messages a producer holds while waiting for receipts; beyond: QueueFull."""
DEFAULT_PRODUCER_IDLE = 300.0
"""A topic's producer is closed after this long without a message (s)."""
BATCH_DELAY_MS = 1
"""How long a batching producer holds a message for others to join it."""
BATCH_MAX_MESSAGES = 500
"""Messages in one batch at most (the gateway's and the Go SDK's bound)."""


class ClientLogFilter(logging.Filter):
    """Lets through one line of the client's a kind per interval (lines that
    differ only in their digits are one kind), then one saying how many
    were left out: while the broker is away, the client says the same
    things several times a second for every producer and consumer."""

    def __init__(self, every: float = 30.0) -> None:
        super().__init__()
        self._every = every
        self._lock = threading.Lock()  # the client logs from its own threads
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = re.sub(r"[0-9]+", "#", record.getMessage())[:200]
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(kind)
            if last is not None and now - last[0] < self._every:
                self._seen[kind] = (last[0], last[1] + 1)
                return False
            if len(self._seen) > 1024:
                self._seen.clear()
            self._seen[kind] = (now, 0)
        if last is not None and last[1]:
            record.msg = f"{record.getMessage()} ({last[1]} more like it since the last line)"
            record.args = None
        return True


_client_log_filter = ClientLogFilter()


async def in_thread(fn: Callable[[], T]) -> T:
    """Run a blocking call of the client on a daemon thread of its own.

    Not the loop's default executor: a call the broker never answers
    would keep ``asyncio.run`` from returning at exit.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, v: Any) -> None:
        if fut.done():
            return
        if ok:
            fut.set_result(v)
        else:
            fut.set_exception(v)

    def work() -> None:
        try:
            v: Any = fn()
            ok = True
        except BaseException as e:  # handed to the awaiting coroutine
            v, ok = e, False
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, ok, v)

    threading.Thread(target=work, name="toolgate-pulsar", daemon=True).start()
    return await fut


def _error(result: Any) -> PublishError | None:
    if result == pulsar.Result.Ok:
        return None
    if result == pulsar.Result.ProducerQueueIsFull:
        return QueueFull(f"producer queue full ({result})")
    return PublishError(f"publish failed: {result}")


class _Subscription:
    def __init__(self, consumer: Any, name: str) -> None:
        self._consumer = consumer
        self.name = name
        self._closed = False

    def pause(self) -> None:
        if not self._closed:
            self._consumer.pause_message_listener()

    def resume(self) -> None:
        if not self._closed:
            self._consumer.resume_message_listener()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await in_thread(self._consumer.close)


class _Producer:
    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[Any] = loop.create_future()
        self.last = loop.time()  # when it was last used


class PulsarBroker:
    """A :class:`~toolgate_service.transport.Broker` on a Pulsar client.

    Give ``url`` (``pulsar://host:6650``, ``pulsar+ssl://…``) and, if
    needed, ``authentication`` (``pulsar.AuthenticationToken(…)``, …) and
    ``tls_trust_certs_file``; or ``client``, a ``pulsar.Client`` the
    program already has, which :meth:`close` leaves open.
    """

    def __init__(
        self,
        url: str = "",
        *,
        client: Any = None,
        authentication: Any = None,
        tls_trust_certs_file: str = "",
        operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
        connection_timeout: float = DEFAULT_CONNECTION_TIMEOUT,
        max_pending: int = DEFAULT_MAX_PENDING,
        producer_idle: float = DEFAULT_PRODUCER_IDLE,
        logger: logging.Logger | None = None,
    ) -> None:
        self._log = logger or logging.getLogger("toolgate_service")
        self._shared = client is not None
        if client is None:
            if not url:
                raise ValueError("PulsarBroker: give a url or a client")
            plog = logging.getLogger("toolgate_service.pulsar")
            if plog.level == logging.NOTSET:
                # The client's own informational lines, one per producer
                # and consumer opened or closed, would drown the service's.
                plog.setLevel(logging.WARNING)
            if _client_log_filter not in plog.filters:
                plog.addFilter(_client_log_filter)
            kw: dict[str, Any] = {
                "operation_timeout_seconds": max(1, round(operation_timeout)),
                "connection_timeout_ms": max(1, round(connection_timeout * 1000)),
                "logger": plog,
            }
            if authentication is not None:
                kw["authentication"] = authentication
            if tls_trust_certs_file:
                kw["tls_trust_certs_file_path"] = tls_trust_certs_file
            client = pulsar.Client(url, **kw)
        self._client = client
        self._operation_timeout = operation_timeout
        self._max_pending = max_pending
        self._producer_idle = producer_idle
        # Two producers a topic: one sending each message at once (replies,
        # receipts, announcements: what a caller waits for), one batching
        # (a stream's chunks, published without waiting; see publish_nowait).
        self._producers: dict[tuple[str, bool], _Producer] = {}
        self._subscriptions: list[_Subscription] = []
        self._janitor: asyncio.Task[None] | None = None
        self._closed = False

    async def subscribe(
        self, topic: str, subscription: str, *, shared: bool, on_message: OnMessage, queue_size: int
    ) -> _Subscription:
        loop = asyncio.get_running_loop()
        persistent = topic.startswith("persistent://")

        def listener(consumer: Any, msg: Any) -> None:
            try:
                m = Message(
                    payload=msg.data(),
                    properties=dict(msg.properties()),
                    key=msg.partition_key(),
                    topic=msg.topic_name(),
                )
                loop.call_soon_threadsafe(on_message, m)
                if persistent:
                    consumer.acknowledge(msg)  # acks do nothing on non-persistent topics
            except RuntimeError:
                pass  # the loop is closed
            except Exception:  # on the client's thread: logged, not raised
                self._log.exception("cannot take a message from %s", topic)

        kind = pulsar.ConsumerType.Shared if shared else pulsar.ConsumerType.Exclusive
        consumer = await in_thread(
            lambda: self._client.subscribe(
                topic,
                subscription,
                consumer_type=kind,
                message_listener=listener,
                receiver_queue_size=queue_size,
            )
        )
        sub = _Subscription(consumer, f"{subscription} on {topic}")
        self._subscriptions.append(sub)
        return sub

    async def _producer(self, topic: str, batched: bool) -> Any:
        if self._closed:
            raise PublishError("the broker client is closed")
        key = (topic, batched)
        p = self._producers.get(key)
        if p is None:
            p = _Producer()
            self._producers[key] = p
            if self._janitor is None:
                self._janitor = asyncio.get_running_loop().create_task(self._close_idle())
            kw: dict[str, Any] = {"batching_enabled": False}
            if batched:
                kw = {
                    "batching_enabled": True,
                    "batching_max_publish_delay_ms": BATCH_DELAY_MS,
                    "batching_max_messages": BATCH_MAX_MESSAGES,
                }
            try:
                producer = await in_thread(
                    lambda: self._client.create_producer(
                        topic,
                        block_if_queue_full=False,
                        max_pending_messages=self._max_pending,
                        send_timeout_millis=max(1, round(self._operation_timeout * 1000)),
                        **kw,
                    )
                )
            except Exception as e:
                if self._producers.get(key) is p:
                    del self._producers[key]  # the next publish tries again
                p.ready.set_exception(PublishError(f"create producer for {topic}: {e}"))
                p.ready.exception()  # retrieved: nobody else may wait
                raise PublishError(f"create producer for {topic}: {e}") from e
            p.ready.set_result(producer)
        p.last = asyncio.get_running_loop().time()
        return await asyncio.shield(p.ready)

    async def publish_nowait(self, topic: str, msg: Message, done: OnDone) -> None:
        """Publish without waiting for the receipt, batched: messages handed
        over within a millisecond go in one batch (up to 500). A stream's
        chunks go so, as the Go SDK's do: a gateway's flow control reckons
        with a batch's small per-message overhead, and unbatched chunks,
        each with metadata and a frame of its own, could pass the bytes
        the broker holds for a slow consumer (then it drops them)."""
        await self._send(topic, msg, done, True)

    async def _send(self, topic: str, msg: Message, done: OnDone, batched: bool) -> None:
        producer = await self._producer(topic, batched)
        loop = asyncio.get_running_loop()
        me = threading.get_ident()
        refused: list[BaseException] = []

        def callback(result: Any, _msg_id: Any) -> None:
            err = _error(result)
            if threading.get_ident() == me and err is not None:
                # Answered at once, on the calling thread: a full queue or a
                # closed producer, which publish_nowait raises.
                refused.append(err)
                return
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(done, err)

        kw: dict[str, Any] = {"properties": msg.properties}
        if msg.key:
            kw["partition_key"] = msg.key
        producer.send_async(msg.payload, callback, **kw)
        if refused:
            raise refused[0]

    async def publish(self, topic: str, msg: Message) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(err: BaseException | None) -> None:
            if fut.done():
                return
            if err is None:
                fut.set_result(None)
            else:
                fut.set_exception(err)

        await self._send(topic, msg, done, False)
        await fut

    async def _close_idle(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            await asyncio.sleep(min(60.0, self._producer_idle / 4))
            for key, p in list(self._producers.items()):
                if loop.time() - p.last < self._producer_idle or not p.ready.done() or p.ready.exception() is not None:
                    continue
                del self._producers[key]
                topic = key[0]
                producer = p.ready.result()
                try:
                    await in_thread(producer.close)
                except Exception as e:  # the next publish opens a new one
                    self._log.debug("closing the idle producer of %s: %s", topic, e)

    async def close(self, bound: float) -> list[str]:
        """Close everything, each on a thread of its own, for ``bound`` s."""
        self._closed = True
        if self._janitor is not None:
            self._janitor.cancel()
        closes: dict[str, Callable[[], Any]] = {}
        for sub in self._subscriptions:
            closes[f"subscription {sub.name}"] = sub.close
        for (topic, batched), p in self._producers.items():
            if p.ready.done() and p.ready.exception() is None:
                closes[f"{'batching ' if batched else ''}producer on {topic}"] = _closer(p.ready.result())
        self._producers.clear()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        left: list[str] = []
        tasks = {name: asyncio.ensure_future(c()) for name, c in closes.items()}
        if tasks:
            done, _ = await asyncio.wait(tasks.values(), timeout=max(0.0, bound))
            left = [n for n, t in tasks.items() if t not in done]
        if not self._shared:
            client = asyncio.ensure_future(in_thread(self._client.close))
            done, _ = await asyncio.wait({client}, timeout=max(0.05, deadline - loop.time()))
            if client not in done:
                left.append("pulsar client")
        for t in tasks.values():
            if t.done() and not t.cancelled():
                t.exception()  # retrieved: a close that failed is closed enough
        return left


def _closer(producer: Any) -> Callable[[], Any]:
    async def close() -> None:
        await in_thread(producer.close)

    return close
