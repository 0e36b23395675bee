#!/usr/bin/env python3
"""Closed-loop load on a tool service through TrustGraph's own caller stack.

The "python" mode of the toolgate benchmark (bench/run.sh). Runs in the venv of
scripts/pyenv.sh (trustgraph-base 2.11.1):

    .cache/venv/bin/python bench/python/tg_load.py --topic bench-echo-x \
        --concurrency 64 --duration 10 --warmup 2

The client is exactly what a TrustGraph agent uses to call a tool service:
ToolServiceClient.call on a RequestResponseClient over AsyncPulsarBackend
(pulsar.asyncio), created with the short queue names "request:tg:<topic>" /
"response:tg:<topic>" so that the backend maps them and picks the consumer
type (Exclusive for responses) as it does for TrustGraph's own flows. One
process, one event loop, one RequestResponseClient shared by --concurrency
asyncio tasks, each calling in a loop with {"msg": ...} and checking the reply.
Wire behaviour therefore includes TrustGraph's producer defaults (pulsar.asyncio
batching on, 10 ms publish delay), a uuid4 "id" property and a per-call ack.

Prints one JSON object, the same fields as cmd/loadgen: mode, concurrency,
duration_s, warmup_s, calls, rps, p50_ms, p90_ms, p99_ms, p999_ms, max_ms,
mean_ms, errors, warmup_errors, error_samples, client_cpu_s, and with --watch
procs: {name: {pid, cpu_s, cpu_s_per_1k_calls}}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import sys
import time


def percentile(sorted_ms: list[float], q: float) -> float:
    """Nearest-rank percentile, as cmd/loadgen computes it."""
    if not sorted_ms:
        return 0.0
    i = max(0, min(len(sorted_ms) - 1, math.ceil(len(sorted_ms) * q) - 1))
    return sorted_ms[i]


def proc_cpu(pid: int) -> float:
    """utime+stime of pid in seconds, from /proc (as cmd/loadgen reads it)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_watch(spec: str) -> dict[str, int]:
    out = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, _, pid = item.partition("=")
        out[name] = int(pid)
    return out


def message(n: int) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(alphabet[i % len(alphabet)] for i in range(n))


async def run(args) -> dict:
    from trustgraph.base.async_pulsar_backend import AsyncPulsarBackend
    from trustgraph.base.request_response_client import RequestResponseClient
    from trustgraph.base.request_response_spec import _make_impl_wrapper
    from trustgraph.base.tool_service_client import ToolServiceClient
    from trustgraph.schema import ToolServiceRequest, ToolServiceResponse

    backend = AsyncPulsarBackend(host=args.pulsar)
    rr = await RequestResponseClient.create(
        backend=backend,
        request_topic=f"request:tg:{args.topic}",
        response_topic=f"response:tg:{args.topic}",
        request_schema=ToolServiceRequest,
        response_schema=ToolServiceResponse,
        default_timeout=args.timeout,
    )
    client = _make_impl_wrapper(rr, ToolServiceClient)
    msg = message(args.msg_size)
    arguments = {"msg": msg}

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    win_start = t0 + args.warmup
    win_end = win_start + args.duration
    lat_ms: list[float] = []
    errors = 0
    warmup_errors = 0
    samples: list[str] = []
    cpu0 = cpu1 = None
    watch = parse_watch(args.watch)
    watch0: dict[str, float] = {}
    procs: dict[str, dict] = {}

    async def mark_window():
        nonlocal cpu0, cpu1
        await asyncio.sleep(max(0.0, win_start - loop.time()))
        cpu0 = time.process_time()
        for name, pid in watch.items():
            watch0[name] = proc_cpu(pid)
        await asyncio.sleep(max(0.0, win_end - loop.time()))
        cpu1 = time.process_time()
        for name, pid in watch.items():
            procs[name] = {"pid": pid, "cpu_s": round(proc_cpu(pid) - watch0[name], 3)}

    async def worker():
        nonlocal errors, warmup_errors
        while True:
            start = loop.time()
            if start >= win_end:
                return
            err = None
            try:
                out = await client.call({}, arguments, timeout=args.timeout)
                if out != msg:
                    err = "reply differs from the message sent"
            except Exception as e:  # RuntimeError from a service error, TimeoutError
                err = f"{type(e).__name__}: {e}"
            end = loop.time()
            in_window = win_start <= end <= win_end
            if err is not None:
                if in_window:
                    errors += 1
                else:
                    warmup_errors += 1
                if len(samples) < 5 and err not in samples:
                    samples.append(err)
                await asyncio.sleep(0.01)
            elif in_window:
                lat_ms.append((end - start) * 1000.0)

    marker = asyncio.create_task(mark_window())
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    await marker
    try:
        await client.close()
    finally:
        await backend.close()

    lat_ms.sort()
    n = len(lat_ms)
    for p in procs.values():
        p["cpu_s_per_1k_calls"] = round(p["cpu_s"] * 1000 / n, 4) if n else 0.0
    return {
        "mode": "python",
        "concurrency": args.concurrency,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "calls": n,
        "rps": round(n / args.duration, 1),
        "p50_ms": round(percentile(lat_ms, 0.50), 3),
        "p90_ms": round(percentile(lat_ms, 0.90), 3),
        "p99_ms": round(percentile(lat_ms, 0.99), 3),
        "p999_ms": round(percentile(lat_ms, 0.999), 3),
        "max_ms": round(lat_ms[-1], 3) if n else 0.0,
        "mean_ms": round(sum(lat_ms) / n, 3) if n else 0.0,
        "errors": errors,
        "warmup_errors": warmup_errors,
        "error_samples": samples,
        "client_cpu_s": round((cpu1 or 0) - (cpu0 or 0), 3),
        "procs": procs,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--pulsar", default="pulsar://127.0.0.1:6650")
    p.add_argument("--topic", required=True, help="short topic of the echo service")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration", type=float, default=10.0, help="measured window, seconds")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of load before the window")
    p.add_argument("--msg-size", type=int, default=32)
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per call")
    p.add_argument("--watch", default="", help="name=pid,... processes whose CPU time over the window to report")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    out = asyncio.run(run(args))
    print(json.dumps(out), flush=True)
    # pulsar-client 3.13's asyncio client sometimes crashes in interpreter
    # teardown after close(); the result is out, so skip the teardown.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
