"""Streams tool answers through the Python client openapi-generator makes of
toolgate's OpenAPI document (package toolgate_client, generated beside this
file's run by test/e2e's TestOpenAPIGeneratorPython), the way docs/api.md
("Streaming from generated clients") shows: the request without preloading
its answer, each line read as it arrives and decoded as the generated
StreamLine. It exits non-zero on the first thing that is not as the
document says; TOOLGATE_HTTP_BASE is the gateway's base URL.
"""

import os
import sys

import toolgate_client
from toolgate_client.models.stream_line import StreamLine


def stream(api, name, body):
    """Yields the chunks of a stream as they arrive; a Status line (the
    stream failed after its first chunk) raises."""
    resp = api.stream_tool_without_preload_content(
        name, body, _headers={"Accept": "application/x-ndjson"}
    )
    try:
        for raw in resp:  # one line per chunk, as the gateway flushes it
            line = StreamLine.from_json(raw).actual_instance
            if isinstance(line, toolgate_client.Status):
                raise RuntimeError(f"the stream failed: {line.code} {line.message}")
            yield line
    finally:
        resp.release_conn()


def main():
    config = toolgate_client.Configuration(host=os.environ["TOOLGATE_HTTP_BASE"])
    api = toolgate_client.ToolServiceApi(toolgate_client.ApiClient(config))

    # A stream of 1000 chunks 50 ms apart: the first three arrive long
    # before its end, and leaving it then ends the call.
    chunks = []
    body = toolgate_client.StreamToolBody(arguments={"mode": "stream", "n": 1000, "gap_ms": 50})
    for chunk in stream(api, "echo", body):
        if chunk.index != str(len(chunks)):
            raise SystemExit(f"FAIL: chunk {len(chunks)} has index {chunk.index}")
        chunks.append(chunk.output)
        if len(chunks) == 3:
            break
    print(f"live stream: {len(chunks)} chunks {chunks}")

    # A stream that fails after its first chunk ends in a Status line.
    body = toolgate_client.StreamToolBody(
        arguments={"mode": "stream", "n": 50, "gap_ms": 50}, timeout="300ms"
    )
    got = 0
    try:
        for _ in stream(api, "echo", body):
            got += 1
    except RuntimeError as e:
        print(f"failing stream: {got} chunks, then {e}")
    else:
        raise SystemExit("FAIL: the failing stream ended without its Status line")
    print("PASS")


if __name__ == "__main__":
    sys.exit(main())
