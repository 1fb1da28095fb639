#!/usr/bin/env python3
"""Tabulate and plot the FP8 decode GEMV of bench/bench_linear.cpp against the read probe.

Usage:
    dsa_bench_linear --benchmark_filter='probe|parts|fp8_linear_decode/t:./threads:./shape:./fp32:1/dram:./packed:1' \
        --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
        --benchmark_out=decode.json --benchmark_out_format=json
    python3 tools/plot_fp8_decode.py LABEL=decode.json [LABEL=other.json ...] [--png out.png]

For each file and each (rows t, threads), prints the range over the weight shapes of the
median fraction of the read probe of the same run (`of_read`, weights streamed from DRAM) as a
Markdown table; with --png, plots those ranges against t with the 70% target. Needs matplotlib
only for the plot.
"""

import argparse
import json
import re
import sys


def load(path):
    """{(t, threads): [of_read of each shape]} for the from-DRAM medians of one file."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    out = {}
    for b in doc.get("benchmarks", []):
        if b.get("aggregate_name", "median") != "median":
            continue
        m = re.match(r"BM_fp8_linear_decode/t:(\d)/threads:(\d)/shape:\d/fp32:1/dram:1/packed:1", b.get("run_name", b["name"]))
        if m and "of_read" in b:
            out.setdefault((int(m[1]), int(m[2])), []).append(100.0 * b["of_read"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="LABEL=bench_linear.json")
    ap.add_argument("--png", help="write the plot here")
    args = ap.parse_args()
    runs = []
    for r in args.runs:
        label, _, path = r.partition("=")
        if not path:
            sys.exit(f"expected LABEL=FILE, got {r!r}")
        data = load(path)
        if not data:
            sys.exit(f"{path}: no BM_fp8_linear_decode .../dram:1/packed:1 medians")
        runs.append((label, data))

    keys = sorted({k for _, d in runs for k in d})
    print("| rows t | threads | " + " | ".join(label for label, _ in runs) + " |")
    print("|---:|---:|" + "---:|" * len(runs))
    for t, th in keys:
        cells = []
        for _, d in runs:
            v = d.get((t, th))
            cells.append(f"{min(v):.0f}-{max(v):.0f}%" if v else "")
        print(f"| {t} | {th} | " + " | ".join(cells) + " |")

    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        threads = sorted({th for _, th in keys})
        fig, axes = plt.subplots(1, len(threads), figsize=(5 * len(threads), 3.8), sharey=True, squeeze=False)
        for ax, th in zip(axes[0], threads):
            for i, (label, d) in enumerate(runs):
                ts = [t for t, h in keys if h == th and (t, h) in d]
                lo = [min(d[(t, th)]) for t in ts]
                hi = [max(d[(t, th)]) for t in ts]
                x = [t + (i - (len(runs) - 1) / 2) * 0.08 for t in ts]
                ax.vlines(x, lo, hi, colors=f"C{i}", linewidth=3)
                ax.plot(x, [(a + b) / 2 for a, b in zip(lo, hi)], "o-", color=f"C{i}", label=label, markersize=4)
            ax.axhline(70, color="gray", linestyle="--", linewidth=1, label="target 70%")
            ax.set_title(f"{th} thread{'s' if th > 1 else ''}")
            ax.set_xlabel("rows t")
            ax.set_xticks(sorted({t for t, _ in keys}))
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("weights streamed, % of the read probe")
        axes[0][0].legend(fontsize=8)
        fig.suptitle("FP8 decode GEMV (fp32 block dots, packed weights, from DRAM): range over four shapes")
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
