"""The service's contract, on the in-memory broker: unary calls and errors,
reply-to, tools by name, bounds on input."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from helpers import REPLY_TOPIC, Harness, eventually, last, of

from toolgate_service import TOOL_PARAM, Call, Config, Service, Tool, ToolError, wire
from toolgate_service.testing import MemoryBroker


def aio(fn: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on a loop of its own, for 20 s at most."""

    @functools.wraps(fn)
    def run() -> None:
        asyncio.run(asyncio.wait_for(fn(), 20))

    return run


def echo_harness(**config: Any) -> Harness:
    h = Harness.make(**config)

    @h.svc.tool(description="echo", input_schema={"type": "object", "properties": {"msg": {"type": "string"}}})
    async def echo(call: Call) -> Any:
        a = call.arguments
        mode = a.get("mode")
        if mode == "fail":
            if a.get("type"):
                raise ToolError(a["type"], a.get("message", ""))
            raise RuntimeError(a.get("message", "failed as asked"))
        if mode == "sleep":
            await asyncio.sleep(a.get("ms", 100) / 1000)
            return "slept"
        if mode == "user":
            return call.user
        if mode == "config":
            return call.config
        if mode == "send":
            for i in range(a.get("n", 3) - 1):
                await call.send(f"{i},")
            return str(a.get("n", 3) - 1)
        return a.get("msg", a)

    return h


@aio
async def test_unary_reply_on_the_response_topic() -> None:
    h = echo_harness()
    await h.start()
    await h.call("c1", {"msg": "hi"})
    await eventually(lambda: last(h.responses, "c1") is not None, "the reply")
    (m,) = of(h.responses, "c1")
    assert wire.decode_response(m.payload) == wire.Response("hi", None, True)
    assert m.properties == {wire.PROP_ID: "c1", wire.PROP_SEQ: "0", wire.PROP_INSTANCE: h.svc.instance}
    assert m.key == "c1"
    # Anything but a string is JSON as Python's json.dumps writes it.
    await h.call("c2", {"mode": "config"}, config={"style": "pun", "n": [1, 2]})
    await h.call("c3", {"mode": "user"})
    await h.call("c4", {"big": 123456789012345678, "é": True})
    await eventually(lambda: all(last(h.responses, c) for c in ("c2", "c3", "c4")), "the replies")
    assert last(h.responses, "c2") == wire.Response('{"style": "pun", "n": [1, 2]}', None, True)
    assert last(h.responses, "c3") == wire.Response("alice", None, True)
    assert last(h.responses, "c4") == wire.Response('{"big": 123456789012345678, "\\u00e9": true}', None, True)
    assert not h.replies
    await h.stop()
    assert h.svc.stats().handled == 4


@aio
async def test_reply_to() -> None:
    h = echo_harness()
    await h.start()
    # Through the property of its own (an older caller) and through the
    # packed words.
    await h.call("c1", {"msg": "a"}, props={wire.PROP_REPLY_TO: REPLY_TOPIC})
    await h.call("c2", {"msg": "b"}, words=wire.CallWords(reply_to=REPLY_TOPIC, credit=8))
    await eventually(lambda: last(h.replies, "c1") is not None and last(h.replies, "c2") is not None, "replies on reply-to")
    assert not h.responses, "a reply sent to reply-to went to the response topic too"
    # Outside the response namespace: ignored, the reply goes to the
    # response topic.
    for i, bad in enumerate(
        ["non-persistent://tg/request/x", "persistent://other/response/x", "non-persistent://tg/response/a/b"]
    ):
        await h.call(f"bad{i}", {"msg": "c"}, words=wire.CallWords(reply_to=bad))
    await eventually(lambda: all(last(h.responses, f"bad{i}") for i in range(3)), "replies on the response topic")
    bad_topics = {"non-persistent://tg/request/x", "persistent://other/response/x", "non-persistent://tg/response/a/b"}
    assert not [t for t, _ in h.broker.published if t in bad_topics], "a reply went where reply-to said, outside the namespace"
    await h.stop()


