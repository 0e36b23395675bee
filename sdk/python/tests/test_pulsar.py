"""The service on the real broker (TOOLGATE_PULSAR_URL; skipped without it):
a caller written against the pulsar client directly, as a gateway speaks."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pulsar
import pytest

from toolgate_service import Announcement, Call, Config, Service, wire

URL = os.environ.get("TOOLGATE_PULSAR_URL", "")
pytestmark = pytest.mark.skipif(not URL, reason="TOOLGATE_PULSAR_URL is not set")


class Caller:
    """A gateway's side: its own reply topic, requests with toolgate's words."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.reply_topic = f"non-persistent://tg/response/toolgate.pytest-{secrets.token_hex(4)}"
        self.got: queue.Queue[Any] = queue.Queue()
        self.consumer = client.subscribe(
            self.reply_topic, "pytest", message_listener=lambda _c, m: self.got.put(m), receiver_queue_size=10000
        )

    def replies(self, n: int, within: float = 10.0) -> list[Any]:
        out: list[Any] = []
        end = time.monotonic() + within
        while len(out) < n:
            out.append(self.got.get(timeout=max(0.01, end - time.monotonic())))
        return out


def test_over_pulsar() -> None:
    topic = f"pytest-{secrets.token_hex(4)}"
    svc = Service(
        Config(
            id=f"svc-{topic}",
            topic=topic,
            pulsar_url=URL,
            stop_grace=3,
            announce=Announcement(topic=f"persistent://tg/config/{topic}"),
        ),
    )

    @svc.tool(input_schema={"type": "object"})
    async def echo(call: Call) -> Any:
        return call.arguments.get("msg", "")

    @svc.tool()
    async def count(call: Call) -> AsyncIterator[str]:
        for i in range(call.arguments["n"]):
            yield f"{i},"

    client = pulsar.Client(URL, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    caller = Caller(client)
    ann_reader = client.create_reader(f"persistent://tg/config/{topic}", pulsar.MessageId.earliest)
    producer = client.create_producer(svc.request_topic)

    def request(call_id: str, tool: str, args: dict[str, Any], credit: int = 0) -> None:
        words = wire.format_call(wire.CallWords(reply_to=caller.reply_topic, credit=credit))
        body = wire.encode_request(wire.Request(config=json.dumps({"toolgate-tool": tool}), arguments=json.dumps(args)))
        producer.send(body, properties={wire.PROP_ID: call_id, wire.PROP_CALL: words})

    async def body() -> None:
        run = asyncio.get_running_loop().create_task(svc.run())
        await svc.wait_ready()
        loop = asyncio.get_running_loop()
        # Unary, on the caller's reply topic.
        await loop.run_in_executor(None, request, "u1", "echo", {"msg": "hi"})
        (m,) = await loop.run_in_executor(None, caller.replies, 1)
        assert m.properties()[wire.PROP_ID] == "u1" and m.properties()[wire.PROP_INSTANCE] == svc.instance
        assert wire.decode_response(m.data()) == wire.Response("hi", None, True)
        # A stream under credit: 40 chunks with a window of 16, granted on
        # the flow topic as the caller reads.
        await loop.run_in_executor(None, request, "s1", "count", {"n": 40}, 16)
        first = await loop.run_in_executor(None, caller.replies, 16)
        flow = first[0].properties()[wire.PROP_FLOW]
        assert flow == wire.flow_topic(svc.request_topic, svc.instance)
        with pytest.raises(queue.Empty):
            caller.got.get(timeout=0.3)  # no more without credit
        grants = client.create_producer(flow)
        grants.send(b"41", properties={wire.PROP_ID: "s1", wire.PROP_CREDIT: "41"})
        rest = await loop.run_in_executor(None, caller.replies, 25)
        seqs = [int(x.properties()[wire.PROP_SEQ]) for x in first + rest]
        assert seqs == list(range(41))
        texts = [wire.decode_response(x.data()).response for x in first + rest]
        assert texts == [f"{i}," for i in range(40)] + [""]
        assert wire.decode_response(rest[-1].data()).end_of_stream
        # The announcement: keyed by instance, with its lease.
        a = await loop.run_in_executor(None, ann_reader.read_next, 10000)
        assert a.partition_key() == f"svc-{topic}@{svc.instance}"
        assert a.properties() == {wire.PROP_INSTANCE: svc.instance, wire.PROP_LEASE: "8s"}
        doc = json.loads(a.data())
        assert sorted(doc["tool"]) == ["count", "echo"]
        svc.stop()
        await run
        w = await loop.run_in_executor(None, ann_reader.read_next, 10000)
        assert w.data() == b"" and w.properties()[wire.PROP_WITHDRAWN] == "true"
        grants.close()

    try:
        asyncio.run(asyncio.wait_for(body(), 60))
    finally:
        client.close()


def test_concurrency_bound_over_pulsar() -> None:
    # More requests than the service runs at once: the rest wait, the
    # consumer paused and resumed, and every one is answered.
    topic = f"pytest-{secrets.token_hex(4)}"
    svc = Service(Config(id=f"svc-{topic}", topic=topic, pulsar_url=URL, max_concurrency=2, stop_grace=3))
    running = 0
    most = 0

    @svc.tool()
    async def work(call: Call) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.005)
        running -= 1
        return call.id

    client = pulsar.Client(URL, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    caller = Caller(client)
    producer = client.create_producer(svc.request_topic, batching_enabled=True)
    n = 200

    async def body() -> None:
        run = asyncio.get_running_loop().create_task(svc.run())
        await svc.wait_ready()
        loop = asyncio.get_running_loop()
        words = wire.format_call(wire.CallWords(reply_to=caller.reply_topic))

        def send_all() -> None:
            for i in range(n):
                producer.send_async(
                    wire.encode_request(wire.Request()), None, properties={wire.PROP_ID: f"c{i}", wire.PROP_CALL: words}
                )
            producer.flush()

        await loop.run_in_executor(None, send_all)
        got = await loop.run_in_executor(None, caller.replies, n, 30.0)
        assert sorted(wire.decode_response(m.data()).response for m in got) == sorted(f"c{i}" for i in range(n))
        assert most == 2
        svc.stop()
        await run

    try:
        asyncio.run(asyncio.wait_for(body(), 60))
    finally:
        client.close()


def test_idle_producers_close() -> None:
    from toolgate_service.pulsar_broker import PulsarBroker
    from toolgate_service.transport import Message

    topic = f"non-persistent://tg/response/pytest-idle-{secrets.token_hex(4)}"

    async def body() -> None:
        broker = PulsarBroker(URL, producer_idle=0.4)
        await broker.publish(topic, Message(payload=b"a", properties={"id": "1"}))
        assert (topic, False) in broker._producers
        end = time.monotonic() + 5
        while (topic, False) in broker._producers:
            assert time.monotonic() < end, "an idle producer was not closed"
            await asyncio.sleep(0.05)
        await broker.publish(topic, Message(payload=b"b", properties={"id": "2"}))  # opened again
        assert await broker.close(5) == []

    asyncio.run(asyncio.wait_for(body(), 30))
