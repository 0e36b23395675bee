"""fastmcp's Client as a client of the gateway's /mcp endpoint.

fastmcp (PyPI `fastmcp`) wraps the official SDK's session in a Client of its
own: StreamableHttpTransport, auth as a bearer string or headers, progress
handlers, call_tool raising ToolError unless raise_on_error=False, a
per-call timeout, and Client.cancel to send notifications/cancelled.
Every test runs in both protocol eras fastmcp connects in: mode "auto" (its
default: server/discover, protocol 2026-07-28) and "legacy" (the initialize
handshake, 2025-11-25).

Started, with test_mcp_client.py, by test/e2e/mcp_test.go
(TestMCPPythonClient), which names the gateways by the environment:
  TOOLGATE_MCP_URL          the shared e2e gateway's endpoint (anonymous callers allowed)
  TOOLGATE_MCP_SECURED_URL  a gateway with API keys and an access policy
  TOOLGATE_MCP_KEY          an API key of that gateway whose user may list and
                            invoke echo and tell-joke, and nothing else
  TOOLGATE_ADMIN_BASE       the shared gateway's admin listener (for its /metrics)
"""

import json
import re
import time

import anyio
import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError
from mcp.shared.exceptions import MCPError

from mcpenv import env, mode, secured, url  # noqa: F401 (fixtures)

TIMEOUT = 30  # seconds, per test
ERA = {"auto": "2026-07-28", "legacy": "2025-11-25"}


class Wire:
    """The JSON-RPC messages the client POSTed, read by an httpx request hook
    on the client that fastmcp's transport builds through its factory."""

    def __init__(self):
        self.sent = []

    async def _record(self, request):
        if request.method == "POST" and request.content:
            self.sent.append(json.loads(request.content))

    def factory(self, **kwargs):
        kwargs.setdefault("timeout", httpx2.Timeout(TIMEOUT))
        return httpx2.AsyncClient(event_hooks={"request": [self._record]}, **kwargs)

    def methods(self):
        return [m.get("method") for m in self.sent]

    def ids_of(self, method):
        return [m["id"] for m in self.sent if m.get("method") == method and "id" in m]


def run(url, body, mode, wire=None, **transport):
    """Runs body(client) with a fastmcp Client of url connected in mode;
    transport holds StreamableHttpTransport's headers= or auth=."""

    async def main():
        with anyio.fail_after(TIMEOUT):
            t = StreamableHttpTransport(url, httpx_client_factory=wire.factory if wire else None, **transport)
            async with Client(t, mode=mode, timeout=TIMEOUT) as client:
                assert client.protocol_version == ERA[mode], client.protocol_version
                return await body(client)

    return anyio.run(main)


async def list_tools(client):
    return await client.list_tools()


def text_of(result):
    assert len(result.content) == 1, result.content
    assert result.content[0].type == "text"
    return result.content[0].text


def test_connects_in_the_era_asked(url, mode):
    # run() asserts the negotiated version; here the wire says how.
    wire = Wire()

    async def body(client):
        return client.initialize_result

    init = run(url, body, mode, wire)
    if mode == "auto":
        assert init is None  # a server/discover connection has no InitializeResult
        assert "server/discover" in wire.methods() and "initialize" not in wire.methods()
    else:
        assert init.server_info.name
        assert wire.methods()[:2] == ["initialize", "notifications/initialized"]


def test_lists_tools_with_schemas(url, mode):
    tools = {t.name: t for t in run(url, list_tools, mode)}
    assert {"tell-joke", "echo", "tell-dad-joke"} <= set(tools)
    joke = tools["tell-joke"]
    assert joke.description == "Tell a joke on a given topic"
    schema = joke.input_schema
    assert schema["type"] == "object"
    assert schema["properties"]["topic"]["type"] == "string"
    assert tools["tell-dad-joke"].input_schema["required"] == ["topic"]


def test_calls_tell_joke(url, mode):
    async def body(client):
        return await client.call_tool("tell-joke", {"topic": "programming"})

    result = run(url, body, mode)
    assert not result.is_error
    assert len(text_of(result)) > 10


def test_calls_echo(url, mode):
    async def body(client):
        return await client.call_tool("echo", {"msg": "hello fastmcp"})

    result = run(url, body, mode)
    assert not result.is_error
    assert text_of(result) == "hello fastmcp"


def test_streams_echo_as_progress_in_order(url, mode):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    async def body(client):
        return await client.call_tool(
            "echo", {"mode": "stream", "n": 6, "gap_ms": 20}, progress_handler=on_progress
        )

    result = run(url, body, mode)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "0,1,2,3,4,5"
    assert seen == [(1, "0,"), (2, "1,"), (3, "2,"), (4, "3,"), (5, "4,"), (6, "5")]