@aio
async def test_errors() -> None:
    h = echo_harness()
    await h.start()
    await h.call("typed", {"mode": "fail", "type": "not-found", "message": "no such thing"})
    await h.call("other", {"mode": "fail", "message": "boom"})
    await h.call(None, {"msg": "no id"})
    await h.call("malformed", payload=b"not json")
    await h.call("config-array", payload=b'{"config": "[1]", "arguments": "{}"}')
    await h.call("args-trailing", payload=b'{"config": "{}", "arguments": "{} {}"}')
    await h.call("args-object", payload=b'{"arguments": {"a": 1}}')
    ids = ["typed", "other", "unknown", "malformed", "config-array", "args-trailing", "args-object"]
    await eventually(lambda: all(last(h.responses, c) for c in ids), "every call answered")

    def err(c: str) -> wire.Error | None:
        r = last(h.responses, c)
        assert r is not None
        return r.error

    assert err("typed") == wire.Error("not-found", "no such thing")
    assert err("other") == wire.Error("tool-service-error", "boom")
    assert err("unknown") is None, "a request without an id is answered as id unknown"
    for c in ("malformed", "config-array", "args-trailing", "args-object"):
        e = err(c)
        assert e is not None and e.type == "invalid-argument", (c, e)
    assert "config:" in str(err("config-array")) and "arguments:" in str(err("args-trailing"))
    await h.stop()


@aio
async def test_unencodable_result() -> None:
    h = Harness.make()

    @h.svc.tool()
    async def odd(call: Call) -> Any:
        return {1, 2}

    await h.start()
    await h.call("c", {})
    await eventually(lambda: last(h.responses, "c") is not None, "the reply")
    r = last(h.responses, "c")
    assert r is not None and r.error is not None and r.error.type == "tool-service-error"
    assert "cannot encode the reply" in r.error.message
    await h.stop()


@aio
async def test_bounds_on_input() -> None:
    h = echo_harness(max_request_bytes=1000)
    await h.start()
    await h.call("big", {"msg": "x" * 2000})
    long_id = "i" * 300
    await h.call(long_id, {"msg": "x"})
    await h.call("deep", "[" * 50000 + "]" * 50000)
    await h.call("huge-int", '{"n": ' + "9" * 5000 + "}")
    await eventually(lambda: all(last(h.responses, c) for c in ("big", long_id, "deep", "huge-int")), "the refusals")
    for c in ("big", long_id, "deep", "huge-int"):
        r = last(h.responses, c)
        assert r is not None and r.error is not None and r.error.type == "invalid-argument", (c[:10], r)
    # A long id is answered, but neither kept nor given out again.
    await h.cancel(long_id, wire.CREDIT_RESEND)
    await h.call("after", {"msg": "ok"})
    await eventually(lambda: last(h.responses, "after") is not None, "a call after them")
    assert len(of(h.responses, long_id)) == 1
    await h.stop()


@aio
async def test_tools_by_name() -> None:
    h = Harness.make()

    @h.svc.tool("upper", input_schema={"type": "object"}, config={"style": "loud"})
    async def upper(call: Call) -> str:
        return f"{call.tool}:{call.arguments['s'].upper()}:{sorted(call.config.items())}"

    @h.svc.tool("lower")
    async def lower(call: Call) -> str:
        return f"{call.tool}:{call.arguments['s'].lower()}"

    await h.start()
    await h.call("u", {"s": "Ab"}, config={TOOL_PARAM: "upper", "style": "loud"})
    await h.call("l", {"s": "Ab"}, config={TOOL_PARAM: "lower"})
    await h.call("none", {"s": "Ab"})
    await h.call("nosuch", {"s": "Ab"}, config={TOOL_PARAM: "nosuch"})
    await eventually(lambda: all(last(h.responses, c) for c in ("u", "l", "none", "nosuch")), "the replies")
    assert last(h.responses, "u") == wire.Response("upper:AB:[('style', 'loud')]", None, True)
    assert last(h.responses, "l") == wire.Response("lower:ab", None, True)
    r = last(h.responses, "none")
    assert r is not None and r.error is not None and r.error.type == "invalid-argument"
    r = last(h.responses, "nosuch")
    assert r is not None and r.error is not None and r.error.type == "not-found"
    await h.stop()


