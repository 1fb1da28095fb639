#!/usr/bin/env python3
"""Plot the per-step log of examples/train_indexer (docs/training.md).

Usage:
    dsa_train_indexer --csv train_indexer.csv
    python3 tools/plot_train_indexer.py train_indexer.csv [--png docs/img/train_indexer.png]

Top panel: the KL loss per query row (the dense KL of eq. 3 at every step, and the sparse loss
of eq. 4 that the sparse stage trains). Bottom panel: the top-k recall (share of the dense
attention's probability mass inside the indexer's k selected keys) with the random-indexer
baseline k / causal length and the best possible recall (the k most attended keys).
Thin lines are the per-step values, thick lines a moving average. Prints a short summary.
"""

import argparse
import csv
import sys


def load(path):
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    need = {"step", "stage", "loss", "dense_kl", "recall", "baseline", "oracle"}
    if not rows or not need.issubset(rows[0].keys()):
        sys.exit(f"{path}: expected a dsa_train_indexer --csv file with columns {sorted(need)}")
    out = {k: [] for k in need}
    for r in rows:
        out["step"].append(int(r["step"]))
        out["stage"].append(r["stage"])
        for k in need - {"step", "stage"}:
            out[k].append(float(r[k]))
    return out


def smooth(v, w):
    """Trailing moving average over up to w points."""
    out, acc = [], 0.0
    for i, x in enumerate(v):
        acc += x
        if i >= w:
            acc -= v[i - w]
        out.append(acc / min(i + 1, w))
    return out


def summary(d, w):
    n = len(d["step"])
    first = min(w, n)
    dense_end = max([i for i, s in enumerate(d["stage"]) if s == "dense"], default=-1) + 1

    def mean(key, a, b):
        return sum(d[key][a:b]) / max(b - a, 1)

    print(f"steps: {n} ({dense_end} dense, {n - dense_end} sparse)")
    print(f"random baseline recall: {mean('baseline', 0, n):.4f}; best possible: {mean('oracle', 0, n):.4f}")
    print(f"first {first} steps: dense KL {mean('dense_kl', 0, first):.4f}, recall {mean('recall', 0, first):.4f}")
    if dense_end >= first:
        a = dense_end - first
        print(f"last {first} dense steps: dense KL {mean('dense_kl', a, dense_end):.4f}, "
              f"recall {mean('recall', a, dense_end):.4f}")
    if n - dense_end >= first:
        print(f"last {first} sparse steps: sparse loss {mean('loss', n - first, n):.4f}, "
              f"dense KL {mean('dense_kl', n - first, n):.4f}, recall {mean('recall', n - first, n):.4f}")


def plot(d, w, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = d["step"]
    sparse = [s for s, st in zip(steps, d["stage"]) if st == "sparse"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for ax in (ax1, ax2):
        if sparse:
            ax.axvspan(sparse[0] - 0.5, sparse[-1] + 0.5, color="0.92", zorder=0)
        ax.grid(True, alpha=0.3)

    ax1.plot(steps, d["dense_kl"], color="tab:blue", alpha=0.25, lw=0.8)
    ax1.plot(steps, smooth(d["dense_kl"], w), color="tab:blue", lw=2, label="dense KL (eq. 3), all keys")
    if sparse:
        idx = [i for i, st in enumerate(d["stage"]) if st == "sparse"]
        ls = [d["loss"][i] for i in idx]
        ax1.plot(sparse, ls, color="tab:orange", alpha=0.25, lw=0.8)
        ax1.plot(sparse, smooth(ls, w), color="tab:orange", lw=2, label="sparse KL (eq. 4), top-k keys")
    ax1.set_ylabel("KL per query row (nats)")
    ax1.legend(loc="upper right")
    title = "Lightning indexer warm-up: dense stage"
    if sparse:
        title += ", then sparse stage (shaded)"
    ax1.set_title(title)

    ax2.plot(steps, d["recall"], color="tab:green", alpha=0.25, lw=0.8)
    ax2.plot(steps, smooth(d["recall"], w), color="tab:green", lw=2, label="indexer top-k recall")
    ax2.plot(steps, d["oracle"], color="k", ls="--", lw=1.2, label="best possible (top-k of the attention)")
    ax2.plot(steps, d["baseline"], color="tab:red", ls=":", lw=1.5, label="random indexer (k / causal length)")
    ax2.set_ylabel("attention mass in the top-k")
    ax2.set_xlabel(f"training step (per-step values; thick: moving average of {w})")
    ax2.set_ylim(0, 1)
    ax2.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"wrote {png}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="dsa_train_indexer --csv output")
    ap.add_argument("--png", help="write the plot here (needs matplotlib)")
    ap.add_argument("--window", type=int, default=20, help="moving-average window (steps)")
    args = ap.parse_args()
    if args.window < 1:
        sys.exit("--window must be >= 1")
    d = load(args.csv)
    summary(d, args.window)
    if args.png:
        plot(d, args.window, args.png)


if __name__ == "__main__":
    main()
