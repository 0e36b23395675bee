#!/usr/bin/env python3
"""Announce a tool service to toolgate gateways, or withdraw it, with the plain
pulsar-client package: what a service written in Python (or an operator) does
to appear in, or leave, every gateway's registry.

  announce.py announce --id ID (--topic T | --request-queue Q --response-queue Q)
                       [--config-param NAME[:required]] [--timeout 30s]
                       --tool '{"name": "...", "description": "...", "arguments": [...]}' [--tool ...]
  announce.py withdraw --id ID [--instance INSTANCE]
  announce.py show     (print every live announcement, by key)

An announcement is one message on persistent://tg/config/tool-descriptors
(--announce-topic), keyed by the service id, whose payload is the registry
file's layout scoped to that one service:

  {"tool-service": {"<id>": {"id": "<id>", "request-queue": "...", "response-queue": "..."}},
   "tool": {"<name>": {"type": "tool-service", "name": "<name>", "service": "<id>", ...}}}

This script announces the service as a whole (no instance, no lease): it
is served until withdrawn. Go SDK services announce each replica as an
instance instead, keyed "<id>@<instance>" with the toolgate-instance and
toolgate-lease properties, and renew that lease; "show" lists their keys.

Withdrawing publishes an empty message with the same key (a tombstone, with
the property toolgate-withdrawn=true so that every client library decodes it);
with --instance, the key of that instance of the service (a crashed
replica's announcement, which gateways already ignore once its lease ran
out, is removed from the topic that way). The
broker is --pulsar, default $TOOLGATE_PULSAR_URL, else pulsar://127.0.0.1:6650.
"""

import argparse
import json
import os
import sys

import pulsar

DEFAULT_TOPIC = "persistent://tg/config/tool-descriptors"


def payload(args):
    svc = {"id": args.id}
    if args.topic:
        svc["topic"] = args.topic
    else:
        svc["request-queue"] = args.request_queue
        svc["response-queue"] = args.response_queue
    params = []
    for p in args.config_param or []:
        name, _, req = p.partition(":")
        params.append({"name": name, "required": req == "required"})
    svc["config-params"] = params
    if args.timeout:
        svc["timeout"] = args.timeout
    tools = {}
    for raw in args.tool or []:
        t = json.loads(raw)
        if not isinstance(t, dict) or not t.get("name"):
            sys.exit(f"announce.py: --tool must be a JSON object with a name: {raw}")
        t.setdefault("type", "tool-service")
        t["service"] = args.id
        tools[t.pop("key", t["name"])] = t
    return json.dumps({"tool-service": {args.id: svc}, "tool": tools}).encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pulsar", default=os.environ.get("TOOLGATE_PULSAR_URL") or "pulsar://127.0.0.1:6650")
    ap.add_argument("--announce-topic", default=DEFAULT_TOPIC)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("announce")
    a.add_argument("--id", required=True)
    a.add_argument("--topic")
    a.add_argument("--request-queue")
    a.add_argument("--response-queue")
    a.add_argument("--config-param", action="append")
    a.add_argument("--timeout")
    a.add_argument("--tool", action="append")
    w = sub.add_parser("withdraw")
    w.add_argument("--id", required=True)
    w.add_argument("--instance")
    sub.add_parser("show")
    args = ap.parse_args()
    if args.cmd == "announce" and not args.topic and not (args.request_queue and args.response_queue):
        ap.error("announce needs --topic, or --request-queue and --response-queue")

    client = pulsar.Client(args.pulsar, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        if args.cmd == "show":
            reader = client.create_reader(args.announce_topic, pulsar.MessageId.earliest, is_read_compacted=True)
            live = {}
            while reader.has_message_available():
                m = reader.read_next(timeout_millis=5000)
                if m.data():
                    live[m.partition_key()] = json.loads(m.data())
                else:
                    live.pop(m.partition_key(), None)
            print(json.dumps(live, indent=2, sort_keys=True))
            return
        # No batching: a tombstone (empty payload) must travel as a message of
        # its own for readers of other clients to decode it.
        producer = client.create_producer(args.announce_topic, batching_enabled=False)
        if args.cmd == "announce":
            producer.send(payload(args), partition_key=args.id)
        else:
            # The tombstone carries a property: pulsar-client-go drops an
            # unbatched message that has neither payload nor properties.
            key, props = args.id, {"toolgate-withdrawn": "true"}
            if args.instance:
                key, props["toolgate-instance"] = f"{args.id}@{args.instance}", args.instance
            producer.send(b"", partition_key=key, properties=props)
        producer.flush()
        print(f"{args.cmd}: {args.id} on {args.announce_topic}")
    finally:
        client.close()


if __name__ == "__main__":
    main()