def test_tool_checks() -> None:
    svc = Service(Config(id="s", topic="t", pulsar_url="pulsar://localhost:6650"))

    def sync(call: Call) -> str:
        return ""

    async def ok(call: Call) -> str:
        return ""

    async def gen(call: Call) -> AsyncIterator[str]:
        yield ""

    with pytest.raises(TypeError):
        svc.add_tool(Tool("sync", sync))
    with pytest.raises(ValueError, match="type"):
        svc.add_tool(Tool("bad-schema", ok, input_schema={"type": "string"}))
    deep: dict[str, Any] = {"type": "object"}
    inner = deep
    for _ in range(40):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(ValueError, match="deeper"):
        svc.add_tool(Tool("deep", ok, input_schema=deep))
    with pytest.raises(ValueError, match="bytes"):
        svc.add_tool(Tool("huge", ok, input_schema={"type": "object", "description": "x" * 70000}))
    with pytest.raises(ValueError, match="SDK's own"):
        svc.add_tool(Tool("sneaky", ok, config={TOOL_PARAM: "other"}))
    svc.add_tool(Tool("ok", ok))
    svc.add_tool(Tool("gen", gen))
    with pytest.raises(ValueError, match="twice"):
        svc.add_tool(Tool("ok", ok))
    assert [t.streams for t in svc.tools] == [False, True]
    for bad, why in (
        (Config(id="", topic="t", pulsar_url="u"), "empty id"),
        (Config(id="s", pulsar_url="u"), "set topic"),
        (Config(id="s", topic="t"), "empty pulsar_url"),
        (Config(id="s", topic="a b", pulsar_url="u"), "invalid topic"),
    ):
        with pytest.raises(ValueError, match=why):
            Service(bad)


def test_config_defaults_are_the_go_sdks() -> None:
    svc = Service(Config(id="s", topic="t"), broker=MemoryBroker())
    assert svc._max_concurrency == 64
    assert svc._request_queue == 10000
    assert svc._stop_grace == 10.0
    svc = Service(Config(id="s", topic="t", max_concurrency=4000), broker=MemoryBroker())
    assert svc._request_queue == 16000
    assert svc.request_topic == "non-persistent://tg/request/t" and svc.response_topic == "non-persistent://tg/response/t"
    svc = Service(
        Config(id="s", request_topic="request:tg:a", response_topic="persistent://tg/response/b"), broker=MemoryBroker()
    )
    assert (svc.request_topic, svc.response_topic) == ("non-persistent://tg/request/a", "persistent://tg/response/b")
    assert len(svc.instance) == 12


@aio
async def test_deadline() -> None:
    import time

    h = echo_harness()
    await h.start()
    past = int((time.time() - 1) * 1000)
    soon = int((time.time() + 0.1) * 1000)
    await h.call("late", {"msg": "x"}, words=wire.CallWords(deadline_ms=past))
    await h.call("slow", {"mode": "sleep", "ms": 5000}, props={wire.PROP_DEADLINE: str(soon)})
    await eventually(lambda: last(h.responses, "slow") is not None, "the slow call's end")
    r = last(h.responses, "slow")
    assert r is not None and r.error == wire.Error("timeout", "the request's deadline passed")
    assert not of(h.responses, "late"), "a request past its deadline is dropped"
    assert h.svc.stats().dropped == 1
    await h.stop()


@aio
async def test_concurrency_bound() -> None:
    h = Harness.make(max_concurrency=2)
    running = 0
    most = 0
    release = asyncio.Event()

    @h.svc.tool()
    async def hold(call: Call) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1
        return call.id

    await h.start()
    for i in range(10):
        await h.call(f"c{i}", {})
    await eventually(lambda: running == 2, "two calls running")
    await asyncio.sleep(0.05)
    assert running == 2 and h.svc._paused, "the subscription is paused while requests wait"
    release.set()
    await eventually(lambda: all(last(h.responses, f"c{i}") for i in range(10)), "every call answered")
    assert most == 2
    assert not h.svc._paused
    await h.stop()


def test_call_text() -> None:
    got: list[str] = []

    async def send(text: str) -> None:
        got.append(text)

    async def body() -> None:
        c = Call(call_id="c", tool="t", user="", config={}, arguments={}, properties={}, deadline=None, send=send)
        await c.send({"a": 1})
        await c.send(None)
        await c.log("info", {"n": 1})
        with pytest.raises(ValueError, match="log level"):
            await c.log("loud", "x")
        with pytest.raises(RuntimeError):
            await Call(call_id="c", tool="t", user="", config={}, arguments={}, properties={}, deadline=None).send("x")

    asyncio.run(body())
    # A log record as the Go SDK's Request.Log writes it.
    assert got == ['{"a": 1}', "", '{"log":{"level":"info","data":{"n":1}}}']
