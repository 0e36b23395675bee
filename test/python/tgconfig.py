#!/usr/bin/env python3
"""Speak TrustGraph's config-service protocol on Pulsar with the plain pulsar-client.

Used by scripts/configsvc.sh (readiness and workspace registration), by
test/python/test_configsvc.py, and by hand to capture the raw messages that
docs/trustgraph-config.md shows:

  tgconfig.py probe [--workspace W]           one `config` request; print the reply
  tgconfig.py ensure-workspace W [W ...]      register workspaces (as TrustGraph's IAM does)
                                              and wait until their own queues answer
  tgconfig.py request JSON [--workspace W]    send one raw request body; print the reply
  tgconfig.py watch [--seconds N] [-w W ...]  print every message on the config topics

The broker is named by --pulsar (default $TOOLGATE_PULSAR_URL, else
pulsar://127.0.0.1:6650). Exit status 1 with a message on stderr when no
answer comes in time.
"""

import argparse
import json
import os
import sys
import time
import uuid

import pulsar

TENANT = "tg"
# TrustGraph's queue ids request:tg:config / response:tg:config / notify:tg:config
# map to these non-persistent topics (trustgraph.base.async_pulsar_backend).
REQUEST = f"non-persistent://{TENANT}/request/config"
RESPONSE = f"non-persistent://{TENANT}/response/config"
NOTIFY = f"non-persistent://{TENANT}/notify/config"
WORKSPACES = "__workspaces__"


def request_topic(workspace=None):
    """The system queue (workspace None) or the queue of one workspace."""
    return REQUEST if not workspace else f"{REQUEST}:{workspace}"


def response_topic(workspace=None):
    return RESPONSE if not workspace else f"{RESPONSE}:{workspace}"


def default_url():
    return os.environ.get("TOOLGATE_PULSAR_URL") or "pulsar://127.0.0.1:6650"


