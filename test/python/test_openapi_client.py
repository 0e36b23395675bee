"""An OpenAPI-driven REST client of the gateway.

The client knows no URL: it fetches the gateway's OpenAPI 3.1 document,
finds each operation by its operationId, and builds the request from the
operation's method, path template, parameters (path, query) and request
body. Request bodies and every answer are validated (JSON Schema 2020-12)
against the schemas the document declares for their status and media type.
Run by test/e2e/clients_test.go; see conftest.py.
"""

import json
import re
from pathlib import Path
from urllib.parse import quote

import jsonschema
import pytest
import requests
from google.protobuf import struct_pb2

from toolgate.v1 import toolgate_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
SPEC_FILE = REPO / "api" / "openapi" / "toolgate.openapi.json"
TIMEOUT = 30  # seconds, per request
NDJSON = "application/x-ndjson"


class SpecError(Exception):
    """The call does not fit the operation the document describes."""


class OpenAPIClient:
    """Calls the operations of an OpenAPI 3.1 document by operationId."""

    def __init__(self, base_url, spec):
        if not str(spec.get("openapi", "")).startswith("3.1."):
            raise SpecError(f"not an OpenAPI 3.1 document: {spec.get('openapi')!r}")
        self.base_url = base_url.rstrip("/")
        self.spec = spec
        self.session = requests.Session()
        self.ops = {}
        for path, item in spec["paths"].items():
            shared = item.get("parameters", [])
            for method, op in item.items():
                if method == "parameters":
                    continue
                self.ops[op["operationId"]] = (method.upper(), path, shared + op.get("parameters", []), op)

    def schema(self, schema):
        """A schema of the document, made standalone (its $refs resolve)."""
        return {**schema, "components": self.spec.get("components", {})}

    def validate(self, instance, schema):
        jsonschema.Draft202012Validator(self.schema(schema)).validate(instance)

    def response_schema(self, operation_id, status, media_type="application/json"):
        responses = self.ops[operation_id][3]["responses"]
        r = responses.get(str(status)) or responses.get("default")
        if r is None:
            raise SpecError(f"{operation_id}: status {status} not in the document")
        ref = r.get("$ref", "")
        if ref:
            r = self.spec["components"]["responses"][ref.rsplit("/", 1)[1]]
        content = r.get("content", {})
        if media_type not in content:
            raise SpecError(f"{operation_id}: status {status} has no {media_type} answer")
        return content[media_type]["schema"]

    def request(self, operation_id, stream=False, headers=None, **params):
        """Sends the operation; returns the requests.Response (not checked).
        The request body, when the operation takes one, is params["body"]."""
        method, path, declared, op = self.ops[operation_id]
        query, body, have_body = {}, None, False
        url_path = path
        names = set()
        for p in declared:
            name, where = p["name"], p["in"]
            names.add(name)
            if name not in params:
                if p.get("required"):
                    raise SpecError(f"{operation_id}: required parameter {name!r} missing")
                continue
            value = params[name]
            if where == "path":
                url_path = url_path.replace("{" + name + "}", quote(str(value), safe=""))
            elif where == "query":
                query[name] = value
            else:
                raise SpecError(f"{operation_id}: parameters in {where} not supported")
        rb = op.get("requestBody")
        if rb is not None:
            names.add("body")
            if "body" in params:
                self.validate(params["body"], rb["content"]["application/json"]["schema"])
                body, have_body = params["body"], True
            elif rb.get("required"):
                raise SpecError(f"{operation_id}: request body missing")
        unknown = set(params) - names
        if unknown:
            raise SpecError(f"{operation_id}: no parameters {sorted(unknown)} in the document")
        if re.search(r"\{[^}]*\}", url_path):
            raise SpecError(f"{operation_id}: path {url_path} not filled in")
        url = self.base_url + url_path
        return self.session.request(
            method, url, params=query, json=body if have_body else None,
            stream=stream, timeout=TIMEOUT, headers=headers,
        )

    def call(self, operation_id, **params):
        """Sends the operation; validates the JSON answer against the schema
        for its status; returns (status, answer)."""
        resp = self.request(operation_id, **params)
        assert resp.headers.get("Content-Type", "").startswith("application/json"), resp.headers
        answer = resp.json()
        self.validate(answer, self.response_schema(operation_id, resp.status_code))
        return resp.status_code, answer

    def stream(self, operation_id, **params):
        """Sends a server-streaming operation asking for NDJSON. A 200 answer
        is read line by line, each line validated against the document's
        NDJSON schema; an error status has one Status JSON body, validated
        against that status's schema. Returns (status, objects)."""
        with self.request(operation_id, stream=True, headers={"Accept": NDJSON}, **params) as resp:
            ctype = resp.headers.get("Content-Type", "")
            if resp.status_code != 200:
                assert ctype.startswith("application/json"), resp.headers
                answer = resp.json()
                self.validate(answer, self.response_schema(operation_id, resp.status_code))
                return resp.status_code, [answer]
            assert ctype.startswith(NDJSON), resp.headers
            schema = self.response_schema(operation_id, 200, NDJSON)
            objects = []
            for line in resp.iter_lines():
                if not line.strip():
                    continue
                obj = json.loads(line)
                self.validate(obj, schema)
                objects.append(obj)
            return resp.status_code, objects


