"""Print bench/ab.sh's results as one Markdown table: medians over rounds."""
import glob
import json
import os
import statistics
import sys


def main(out, names):
    print("| gateway build | gRPC c=64 calls/s | gRPC/direct c=64 | REST c=64 calls/s | REST/direct c=64 "
          "| gateway CPU ms/call, gRPC c=64 | REST c=64 | gRPC added p99 c=16 (ms) | bytes per parked call |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in names:
        rows = []
        for f in sorted(glob.glob(os.path.join(out, n + "-*", "latest.json"))):
            d = json.load(open(f))
            r = {(x["mode"], x["concurrency"]): x for x in d.get("runs") or []}
            g, rest, direct = r[("grpc", 64)], r[("rest", 64)], r[("direct", 64)]
            rows.append({
                "g": g["rps"], "gr": g["rps"] / direct["rps"],
                "r": rest["rps"], "rr": rest["rps"] / direct["rps"],
                "gc": g["cpu_s_per_1k_calls"].get("gateway", float("nan")),
                "rc": rest["cpu_s_per_1k_calls"].get("gateway", float("nan")),
                "p99": r[("grpc", 16)]["p99_ms"] - r[("direct", 16)]["p99_ms"],
                "mem": d.get("inflight_bytes_per_call") or float("nan"),
            })
        if not rows:
            print(f"| {n} | no results | | | | | | | |")
            continue
        m = lambda k: statistics.median(x[k] for x in rows)
        print(f"| {n} ({len(rows)} rounds) | {m('g'):.0f} | {m('gr'):.2f} | {m('r'):.0f} | {m('rr'):.2f} "
              f"| {m('gc'):.3f} | {m('rc'):.3f} | {m('p99'):.1f} | {m('mem'):.0f} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
