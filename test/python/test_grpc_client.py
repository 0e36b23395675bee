"""A gRPC client of the gateway in Python, using stubs generated from proto/.

Run by test/e2e/clients_test.go against a gateway with the e2e registry
(tools tell-joke, tell-dad-joke, echo, ...); see conftest.py.
"""

import grpc
import pytest
from google.protobuf import json_format, message_factory, struct_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from google.rpc import error_details_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from grpc_status import rpc_status

from toolgate.v1 import toolgate_pb2 as pb

TIMEOUT = 30  # seconds, per call


def struct(d):
    s = struct_pb2.Struct()
    s.update(d)
    return s


def invoke(stub, name, args):
    return stub.InvokeTool(
        pb.InvokeToolRequest(name=name, arguments=struct(args)), timeout=TIMEOUT
    )


def list_all(stub, page_size):
    """Pages through ListTools; returns the pages (lists of tool names)."""
    pages, token = [], ""
    for _ in range(200):
        resp = stub.ListTools(
            pb.ListToolsRequest(page_size=page_size, page_token=token), timeout=TIMEOUT
        )
        pages.append([t.name for t in resp.tools])
        token = resp.next_page_token
        if not token:
            return pages
    pytest.fail(f"ListTools(page_size={page_size}) did not end after 200 pages: {pages}")


def test_list_tools(stub):
    resp = stub.ListTools(pb.ListToolsRequest(), timeout=TIMEOUT)
    names = [t.name for t in resp.tools]
    assert resp.next_page_token == "", "all tools fit in one default page of 50"
    for want in ("tell-joke", "tell-dad-joke", "echo"):
        assert want in names, names
    assert names == sorted(names), "ListTools is ordered by name"
    assert len(set(names)) == len(names), names
    echo = next(t for t in resp.tools if t.name == "echo")
    assert echo.service == "echo-service"
    assert echo.description


def test_list_tools_pages(stub):
    full = [n for page in list_all(stub, 0) for n in page]
    pages = list_all(stub, 1)
    assert all(len(p) == 1 for p in pages), pages
    joined = [n for p in pages for n in p]
    assert len(set(joined)) == len(joined), f"duplicates across pages: {joined}"
    assert joined == full


def test_get_tool(stub):
    tool = stub.GetTool(pb.GetToolRequest(name="tell-dad-joke"), timeout=TIMEOUT).tool
    assert tool.name == "tell-dad-joke"
    assert tool.service == "joke-service"
    assert tool.description == "Tell a dad joke"
    assert [(a.name, a.type, a.required) for a in tool.arguments] == [
        ("topic", "string", True)
    ]
    assert tool.arguments[0].description == "The topic for the joke"
    schema = json_format.MessageToDict(tool.arguments_schema)
    assert schema.get("type") == "object", schema
    assert schema.get("required") == ["topic"], schema
    assert schema["properties"]["topic"]["type"] == "string", schema


def test_invoke(stub):
    resp = invoke(stub, "echo", {"msg": "hi from python"})
    assert resp.output == "hi from python"
    assert not resp.HasField("output_json"), "plain text is not JSON"


def test_invoke_json_answer(stub):
    args = {"a": 1, "b": ["x", True], "c": {"d": "é"}}
    resp = invoke(stub, "echo", args)
    assert json_format.MessageToDict(resp.output_json) == args


def test_stream(stub):
    req = pb.StreamToolRequest(name="echo", arguments=struct({"mode": "stream", "n": 50}))
    chunks = list(stub.StreamTool(req, timeout=TIMEOUT))
    assert [c.output for c in chunks] == [f"{i}," for i in range(49)] + ["49"]
    assert [c.index for c in chunks] == list(range(50))
    assert [c.last for c in chunks] == [False] * 49 + [True]


