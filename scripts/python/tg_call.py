#!/usr/bin/env python3
"""Send one request to a TrustGraph tool service over Pulsar; print the reply as JSON.

Runs in the venv made by scripts/pyenv.sh:

    $(scripts/pyenv.sh python) scripts/python/tg_call.py \
        --pulsar pulsar://127.0.0.1:6650 --topic joke \
        --config '{"style":"pun"}' --arguments '{"topic":"cats"}' \
        --user alice --timeout 10

Wire format is TrustGraph's own (trustgraph-base 2.11.1): the request is
ToolServiceRequest turned into a dict by trustgraph.base.serialization.
dataclass_to_dict, JSON-encoded as UTF-8 bytes, sent with BytesSchema and a
property "id"; replies are decoded with dict_to_dataclass(ToolServiceResponse).
`config` and `arguments` travel as strings holding JSON objects.

Two client modes:
  --client plain (default)  the plain `pulsar` client with TrustGraph's
      serialization. Subscribes to the response topic (unique subscription,
      Exclusive) BEFORE sending, matches replies by the "id" property, joins
      `response` chunks until end_of_stream, and applies --timeout to the whole
      call. Also sends "user" (the seed's envelope field; 2.11.1's dataclass
      no longer has it and its decoder ignores it), unless --no-user.
  --client trustgraph  TrustGraph's own caller stack, as its agent uses it:
      ToolServiceClient methods on a RequestResponseClient over
      AsyncPulsarBackend (subscription "rr-<12 hex>", id = uuid4, no "user").
      Its timeout is per chunk; this script adds the overall --timeout.

Topics: --topic NAME means non-persistent://tg/request/NAME and
non-persistent://tg/response/NAME (what DynamicToolService listens on);
--request-queue/--response-queue take either a full Pulsar topic or
TrustGraph's short form "request:tg:joke" / "response:tg:joke".

Output (stdout), one JSON object:
  {"id": ..., "request_topic": ..., "response_topic": ..., "response": "<joined>",
   "error": null | {"type": ..., "message": ...}, "end_of_stream": true,
   "chunks": N, "elapsed_ms": ...}
Exit status: 0 reply without error; 1 reply with error (also printed to
stderr); 3 timeout (no complete reply); 2 bad usage or connection failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid

EXIT_OK, EXIT_TOOL_ERROR, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3


def map_topic(queue_id: str) -> str:
    """TrustGraph's own queue-name mapping (AsyncPulsarBackend._map_topic)."""
    from trustgraph.base.async_pulsar_backend import AsyncPulsarBackend

    return AsyncPulsarBackend._map_topic(None, queue_id)