def test_client_wide_progress_handler(url, mode):
    # The handler given to Client() serves calls that name none.
    seen = []

    async def on_progress(progress, total, message):
        seen.append(message)

    async def main():
        with anyio.fail_after(TIMEOUT):
            async with Client(StreamableHttpTransport(url), mode=mode, progress_handler=on_progress) as client:
                return await client.call_tool("echo", {"mode": "stream", "n": 3, "gap_ms": 10})

    result = anyio.run(main)
    assert text_of(result) == "0,1,2"
    assert seen == ["0,", "1,", "2"]


def test_service_error_raises_tool_error(url, mode):
    async def body(client):
        # Caught here: leaving the client would wrap it in task groups.
        with pytest.raises(ToolError) as err:
            await client.call_tool("echo", {"mode": "fail", "type": "not-found", "message": "no such joke"})
        return err.value

    assert str(run(url, body, mode)) == "not-found: no such joke"


def test_service_error_as_a_result(url, mode):
    async def body(client):
        return await client.call_tool(
            "echo", {"mode": "fail", "type": "not-found", "message": "no such joke"}, raise_on_error=False
        )

    result = run(url, body, mode)
    assert result.is_error
    assert text_of(result) == "not-found: no such joke"
    assert result.structured_content["error"]["type"] == "not-found"


def test_bad_arguments_name_the_argument(url, mode):
    async def body(client):
        return await client.call_tool("tell-dad-joke", {}, raise_on_error=False)

    result = run(url, body, mode)
    assert result.is_error
    assert '"topic"' in text_of(result)
    assert result.structured_content["error"]["code"] == "InvalidArgument"


def test_timeout_from_meta(url, mode):
    async def body(client):
        return await client.call_tool(
            "echo", {"mode": "sleep", "ms": 5000}, meta={"timeout": "300ms"}, raise_on_error=False
        )

    t0 = time.monotonic()
    result = run(url, body, mode)
    assert result.is_error
    assert result.structured_content["error"]["code"] == "DeadlineExceeded", result.structured_content
    assert time.monotonic() - t0 < 4


def test_refused_without_credentials(secured, mode):
    mcp_url, _ = secured
    wire = Wire()
    with pytest.raises(MCPError) as err:
        run(mcp_url, list_tools, mode, wire)
    # Connecting fails with the JSON-RPC error of the gateway's 401 body.
    # In "auto" fastmcp takes a refused server/discover for a server of the
    # old era and tries initialize, refused the same way.
    want = ["server/discover", "initialize"] if mode == "auto" else ["initialize"]
    assert wire.methods() == want
    assert err.value.code == -32001, err.value
    assert err.value.message.startswith("missing credentials"), err.value.message
    assert err.value.data == {"code": "Unauthenticated", "reason": "MISSING_CREDENTIALS", "domain": "toolgate"}
    # The refusal is an HTTP 401 with a bearer challenge.
    resp = httpx2.post(
        mcp_url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
        timeout=TIMEOUT,
    )
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"].startswith("Bearer")


def test_refused_with_a_wrong_key(secured, mode):
    mcp_url, _ = secured
    with pytest.raises(MCPError) as err:
        run(mcp_url, list_tools, mode, auth="not-a-key")
    assert err.value.code == -32001, err.value
    assert err.value.message == "invalid API key"
    assert err.value.data == {"code": "Unauthenticated", "reason": "INVALID_CREDENTIALS", "domain": "toolgate"}


@pytest.mark.parametrize("how", ["auth", "headers"])
def test_policy_hides_a_tool(secured, mode, how):
    mcp_url, key = secured
    cred = {"auth": key} if how == "auth" else {"headers": {"Authorization": f"Bearer {key}"}}
    names = {t.name for t in run(mcp_url, list_tools, mode, **cred)}
    assert names == {"echo", "tell-joke"}

    async def hidden(client):
        with pytest.raises(MCPError) as err:
            await client.call_tool("secret-echo", {"msg": "x"})
        return err.value

    err = run(mcp_url, hidden, mode, **cred)
    assert err.code == -32602
    assert 'may not invoke tool "secret-echo"' in err.message

    async def allowed(client):
        return await client.call_tool("echo", {"msg": "hi"})

    result = run(mcp_url, allowed, mode, **cred)
    assert not result.is_error and text_of(result) == "hi"


