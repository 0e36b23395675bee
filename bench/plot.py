#!/usr/bin/env python3
"""Draw the benchmark plot from latest.json: throughput and p99 latency
against concurrency, one line per mode, and the gateway's CPU per call beside
the floor's (bench/cmd/floorgw, the smallest forwarder over the same path).

    python bench/plot.py docs/benchmarks/latest.json docs/benchmarks/latest.png

Needs matplotlib (bench/requirements.txt; bench/run.sh installs it).
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "direct": {"color": "#444444", "marker": "o", "linestyle": "--", "label": "direct (Go over Pulsar)"},
    "grpc": {"color": "#1f77b4", "marker": "s", "label": "gateway, gRPC"},
    "rest": {"color": "#ff7f0e", "marker": "^", "label": "gateway, REST"},
    "floor-grpc": {"color": "#1f77b4", "marker": "s", "linestyle": ":", "mfc": "none", "label": "floor, gRPC"},
    "floor-rest": {"color": "#ff7f0e", "marker": "^", "linestyle": ":", "mfc": "none", "label": "floor, REST"},
    "python": {"color": "#2ca02c", "marker": "D", "label": "python (TrustGraph client)"},
}


def main(src: str, dst: str) -> int:
    with open(src) as f:
        data = json.load(f)
    runs = [r for r in data["runs"] if r.get("rps_samples")]
    modes = [m for m in STYLE if any(r["mode"] == m for r in runs)]

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.8))
    for m in modes:
        pts = sorted((r for r in runs if r["mode"] == m), key=lambda r: r["concurrency"])
        xs = [r["concurrency"] for r in pts]
        st = dict(STYLE[m])
        label = st.pop("label")
        ax1.plot(xs, [r["rps"] for r in pts], label=label, **st)
        ax2.plot(xs, [r["p99_ms"] for r in pts], label=label, **st)
        cpu = [(r["concurrency"], r["gateway_cpu_s_per_1k_calls"]) for r in pts if r.get("gateway_cpu_s_per_1k_calls")]
        if cpu:
            ax3.plot([c for c, _ in cpu], [v for _, v in cpu], label=label, **st)

    concs = sorted({r["concurrency"] for r in runs})
    for ax in (ax1, ax2, ax3):
        ax.set_xscale("log", base=2)
        ax.set_xticks(concs)
        ax.set_xticklabels([str(c) for c in concs])
        ax.set_xlabel("concurrency (calls in flight)")
        ax.grid(True, which="both", alpha=0.3)
    ax1.set_ylabel("calls per second")
    ax1.set_title("Throughput")
    ax1.set_ylim(bottom=0)
    ax2.set_ylabel("p99 latency (ms)")
    ax2.set_yscale("log")
    ax2.set_title("p99 latency")
    ax3.set_ylabel("CPU ms per call")
    ax3.set_title("Gateway vs floor: the server's CPU per call")
    ax3.set_ylim(bottom=0)
    ratios = data.get("ratios", {})
    notes = [
        f"{name} {ratios[key]:.2f}×"
        for name, key in (("gRPC", "cpu_vs_floor_grpc"), ("REST", "cpu_vs_floor_rest"))
        if isinstance(ratios.get(key), (int, float))
    ]
    if notes:
        ax3.text(0.02, 0.03, "gateway ÷ floor at c=64: " + ", ".join(notes), transform=ax3.transAxes, fontsize=8)
    ax1.legend(loc="best", fontsize=9)

    machine = data.get("machine", {})
    cfg = data.get("config", {})
    kind = "quick run" if cfg.get("quick") else "full run"
    fig.suptitle(
        f"toolgate echo round trip, {kind}, {data.get('date', '')[:10]} — "
        f"{machine.get('cores', '?')} cores shared by broker, echo service, gateway and load client; "
        f"median of {cfg.get('repetitions', '?')}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(dst, dpi=110)
    print(f"plot.py: wrote {dst}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
