"""The chunks of a streamed reply: numbered, windowed, flow-controlled."""

from __future__ import annotations

import asyncio

from . import wire
from .errors import CallerGone, PublishError, QueueFull
from .transport import Broker, Message

CHUNK_WINDOW = 64
"""Chunks of one reply published but not yet confirmed by the broker: a
fast tool streams without a round trip per chunk, and cannot flood the
producer's queue."""


class ChunkSender:
    """Publishes one call's chunks in order (``toolgate-seq`` from 0), at
    most :data:`CHUNK_WINDOW` of them unconfirmed and, when the caller does
    flow control (``toolgate-credit``), none numbered at or past the limit
    it granted. :meth:`send` is not called concurrently."""

    def __init__(self, broker: Broker, topic: str, call_id: str, *, flow: str = "", limit: int = 0, instance: str = "") -> None:
        self._broker = broker
        self.topic = topic
        self.id = call_id
        self.flow = flow
        self.instance = instance
        self.seq = 0
        """The number of the next reply message."""
        self._limit = limit if flow else -1
        self._err: BaseException | None = None
        self._unconfirmed = 0
        self._credit = asyncio.Event()
        self._room = asyncio.Event()

    def grant(self, limit: int) -> None:
        """Raise the credit to ``limit`` (grants are cumulative: a smaller
        one came late and changes nothing)."""
        if 0 <= self._limit < limit:
            self._limit = limit
            self._credit.set()

    def cancel(self) -> None:
        """End the stream: the caller is gone."""
        self._fail(CallerGone())
        self._credit.set()
        self._room.set()

    def _fail(self, err: BaseException) -> None:
        if self._err is None:
            self._err = err

    def _confirmed(self, err: BaseException | None) -> None:
        self._unconfirmed -= 1
        if err is not None:
            self._fail(PublishError(f"publish reply chunk: {err}"))
        self._room.set()

    async def _wait_room(self, keep: int) -> None:
        """Wait until at most ``keep`` chunks are unconfirmed."""
        while self._unconfirmed > keep:
            self._room.clear()
            await self._room.wait()

    async def send(self, text: str) -> None:
        """Publish one chunk; waits only for credit, or when the window is full."""
        while True:
            if self._err is not None:
                raise self._err
            if self._limit < 0 or self.seq < self._limit:
                break
            self._credit.clear()
            await self._credit.wait()
        await self._wait_room(CHUNK_WINDOW - 1)
        if self._err is not None:
            raise self._err
        props = {wire.PROP_ID: self.id, wire.PROP_SEQ: str(self.seq)}
        if self.flow:
            props[wire.PROP_FLOW] = self.flow
        if self.instance:
            props[wire.PROP_INSTANCE] = self.instance
        msg = Message(payload=wire.encode_response(wire.Response(response=text)), properties=props, key=self.id)
        self.seq += 1
        while True:
            own = self._unconfirmed > 0
            self._unconfirmed += 1
            try:
                await self._broker.publish_nowait(self.topic, msg, self._confirmed)
                return
            except QueueFull as e:
                self._unconfirmed -= 1
                if not own:
                    self._fail(e)
                    raise
                # The producer is saturated by other calls too: let this
                # reply's own chunks drain, then try again.
                await self._wait_room(0)
            except BaseException as e:
                self._unconfirmed -= 1
                self._fail(e)
                raise

    async def wait(self) -> None:
        """Return once every chunk sent is confirmed; raise the first failure."""
        await self._wait_room(0)
        if self._err is not None and not isinstance(self._err, CallerGone):
            raise self._err