def client(url=None, timeout=10):
    return pulsar.Client(
        url or default_url(),
        operation_timeout_seconds=max(1, int(timeout)),
        connection_timeout_ms=int(timeout * 1000),
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


class NoAnswer(Exception):
    """No reply with our id came back in time."""


class Requester:
    """One producer on a request topic and one exclusive consumer on its response
    topic, as TrustGraph's RequestResponseClient sets them up: the consumer is
    subscribed before anything is sent (non-persistent topics keep nothing), and
    replies are matched on the `id` message property."""

    def __init__(self, cl, workspace=None):
        self.workspace = workspace
        self.consumer = cl.subscribe(
            response_topic(workspace),
            subscription_name=f"tgconfig-{uuid.uuid4().hex[:12]}",
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Latest,
        )
        self.producer = cl.create_producer(request_topic(workspace))

    def close(self):
        for c in (self.producer, self.consumer):
            try:
                c.close()
            except Exception:
                pass

    def send_raw(self, body, timeout=10.0, msg_id=None):
        """Send body (dict or bytes) once; return (reply dict, raw bytes, properties).
        Raises NoAnswer when no reply with our id arrives within timeout."""
        msg_id = msg_id or str(uuid.uuid4())
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.producer.send(data, properties={"id": msg_id})
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoAnswer(
                    f"no reply on {response_topic(self.workspace)} within {timeout}s"
                )
            try:
                msg = self.consumer.receive(timeout_millis=max(1, int(left * 1000)))
            except pulsar.Timeout:
                continue
            self.consumer.acknowledge(msg)
            if msg.properties().get("id") == msg_id:
                raw = msg.data()
                return json.loads(raw), raw, msg.properties()

    def call(self, body, timeout=10.0, attempt=2.0):
        """Send until answered: a request published before the service's consumer
        is subscribed is dropped by the broker, so each try waits `attempt` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                return self.send_raw(body, timeout=max(0.1, min(attempt, left)))
            except NoAnswer:
                if time.monotonic() >= deadline:
                    raise NoAnswer(
                        f"config service did not answer on {request_topic(self.workspace)} "
                        f"within {timeout}s"
                    ) from None


def probe(cl, workspace=None, timeout=10.0):
    """A `config` request; the system queue needs the workspace in the body."""
    r = Requester(cl, workspace)
    try:
        reply, _, _ = r.call(
            {"operation": "config", "workspace": workspace or "default"}, timeout=timeout
        )
    finally:
        r.close()
    if reply.get("error"):
        raise RuntimeError(f"config service error: {reply['error']}")
    return reply


def ensure_workspaces(cl, names, timeout=30.0):
    """Register workspaces in __workspaces__ (type `workspace`, value
    {"enabled": true}, as TrustGraph's IAM service does) through the system
    queue, then wait until each workspace's own queue answers."""
    deadline = time.monotonic() + timeout
    sysq = Requester(cl)
    try:
        reply, _, _ = sysq.call(
            {"operation": "getvalues", "workspace": WORKSPACES, "type": "workspace"},
            timeout=timeout,
        )
        if reply.get("error"):
            raise RuntimeError(f"listing workspaces: {reply['error']}")
        known = {v["key"] for v in reply.get("values") or []}
        missing = [n for n in names if n not in known]
        if missing:
            reply, _, _ = sysq.call(
                {
                    "operation": "put",
                    "workspace": WORKSPACES,
                    "values": [
                        {"type": "workspace", "key": n, "value": '{"enabled": true}'}
                        for n in missing
                    ],
                },
                timeout=max(1.0, deadline - time.monotonic()),
            )
            if reply.get("error"):
                raise RuntimeError(f"registering {missing}: {reply['error']}")
    finally:
        sysq.close()
    for n in names:
        probe(cl, n, timeout=max(1.0, deadline - time.monotonic()))


def watch(cl, seconds, workspaces, out=sys.stdout):
    """Print every message on the config topics (system, per-workspace, push)."""
    topics = [REQUEST, RESPONSE, NOTIFY]
    for w in workspaces:
        topics += [request_topic(w), response_topic(w)]
    consumers = [
        cl.subscribe(
            t,
            subscription_name=f"tgconfig-watch-{uuid.uuid4().hex[:8]}",
            consumer_type=pulsar.ConsumerType.Exclusive,
        )
        for t in topics
    ]
    print(f"watching {len(topics)} topics for {seconds}s", file=sys.stderr, flush=True)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            idle = True
            for c in consumers:
                try:
                    msg = c.receive(timeout_millis=20)
                except pulsar.Timeout:
                    continue
                idle = False
                c.acknowledge(msg)
                print(
                    json.dumps(
                        {
                            "topic": msg.topic_name(),
                            "properties": msg.properties(),
                            "data": msg.data().decode(),
                        }
                    ),
                    file=out,
                    flush=True,
                )
            if idle:
                time.sleep(0.01)
    finally:
        for c in consumers:
            c.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pulsar", default=None, help="broker URL (default $TOOLGATE_PULSAR_URL)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for answers")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--workspace", default=None, help="use this workspace's own queue")
    p = sub.add_parser("ensure-workspace")
    p.add_argument("names", nargs="+")
    p = sub.add_parser("request")
    p.add_argument("body", help="request JSON")
    p.add_argument("--workspace", default=None, help="use this workspace's own queue")
    p = sub.add_parser("watch")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("-w", "--workspace", action="append", default=[])
    args = ap.parse_args(argv)

    cl = client(args.pulsar, timeout=min(args.timeout, 30))
    try:
        if args.cmd == "probe":
            reply = probe(cl, args.workspace, timeout=args.timeout)
            print(json.dumps(reply))
        elif args.cmd == "ensure-workspace":
            ensure_workspaces(cl, args.names, timeout=args.timeout)
            print("workspaces ready: " + " ".join(args.names))
        elif args.cmd == "request":
            r = Requester(cl, args.workspace)
            try:
                reply, raw, props = r.call(json.loads(args.body), timeout=args.timeout)
            finally:
                r.close()
            print(json.dumps({"properties": props, "data": raw.decode()}))
        elif args.cmd == "watch":
            watch(cl, args.seconds, args.workspace)
    except (NoAnswer, RuntimeError, pulsar.PulsarException) as e:
        print(f"tgconfig: {e}", file=sys.stderr)
        return 1
    finally:
        cl.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
