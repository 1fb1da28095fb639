#!/usr/bin/env python3
"""Turns the Google Benchmark JSON of `cmake --workflow --preset bench` into the tables of
docs/performance.md: every kernel figure next to the machine limits measured in the same run
(bench_machine: fp32 FMA peak, copy/triad bandwidth), the ratios of each kernel to the baseline
benchmarked beside it (scalar loops, std::nth_element / std::sort, dense attention) and the
1 -> 2 thread scaling, and optional plots (per-file bars, cost against context length, thread
scaling).

usage: tools/bench_report.py RESULTS_DIR [--plots OUT_DIR] [--time real|cpu]

--time cpu reports the CPU time of the benchmark's main thread instead of the wall-clock time:
on a loaded machine it is the figure the load does not distort, but it is meaningful only for
single-threaded runs (threads:1 and the baselines); the rates (FLOP/s, bytes/s) stay wall-clock.

The CUDA benchmarks' JSON (bench_cuda_*.json) is left out of these tables and gets its own section,
with the GPU's measured limits and the published anchors: tools/bench_report_cuda.py.
"""
import argparse
import json
import math
import pathlib
import re
import sys


def load(results_dir):
    runs = {}
    context = None
    for path in sorted(pathlib.Path(results_dir).glob("*.json")):
        if path.stem.startswith("bench_cuda_"):
            continue  # the GPU section (bench_report_cuda.py): other limits, other anchors
        data = json.loads(path.read_text())
        context = context or data.get("context")
        rows = [b for b in data.get("benchmarks", []) if b.get("run_type", "iteration") == "iteration"]
        runs[path.stem] = rows
    return context, runs


def limits(runs):
    """Peak FMA FLOP/s (best thread count and single thread) and bandwidth from bench_machine."""
    lim = {}
    for b in runs.get("bench_machine", []):
        name = b["name"]
        if name.startswith("BM_peak_fma"):
            threads = b.get("threads", 1)
            lim[f"fma_peak_{threads}t"] = b["FLOP/s"]
            lim["fma_peak"] = max(lim.get("fma_peak", 0.0), b["FLOP/s"])
        elif name.startswith("BM_bandwidth_copy") or name.startswith("BM_bandwidth_triad"):
            kind = "bw_copy" if "copy" in name else "bw_triad"
            threads = b.get("threads", 1)
            lim[f"{kind}_{threads}t"] = b["bytes/s"]
            lim[kind] = max(lim.get(kind, 0.0), b["bytes/s"])
    # The bandwidth limit of a thread count: the better of copy and triad on that many threads.
    for key in ("", "_1t", "_2t"):
        best = max(lim.get("bw_copy" + key, 0.0), lim.get("bw_triad" + key, 0.0))
        if best:
            lim["bandwidth" + key] = best
    return lim


def args_of(b):
    """The benchmark's named arguments, e.g. {'s': 1, 'L': 32768, 'threads': 2}."""
    return {k: int(v) for k, v in re.findall(r"([A-Za-z_]+):(-?\d+)", b["name"]) if k not in ("min_time",)}


def bandwidth_for(b, lim):
    """The bandwidth probe of the threads the benchmark ran on: its `threads` argument, else all."""
    t = args_of(b).get("threads")
    return lim.get(f"bandwidth_{t}t") or lim.get("bandwidth")


def peak_for(b, lim):
    """The FMA peak of the threads the benchmark ran on: its `threads` argument (0 = all), else all."""
    t = args_of(b).get("threads")
    if t == 1:
        return lim.get("fma_peak_1t") or lim.get("fma_peak")
    return lim.get("fma_peak")


# Which time column the tables use: "real_time" (wall clock) or "cpu_time" (main thread), see --time.
TIME_KEY = "real_time"


def seconds(b):
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    return b[TIME_KEY] * scale


def family(b):
    return b["name"].split("/")[0]


def find(rows, fam, **args):
    for b in rows:
        if family(b) == fam and all(args_of(b).get(k) == v for k, v in args.items()):
            return b
    return None


