#!/usr/bin/env python3
"""Tabulate and plot the batched decode of bench/bench_forward.cpp: aggregate tokens/s against
the batch size, and the speedup over batch 1 of the same run.

Usage:
    DSA_BENCH_V32_DIR=... dsa_bench_forward --benchmark_filter='batch_decode' \
        --benchmark_out=batch.json --benchmark_out_format=json
    python3 tools/plot_batch_decode.py LABEL=batch.json [LABEL=other.json ...] \
        [--read-gbs 32.3] [--png out.png]

For each file and each model (v32, tiny) and block-dot mode, prints a Markdown table: batch B,
aggregate tokens/s, tokens/s per sequence, speedup over B = 1, the weights read per second and,
with --read-gbs (the read probe of the same machine, GB/s), its fraction. With --png, plots
aggregate tokens/s against B (log-log) beside the ideal B x (B = 1). Needs matplotlib only for
the plot.
"""

import argparse
import json
import re
import sys

ROW = re.compile(r"BM_forward_(v32|tiny)_batch_decode/batch:(\d+)/fp32:(\d)")


def load(path):
    """{(model, fp32): {B: counters}} of one bench_forward JSON file."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    out = {}
    for b in doc.get("benchmarks", []):
        if b.get("aggregate_name", "median") != "median" or "tokens/s" not in b:
            continue
        m = ROW.fullmatch(b.get("run_name", b["name"]).split("/manual_time")[0].split("/iterations")[0])
        if m:
            out.setdefault((m[1], int(m[3])), {})[int(m[2])] = b
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="LABEL=bench_forward.json")
    ap.add_argument("--read-gbs", type=float, help="the read probe of the machine, GB/s")
    ap.add_argument("--png", help="write the plot here")
    args = ap.parse_args()
    runs = []
    for r in args.runs:
        label, _, path = r.partition("=")
        if not path:
            sys.exit(f"expected LABEL=FILE, got {r!r}")
        data = load(path)
        if not data:
            sys.exit(f"{path}: no BM_forward_*_batch_decode rows")
        runs.append((label, data))

    for label, data in runs:
        for (model, fp32), rows in sorted(data.items()):
            base = rows.get(1, {}).get("tokens/s")
            print(f"\n{label}, {model}, {'fp32' if fp32 else 'exact'} block dot\n")
            head = "| batch | tokens/s | per sequence | x batch 1 | weights GB/s |"
            print(head + (" of read |" if args.read_gbs else ""))
            print("|---:|---:|---:|---:|---:|" + ("---:|" if args.read_gbs else ""))
            for bsz in sorted(rows):
                c = rows[bsz]
                speed = f"{c['tokens/s'] / base:.2f}" if base else ""
                line = f"| {bsz} | {c['tokens/s']:.1f} | {c['tokens/s/seq']:.2f} | {speed} | {c['weights_GB/s']:.1f} |"
                if args.read_gbs:
                    line += f" {100.0 * c['weights_GB/s'] / args.read_gbs:.0f}% |"
                print(line)

    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, data in runs:
            for (model, fp32), rows in sorted(data.items()):
                bs = sorted(rows)
                tps = [rows[b]["tokens/s"] for b in bs]
                name = f"{label}: {model}, {'fp32' if fp32 else 'exact'}"
                (line,) = ax.plot(bs, tps, marker="o", label=name)
                if 1 in rows:
                    ax.plot(bs, [rows[1]["tokens/s"] * b for b in bs], linestyle=":", color=line.get_color(),
                            label=f"{name}: batch 1 x B")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequences decoded together (B)")
        ax.set_ylabel("aggregate decode tokens/s")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)


if __name__ == "__main__":
    main()
