"""The official Python MCP SDK's OAuth support against a gateway whose /mcp
endpoint is an OAuth protected resource (RFC 9728).

test/e2e/mcp_oauth_test.go (TestMCPOAuthPythonClient) starts the gateway
and a small authorization server, and names them by the environment:
  TOOLGATE_MCP_OAUTH_URL            the endpoint, which is also its resource identifier
  TOOLGATE_MCP_OAUTH_ISSUER         the authorization server's issuer
  TOOLGATE_MCP_OAUTH_CLIENT_ID      a client_credentials client of it
  TOOLGATE_MCP_OAUTH_CLIENT_SECRET
  TOOLGATE_MCP_OAUTH_TOKEN          a token of the issuer for this resource
  TOOLGATE_MCP_OAUTH_WRONG_AUDIENCE a token of the issuer for another resource
"""

import os

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

TIMEOUT = 30  # seconds, per test
MODES = ["auto", "legacy"]


def _env(name):
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"{name} is not set: run these tests with `go test ./test/e2e -run MCPOAuthPythonClient`", pytrace=False)
    return value


class MemoryStorage:
    """Tokens and client information, kept for one test."""

    def __init__(self):
        self.tokens, self.client_info = None, None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


def run(mode, body, **http_args):
    """Runs body(client) with a Client of the endpoint in mode."""

    async def main():
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient(timeout=TIMEOUT, **http_args) as http:
                transport = streamable_http_client(_env("TOOLGATE_MCP_OAUTH_URL"), http_client=http)
                async with Client(transport, mode=mode) as client:
                    return await body(client)

    return anyio.run(main)


async def list_and_call(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    result = await client.call_tool("echo", {"msg": "authorized"})
    return tools, result


def check(tools, result):
    assert tools["tell-joke"].input_schema["properties"]["topic"]["type"] == "string"
    assert not result.is_error
    assert [c.text for c in result.content] == ["authorized"]


@pytest.mark.parametrize("mode", MODES)
def test_client_credentials_flow(mode):
    storage = MemoryStorage()
    provider = ClientCredentialsOAuthProvider(
        server_url=_env("TOOLGATE_MCP_OAUTH_URL"),
        storage=storage,
        client_id=_env("TOOLGATE_MCP_OAUTH_CLIENT_ID"),
        client_secret=_env("TOOLGATE_MCP_OAUTH_CLIENT_SECRET"),
        scope="tools",
        issuer=_env("TOOLGATE_MCP_OAUTH_ISSUER"),
    )
    check(*run(mode, list_and_call, auth=provider))
    # The token came from the authorization server the gateway named.
    assert storage.tokens is not None and storage.tokens.access_token


@pytest.mark.parametrize("mode", MODES)
def test_bearer_token(mode):
    headers = {"Authorization": "Bearer " + _env("TOOLGATE_MCP_OAUTH_TOKEN")}
    check(*run(mode, list_and_call, headers=headers))


@pytest.mark.parametrize("mode", MODES)
def test_token_for_another_resource_is_refused(mode):
    headers = {"Authorization": "Bearer " + _env("TOOLGATE_MCP_OAUTH_WRONG_AUDIENCE")}
    with pytest.raises(Exception) as err:
        run(mode, list_and_call, headers=headers)
    refusal = first_mcp_error(err.value)
    assert refusal is not None, repr(err.value)
    assert (refusal.code, refusal.message) == (-32001, "invalid token")


def first_mcp_error(exc):
    """The MCPError in exc, however deep in exception groups."""
    if isinstance(exc, MCPError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        if (found := first_mcp_error(inner)) is not None:
            return found
    return None


def test_challenge_points_at_the_metadata():
    url = _env("TOOLGATE_MCP_OAUTH_URL")
    resp = httpx2.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
        timeout=TIMEOUT,
    )
    assert resp.status_code == 401
    base = url.removesuffix("/mcp")
    assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in resp.headers["www-authenticate"]
    md = httpx2.get(f"{base}/.well-known/oauth-protected-resource/mcp", timeout=TIMEOUT).json()
    assert md["resource"] == url
    assert md["authorization_servers"] == [_env("TOOLGATE_MCP_OAUTH_ISSUER")]
