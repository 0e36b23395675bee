"""An in-memory broker, for testing tools and services without Pulsar.

Topics behave like Pulsar's non-persistent ones: a message published while
nobody is subscribed is dropped; a shared subscription hands each message
to one of its consumers, an exclusive one to its one consumer; every
subscription of a topic gets every message. Tests may hold the broker's
receipts (:attr:`MemoryBroker.hold_receipts`) and fill producers' queues
(:attr:`MemoryBroker.queue_full`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import PublishError, QueueFull
from .transport import Message, OnDone, OnMessage


class _Consumer:
    def __init__(self, broker: MemoryBroker, topic: str, name: str, on_message: OnMessage) -> None:
        self._broker = broker
        self.topic = topic
        self.name = name
        self.on_message = on_message
        self.paused = False
        self.closed = False
        self.queue: deque[Message] = deque()

    def hand(self, m: Message) -> None:
        if self.paused:
            self.queue.append(m)
        else:
            asyncio.get_running_loop().call_soon(self._deliver, m)

    def _deliver(self, m: Message) -> None:
        if not self.closed:
            self.on_message(m)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        while self.queue and not self.paused:
            self.hand(self.queue.popleft())

    async def close(self) -> None:
        self.closed = True
        self.queue.clear()
        self._broker._unsubscribe(self)


@dataclass
class _Group:
    shared: bool
    consumers: list[_Consumer] = field(default_factory=list)
    turn: itertools.count[int] = field(default_factory=itertools.count)


class MemoryBroker:
    """A :class:`~toolgate_service.transport.Broker` in memory."""

    def __init__(self) -> None:
        self._topics: dict[str, dict[str, _Group]] = {}
        self.published: list[tuple[str, Message]] = []
        """Every message published, with its topic, in order."""
        self.hold_receipts = False
        """While set, receipts of messages published without waiting are
        held (:meth:`release`)."""
        self.queue_full = 0
        """Refuse this many publishes with QueueFull first."""
        self.closed = False
        self._held: deque[Callable[[], None]] = deque()

    async def subscribe(
        self, topic: str, subscription: str, *, shared: bool, on_message: OnMessage, queue_size: int
    ) -> _Consumer:
        groups = self._topics.setdefault(topic, {})
        g = groups.get(subscription)
        if g is None:
            g = groups[subscription] = _Group(shared=shared)
        elif not shared or not g.shared:
            raise PublishError(f"subscription {subscription} on {topic} is exclusive and taken")
        c = _Consumer(self, topic, subscription, on_message)
        g.consumers.append(c)
        return c

    def _unsubscribe(self, c: _Consumer) -> None:
        groups = self._topics.get(c.topic, {})
        g = groups.get(c.name)
        if g is not None and c in g.consumers:
            g.consumers.remove(c)
            if not g.consumers:
                del groups[c.name]

    def subscribers(self, topic: str) -> int:
        """How many consumers the topic has."""
        return sum(len(g.consumers) for g in self._topics.get(topic, {}).values())

    def _deliver(self, topic: str, msg: Message) -> None:
        self.published.append((topic, msg))
        for g in list(self._topics.get(topic, {}).values()):
            if not g.consumers:
                continue
            c = g.consumers[next(g.turn) % len(g.consumers)] if g.shared else g.consumers[0]
            c.hand(Message(payload=msg.payload, properties=dict(msg.properties), key=msg.key, topic=topic))

    def _take(self) -> None:
        if self.closed:
            raise PublishError("the broker is closed")
        if self.queue_full > 0:
            self.queue_full -= 1
            raise QueueFull("producer queue full")

    async def publish(self, topic: str, msg: Message) -> None:
        self._take()
        self._deliver(topic, msg)

    async def publish_nowait(self, topic: str, msg: Message, done: OnDone) -> None:
        self._take()
        self._deliver(topic, msg)
        if self.hold_receipts:
            self._held.append(lambda: done(None))
        else:
            asyncio.get_running_loop().call_soon(done, None)

    def release(self, n: int = -1) -> int:
        """Give the oldest ``n`` held receipts (all when negative); returns how many."""
        k = 0
        while self._held and (n < 0 or k < n):
            self._held.popleft()()
            k += 1
        return k

    async def close(self, bound: float) -> list[str]:
        self.closed = True
        return []

    def listen(self, topic: str, subscription: str = "") -> list[Message]:
        """A list that receives every message published on ``topic`` from now on."""
        got: list[Message] = []
        name = subscription or f"listen-{len(self._topics.get(topic, {}))}-{id(got)}"
        groups = self._topics.setdefault(topic, {})
        g = groups[name] = _Group(shared=False)
        g.consumers.append(_Consumer(self, topic, name, got.append))
        return got
