"""TrustGraph's real config service (config-svc of trustgraph-flow 2.11.1) on a real broker.

Needs a Pulsar broker (scripts/pulsar.sh up), Cassandra (scripts/cassandra.sh up) and
config-svc (scripts/configsvc.sh up), and fails — never skips — when any of them is
missing. The broker is named by TOOLGATE_PULSAR_URL; the workspace by
TOOLGATE_CONFIG_WORKSPACE (default "default"), registered here if it is not yet.

Writes go through TrustGraph's own Python API (trustgraph.base.AsyncConfigClient over
its async Pulsar backend, the client TrustGraph's services use); the raw wire shapes
that docs/trustgraph-config.md describes are checked with the plain pulsar-client
helper tgconfig.py. Every key written is unique to the run and deleted again.

  TOOLGATE_PULSAR_URL=pulsar://127.0.0.1:6650 .cache/venv/bin/python -m pytest -v \
      test/python/test_configsvc.py
"""

import asyncio
import contextlib
import json
import os
import time
import uuid

import pulsar
import pytest

import tgconfig

WORKSPACE = os.environ.get("TOOLGATE_CONFIG_WORKSPACE", "default")
RUN = uuid.uuid4().hex[:8]
SERVICE_KEY = f"test-joke-service-{RUN}"
TOOL_KEY = f"test-tell-joke-{RUN}"

SERVICE = {
    "id": SERVICE_KEY,
    "topic": "joke",
    "request-queue": "non-persistent://tg/request/joke",
    "response-queue": "non-persistent://tg/response/joke",
    "config-params": [{"name": "style", "required": False}],
}
TOOL = {
    "type": "tool-service",
    "name": TOOL_KEY,
    "description": "Tell a joke on a given topic",
    "service": SERVICE_KEY,
    "style": "pun",
    "arguments": [
        {"name": "topic", "type": "string", "description": "The topic for the joke"}
    ],
}

REQUEST_FIELDS = {"operation", "workspace", "keys", "type", "values"}
RESPONSE_FIELDS = {"version", "values", "directory", "config", "error"}
PUSH_FIELDS = {"version", "changes", "workspace_changes"}


# The services are checked inside each test (not in a fixture), so that a missing
# broker, Cassandra or config-svc makes every test FAIL, never skip or error.
_state = {}


def services():
    """The connected pulsar client, the workspace registered; or fail the test."""
    if "error" in _state:
        pytest.fail(_state["error"], pytrace=False)
    if "client" in _state:
        return _state["client"]
    url = os.environ.get("TOOLGATE_PULSAR_URL", "")
    if not url:
        _state["error"] = (
            "TOOLGATE_PULSAR_URL is not set: these tests need a broker, Cassandra and "
            "config-svc (scripts/pulsar.sh up; scripts/cassandra.sh up; scripts/configsvc.sh up)"
        )
        pytest.fail(_state["error"], pytrace=False)
    cl = tgconfig.client(url, timeout=10)
    try:
        # fails fast when no broker listens: a producer needs the broker
        cl.create_producer(tgconfig.REQUEST).close()
        tgconfig.ensure_workspaces(cl, [WORKSPACE], timeout=20)
    except pulsar.PulsarException as e:
        cl.close()
        _state["error"] = f"no Pulsar broker at {url}: {e}"
        pytest.fail(_state["error"], pytrace=False)
    except (tgconfig.NoAnswer, RuntimeError) as e:
        cl.close()
        _state["error"] = f"{e}: is config-svc running with Cassandra? (scripts/configsvc.sh up)"
        pytest.fail(_state["error"], pytrace=False)
    _state["client"] = cl
    return cl


@pytest.fixture(scope="module", autouse=True)
def _close_client():
    yield
    cl = _state.pop("client", None)
    if cl is not None:
        cl.close()


@contextlib.contextmanager
def requester(workspace=None):
    r = tgconfig.Requester(services(), workspace)
    try:
        yield r
    finally:
        r.close()


@contextlib.contextmanager
def push_consumer():
    """A consumer of the push topic, subscribed before the test acts."""
    c = services().subscribe(
        tgconfig.NOTIFY,
        subscription_name=f"test-push-{uuid.uuid4().hex[:8]}",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Latest,
    )
    try:
        yield c
    finally:
        c.close()


def wait_push(consumer, config_type, after_version, timeout=10.0):
    """The first push that names config_type in WORKSPACE with a version above
    after_version; fails the test when none comes."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=200)
        except pulsar.Timeout:
            continue
        consumer.acknowledge(msg)
        body = json.loads(msg.data())
        seen.append(body)
        assert set(body) == PUSH_FIELDS, body
        if body["version"] > after_version and WORKSPACE in body["changes"].get(config_type, []):
            return body
    pytest.fail(f"no push for {config_type!r} above version {after_version} in {timeout}s; saw {seen}")


def tg_api(coro_fn):
    """Run coro_fn(config_client) with TrustGraph's own async config client on the
    workspace's queue, as the services of TrustGraph 2.11 build it."""
    from trustgraph.base.async_config_client import AsyncConfigClient
    from trustgraph.base.async_pulsar_backend import AsyncPulsarBackend

    async def run():
        backend = AsyncPulsarBackend(os.environ["TOOLGATE_PULSAR_URL"])
        try:
            cc = await AsyncConfigClient.create(
                backend,
                f"request:tg:config:{WORKSPACE}",
                f"response:tg:config:{WORKSPACE}",
                timeout=10,
            )
            try:
                return await coro_fn(cc)
            finally:
                await cc.close()
        finally:
            await backend.close()

    return asyncio.run(run())