def canceled_calls():
    """How many echo tools/calls the shared gateway counted as cancelled.

    mcp/StreamTool: fastmcp's Client has a default progress handler (it
    logs), so every call it makes carries a progressToken and the gateway
    serves it as a stream. So --stream-idle-timeout (1s on the e2e gateway)
    applies to each: the calls cancelled below stream a chunk every 100 ms
    for 6 s, which neither that nor the 10 s default deadline ends early."""
    metrics = httpx2.get(env("TOOLGATE_ADMIN_BASE") + "/metrics", timeout=TIMEOUT).text
    m = re.search(r'^toolgate_calls_total\{code="Canceled",method="mcp/StreamTool",tool="echo"\} (\d+)', metrics, re.M)
    return int(m.group(1)) if m else 0


LONG_STREAM = {"mode": "stream", "n": 60, "gap_ms": 100}  # 6 s unless cancelled


async def until_counted(before, t0, what):
    while await anyio.to_thread.run_sync(canceled_calls) == before:
        assert time.monotonic() - t0 < 3, f"the gateway did not end the call {what}"
        await anyio.sleep(0.05)


def test_client_cancel_ends_the_call_at_the_gateway(url, mode):
    # Client.cancel(request_id) sends notifications/cancelled through the
    # SDK session. In the legacy era that frame is POSTed and the gateway
    # ends the call it names. In 2026-07-28 the SDK's transport does not
    # POST it (that wire has no client-to-server notifications): it aborts
    # the call's own POST, and the gateway ends the call on the disconnect.
    # fastmcp's call_tool does not return the request id: it is read off the
    # wire.
    wire = Wire()
    before = canceled_calls()
    outcome, seen = {}, []

    async def on_progress(progress, total, message):
        seen.append(message)

    async def body(client):
        async def call():
            try:
                outcome["result"] = await client.call_tool(
                    "echo", LONG_STREAM, progress_handler=on_progress, raise_on_error=False
                )
            except Exception as e:  # the call may end in an error once abandoned
                outcome["error"] = e

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            while len(seen) < 2:  # the gateway is streaming the call
                await anyio.sleep(0.01)
            (call_id,) = wire.ids_of("tools/call")
            t0 = time.monotonic()
            await client.cancel(call_id, "test: no longer wanted")
            await until_counted(before, t0, "on Client.cancel")
            # The chunks stop: the call ended at the gateway, not at the client.
            streamed = len(seen)
            await anyio.sleep(0.5)
            assert len(seen) == streamed, seen
            assert streamed < 30, seen
            # No answer from the tool. In the legacy era the gateway still
            # answers the cancelled call, on its open response stream, with
            # an error result (code Canceled); the spec says it SHOULD NOT
            # answer, so no result at all is fine too.
            if "result" in outcome:
                result = outcome["result"]
                assert result.is_error, result
                assert result.structured_content["error"]["code"] == "Canceled", result
            # Seen now, before leaving the scope below (which abandons the
            # call in the SDK, and would send a frame of its own).
            cancels = [m for m in wire.sent if m.get("method") == "notifications/cancelled"]
            tg.cancel_scope.cancel()
        return call_id, cancels

    call_id, cancels = run(url, body, mode, wire)
    assert seen[:2] == ["0,", "1,"]
    if mode == "legacy":
        assert len(cancels) == 1, cancels
        assert cancels[0]["params"] == {"requestId": call_id, "reason": "test: no longer wanted"}
    else:
        assert cancels == []


def test_call_timeout_ends_the_call_at_the_gateway(url, mode):
    # call_tool(timeout=...) gives up after that long: the SDK raises and
    # abandons the request (notifications/cancelled in the legacy era, the
    # POST aborted in 2026-07-28), and the gateway ends the call at once,
    # not when the tool would have answered.
    wire = Wire()
    before = canceled_calls()
    seen = []

    async def on_progress(progress, total, message):
        seen.append(message)

    async def body(client):
        with pytest.raises(MCPError) as err:
            await client.call_tool("echo", LONG_STREAM, timeout=1, progress_handler=on_progress)
        return err.value

    t0 = time.monotonic()
    err = run(url, body, mode, wire)
    assert err.message == "Request 'tools/call' timed out", err.message
    assert time.monotonic() - t0 < 3
    assert 2 <= len(seen) < 30, seen
    anyio.run(until_counted, before, t0, "after the client's timeout")
    (call_id,) = wire.ids_of("tools/call")
    cancels = [m["params"] for m in wire.sent if m.get("method") == "notifications/cancelled"]
    if mode == "legacy":
        assert cancels == [{"requestId": call_id, "reason": "timed out after 1.0s"}]
    else:
        assert cancels == []
