"""Announcements, renewals, withdrawal, and the graceful stop."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from helpers import Harness, eventually, last, of
from test_service import aio

from toolgate_service import TOOL_PARAM, Abandoned, Announcement, Call, ConfigParam, wire
from toolgate_service.service import STOP_MARGIN, WITHDRAW_SETTLE
from toolgate_service.transport import Message

ANN = "persistent://tg/config/test-descriptors"


def announced(h: Harness) -> list[Message]:
    return [m for t, m in h.broker.published if t == ANN]


def announcing(**config: object) -> Harness:
    h = Harness.make(id="echo-service", announce=Announcement(topic=ANN, **config))  # type: ignore[arg-type]

    @h.svc.tool(description="Echo", input_schema={"type": "object", "properties": {"msg": {"type": "string"}}}, config={"k": 1})
    async def echo(call: Call) -> str:
        await asyncio.sleep(float(call.arguments.get("s", 0)))
        return str(call.arguments.get("msg", ""))

    return h


@aio
async def test_announcement() -> None:
    h = announcing(timeout=30, config_params=(ConfigParam("k", required=True),))
    await h.start()
    (m,) = announced(h)
    assert m.key == f"echo-service@{h.svc.instance}"
    assert m.properties == {wire.PROP_INSTANCE: h.svc.instance, wire.PROP_LEASE: "8s"}
    doc = json.loads(m.payload)
    assert doc == {
        "tool-service": {
            "echo-service": {
                "id": "echo-service",
                "request-queue": "non-persistent://tg/request/t",
                "response-queue": "non-persistent://tg/response/t",
                "config-params": [{"name": "k", "required": True}, {"name": TOOL_PARAM, "required": False}],
                "timeout": "30s",
            }
        },
        "tool": {
            "echo": {
                "k": 1,
                "type": "tool-service",
                "name": "echo",
                "description": "Echo",
                "service": "echo-service",
                TOOL_PARAM: "echo",
                "input-schema": {"type": "object", "properties": {"msg": {"type": "string"}}},
            }
        },
    }
    await h.stop()
    tomb = announced(h)[-1]
    assert tomb.payload == b"" and tomb.key == m.key
    assert tomb.properties == {wire.PROP_WITHDRAWN: "true", wire.PROP_INSTANCE: h.svc.instance}


@aio
async def test_renewals_every_third_of_the_lease() -> None:
    h = announcing(lease=0.3)
    await h.start()
    await eventually(lambda: len(announced(h)) >= 4, "three renewals", within=2)
    assert announced(h)[0].properties[wire.PROP_LEASE] == "300ms"
    await h.stop()


@aio
async def test_no_lease() -> None:
    h = announcing(lease=-1)
    await h.start()
    (m,) = announced(h)
    assert wire.PROP_LEASE not in m.properties
    await h.stop()


@aio
async def test_announce_retried_until_the_broker_takes_it() -> None:
    h = announcing(lease=0.3)
    h.broker.queue_full = 1  # the first announcement is refused
    await h.start()
    assert not announced(h)
    await eventually(lambda: len(announced(h)) >= 1, "announced on a retry", within=3)
    await h.stop()


@aio
async def test_graceful_stop() -> None:
    h = announcing()
    await h.start()
    await h.call("inflight", {"msg": "a", "s": 0.5})
    await eventually(lambda: len(h.svc._calls) == 1, "a call in flight")
    loop = asyncio.get_running_loop()
    h.svc.stop()
    assert h.task is not None
    # Withdrawn first, then still serving while gateways see it.
    await eventually(lambda: announced(h)[-1].payload == b"", "the withdrawal")
    withdrawn = time.monotonic()
    await h.call("during-settle", {"msg": "b"})
    await eventually(lambda: last(h.responses, "during-settle") is not None, "a call served after the withdrawal")
    assert time.monotonic() - withdrawn < WITHDRAW_SETTLE
    start = loop.time()
    await h.task
    assert loop.time() - start < 2, "the stop took longer than its call"
    assert last(h.responses, "inflight") == wire.Response("a", None, True)
    # Requests after the stop reach nobody.
    assert h.broker.subscribers(h.svc.request_topic) == 0
    assert h.broker.closed


@aio
async def test_stop_grace_cancels_calls_in_flight() -> None:
    h = announcing()
    h.svc._stop_grace = 0.3
    await h.start()
    await h.call("long", {"msg": "a", "s": 60})
    await eventually(lambda: len(h.svc._calls) == 1, "a call in flight")
    loop = asyncio.get_running_loop()
    start = loop.time()
    await h.stop()
    took = loop.time() - start
    assert took < 0.3 + STOP_MARGIN
    r = last(h.responses, "long")
    assert r is not None and r.error is not None and r.error.type == "unavailable"


@aio
async def test_stop_bounded_when_the_broker_does_not_answer() -> None:
    h = announcing()
    h.svc._stop_grace = 0.2

    async def stuck(bound: float) -> list[str]:
        await asyncio.sleep(bound)
        return ["pulsar client"]

    h.broker.close = stuck  # type: ignore[method-assign]
    await h.start()
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(Abandoned):
        await h.stop()
    assert loop.time() - start < 0.2 + STOP_MARGIN + 0.2


@aio
async def test_waiting_requests_run_before_the_stop() -> None:
    h = Harness.make(max_concurrency=1)

    @h.svc.tool()
    async def work(call: Call) -> str:
        await asyncio.sleep(0.02)
        return call.id

    await h.start()
    for i in range(5):
        await h.call(f"c{i}", {})
    await eventually(lambda: len(h.svc._waiting) == 4, "four requests waiting")
    await h.stop()
    assert all(last(h.responses, f"c{i}") is not None for i in range(5)), "a request taken was not run"


@aio
async def test_requests_after_the_stop_are_not_run() -> None:
    h, ran = Harness.make(), []

    @h.svc.tool()
    async def work(call: Call) -> str:
        ran.append(call.id)
        return ""

    await h.start()
    await h.stop()
    h.svc._on_request(Message(payload=b"{}", properties={wire.PROP_ID: "late"}))
    await asyncio.sleep(0.01)
    assert not ran and not of(h.responses, "late")
