"""A service on the in-memory broker, and a caller that speaks to it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from toolgate_service import Config, Service, wire
from toolgate_service.testing import MemoryBroker
from toolgate_service.transport import Message

REPLY_TOPIC = "non-persistent://tg/response/toolgate.gw-test"


async def eventually(cond: Callable[[], bool], what: str, within: float = 5.0) -> None:
    """Wait until cond() holds, polling; fail after ``within`` seconds."""
    end = time.monotonic() + within
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"not within {within} s: {what}")
        await asyncio.sleep(0.005)


class Harness:
    """A service running on a MemoryBroker, and the topics a caller sees."""

    def __init__(self, service: Service, broker: MemoryBroker) -> None:
        self.svc = service
        self.broker = broker
        self.responses = broker.listen(service.response_topic)
        self.replies = broker.listen(REPLY_TOPIC)
        self.task: asyncio.Task[None] | None = None

    @classmethod
    def make(cls, **config: Any) -> Harness:
        broker = MemoryBroker()
        cfg = Config(id=config.pop("id", "svc"), topic=config.pop("topic", "t"), **config)
        return cls(Service(cfg, broker=broker), broker)

    async def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.svc.run())
        await asyncio.wait({self.task, asyncio.ensure_future(self.svc.wait_ready())}, return_when=asyncio.FIRST_COMPLETED)
        if self.task.done():
            self.task.result()

    async def stop(self) -> None:
        self.svc.stop()
        assert self.task is not None
        await self.task

    async def call(
        self,
        call_id: str | None,
        arguments: dict[str, Any] | str | None = None,
        *,
        config: dict[str, Any] | None = None,
        words: wire.CallWords | None = None,
        props: dict[str, str] | None = None,
        payload: bytes | None = None,
    ) -> None:
        """Publish a request as a gateway would."""
        p = dict(props or {})
        if call_id is not None:
            p[wire.PROP_ID] = call_id
        if words is not None:
            p[wire.PROP_CALL] = wire.format_call(words)
        if payload is None:
            args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
            payload = wire.encode_request(wire.Request(user="alice", config=json.dumps(config or {}), arguments=args))
        await self.broker.publish(self.svc.request_topic, Message(payload=payload, properties=p))

    async def cancel(self, call_id: str, credit: str = wire.CREDIT_CANCEL) -> None:
        """Give a call up (or ask for its reply again) on the cancel topic."""
        topic = wire.cancel_topic(self.svc.request_topic)
        await self.broker.publish(
            topic, Message(payload=credit.encode(), properties={wire.PROP_ID: call_id, wire.PROP_CREDIT: credit})
        )

    async def grant(self, flow: str, call_id: str, credit: str) -> None:
        await self.broker.publish(
            flow, Message(payload=credit.encode(), properties={wire.PROP_ID: call_id, wire.PROP_CREDIT: credit})
        )


def of(messages: list[Message], call_id: str) -> list[Message]:
    """The messages of one call."""
    return [m for m in messages if m.properties.get(wire.PROP_ID) == call_id]


def last(messages: list[Message], call_id: str) -> wire.Response | None:
    """The last reply of a call, once it came."""
    for m in of(messages, call_id):
        if m.payload:
            r = wire.decode_response(m.payload)
            if r.end_of_stream:
                return r
    return None


def texts(messages: list[Message], call_id: str) -> list[str]:
    """The texts of a call's reply messages (receipts left out), in order."""
    return [wire.decode_response(m.payload).response for m in of(messages, call_id) if m.payload]
