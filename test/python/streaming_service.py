"""Streaming tool service - a Python service that streams its reply.

TrustGraph's DynamicToolService always answers with one message. A Python
service may also stream, as the wire allows (docs: several messages with
the request's id and end_of_stream false, then one with true); this one
does, with the Pulsar client the way TrustGraph's backend uses it
(BytesSchema, JSON payloads, the correlation id in the "id" property,
a shared "<id>-request" subscription). It knows nothing of toolgate's
properties (no sequence numbers, no flow control, no reply-to): the
gateway must cope with it as it is.

Used by test/e2e/interop_test.go (TestInteropPythonStream):

    python test/python/streaming_service.py -p pulsar://127.0.0.1:6650 \\
        --id py-stream -t <topic>

--response-topic names the topic it answers on (default
non-persistent://tg/response/<topic>, as TrustGraph's services by default);
a persistent one (persistent://tg/response/<topic>) keeps long streams
whole: the broker stores what the gateway's consumer cannot take at once
instead of dropping it.

The arguments choose the reply: {"n": N} sends "0,", "1,", ... "N-2,"
with end_of_stream false, then "N-1" with end_of_stream true;
"gap_ms" waits between chunks.
"""

import argparse
import json
import signal
import sys
import time

import pulsar


def response(text, last, error=None):
    # As TrustGraph serializes a ToolServiceResponse: json.dumps of the
    # dataclass as a dict, every field written.
    return json.dumps({"error": error, "response": text, "end_of_stream": last}).encode()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-p", "--pulsar-host", default="pulsar://127.0.0.1:6650")
    p.add_argument("--id", default="py-stream")
    p.add_argument("-t", "--topic", default="py-stream")
    p.add_argument("--response-topic", default="")
    a = p.parse_args()
    response_topic = a.response_topic or f"non-persistent://tg/response/{a.topic}"

    client = pulsar.Client(a.pulsar_host, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(
        f"non-persistent://tg/request/{a.topic}", f"{a.id}-request",
        consumer_type=pulsar.ConsumerType.Shared, schema=pulsar.schema.BytesSchema(),
    )
    producer = client.create_producer(
        response_topic, schema=pulsar.schema.BytesSchema(),
        block_if_queue_full=True,
    )
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print("streaming service listening", flush=True)
    while not stop:
        try:
            msg = consumer.receive(timeout_millis=200)
        except pulsar.Timeout:
            continue
        consumer.acknowledge(msg)
        props = {"id": msg.properties().get("id", "unknown")}
        try:
            req = json.loads(msg.data())
            args = json.loads(req.get("arguments") or "{}")
            n = int(args.get("n", 10))
            gap = float(args.get("gap_ms", 0)) / 1000
        except Exception as e:  # noqa: BLE001 - reported to the caller
            producer.send(response("", True, {"type": "invalid-argument", "message": str(e)}), properties=props)
            continue
        for i in range(n - 1):
            producer.send_async(response(f"{i},", False), None, properties=props)
            if gap:
                time.sleep(gap)
        producer.send(response(f"{n - 1}", True), properties=props)
    consumer.close()
    producer.close()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