def json_object_arg(text: str, what: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise SystemExit(f"tg_call: --{what} is not JSON: {e}")
    if not isinstance(value, dict):
        raise SystemExit(f"tg_call: --{what} must be a JSON object")
    return value


def error_dict(err) -> dict | None:
    if err is None:
        return None
    return {"type": getattr(err, "type", ""), "message": getattr(err, "message", "")}


def call_plain(args, req_topic, resp_topic, config, arguments) -> tuple[dict, int]:
    import pulsar
    from trustgraph.base.serialization import dataclass_to_dict, dict_to_dataclass
    from trustgraph.schema import ToolServiceRequest, ToolServiceResponse

    # Same encoding as trustgraph.base.async_pulsar_backend.AsyncPulsarProducer.send;
    # empty objects become "{}" as in ToolServiceClient.call.
    body = dataclass_to_dict(
        ToolServiceRequest(
            config=json.dumps(config) if config else "{}",
            arguments=json.dumps(arguments) if arguments else "{}",
        )
    )
    if not args.no_user:
        body["user"] = args.user
    payload = json.dumps(body).encode("utf-8")

    req_id = args.id or str(uuid.uuid4())
    subscription = f"tg-call-{uuid.uuid4()}"
    client = pulsar.Client(
        args.pulsar,
        operation_timeout_seconds=max(5, int(args.timeout) + 1),
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    t0 = time.monotonic()
    deadline = t0 + args.timeout
    try:
        # Subscribe first: non-persistent topics drop messages nobody is subscribed to.
        consumer = client.subscribe(
            resp_topic,
            subscription_name=subscription,
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Latest,
            schema=pulsar.schema.BytesSchema(),
        )
        producer = client.create_producer(req_topic, schema=pulsar.schema.BytesSchema())
        producer.send(payload, properties={"id": req_id})

        chunks: list[str] = []
        err = None
        done = False
        while not done:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                break
            try:
                msg = consumer.receive(timeout_millis=left_ms)
            except pulsar.Timeout:
                break
            try:
                consumer.acknowledge(msg)  # no-op on non-persistent topics
            except Exception:
                pass
            if msg.properties().get("id") != req_id:
                continue  # another caller's reply: every caller sees all of them
            resp = dict_to_dataclass(json.loads(msg.data().decode("utf-8")), ToolServiceResponse)
            if resp.error is not None:
                err = resp.error
                done = True  # TrustGraph's client stops at the first error
            else:
                if resp.response:
                    chunks.append(resp.response)
                done = bool(resp.end_of_stream)
        out = {
            "id": req_id,
            "subscription": subscription,
            "request_topic": req_topic,
            "response_topic": resp_topic,
            "response": "".join(chunks),
            "error": error_dict(err) if not isinstance(err, dict) else err,
            "end_of_stream": done,
            "chunks": len(chunks),
            "elapsed_ms": round((time.monotonic() - t0) * 1000, 1),
        }
        if not done:
            return out, EXIT_TIMEOUT
        return out, EXIT_TOOL_ERROR if err is not None else EXIT_OK
    finally:
        client.close()


async def call_trustgraph(args, req_topic, resp_topic, config, arguments) -> tuple[dict, int]:
    import asyncio

    from trustgraph.base.async_pulsar_backend import AsyncPulsarBackend
    from trustgraph.base.request_response_client import RequestResponseClient
    from trustgraph.base.request_response_spec import _make_impl_wrapper
    from trustgraph.base.tool_service_client import ToolServiceClient
    from trustgraph.schema import ToolServiceRequest, ToolServiceResponse

    backend = AsyncPulsarBackend(host=args.pulsar)
    t0 = time.monotonic()
    try:
        rr = await RequestResponseClient.create(
            backend=backend,
            request_topic=req_topic,
            response_topic=resp_topic,
            request_schema=ToolServiceRequest,
            response_schema=ToolServiceResponse,
            default_timeout=args.timeout,
        )
        client = _make_impl_wrapper(rr, ToolServiceClient)
        chunks: list[str] = []

        async def on_chunk(text):
            chunks.append(text)

        out = {
            "id": None,  # generated inside RequestResponseClient, not exposed
            "request_topic": req_topic,
            "response_topic": resp_topic,
        }
        code = EXIT_OK
        try:
            text = await asyncio.wait_for(
                client.call_streaming(config, arguments, on_chunk, timeout=args.timeout),
                timeout=args.timeout,
            )
            out.update(response=text, error=None, end_of_stream=True)
        except asyncio.TimeoutError:
            out.update(response="".join(chunks), error=None, end_of_stream=False)
            code = EXIT_TIMEOUT
        except RuntimeError as e:  # ToolServiceClient raises RuntimeError(error.message)
            out.update(
                response="".join(chunks),
                error={"type": None, "message": str(e)},
                end_of_stream=True,
            )
            code = EXIT_TOOL_ERROR
        out["chunks"] = len(chunks)
        out["elapsed_ms"] = round((time.monotonic() - t0) * 1000, 1)
        await client.close()
        return out, code
    finally:
        await backend.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description="Call a TrustGraph tool service over Pulsar once and print the reply as JSON."
    )
    p.add_argument("--pulsar", default="pulsar://127.0.0.1:6650", help="Pulsar service URL")
    p.add_argument("--topic", help="tool-service topic name, e.g. joke")
    p.add_argument("--request-queue", help="request topic: full Pulsar topic or request:tg:NAME")
    p.add_argument("--response-queue", help="response topic: full Pulsar topic or response:tg:NAME")
    p.add_argument("--config", default="{}", help="JSON object of config values")
    p.add_argument("--arguments", default="{}", help="JSON object of tool arguments")
    p.add_argument("--user", default="", help='value of the "user" field (plain client)')
    p.add_argument("--no-user", action="store_true", help='omit the "user" field (plain client)')
    p.add_argument("--id", help="correlation id to send (plain client; default: uuid4)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds for the whole call")
    p.add_argument("--client", choices=["plain", "trustgraph"], default="plain")
    args = p.parse_args(argv)

    if args.topic and (args.request_queue or args.response_queue):
        p.error("use --topic or --request-queue/--response-queue, not both")
    if args.topic:
        req_topic = f"non-persistent://tg/request/{args.topic}"
        resp_topic = f"non-persistent://tg/response/{args.topic}"
    elif args.request_queue and args.response_queue:
        req_topic, resp_topic = args.request_queue, args.response_queue
    else:
        p.error("need --topic, or both --request-queue and --response-queue")
    try:
        if args.client == "plain":
            req_topic, resp_topic = map_topic(req_topic), map_topic(resp_topic)
    except ValueError as e:
        p.error(str(e))

    config = json_object_arg(args.config, "config")
    arguments = json_object_arg(args.arguments, "arguments")

    try:
        if args.client == "plain":
            out, code = call_plain(args, req_topic, resp_topic, config, arguments)
        else:
            import asyncio

            out, code = asyncio.run(call_trustgraph(args, req_topic, resp_topic, config, arguments))
    except Exception as e:  # connection/subscription failures
        print(f"tg_call: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_USAGE

    print(json.dumps(out, ensure_ascii=False))
    if code == EXIT_TOOL_ERROR:
        err = out.get("error") or {}
        print(f"tg_call: tool error: {err.get('type')}: {err.get('message')}", file=sys.stderr)
    elif code == EXIT_TIMEOUT:
        print(
            f"tg_call: timeout after {args.timeout}s waiting for {out['response_topic']} "
            f"(chunks so far: {out.get('chunks', 0)})",
            file=sys.stderr,
        )
    return code


if __name__ == "__main__":
    # pulsar-client's asyncio layer can abort in C++ while the interpreter
    # tears down ("terminate called without an active exception"), after the
    # result was printed; leave without that teardown.
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