def code_of(call, *args, **kw):
    with pytest.raises(grpc.RpcError) as e:
        r = call(*args, timeout=TIMEOUT, **kw)
        if hasattr(r, "__iter__") and not hasattr(r, "ListFields"):
            list(r)  # a stream's error arrives while reading it
    return e.value


def test_unknown_tool_is_not_found(stub):
    err = code_of(stub.GetTool, pb.GetToolRequest(name="no-such-tool"))
    assert err.code() == grpc.StatusCode.NOT_FOUND, err
    err = code_of(stub.InvokeTool, pb.InvokeToolRequest(name="no-such-tool", arguments=struct({})))
    assert err.code() == grpc.StatusCode.NOT_FOUND, err
    err = code_of(stub.StreamTool, pb.StreamToolRequest(name="no-such-tool", arguments=struct({})))
    assert err.code() == grpc.StatusCode.NOT_FOUND, err


@pytest.mark.parametrize(
    "tool,args",
    [
        ("tell-dad-joke", {}),  # required "topic" missing
        ("tell-joke", {"topic": 5}),  # "topic" must be a string
    ],
)
def test_bad_arguments_are_invalid_argument(stub, tool, args):
    err = code_of(stub.InvokeTool, pb.InvokeToolRequest(name=tool, arguments=struct(args)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert "topic" in err.details(), err.details()


def test_service_error_carries_error_info(stub):
    args = {"mode": "fail", "type": "not-found", "message": "no such thing"}
    err = code_of(stub.InvokeTool, pb.InvokeToolRequest(name="echo", arguments=struct(args)))
    assert err.code() == grpc.StatusCode.NOT_FOUND, err
    st = rpc_status.from_call(err)
    assert st is not None, "no grpc-status-details-bin trailer"
    assert st.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert st.message == "no such thing"
    infos = []
    for detail in st.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            infos.append(info)
    assert len(infos) == 1, st.details
    assert infos[0].reason == "not-found"
    assert infos[0].metadata["tool"] == "echo"
    assert infos[0].metadata["service"] == "echo-service"


def test_reflection_and_health(channel):
    """What grpcurl does: discover services by reflection, then call one
    with messages built from the descriptors the server sent."""
    db = ProtoReflectionDescriptorDatabase(channel)
    services = set(db.get_services())
    assert {"toolgate.v1.ToolService", "google.longrunning.Operations", "grpc.health.v1.Health"} <= services, services

    pool = DescriptorPool(db)
    tool_svc = pool.FindServiceByName("toolgate.v1.ToolService")
    methods = {m.name: m for m in tool_svc.methods}
    assert set(methods) == {
        "ListTools", "GetTool", "InvokeTool", "StreamTool", "StartTool", "ListToolServices", "GetToolService",
    }
    assert methods["StreamTool"].server_streaming
    assert not methods["InvokeTool"].server_streaming
    assert methods["InvokeTool"].input_type.full_name == "toolgate.v1.InvokeToolRequest"
    assert methods["StartTool"].output_type.full_name == "google.longrunning.Operation"
    ops_svc = pool.FindServiceByName("google.longrunning.Operations")
    assert {"GetOperation", "ListOperations", "CancelOperation", "DeleteOperation", "WaitOperation"} <= {
        m.name for m in ops_svc.methods
    }

    check = pool.FindServiceByName("grpc.health.v1.Health").methods_by_name["Check"]
    req_cls = message_factory.GetMessageClass(check.input_type)
    resp_cls = message_factory.GetMessageClass(check.output_type)
    serving = check.output_type.fields_by_name["status"].enum_type.values_by_name["SERVING"].number
    call = channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=req_cls.SerializeToString,
        response_deserializer=resp_cls.FromString,
    )
    for service in ("", "toolgate.v1.ToolService"):
        resp = call(req_cls(service=service), timeout=TIMEOUT)
        assert resp.status == serving, (service, resp)
    err = code_of(call, req_cls(service="no.such.Service"))
    assert err.code() == grpc.StatusCode.NOT_FOUND, err
