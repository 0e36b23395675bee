"""The official Python MCP SDK as a client of two tool sets' MCP endpoints.

test/e2e/toolset_test.go (TestToolSetsMCPClients) starts a gateway whose
registry has two tool sets and names its HTTP base in TOOLGATE_SETS_BASE:
  alpha  "Alpha desk": echo, and tell-joke shown as alpha-joke
  beta   "Beta desk":  echo shown as repeat
Each set's endpoint, /mcp/<set>, must be a server of its own: its name and
instructions, its tools alone, and any other tool unknown. Every test runs
in both protocol eras (mode "auto": server/discover; "legacy": initialize).
"""

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcpenv import env, mode  # noqa: F401 (fixtures)

TIMEOUT = 30  # seconds, per test

SETS = {
    "alpha": ("Alpha desk", "Alpha: echo and jokes.", {"echo": None, "alpha-joke": "A joke for the alpha desk."}),
    "beta": ("Beta desk", "Beta: repeat only.", {"repeat": None}),
}


def run(url, body, mode):
    async def main():
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient(timeout=TIMEOUT) as http:
                async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                    return await body(client)

    return anyio.run(main)


def set_url(name):
    return env("TOOLGATE_SETS_BASE") + "/mcp/" + name


@pytest.mark.parametrize("name", sorted(SETS))
def test_set_is_a_server_of_its_own(name, mode):
    title, instructions, tools = SETS[name]

    async def body(client):
        listed = (await client.list_tools()).tools
        return client.server_info, client.instructions, {t.name: t.description for t in listed}

    info, got_instructions, listed = run(set_url(name), body, mode)
    assert info is not None and info.name == title
    assert got_instructions == instructions
    assert sorted(listed) == sorted(tools)
    for tool, description in tools.items():
        if description is not None:
            assert listed[tool] == description


@pytest.mark.parametrize("name,tool", [("beta", "repeat"), ("alpha", "echo")])
def test_call_within_the_set(name, tool, mode):
    async def body(client):
        return await client.call_tool(tool, {"mode": "user"})

    result = run(set_url(name), body, mode)
    assert not result.is_error, result
    assert result.content[0].text == "anonymous"


@pytest.mark.parametrize("name,tool", [("beta", "echo"), ("alpha", "repeat"), ("beta", "tell-joke")])
def test_call_outside_the_set_is_unknown(name, tool, mode):
    async def body(client):
        try:
            result = await client.call_tool(tool, {"mode": "user"})
        except MCPError as e:
            return e
        return result

    got = run(set_url(name), body, mode)
    assert isinstance(got, MCPError), got
    assert got.error.code == -32602
    assert "not found" in got.error.message
