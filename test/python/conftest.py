"""Shared set-up of the Python client tests of the gateway.

The gRPC stubs are generated from proto/ at test time, with
scripts/python/gen_stubs.sh and the interpreter running pytest (the project
venv's), into a temporary directory that is put on sys.path; so a test
module can `from toolgate.v1 import toolgate_pb2, toolgate_pb2_grpc`.

The gateway under test is named by the environment:
  TOOLGATE_GRPC_ADDR   host:port of its gRPC server
  TOOLGATE_HTTP_BASE   base URL of its REST server, e.g. http://127.0.0.1:8080
test/e2e/clients_test.go (TestPythonClients) starts a gateway and sets both.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GEN_STUBS = REPO / "scripts" / "python" / "gen_stubs.sh"

_stub_dir = None


def pytest_configure(config):
    """Generate the stubs before any test module is imported."""
    global _stub_dir
    _stub_dir = tempfile.mkdtemp(prefix="toolgate-pystubs-")
    proc = subprocess.run(
        [str(GEN_STUBS), sys.executable, _stub_dir],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        shutil.rmtree(_stub_dir, ignore_errors=True)
        raise pytest.UsageError(
            f"gen_stubs.sh failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    sys.path.insert(0, _stub_dir)


def pytest_unconfigure(config):
    if _stub_dir:
        shutil.rmtree(_stub_dir, ignore_errors=True)


def _required_env(name):
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(
            f"{name} is not set: these tests need a running gateway "
            "(run them with `go test ./test/e2e -run PythonClients`)",
            pytrace=False,
        )
    return value


@pytest.fixture(scope="session")
def grpc_addr():
    return _required_env("TOOLGATE_GRPC_ADDR")


@pytest.fixture(scope="session")
def http_base():
    return _required_env("TOOLGATE_HTTP_BASE").rstrip("/")


@pytest.fixture(scope="session")
def channel(grpc_addr):
    import grpc

    ch = grpc.insecure_channel(grpc_addr)
    try:
        grpc.channel_ready_future(ch).result(timeout=30)
    except grpc.FutureTimeoutError:
        ch.close()
        pytest.fail(f"no gRPC server ready at {grpc_addr} within 30s", pytrace=False)
    yield ch
    ch.close()


@pytest.fixture(scope="session")
def stub(channel):
    from toolgate.v1 import toolgate_pb2_grpc

    return toolgate_pb2_grpc.ToolServiceStub(channel)