@pytest.fixture(scope="module")
def spec(http_base):
    resp = requests.get(http_base + "/openapi.json", timeout=TIMEOUT)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    return resp.json()


@pytest.fixture(scope="module")
def api(http_base, spec):
    return OpenAPIClient(http_base, spec)


def test_served_spec_is_the_checked_in_one(spec):
    assert spec == json.loads(SPEC_FILE.read_text())
    ops = {op["operationId"] for item in spec["paths"].values() for op in item.values()}
    assert ops == {
        "ListTools", "GetTool", "InvokeTool",
        "StreamTool", "StartTool", "ListToolServices", "GetToolService",
        "ListOperations", "GetOperation", "DeleteOperation", "CancelOperation", "WaitOperation", "StreamOperation",
    }


def test_invoke_same_answer_as_grpc(api, stub):
    status, answer = api.call(
        "InvokeTool", name="echo", body={"arguments": {"msg": "same answer"}}
    )
    assert status == 200, answer
    args = struct_pb2.Struct()
    args.update({"msg": "same answer"})
    over_grpc = stub.InvokeTool(pb.InvokeToolRequest(name="echo", arguments=args), timeout=TIMEOUT)
    assert answer["output"] == over_grpc.output == "same answer"
    # Not JSON: gRPC leaves output_json unset, REST writes it as null.
    assert answer.get("output_json") is None and not over_grpc.HasField("output_json")


def test_invoke_json_answer(api):
    args = {"a": 1, "b": ["x", True], "c": {"d": "é"}}
    status, answer = api.call("InvokeTool", name="echo", body={"arguments": args})
    assert status == 200, answer
    assert answer["output_json"] == args
    assert json.loads(answer["output"]) == args


def test_invoke_timeout_is_a_duration_string(api):
    body = {"arguments": {"mode": "sleep", "ms": 5000}, "timeout": "0.2s"}
    status, answer = api.call("InvokeTool", name="echo", body=body)
    assert status == 504, answer  # DEADLINE_EXCEEDED
    assert answer["code"] == 4, answer


def test_list_and_get_tools(api):
    status, page = api.call("ListTools")
    assert status == 200, page
    names = [t["name"] for t in page["tools"]]
    assert {"tell-joke", "tell-dad-joke", "echo"} <= set(names), names
    assert page["next_page_token"] == ""

    joined, token = [], None
    for _ in range(200):
        params = {"page_size": 2} if token is None else {"page_size": 2, "page_token": token}
        status, p = api.call("ListTools", **params)
        assert status == 200, p
        assert 1 <= len(p["tools"]) <= 2, p
        joined += [t["name"] for t in p["tools"]]
        token = p["next_page_token"]
        if not token:
            break
    assert joined == names

    status, tool = api.call("GetTool", name="tell-dad-joke")
    assert status == 200, tool
    # response_body: "tool" — the Tool itself, not {"tool": {...}}.
    assert tool["name"] == "tell-dad-joke"
    assert tool["arguments"] == [
        {"name": "topic", "type": "string", "description": "The topic for the joke", "required": True}
    ]
    assert tool["arguments_schema"]["required"] == ["topic"]
    # The document says arguments_schema is a JSON Schema (draft 2020-12).
    jsonschema.Draft202012Validator.check_schema(tool["arguments_schema"])