def ratios(runs, lim):
    """The figures the performance issue asks for, each as a ratio measured in the same run."""
    out = ["### Ratios to the limits and to the baselines", "",
           "| kernel | case | kernel time | baseline | baseline time | speedup | of the limit |",
           "|---|---|---:|---|---:|---:|---:|"]

    def row(kern, case, b, base_name, base, limit):
        sp = f"{seconds(base) / seconds(b):.1f}x" if base else "-"
        out.append(f"| {kern} | {case} | {time_str(b)} | {base_name} | {time_str(base) if base else '-'} | {sp} | {limit} |")

    def pct(x, lim_v):
        return f"{100 * x / lim_v:.0f}%" if x and lim_v else "-"

    for b in runs.get("bench_hadamard", []):
        f = family(b)
        if f.endswith("baseline"):
            continue
        base = find(runs["bench_hadamard"], f + "_scalar_baseline")
        a = args_of(b)
        row("hadamard", f"{f[len('BM_hadamard_'):]}, threads {a.get('threads', '-')}", b, "scalar loop", base,
            pct(b.get("bytes/s"), bandwidth_for(b, lim)) + " of bandwidth")
    for b in runs.get("bench_fp8_quant", []):
        if family(b).endswith("baseline"):
            continue
        a = args_of(b)
        row("fp8 quant", f"{family(b)[3:]}, threads {a.get('threads', '-')}", b, "-", None,
            pct(b.get("bytes/s"), bandwidth_for(b, lim)) + " of bandwidth")
    for b in runs.get("bench_lightning_indexer", []):
        if family(b) != "BM_lightning_indexer_scores":
            continue
        a = args_of(b)
        base = find(runs["bench_lightning_indexer"], "BM_lightning_indexer_scalar_baseline", m=1, n=8192)
        # The scalar baseline runs one size; compare it per key and query row.
        sp_base = None
        if base:
            sp_base = dict(base)
            sp_base[TIME_KEY] = base[TIME_KEY] * (a["m"] * a["n"]) / (1 * 8192)
        row("indexer", f"m {a['m']}, n {a['n']}, threads {a.get('threads', '-')}", b, "scalar loop (scaled)", sp_base,
            pct(b.get("FLOP/s"), peak_for(b, lim)) + " of FMA peak")
    for b in runs.get("bench_topk", []):
        if family(b) != "BM_topk_indices":
            continue
        a = args_of(b)
        nth = find(runs["bench_topk"], "BM_topk_nth_element_baseline", m=a["m"], n=a["n"])
        srt = find(runs["bench_topk"], "BM_topk_full_sort_baseline", m=a["m"], n=a["n"])
        case = f"m {a['m']}, n {a['n']}, threads {a.get('threads', '-')}"
        row("top-k", case, b, "std::nth_element", nth, "-")
        row("top-k", case, b, "std::sort", srt, "-")
    for b in runs.get("bench_machine", []):
        if family(b) != "BM_parallel_for_overhead":
            continue
        a = args_of(b)
        spawn = find(runs["bench_machine"], "BM_parallel_spawn_baseline", threads=a.get("threads"))
        row("parallel_for", f"empty body, threads {a.get('threads', '-')}", b, "std::thread per chunk", spawn, "-")
    mla = runs.get("bench_sparse_mla_attention", [])
    for b in mla:
        f = family(b)
        if f not in ("BM_sparse_mla_bf16", "BM_sparse_mla_fp8"):
            continue
        a = args_of(b)
        case = f"{f[len('BM_sparse_mla_'):]}, s {a['s']}, L {a['L']}, threads {a['threads']}"
        dense = find(mla, "BM_dense_mla_bf16_baseline", L=a["L"], threads=a["threads"]) if a["s"] == 1 else None
        limit = pct(b.get("FLOP/s"), peak_for(b, lim)) + " of FMA peak"
        if dense:
            sp = seconds(dense) / seconds(b)
            ideal = a["L"] / 2048
            limit += f"; {sp / ideal:.2f} of ideal L/k = {ideal:.0f}"
        row("sparse MLA", case, b, "dense attention over L" if dense else "-", dense, limit)
    for b in mla:
        if family(b) == "BM_dense_mla_bf16_baseline":
            a = args_of(b)
            row("dense MLA", f"bf16, s 1, L {a['L']}, threads {a['threads']}", b, "-", None,
                pct(b.get("FLOP/s"), peak_for(b, lim)) + " of FMA peak")
    return "\n".join(out) + "\n"


