#!/usr/bin/env python3
"""Plot and tabulate bench/bench_decode_layer.cpp results.

Usage:
    dsa_bench_decode_layer --benchmark_out=decode_layer.json --benchmark_out_format=json
    python3 tools/plot_decode_layer.py decode_layer.json [--png docs/img/decode_layer.png]

Prints a Markdown table (context, sparse and dense time per token, measured speedup, ideal L/k)
and, with --png, writes a log-log plot of the per-token times with the measured and the ideal
speedup. Needs matplotlib only for the plot.
"""

import argparse
import json
import re
import sys


def load_rows(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    rows = []
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        m = re.match(r"BM_decode_layer/L:(\d+)", b.get("name", ""))
        if not m:
            continue
        rows.append(
            {
                "L": int(m.group(1)),
                "sparse_ms": float(b["sparse_ms"]),
                "dense_ms": float(b["dense_ms"]),
                "indexer_ms": float(b["indexer_ms"]),
                "topk_ms": float(b["topk_ms"]),
                "attention_ms": float(b["attention_ms"]),
                "speedup": float(b["speedup"]),
                "ideal": float(b["ideal"]),
            }
        )
    if not rows:
        sys.exit(f"{path}: no BM_decode_layer results (run dsa_bench_decode_layer with --benchmark_out=...)")
    rows.sort(key=lambda r: r["L"])
    return doc.get("context", {}), rows


def context_label(L):
    return f"{L // 1024}K" if L % 1024 == 0 else str(L)


def markdown_table(rows):
    lines = [
        "| context L | sparse ms/token | (indexer / top-k / attention) | dense ms/token | speedup | ideal L/k |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {context_label(r['L'])} | {r['sparse_ms']:.1f} | {r['indexer_ms']:.1f} / {r['topk_ms']:.2f} / "
            f"{r['attention_ms']:.1f} | {r['dense_ms']:.1f} | {r['speedup']:.2f}x | {r['ideal']:.0f}x |"
        )
    return "\n".join(lines)


def plot(rows, ctx, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    L = [r["L"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1.loglog(L, [r["dense_ms"] for r in rows], "o-", label="dense MLA attention over all L rows")
    ax1.loglog(L, [r["sparse_ms"] for r in rows], "s-", label="DSA: indexer + top-2048 + sparse MLA")
    ax1.loglog(L, [r["indexer_ms"] for r in rows], "^--", label="  of which indexer scores", alpha=0.7)
    ax1.loglog(L, [r["attention_ms"] for r in rows], "v--", label="  of which sparse attention", alpha=0.7)
    ax1.set_xlabel("context L (tokens)")
    ax1.set_ylabel("ms per decoded token, one layer")
    ax1.set_xticks(L)
    ax1.set_xticklabels([context_label(x) for x in L])
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=8)
    ax1.set_title("Decode time per layer (128 heads, d_qk 576, FP8 caches)")

    ax2.semilogx(L, [r["speedup"] for r in rows], "o-", label="measured dense / sparse")
    ax2.semilogx(L, [r["ideal"] for r in rows], "k:", label="ideal L / 2048 (attended rows)")
    ax2.set_xlabel("context L (tokens)")
    ax2.set_ylabel("speedup")
    ax2.set_xticks(L)
    ax2.set_xticklabels([context_label(x) for x in L])
    ax2.set_yscale("log", base=2)
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    cpus = ctx.get("num_cpus", "?")
    ax2.set_title(f"Sparse vs dense, same run ({cpus} CPU threads)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="Google Benchmark JSON output of dsa_bench_decode_layer")
    ap.add_argument("--png", help="write the plot to this file")
    args = ap.parse_args()
    ctx, rows = load_rows(args.json)
    print(markdown_table(rows))
    load = ctx.get("load_avg")
    if load:
        print(f"\nload average during the run: {', '.join(f'{x:.2f}' for x in load)}")
    if args.png:
        plot(rows, ctx, args.png)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
