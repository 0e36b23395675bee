"""The official Python MCP SDK as a client of the gateway's /mcp endpoint.

Every test runs in both protocol eras the SDK's Client connects in: mode
"auto" (its default: server/discover, protocol 2026-07-28) and "legacy"
(the initialize handshake, 2025-11-25).

Streamable HTTP, against two gateways that test/e2e/mcp_test.go
(TestMCPPythonClient) starts and names by the environment:
  TOOLGATE_MCP_URL          the shared e2e gateway's endpoint (anonymous callers allowed)
  TOOLGATE_MCP_SECURED_URL  a gateway with API keys and an access policy
  TOOLGATE_MCP_KEY          an API key of that gateway whose user may list and
                            invoke echo and tell-joke, and nothing else
  TOOLGATE_ADMIN_BASE       the shared gateway's admin listener (for its /metrics)
"""

import re
import time

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcpenv import env, mode, secured, url  # noqa: F401 (fixtures)

TIMEOUT = 30  # seconds, per test


def run(url, body, mode, headers=None):
    """Runs body(client) with an MCP client of url connected in mode."""

    async def main():
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient(headers=headers or {}, timeout=TIMEOUT) as http:
                async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                    return await body(client)

    return anyio.run(main)


async def all_tools(client):
    tools, cursor = [], None
    while True:
        page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def text_of(result):
    assert len(result.content) == 1, result.content
    assert result.content[0].type == "text"
    return result.content[0].text


def test_lists_tools_with_schemas(url, mode):
    tools = {t.name: t for t in run(url, all_tools, mode)}
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


def test_streams_echo_as_progress_in_order(url, mode):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    async def body(client):
        return await client.call_tool(
            "echo", {"mode": "stream", "n": 6, "gap_ms": 20}, progress_callback=on_progress
        )

    result = run(url, body, mode)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "0,1,2,3,4,5"
    assert seen == [(1, "0,"), (2, "1,"), (3, "2,"), (4, "3,"), (5, "4,"), (6, "5")]


def test_service_error_is_a_tool_error(url, mode):
    async def body(client):
        return await client.call_tool("echo", {"mode": "fail", "type": "not-found", "message": "no such joke"})

    result = run(url, body, mode)
    assert result.is_error
    assert text_of(result) == "not-found: no such joke"
    assert result.structured_content["error"]["type"] == "not-found"


def test_bad_arguments_name_the_argument(url, mode):
    async def body(client):
        return await client.call_tool("tell-dad-joke", {})

    result = run(url, body, mode)
    assert result.is_error
    assert '"topic"' in text_of(result)
    assert result.structured_content["error"]["code"] == "InvalidArgument"


def test_timeout_from_meta(url, mode):
    async def body(client):
        return await client.call_tool("echo", {"mode": "sleep", "ms": 5000}, meta={"timeout": "300ms"})

    t0 = time.monotonic()
    result = run(url, body, mode)
    assert result.is_error
    assert time.monotonic() - t0 < 4


def test_refused_without_credentials(secured, mode):
    mcp_url, _ = secured
    with pytest.raises(Exception):
        run(mcp_url, all_tools, mode)
    # The refusal is an HTTP 401 with a bearer challenge.
    resp = httpx2.post(
        mcp_url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
        timeout=TIMEOUT,
    )
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"].startswith("Bearer")


def test_policy_hides_a_tool(secured, mode):
    mcp_url, key = secured
    headers = {"Authorization": f"Bearer {key}"}
    names = {t.name for t in run(mcp_url, all_tools, mode, headers)}
    assert names == {"echo", "tell-joke"}

    async def hidden(client):
        # Caught here: leaving the client would wrap it in task groups.
        with pytest.raises(MCPError) as err:
            await client.call_tool("secret-echo", {"msg": "x"})
        return err.value

    err = run(mcp_url, hidden, mode, headers)
    assert err.code == -32602
    assert 'may not invoke tool "secret-echo"' in err.message

    async def allowed(client):
        return await client.call_tool("echo", {"msg": "hi"})

    result = run(mcp_url, allowed, mode, headers)
    assert not result.is_error and text_of(result) == "hi"


def canceled_calls():
    """How many echo tools/calls the shared gateway counted as cancelled."""
    metrics = httpx2.get(env("TOOLGATE_ADMIN_BASE") + "/metrics", timeout=TIMEOUT).text
    m = re.search(r'^toolgate_calls_total\{code="Canceled",method="mcp/InvokeTool",tool="echo"\} (\d+)', metrics, re.M)
    return int(m.group(1)) if m else 0


def test_cancelling_a_call_ends_it_at_the_gateway(url, mode):
    # A call the client gives up on ends at the gateway at once, not when
    # the tool would have answered: the SDK sends notifications/cancelled
    # (legacy) or aborts the call's POST (2026-07-28, where that is the
    # signal).
    before = canceled_calls()

    async def body(client):
        with anyio.move_on_after(1) as scope:
            await client.call_tool("echo", {"mode": "sleep", "ms": 8000, "msg": "late"})
        return scope.cancelled_caught

    t0 = time.monotonic()
    assert run(url, body, mode), "the call answered before the client gave up"
    while canceled_calls() == before:
        assert time.monotonic() - t0 < 5, "the gateway did not end the cancelled call"
        time.sleep(0.1)
