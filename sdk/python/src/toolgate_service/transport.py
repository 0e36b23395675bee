"""What a service needs of a message broker: the seam between the service
and Apache Pulsar (:mod:`toolgate_service.pulsar_broker`), or an in-memory
broker in tests (:mod:`toolgate_service.testing`).

Every callback runs on the service's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class Message:
    """A message published or received: payload, properties and key.

    ``topic`` is where a received message came from ("" on one to publish).
    """

    payload: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    key: str = ""
    topic: str = ""


OnMessage = Callable[[Message], None]
"""Takes a received message; runs on the event loop and must not block."""

OnDone = Callable[[BaseException | None], None]
"""Told the outcome of a publish (None: the broker took it); on the event loop."""


class Subscription(Protocol):
    """A subscription made by :meth:`Broker.subscribe`."""

    def pause(self) -> None:
        """Stop handing messages over; they wait in the consumer's queue."""

    def resume(self) -> None:
        """Hand messages over again, the ones that waited first."""

    async def close(self) -> None:
        """Close the consumer; nothing is handed over once this returns."""


class Broker(Protocol):
    """A message broker as a service uses it."""

    async def subscribe(
        self, topic: str, subscription: str, *, shared: bool, on_message: OnMessage, queue_size: int
    ) -> Subscription:
        """Subscribe to ``topic``: Shared (replicas share the messages) or
        Exclusive; ``on_message`` takes each message."""
        ...

    async def publish(self, topic: str, msg: Message) -> None:
        """Publish and wait for the broker's receipt; raises PublishError
        (QueueFull when the producer's queue is full)."""
        ...

    async def publish_nowait(self, topic: str, msg: Message, done: OnDone) -> None:
        """Hand ``msg`` to the topic's producer and return without waiting
        for the receipt, which ``done`` is told. Raises QueueFull (and
        ``done`` is not called) when the producer's queue is full. Messages
        handed over in order are published in order; they may be batched,
        and are not ordered with those of :meth:`publish` (the service
        waits for a stream's chunks before it sends the last reply)."""
        ...

    async def close(self, bound: float) -> list[str]:
        """Close producers, subscriptions and the client, each on its own,
        for ``bound`` seconds at most; returns what had not closed by then
        (empty when all did). A client handed to the broker stays open."""
        ...