def scaling_pairs(runs):
    """(family, other args, 1-thread run, 2-thread (or all-thread) run) for every benchmark run both ways."""
    pairs = []
    for name, rows in runs.items():
        for b in rows:
            a = args_of(b)
            if a.get("threads") != 1:
                continue
            rest = {k: v for k, v in a.items() if k != "threads"}
            other = None
            for t in (2, 0):
                other = find(rows, family(b), threads=t, **rest)
                if other:
                    break
            if other:
                pairs.append((family(b), rest, b, other))
    return pairs


def scaling(runs):
    """Time on 1 thread / time on 2 (or all) threads for every benchmark run both ways."""
    out = ["### Thread scaling", "", "| benchmark | 1 thread | 2 threads | speedup |", "|---|---:|---:|---:|"]
    for fam, rest, b, other in scaling_pairs(runs):
        out.append(f"| `{fam}` {rest} | {time_str(b)} | {time_str(other)} | {seconds(b) / seconds(other):.2f}x |")
    return "\n".join(out) + "\n"


def si(x, unit):
    if x is None or x == 0 or math.isnan(x):
        return "-"
    for p, s in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= p:
            return f"{x / p:.2f} {s}{unit}"
    return f"{x:.2f} {unit}"


def time_str(b):
    t = b[TIME_KEY]
    unit = b.get("time_unit", "ns")
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
    sec = t * scale
    for p, s in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if sec >= p:
            return f"{sec / p:.3g} {s}"
    return f"{sec / 1e-9:.3g} ns"


def table(name, rows, lim):
    out = [f"### {name}", "", "| benchmark | time | FLOP/s | % FMA peak | bytes/s | % bandwidth | other |",
           "|---|---|---|---|---|---|---|"]
    for b in rows:
        flops = b.get("FLOP/s")
        bytes_ = b.get("bytes/s")
        peak = peak_for(b, lim)
        pf = f"{100 * flops / peak:.0f}%" if flops and peak else "-"
        bw = bandwidth_for(b, lim)
        pb = f"{100 * bytes_ / bw:.0f}%" if bytes_ and bw else "-"
        skip = {"FLOP/s", "bytes/s"}
        standard = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
                    "real_time", "cpu_time", "time_unit", "family_index", "per_family_instance_index",
                    "aggregate_name", "aggregate_unit", "label", "error_occurred", "error_message"}
        other = ", ".join(f"{k}={v:.4g}" for k, v in b.items()
                          if k not in skip and k not in standard and isinstance(v, (int, float)))
        out.append(f"| `{b['name']}` | {time_str(b)} | {si(flops, 'FLOP/s')} | {pf} | {si(bytes_, 'B/s')} | {pb} | {other} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results_dir")
    ap.add_argument("--plots", help="directory for PNG plots (needs matplotlib)")
    ap.add_argument("--time", choices=("real", "cpu"), default="real",
                    help="wall-clock time (default) or the main thread's CPU time (single-threaded runs on a loaded machine)")
    args = ap.parse_args()
    global TIME_KEY
    TIME_KEY = "cpu_time" if args.time == "cpu" else "real_time"
    context, runs = load(args.results_dir)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from bench_report_cuda import gpu_report
    gpu = gpu_report(args.results_dir)
    if not runs:
        if gpu is None:
            sys.exit(f"no benchmark JSON in {args.results_dir}")
        print(gpu)
        return
    lim = limits(runs)
    if context:
        print(f"Host: {context.get('host_name', '?')}, {context.get('num_cpus', '?')} CPUs at "
              f"{context.get('mhz_per_cpu', '?')} MHz, library build {context.get('library_build_type', '?')}.\n")
    print("Machine limits measured in the same run: "
          f"fp32 FMA peak {si(lim.get('fma_peak_1t'), 'FLOP/s')} (1 thread), {si(lim.get('fma_peak'), 'FLOP/s')} (all); "
          f"memory bandwidth copy {si(lim.get('bw_copy_1t'), 'B/s')} (1 thread), {si(lim.get('bw_copy'), 'B/s')} (all), "
          f"triad {si(lim.get('bw_triad_1t'), 'B/s')} (1 thread), {si(lim.get('bw_triad'), 'B/s')} (all).\n")
    print(ratios(runs, lim))
    print(scaling(runs))
    for name, rows in runs.items():
        if name != "bench_machine":
            print(table(name, rows, lim))
    if gpu is not None:
        print(gpu)
    if args.plots:
        plot(runs, pathlib.Path(args.plots))


