"""The TrustGraph adapter: TrustGraph's joke service, its import changed,
on the in-memory broker, with toolgate's contract."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import functools
import importlib.util
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from helpers import REPLY_TOPIC, Harness, eventually, last, of, texts

from toolgate_service import ToolError, wire
from toolgate_service.testing import MemoryBroker
from toolgate_service.trustgraph import DynamicToolService, TooManyRequests

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "joke.py"


def aio(fn: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(fn)
    def run() -> None:
        asyncio.run(asyncio.wait_for(fn(), 20))

    return run


def joke_module() -> ModuleType:
    """examples/joke.py, loaded as a module (it is not on the path)."""
    spec = importlib.util.spec_from_file_location("toolgate_joke_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def harness(cls: type[DynamicToolService], **params: Any) -> tuple[Harness, DynamicToolService]:
    broker = MemoryBroker()
    p = cls(id=params.pop("id", "joke-service"), topic=params.pop("topic", "joke"), broker=broker, **params)
    return Harness(p.service, broker), p


def test_the_example_is_trustgraphs_joke_service_with_its_import_changed() -> None:
    # TrustGraph's own source, installed in the project's venv (trustgraph-flow).
    import trustgraph.tool_service.joke.service as tg

    theirs = Path(tg.__file__).read_text().splitlines()
    ours = EXAMPLE.read_text().splitlines()
    changed = [
        line
        for line in difflib.unified_diff(theirs, ours, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---")) and line not in ("+", "-") and not line.startswith("+#")
    ]
    assert changed == [
        "-from ... base import DynamicToolService",
        "+from toolgate_service.trustgraph import DynamicToolService  # was: from ... base import DynamicToolService",
        '+if __name__ == "__main__":',
        "+    run()",
    ], changed


@aio
async def test_joke_service_answers_on_toolgates_contract() -> None:
    h, p = harness(joke_module().Processor, tool_name="tell-joke", config_param=["style"])
    assert [t.name for t in p.service.tools] == ["tell-joke"]
    await h.start()
    # TrustGraph's agent: no properties but the id, the reply on the response topic.
    await h.call("c1", {"topic": "llamas"}, config={"style": "pun"})
    await eventually(lambda: last(h.responses, "c1") is not None, "the reply")
    (m,) = of(h.responses, "c1")
    r = wire.decode_response(m.payload)
    assert r.error is None and r.end_of_stream and r.response.startswith("Here's a pun for you:\n\n"), r
    assert "llama" in r.response.lower()
    assert m.properties == {wire.PROP_ID: "c1", wire.PROP_SEQ: "0", wire.PROP_INSTANCE: h.svc.instance}
    # A gateway: reply-to, the tool named in the config.
    await h.call(
        "c2",
        {"topic": "programming"},
        config={"style": "one-liner", "toolgate-tool": "tell-joke"},
        words=wire.CallWords(reply_to=REPLY_TOPIC, credit=8),
    )
    await eventually(lambda: last(h.replies, "c2") is not None, "the reply on reply-to")
    r2 = last(h.replies, "c2")
    assert r2 is not None and r2.response.startswith("Here's a one-liner for you:"), r2
    assert not of(h.responses, "c2")
    # Published again after its end: the kept reply, not a second run.
    await h.call("c2", {"topic": "programming"}, words=wire.CallWords(reply_to=REPLY_TOPIC, receipt=True))
    await eventually(lambda: len(of(h.replies, "c2")) == 2, "the kept reply again")
    assert texts(h.replies, "c2") == [r2.response, r2.response]
    # The announcement: the tool and its config param, under the service id.
    doc = json.loads(h.svc.announcement_payload())
    assert doc["tool-service"]["joke-service"]["request-queue"] == "non-persistent://tg/request/joke"
    assert {"name": "style", "required": False} in doc["tool-service"]["joke-service"]["config-params"]
    assert doc["tool"]["tell-joke"]["service"] == "joke-service"
    await h.stop()
    assert h.svc.stats().handled == 2 and h.svc.stats().repeated == 1


class Slow(DynamicToolService):
    """A service that streams, sleeps, fails and refuses."""

    input_schema = {"type": "object"}  # noqa: RUF012

    async def invoke(self, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
        mode = arguments.get("mode")
        if mode == "busy":
            raise TooManyRequests("later")
        if mode == "typed":
            raise ToolError("not-found", "nothing")
        if mode == "boom":
            raise RuntimeError("boom")
        if mode == "stream":
            for i in range(3):
                await self.send(f"{i},")
            return {"id": self.call.id}
        if mode == "sleep":
            await asyncio.sleep(30)
        return arguments


@aio
async def test_errors_streams_and_cancels() -> None:
    h, _ = harness(Slow, id="slow", topic="slow")
    await h.start()
    for c in ("busy", "typed", "boom", "stream"):
        await h.call(c, {"mode": c}, words=wire.CallWords(reply_to=REPLY_TOPIC, credit=16))
    await eventually(lambda: all(last(h.replies, c) for c in ("busy", "typed", "boom", "stream")), "the replies")
    assert (last(h.replies, "busy") or wire.Response("", None, True)).error == wire.Error("too-many-requests", "later")
    assert (last(h.replies, "typed") or wire.Response("", None, True)).error == wire.Error("not-found", "nothing")
    assert (last(h.replies, "boom") or wire.Response("", None, True)).error == wire.Error("tool-service-error", "boom")
    assert texts(h.replies, "stream") == ["0,", "1,", "2,", '{"id": "stream"}']
    assert [m.properties[wire.PROP_SEQ] for m in of(h.replies, "stream")] == ["0", "1", "2", "3"]
    # A cancel on the cancel topic stops invoke.
    await h.call("long", {"mode": "sleep"}, words=wire.CallWords(reply_to=REPLY_TOPIC, receipt=True))
    await eventually(lambda: any(not m.payload for m in of(h.replies, "long")), "the long call's receipt")
    await h.cancel("long")
    await eventually(lambda: last(h.replies, "long") is not None, "the cancelled call's reply")
    assert (last(h.replies, "long") or wire.Response("", None, True)).error == wire.Error(
        "cancelled", "the caller gave the call up"
    )
    await h.stop()
    assert h.svc.stats().cancelled == 1


def test_trustgraphs_command_line() -> None:
    # The command line TrustGraph's docs give for joke-service, and toolgate's flags.
    mod = joke_module()
    parser = argparse.ArgumentParser()
    parser.add_argument("--id", default="joke-service")
    mod.Processor.add_args(parser)
    a = vars(
        parser.parse_args(
            [
                "-p",
                "pulsar://127.0.0.1:6650",
                "--id",
                "jokes",
                "--no-metrics",
                "--no-loki-enabled",
                "--config-param",
                "style",
                "--tool-config",
                "style=pun",
            ]
        )
    )
    assert a["topic"] == "joke", "the joke service's own default topic"
    assert a["pulsar_host"] == "pulsar://127.0.0.1:6650" and a["id"] == "jokes" and a["config_param"] == ["style"]
    p = mod.Processor(**a, broker=MemoryBroker())
    assert p.service.request_topic == "non-persistent://tg/request/joke"
    assert p.service.config.announce is not None
    assert [c.name for c in p.service.config.announce.config_params] == ["style"]
    assert [t.name for t in p.service.tools] == ["jokes"]
    doc = json.loads(p.service.announcement_payload())
    assert doc["tool"]["jokes"]["style"] == "pun"
    with pytest.raises(ValueError, match="NAME=VALUE"):
        mod.Processor(id="jokes", tool_config=["style"], broker=MemoryBroker())
