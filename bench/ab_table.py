"""Print bench/ab.sh's results as one Markdown table: medians over rounds."""
import glob
import json
import os
import statistics
import sys


def stream_table(out, names):
    """Streams: chunks/s per mode, medians over rounds, and each build over the first."""
    per = {}  # name -> mode -> [chunks/s of each round]
    modes = []
    for n in names:
        per[n] = {}
        for f in sorted(glob.glob(os.path.join(out, n + "-*", "latest.json"))):
            for p in json.load(open(f)).get("streaming") or []:
                if p.get("chunks_per_s"):
                    per[n].setdefault(p["mode"], []).append(p["chunks_per_s"])
                    if p["mode"] not in modes:
                        modes.append(p["mode"])
    if not modes:
        return
    base = names[0]
    print()
    head = "| stream mode | " + " | ".join(f"{n} chunks/s" for n in names)
    head += "".join(f" | {n} ÷ {base}" for n in names[1:])
    print(head + " |")
    print("|---|" + "---:|" * (len(names) + len(names) - 1))
    for m in modes:
        med = {n: statistics.median(per[n][m]) if per[n].get(m) else None for n in names}
        cells = [f"{med[n]:.0f} ({', '.join(f'{v:.0f}' for v in per[n].get(m, []))})" if med[n] else "–" for n in names]
        for n in names[1:]:
            cells.append(f"{med[n] / med[base]:.3f}" if med[n] and med[base] else "–")
        print(f"| {m} | " + " | ".join(cells) + " |")


def main(out, names):
    if any((json.load(open(f)).get("runs") or [])
           for n in names for f in glob.glob(os.path.join(out, n + "-*", "latest.json"))):
        unary_table(out, names)
    stream_table(out, names)


def unary_table(out, names):
    print("| gateway build | gRPC c=64 calls/s | gRPC/direct c=64 | REST c=64 calls/s | REST/direct c=64 "
          "| gateway CPU ms/call, gRPC c=64 | REST c=64 | gRPC added p99 c=16 (ms) | bytes per parked call |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in names:
        rows = []
        for f in sorted(glob.glob(os.path.join(out, n + "-*", "latest.json"))):
            d = json.load(open(f))
            r = {(x["mode"], x["concurrency"]): x for x in d.get("runs") or []}
            if not all(k in r for k in (("grpc", 64), ("rest", 64), ("direct", 64), ("grpc", 16), ("direct", 16))):
                continue
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
            print(f"| {n} | no unary results | | | | | | | |")
            continue
        m = lambda k: statistics.median(x[k] for x in rows)
        print(f"| {n} ({len(rows)} rounds) | {m('g'):.0f} | {m('gr'):.2f} | {m('r'):.0f} | {m('rr'):.2f} "
              f"| {m('gc'):.3f} | {m('rc'):.3f} | {m('p99'):.1f} | {m('mem'):.0f} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