def test_list_and_get_tool_services(api):
    status, page = api.call("ListToolServices", page_size=1000)
    assert status == 200, page
    ids = [s["id"] for s in page["tool_services"]]
    assert {"echo-service", "joke-service"} <= set(ids), ids
    status, svc = api.call("GetToolService", id="echo-service")
    assert status == 200, svc
    assert svc["id"] == "echo-service"
    assert [c["name"] for c in svc["config_params"]] == ["mode-hint"]


def test_errors_are_statuses(api):
    status, answer = api.call("GetTool", name="no-such-tool")
    assert status == 404 and answer["code"] == 5, answer
    status, answer = api.call("InvokeTool", name="tell-dad-joke", body={"arguments": {}})
    assert status == 400 and answer["code"] == 3, answer
    status, answer = api.call(
        "InvokeTool", name="echo",
        body={"arguments": {"mode": "fail", "type": "not-found", "message": "gone"}},
    )
    assert status == 404 and answer["code"] == 5 and answer["message"] == "gone", answer
    infos = [d for d in answer["details"] if d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"]
    assert len(infos) == 1, answer
    assert infos[0]["reason"] == "not-found"
    assert infos[0]["metadata"] == {"tool": "echo", "service": "echo-service"}


def test_stream(api):
    status, chunks = api.stream(
        "StreamTool", name="echo", body={"arguments": {"mode": "stream", "n": 50}}
    )
    assert status == 200, chunks
    # Each line is a StreamToolResponse itself, not wrapped.
    assert all(set(c) == {"output", "index", "last"} for c in chunks), chunks
    assert [c["output"] for c in chunks] == [f"{i}," for i in range(49)] + ["49"]
    # int64 is a JSON string in proto3 JSON, as the document declares.
    assert [c["index"] for c in chunks] == [str(i) for i in range(50)]
    assert [c["last"] for c in chunks] == [False] * 49 + [True]


def test_stream_error_is_a_status(api):
    status, objects = api.stream(
        "StreamTool", name="echo",
        body={"arguments": {"mode": "fail", "type": "not-found", "message": "gone"}},
    )
    # Failed before the first chunk: the HTTP status is the error's, the body
    # one Status, as for unary calls.
    assert status == 404, objects
    (st,) = objects
    assert st["code"] == 5 and st["message"] == "gone", st
    assert st["details"][0]["reason"] == "not-found"


def test_stream_error_after_chunks(api):
    # 50 chunks 50ms apart cannot finish within the 1s timeout: some chunks,
    # then the deadline's error as the last line of a 200 answer.
    body = {"arguments": {"mode": "stream", "n": 50, "gap_ms": 50}, "timeout": "1s"}
    status, objects = api.stream("StreamTool", name="echo", body=body)
    assert status == 200, objects
    *chunks, last = objects
    assert chunks and all("code" not in o for o in chunks), objects
    assert [c["output"] for c in chunks] == [f"{i}," for i in range(len(chunks))]
    assert "code" in last and "output" not in last, objects
    # DEADLINE_EXCEEDED (4) when the gateway's deadline fires first. The
    # tool service gets the same deadline, and when its own reply wins the
    # race the echo service's context error arrives as an untyped service
    # error: UNKNOWN (2), "context deadline exceeded", reason
    # tool-service-error. Both are accepted here.
    assert last["code"] == 4 or (last["code"] == 2 and "deadline" in last["message"]), last


def test_client_follows_the_document(api):
    with pytest.raises(SpecError):
        api.request("InvokeTool", body={"arguments": {}})  # name missing
    with pytest.raises(SpecError):
        api.request("GetTool", name="echo", verbose=True)  # not a parameter
    with pytest.raises(jsonschema.ValidationError):
        api.request("InvokeTool", name="echo", body={"arguments": "not an object"})
    with pytest.raises(jsonschema.ValidationError):
        api.request("InvokeTool", name="echo", body={"arguments": {}, "user": "x"})  # unknown member
