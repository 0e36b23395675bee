"""Streams: numbered chunks, the window of unconfirmed chunks, the caller's
credit, a full producer queue, cancels."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from helpers import REPLY_TOPIC, Harness, eventually, last, of, texts
from test_service import aio

from toolgate_service import Call, CallerGone, wire
from toolgate_service.chunks import CHUNK_WINDOW, ChunkSender
from toolgate_service.errors import QueueFull
from toolgate_service.testing import MemoryBroker


def stream_harness(**config: object) -> Harness:
    h = Harness.make(**config)

    @h.svc.tool()
    async def count(call: Call) -> AsyncIterator[str]:
        for i in range(int(call.arguments.get("n", 3))):
            yield f"{i},"
            gap = call.arguments.get("gap_ms", 0)
            if gap:
                await asyncio.sleep(gap / 1000)

    return h


@aio
async def test_numbered_chunks_then_the_end() -> None:
    h = stream_harness()
    await h.start()
    await h.call("s", {"n": 200}, words=wire.CallWords(reply_to=REPLY_TOPIC))
    await eventually(lambda: last(h.replies, "s") is not None, "the stream's end")
    msgs = of(h.replies, "s")
    assert [m.properties[wire.PROP_SEQ] for m in msgs] == [str(i) for i in range(201)]
    assert texts(h.replies, "s") == [f"{i}," for i in range(200)] + [""]
    assert all(m.properties[wire.PROP_INSTANCE] == h.svc.instance and m.key == "s" for m in msgs)
    # Without credit, no flow control: the chunks name no flow topic.
    assert all(wire.PROP_FLOW not in m.properties for m in msgs)
    await h.stop()


@aio
async def test_unary_tool_streams_with_send() -> None:
    h = Harness.make()

    @h.svc.tool()
    async def parts(call: Call) -> str:
        for i in range(3):
            await call.send(f"{i},")
        return "3"

    await h.start()
    await h.call("p", {})
    await eventually(lambda: last(h.responses, "p") is not None, "the last reply")
    assert texts(h.responses, "p") == ["0,", "1,", "2,", "3"]
    assert [m.properties[wire.PROP_SEQ] for m in of(h.responses, "p")] == ["0", "1", "2", "3"]
    await h.stop()


@aio
async def test_credit() -> None:
    h = stream_harness()
    await h.start()
    await h.call("s", {"n": 30}, words=wire.CallWords(reply_to=REPLY_TOPIC, credit=8))
    await eventually(lambda: len(of(h.replies, "s")) == 8, "the first window")
    await asyncio.sleep(0.05)
    assert len(of(h.replies, "s")) == 8, "more than the credit was sent"
    flow = of(h.replies, "s")[0].properties[wire.PROP_FLOW]
    assert flow == wire.flow_topic(h.svc.request_topic, h.svc.instance)
    # A grant of a smaller limit, or a malformed one, or another call's, changes nothing.
    await h.grant(flow, "s", "4")
    await h.grant(flow, "s", "lots")
    await h.grant(flow, "other", "100")
    await asyncio.sleep(0.05)
    assert len(of(h.replies, "s")) == 8
    await h.grant(flow, "s", "20")
    await eventually(lambda: len(of(h.replies, "s")) == 20, "up to the new limit")
    await h.grant(flow, "s", "30")
    # The last message needs no credit: 30 chunks and the end.
    await eventually(lambda: last(h.replies, "s") is not None, "the stream's end")
    assert len(of(h.replies, "s")) == 31
    assert not h.svc._flows, "a stream that ended is forgotten"
    await h.stop()


@aio
async def test_caller_gone_on_the_flow_topic() -> None:
    h = stream_harness()
    ended = asyncio.Event()
    await h.start()
    await h.call("s", {"n": 1000}, words=wire.CallWords(reply_to=REPLY_TOPIC, credit=4))
    await eventually(lambda: len(of(h.replies, "s")) == 4, "the first window")
    flow = of(h.replies, "s")[0].properties[wire.PROP_FLOW]
    await h.grant(flow, "s", wire.CREDIT_CANCEL)
    await eventually(lambda: last(h.replies, "s") is not None, "the call's end")
    r = last(h.replies, "s")
    assert r is not None and r.error == wire.Error("cancelled", "the caller gave the call up")
    assert h.svc.stats().cancelled == 1
    ended.set()
    await h.stop()


@aio
async def test_cancel_topic_ends_a_running_call() -> None:
    h = Harness.make()
    seen: list[BaseException] = []

    @h.svc.tool()
    async def wait(call: Call) -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError as e:
            seen.append(e)
            raise
        return "never"

    await h.start()
    await h.call("w", {})
    await eventually(lambda: len(h.svc._calls) == 1, "the call running")
    await h.cancel("other")  # a call another instance has: kept a while, harmless
    await h.cancel("w")
    await eventually(lambda: last(h.responses, "w") is not None, "the call's end")
    r = last(h.responses, "w")
    assert r is not None and r.error is not None and r.error.type == "cancelled"
    assert len(seen) == 1
    # A cancel that comes before its request: the tool never runs.
    await h.cancel("early")
    await h.call("early", {})
    await eventually(lambda: last(h.responses, "early") is not None, "the early-cancelled call answered")
    r = last(h.responses, "early")
    assert r is not None and r.error == wire.Error("cancelled", "the caller gave the call up before it started")
    assert h.svc.stats().cancelled == 2
    await h.stop()


@aio
async def test_chunk_window() -> None:
    broker = MemoryBroker()
    broker.hold_receipts = True
    sender = ChunkSender(broker, "t", "id")
    for i in range(CHUNK_WINDOW):
        await sender.send(str(i))
    blocked = asyncio.ensure_future(sender.send("next"))
    await asyncio.sleep(0.05)
    assert not blocked.done(), "a send beyond the window returned before any receipt"
    broker.release(1)
    await asyncio.wait_for(blocked, 1)
    waiting = asyncio.ensure_future(sender.wait())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    broker.release()
    await asyncio.wait_for(waiting, 1)
    assert [m.payload for _, m in broker.published][-1] == wire.encode_response(wire.Response("next"))
    assert sender.seq == CHUNK_WINDOW + 1


@aio
async def test_chunk_sender_queue_full() -> None:
    # The producer's queue full while chunks of its own are unconfirmed:
    # the sender lets them drain and tries again.
    broker = MemoryBroker()
    broker.hold_receipts = True
    sender = ChunkSender(broker, "t", "id")
    await sender.send("a")
    broker.queue_full = 1
    second = asyncio.ensure_future(sender.send("b"))
    await asyncio.sleep(0.01)
    assert not second.done()
    broker.release()
    await asyncio.wait_for(second, 1)
    broker.release()
    await sender.wait()
    assert [m.payload for _, m in broker.published] == [wire.encode_response(wire.Response(x)) for x in "ab"]
    # With nothing of its own to drain it gives up at once, and stays failed.
    broker2 = MemoryBroker()
    broker2.queue_full = 5
    s2 = ChunkSender(broker2, "t", "id")
    for _ in range(2):
        try:
            await s2.send("x")
        except QueueFull:
            continue
        raise AssertionError("a send into a full queue succeeded")


@aio
async def test_chunk_sender_cancel_wakes_a_wait_for_credit() -> None:
    sender = ChunkSender(MemoryBroker(), "t", "id", flow="f", limit=1)
    await sender.send("a")
    waiting = asyncio.ensure_future(sender.send("b"))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    sender.cancel()
    try:
        await asyncio.wait_for(waiting, 1)
    except CallerGone:
        return
    raise AssertionError("a send waiting for credit went on after the caller left")


@aio
async def test_lost_chunk_fails_the_call() -> None:
    h = stream_harness()
    await h.start()

    real = h.broker.publish_nowait
    n = 0

    async def lossy(topic: str, msg: object, done: object) -> None:
        nonlocal n
        n += 1
        if n == 3:
            asyncio.get_running_loop().call_soon(done, RuntimeError("connection reset"))  # type: ignore[arg-type]
            return
        await real(topic, msg, done)  # type: ignore[arg-type]

    h.broker.publish_nowait = lossy  # type: ignore[method-assign]
    await h.call("s", {"n": 10})
    await eventually(lambda: last(h.responses, "s") is not None, "the stream's end")
    r = last(h.responses, "s")
    assert r is not None and r.error is not None and r.error.type == "tool-service-error"
    assert "publish reply chunk" in r.error.message
    await h.stop()
