"""What the MCP client tests (test_mcp_client.py, test_fastmcp_client.py)
share: the gateways test/e2e/mcp_test.go (TestMCPPythonClient) names by the
environment, as fixtures, and the two protocol eras as a parameter."""

import os

import pytest


def env(name):
    """The environment variable name, or the test fails saying how to run it."""
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"{name} is not set: run these tests with `go test ./test/e2e -run MCPPythonClient`", pytrace=False)
    return value


@pytest.fixture(scope="module")
def url():
    return env("TOOLGATE_MCP_URL")


@pytest.fixture(scope="module")
def secured():
    return env("TOOLGATE_MCP_SECURED_URL"), env("TOOLGATE_MCP_KEY")


@pytest.fixture(params=["auto", "legacy"])
def mode(request):
    return request.param
