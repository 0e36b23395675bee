"""Receipts and requests published again: a call runs once per instance."""

from __future__ import annotations

import asyncio

from helpers import REPLY_TOPIC, Harness, eventually, last, of
from test_service import aio

from toolgate_service import Call, wire
from toolgate_service.state import RECENT_GIVE


def receipts(h: Harness, call_id: str) -> list[object]:
    return [m for m in of(h.replies, call_id) if m.properties.get(wire.PROP_RECEIPT) == "1"]


def harness() -> tuple[Harness, dict[str, int], asyncio.Event]:
    h = Harness.make()
    runs: dict[str, int] = {}
    release = asyncio.Event()

    @h.svc.tool()
    async def work(call: Call) -> str:
        runs[call.id] = runs.get(call.id, 0) + 1
        if call.arguments.get("slow"):
            await release.wait()
        return f"done {call.id}"

    return h, runs, release


ASK = wire.CallWords(reply_to=REPLY_TOPIC, receipt=True)


@aio
async def test_receipt_for_a_slow_call_only() -> None:
    h, _, release = harness()
    await h.start()
    await h.call("fast", {}, words=ASK)
    await h.call("slow", {"slow": True}, words=ASK)
    await eventually(lambda: len(receipts(h, "slow")) == 1, "the slow call's receipt")
    (rc,) = receipts(h, "slow")
    assert rc.payload == b""  # type: ignore[attr-defined]
    assert rc.properties == {wire.PROP_ID: "slow", wire.PROP_RECEIPT: "1", wire.PROP_INSTANCE: h.svc.instance}  # type: ignore[attr-defined]
    assert last(h.replies, "fast") is not None and not receipts(h, "fast"), "a call answered within 250 ms got a receipt"
    release.set()
    await eventually(lambda: last(h.replies, "slow") is not None, "the slow call's reply")
    assert len(receipts(h, "slow")) == 1
    await h.stop()


@aio
async def test_repeated_request_runs_once() -> None:
    h, runs, release = harness()
    await h.start()
    await h.call("c", {"slow": True}, words=ASK)
    await eventually(lambda: runs.get("c") == 1, "the call running")
    # Published again while it runs here: a receipt at once, not a second run.
    await h.call("c", {"slow": True}, words=ASK)
    await eventually(lambda: len(receipts(h, "c")) >= 1, "a receipt for the repeated request")
    release.set()
    await eventually(lambda: last(h.replies, "c") is not None, "the reply")
    # Published again after it ended here: the kept reply again.
    await h.call("c", {"slow": True}, words=ASK)
    await eventually(lambda: len([m for m in of(h.replies, "c") if m.payload]) == 2, "the kept reply again")
    replies = [m for m in of(h.replies, "c") if m.payload]
    assert replies[0].payload == replies[1].payload and replies[0].properties == replies[1].properties
    assert runs["c"] == 1
    assert h.svc.stats().repeated == 2
    # Without the receipt word a request is not checked (TrustGraph's callers).
    await h.call("c", {})
    await eventually(lambda: runs["c"] == 2, "run again")
    await h.stop()


@aio
async def test_resend_on_the_cancel_topic() -> None:
    h, _, _ = harness()
    await h.start()
    await h.call("r", {}, words=wire.CallWords(reply_to=REPLY_TOPIC))
    await eventually(lambda: last(h.replies, "r") is not None, "the reply")
    for _ in range(RECENT_GIVE + 2):
        await h.cancel("r", wire.CREDIT_RESEND)
    await h.cancel("never-here", wire.CREDIT_RESEND)
    await eventually(lambda: len(of(h.replies, "r")) == 1 + RECENT_GIVE, "the reply given out again")
    await asyncio.sleep(0.05)
    assert len(of(h.replies, "r")) == 1 + RECENT_GIVE, "a kept reply was given out more than RECENT_GIVE times"
    assert h.svc.stats().resent == RECENT_GIVE
    await h.stop()