def plot(runs, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in runs.items():
        if name == "bench_machine" or not rows:
            continue
        fig, ax = plt.subplots(figsize=(9, max(2.5, 0.3 * len(rows))))
        labels = [b["name"] for b in rows]
        ax.barh(labels, [b[TIME_KEY] for b in rows])
        ax.set_xscale("log")
        ax.set_xlabel(f"time ({rows[0].get('time_unit', 'ns')})")
        ax.invert_yaxis()
        ax.set_title(name)
        fig.tight_layout()
        fig.savefig(out_dir / f"{name}.png", dpi=110)
        plt.close(fig)
    plot_context(runs, out_dir, plt)
    plot_scaling(runs, out_dir, plt)


def plot_context(runs, out_dir, plt):
    """Cost of one decode token against the context length: sparse vs dense attention, the
    indexer and top-k (the O(L) parts of DSA)."""
    series = []
    mla = runs.get("bench_sparse_mla_attention", [])
    for fam, label in (("BM_sparse_mla_bf16", "sparse MLA, bf16 rows"), ("BM_sparse_mla_fp8", "sparse MLA, FP8 rows"),
                       ("BM_dense_mla_bf16_baseline", "dense MLA (baseline)")):
        pts = sorted((args_of(b)["L"], seconds(b) * 1e3) for b in mla
                     if family(b) == fam and args_of(b).get("s", 1) == 1 and args_of(b).get("threads") == 2)
        if pts:
            series.append((label, pts))
    idx = [(args_of(b)["n"], seconds(b) * 1e3) for b in runs.get("bench_lightning_indexer", [])
           if family(b) == "BM_lightning_indexer_scores" and args_of(b)["m"] == 1 and args_of(b).get("threads") == 2]
    if idx:
        series.append(("lightning indexer, 1 query", sorted(idx)))
    tk = [(args_of(b)["n"], seconds(b) * 1e3) for b in runs.get("bench_topk", [])
          if family(b) == "BM_topk_indices" and args_of(b)["m"] == 1 and args_of(b).get("threads") == 2]
    if tk:
        series.append(("top-2048, 1 row", sorted(tk)))
    if not series:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, pts in series:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length L (keys)")
    ax.set_ylabel("ms per decode token")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title("CPU cost of one decode token against context length")
    fig.tight_layout()
    fig.savefig(out_dir / "context_cost.png", dpi=110)
    plt.close(fig)


def plot_scaling(runs, out_dir, plt):
    """Speedup from 1 to 2 threads of every benchmark run both ways (the scaling table), against
    the ideal 2x; the machine's probes are in the same figure."""
    pairs = scaling_pairs(runs)
    if not pairs:
        return
    labels = [fam[3:] + "".join(f" {k} {v}" for k, v in rest.items()) for fam, rest, _, _ in pairs]
    speedups = [seconds(b) / seconds(other) for _, _, b, other in pairs]
    colors = ["tab:gray" if fam.startswith(("BM_peak_fma", "BM_bandwidth")) else "tab:blue" for fam, _, _, _ in pairs]
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.28 * len(pairs) + 1.2)))
    ax.barh(labels, speedups, color=colors)
    for y, v in enumerate(speedups):
        ax.text(v + 0.02, y, f"{v:.2f}x", va="center", fontsize=7)
    ax.axvline(2.0, color="k", linestyle=":", label="ideal 2x")
    ax.axvline(1.0, color="tab:red", linestyle=":", label="no gain")
    ax.set_xlim(0, max(2.6, max(speedups) + 0.3))
    ax.set_xlabel("speedup, 2 threads over 1 (time on 1 / time on 2); grey: machine probes")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("CPU thread scaling, 1 -> 2 threads")
    fig.tight_layout()
    fig.savefig(out_dir / "thread_scaling.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
