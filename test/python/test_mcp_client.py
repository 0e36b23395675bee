"""The official Python MCP SDK as a client of the gateway's /mcp endpoint.

Streamable HTTP, against two gateways that test/e2e/mcp_test.go
(TestMCPPythonClient) starts and names by the environment:
  TOOLGATE_MCP_URL          the shared e2e gateway's endpoint (anonymous callers allowed)
  TOOLGATE_MCP_SECURED_URL  a gateway with API keys and an access policy
  TOOLGATE_MCP_KEY          an API key of that gateway whose user may list and
                            invoke echo and tell-joke, and nothing else
"""

import os
import time

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

TIMEOUT = 30  # seconds, per test


def _env(name):
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"{name} is not set: run these tests with `go test ./test/e2e -run MCPPythonClient`", pytrace=False)
    return value


@pytest.fixture(scope="module")
def url():
    return _env("TOOLGATE_MCP_URL")


@pytest.fixture(scope="module")
def secured():
    return _env("TOOLGATE_MCP_SECURED_URL"), _env("TOOLGATE_MCP_KEY")


def run(url, body, headers=None):
    """Runs body(session) in an initialized MCP session with url."""

    async def main():
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient(headers=headers or {}, timeout=TIMEOUT) as http:
                async with streamable_http_client(url, http_client=http) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        return await body(session)

    return anyio.run(main)


async def all_tools(session):
    tools, cursor = [], None
    while True:
        page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def text_of(result):
    assert len(result.content) == 1, result.content
    assert result.content[0].type == "text"
    return result.content[0].text


def test_lists_tools_with_schemas(url):
    tools = {t.name: t for t in run(url, all_tools)}
    assert {"tell-joke", "echo", "tell-dad-joke"} <= set(tools)
    joke = tools["tell-joke"]
    assert joke.description == "Tell a joke on a given topic"
    schema = joke.input_schema
    assert schema["type"] == "object"
    assert schema["properties"]["topic"]["type"] == "string"
    assert tools["tell-dad-joke"].input_schema["required"] == ["topic"]


def test_calls_tell_joke(url):
    async def body(session):
        return await session.call_tool("tell-joke", {"topic": "programming"})

    result = run(url, body)
    assert not result.is_error
    assert len(text_of(result)) > 10


def test_streams_echo_as_progress_in_order(url):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    async def body(session):
        return await session.call_tool(
            "echo", {"mode": "stream", "n": 6, "gap_ms": 20}, progress_callback=on_progress
        )

    result = run(url, body)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "0,1,2,3,4,5"
    assert seen == [(1, "0,"), (2, "1,"), (3, "2,"), (4, "3,"), (5, "4,"), (6, "5")]


def test_service_error_is_a_tool_error(url):
    async def body(session):
        return await session.call_tool("echo", {"mode": "fail", "type": "not-found", "message": "no such joke"})

    result = run(url, body)
    assert result.is_error
    assert text_of(result) == "not-found: no such joke"
    assert result.structured_content["error"]["type"] == "not-found"


def test_bad_arguments_name_the_argument(url):
    async def body(session):
        return await session.call_tool("tell-dad-joke", {})

    result = run(url, body)
    assert result.is_error
    assert '"topic"' in text_of(result)
    assert result.structured_content["error"]["code"] == "InvalidArgument"


def test_timeout_from_meta(url):
    async def body(session):
        return await session.call_tool("echo", {"mode": "sleep", "ms": 5000}, meta={"timeout": "300ms"})

    t0 = time.monotonic()
    result = run(url, body)
    assert result.is_error
    assert time.monotonic() - t0 < 4


def test_refused_without_credentials(secured):
    mcp_url, _ = secured
    with pytest.raises(Exception):
        run(mcp_url, all_tools)
    # The refusal is an HTTP 401 with a bearer challenge.
    resp = httpx2.post(
        mcp_url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
        timeout=TIMEOUT,
    )
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"].startswith("Bearer")


def test_policy_hides_a_tool(secured):
    mcp_url, key = secured
    headers = {"Authorization": f"Bearer {key}"}
    names = {t.name for t in run(mcp_url, all_tools, headers)}
    assert names == {"echo", "tell-joke"}

    async def hidden(session):
        # Caught here: leaving the session would wrap it in task groups.
        with pytest.raises(MCPError) as err:
            await session.call_tool("secret-echo", {"msg": "x"})
        return err.value

    err = run(mcp_url, hidden, headers)
    assert err.code == -32602
    assert 'may not invoke tool "secret-echo"' in err.message

    async def allowed(session):
        return await session.call_tool("echo", {"msg": "hi"})

    result = run(mcp_url, allowed, headers)
    assert not result.is_error and text_of(result) == "hi"