def version(requester):
    reply, _, _ = requester.call({"operation": "config", "workspace": WORKSPACE})
    assert reply["error"] is None, reply
    return reply["version"]


def test_tool_service_and_tool_round_trip():
    with requester() as system, push_consumer() as pushes:
        round_trip(system, pushes)


def round_trip(system, pushes):
    v0 = version(system)

    # put both with TrustGraph's API; each put is its own change and push
    tg_api(lambda c: c.put(WORKSPACE, "tool-service", SERVICE_KEY, json.dumps(SERVICE)))
    p1 = wait_push(pushes, "tool-service", v0)
    tg_api(lambda c: c.put(WORKSPACE, "tool", TOOL_KEY, json.dumps(TOOL)))
    p2 = wait_push(pushes, "tool", p1["version"])
    assert p1["version"] > v0 and p2["version"] > p1["version"]
    # a push is a change notice: types and workspaces, never the values
    assert p2["changes"] == {"tool": [WORKSPACE]} and p2["workspace_changes"] is None

    # read back with TrustGraph's API: the stored value is the JSON text put
    async def read(c):
        return (
            await c.get(WORKSPACE, "tool", TOOL_KEY),
            await c.get(WORKSPACE, "tool-service", SERVICE_KEY),
            await c.keys(WORKSPACE, "tool"),
            await c.get_all(WORKSPACE),
        )

    tool_raw, svc_raw, tool_keys, everything = tg_api(read)
    assert json.loads(tool_raw) == TOOL
    assert json.loads(svc_raw) == SERVICE
    assert TOOL_KEY in tool_keys
    assert json.loads(everything["tool"][TOOL_KEY]) == TOOL
    assert json.loads(everything["tool-service"][SERVICE_KEY]) == SERVICE

    # the same through the system queue, workspace in the body (what TrustGraph's
    # own processors do at start-up and on a push)
    reply, _, props = system.call(
        {"operation": "getvalues", "workspace": WORKSPACE, "type": "tool-service"}
    )
    assert set(reply) == RESPONSE_FIELDS and reply["error"] is None
    assert reply["version"] >= p2["version"]
    by_key = {v["key"]: v for v in reply["values"]}
    assert json.loads(by_key[SERVICE_KEY]["value"]) == SERVICE
    assert by_key[SERVICE_KEY]["type"] == "tool-service"

    # delete, again one push per change; then the keys are gone
    tg_api(lambda c: c.delete(WORKSPACE, "tool", TOOL_KEY))
    p3 = wait_push(pushes, "tool", p2["version"])
    tg_api(lambda c: c.delete(WORKSPACE, "tool-service", SERVICE_KEY))
    wait_push(pushes, "tool-service", p3["version"])

    async def gone(c):
        return (
            await c.get(WORKSPACE, "tool", TOOL_KEY),
            await c.keys(WORKSPACE, "tool"),
            await c.keys(WORKSPACE, "tool-service"),
        )

    tool_after, tool_keys_after, svc_keys_after = tg_api(gone)
    assert tool_after is None
    assert TOOL_KEY not in tool_keys_after and SERVICE_KEY not in svc_keys_after


def test_raw_request_minimal_json_and_id():
    # a client may leave out every field it does not use; the reply carries our id
    msg_id = f"test-{uuid.uuid4()}"
    with requester(WORKSPACE) as ws_queue:
        ws_queue.call({"operation": "list", "type": "tool"})  # the queue answers
        reply, raw, props = ws_queue.send_raw({"operation": "list", "type": "tool"}, msg_id=msg_id)
    assert props == {"id": msg_id}
    assert set(reply) == RESPONSE_FIELDS
    assert reply["error"] is None and isinstance(reply["directory"], list)
    assert isinstance(reply["version"], int)


def test_put_reply_and_missing_key():
    with requester(WORKSPACE) as ws_queue, push_consumer() as pushes:
        put_reply_and_missing_key(ws_queue, pushes)


def put_reply_and_missing_key(ws_queue, pushes):
    key = f"test-put-reply-{RUN}"
    reply, _, _ = ws_queue.call(
        {"operation": "put", "values": [{"type": "tool", "key": key, "value": '{"name": "x"}'}]}
    )
    try:
        # the put reply is an empty response: version 0; the new version comes in the push
        assert reply == {"version": 0, "values": [], "directory": [], "config": {}, "error": None}
        wait_push(pushes, "tool", 0)
    finally:
        reply, _, _ = ws_queue.call({"operation": "delete", "keys": [{"type": "tool", "key": key}]})
        assert reply["error"] is None
    # get of a missing key is no error: the value is null
    reply, _, _ = ws_queue.call({"operation": "get", "keys": [{"type": "tool", "key": key}]})
    assert reply["error"] is None
    assert reply["values"] == [{"type": "tool", "key": key, "value": None, "workspace": ""}]


def test_errors():
    with requester(WORKSPACE) as ws_queue:
        reply, _, _ = ws_queue.call({"operation": "frobnicate"})
    assert reply["error"] == {"type": "bad-operation", "message": "Bad operation"}
    # the system queue needs the workspace in the body
    with requester() as system:
        reply, _, _ = system.call({"operation": "list", "type": "tool"})
    assert reply["error"] == {"type": "bad-request", "message": "Workspace is required"}


def test_workspace_registry():
    with requester() as system:
        reply, _, _ = system.call({"operation": "getkeys-all-ws", "type": "workspace"})
    assert reply["error"] is None
    assert {"type": "workspace", "key": WORKSPACE, "value": "", "workspace": "__workspaces__"} in reply["values"]
