#!/usr/bin/env python3
"""Times dsa (tools/dsa_run) and llama.cpp (llama-bench) on the same checkpoint, prompt lengths
and thread counts, then prints one table, writes JSON and (with matplotlib) a plot.

Called by bench/compare_llamacpp.sh, which downloads and builds everything first; it can also
be run by hand on binaries you already have:

    python3 bench/compare_llamacpp.py --dsa-run build/default/tools/dsa_run \
        --llama-bench PATH/llama-bench --model models/tiny-random --gguf tiny.gguf \
        --contexts 1024,8192 --threads 2 --json results.json --plot results.png

    python3 bench/compare_llamacpp.py --report results.json [--plot results.png]
        (table and plot again from a JSON written before)

What is measured, per thread count T and context L:
  dsa        dsa_run --prompt-ids <L ids> --max-new-tokens N+1 --threads T: prefill tokens/s
             over the L prompt tokens; decode tokens/s over the N steps that follow (context
             L .. L+N). One process per (T, L).
  llama.cpp  by default llama-batched-bench -npp L -ntg N -npl 1 -c L+N -t T -fa 0|1: the same
             sequence in one process (prefill of L tokens from an empty cache, then N decode
             steps), both timed; one process per (T, L, -fa).
  --parallel "1 4 8 16"  B sequences at once, each with its own prompt of L tokens: dsa_run
             --batch B (one batched forward call per step) against llama-batched-bench -npl B
             -c B(L+N) (unshared prompts); tokens/s are the whole batch's, prefill B L tokens,
             decode B N. With --llama-tool llama-bench:
             llama-bench -p L -n 0 (prefill) and llama-bench -p 0 -n N -d L (decode after an
             untimed depth-L prefill), -fa 0,1, -t T, -r REPS, -o json: twice the prefills.
The table shows the best of the REPS repetitions of each engine (the JSON keeps every sample).
Runs alternate between the engines context by context. Before each run the script waits (up to
--max-wait s) for the CPUs to be mostly idle, and records how busy they were and the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from pathlib import Path

# Linux caps one argv string at MAX_ARG_STRLEN = 32 pages = 131072 bytes, terminator included.
MAX_ARG_BYTES = 131072


def log(msg: str) -> None:
    print(f"[compare_llamacpp {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def cpu_busy(interval: float = 2.0) -> float | None:
    """Fraction of all CPUs busy (user + system + steal...) over `interval` seconds, from /proc/stat."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + (v[4] if len(v) > 4 else 0)  # total, idle + iowait
    try:
        t0, i0 = snap()
        time.sleep(interval)
        t1, i1 = snap()
    except OSError:
        return None
    return round(1.0 - (i1 - i0) / max(1, t1 - t0), 3)


def wait_quiet(args) -> dict:
    """Waits until the machine is quiet (at most --max-wait s); returns what it saw."""
    t0 = time.time()
    busy = cpu_busy()
    while busy is not None and busy > args.max_busy and time.time() - t0 < args.max_wait:
        log(f"machine busy ({busy:.0%} of CPUs; want <= {args.max_busy:.0%}): waiting")
        time.sleep(8)
        busy = cpu_busy()
    return {"cpu_busy_before": busy, "waited_s": round(time.time() - t0, 1), "loadavg_before": loadavg()}


def prio(args) -> list[str]:
    """Command prefix for --nice N. With the kernel's autogroup scheduling (Debian's default,
    /proc/sys/kernel/sched_autogroup_enabled = 1) a nice value only ranks a process against its
    own session: against other sessions' builds it is the autogroup's nice that counts. So each
    run gets a session of its own (run_cmd() with start_new_session) whose autogroup nice is set too."""
    if args.nice is None:
        return []
    return ["sh", "-c", 'echo "$0" > /proc/self/autogroup 2>/dev/null; exec nice -n "$0" "$@"', str(args.nice)]


def run_cmd(args, cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(prio(args) + cmd, capture_output=True, text=True, timeout=args.timeout,
                          start_new_session=args.nice is not None)


# ---------------------------------------------------------------------------------------------
# dsa


def prompt_args(length: int, vocab: int, seed: int, logdir: Path) -> list[str]:
    """dsa_run's arguments for a prompt of `length` pseudo-random ids from [0, vocab):
    --prompt-ids while the ids fit in one argv string (which any dsa_run accepts), else
    --prompt-file with the ids written under logdir (dsa_run from 2026-11-26 on)."""
    rng = random.Random(seed)
    ids = " ".join(str(rng.randrange(vocab)) for _ in range(length))
    if len(ids.encode()) + 1 <= MAX_ARG_BYTES:
        return ["--prompt-ids", ids]
    path = logdir / f"prompt_{length}.txt"
    path.write_text(ids + "\n")
    return ["--prompt-file", str(path)]


_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"


def parse_dsa_stage(text: str, stage: str) -> dict | None:
    """Parses a dsa_run line such as
        'prefill: 1024 tokens in 3.5244 s = 290.5 tokens/s'
    tolerating extra fields anywhere after the stage name (e.g. bytes per token, GB/s)."""
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith(stage + ":"):
            continue
        m_tok = re.search(r"(\d+)\s+tokens?\s+in\s+" + _NUM + r"\s*s\b", s)
        m_tps = re.search(_NUM + r"\s*tokens/s", s)
        if not m_tok and not m_tps:
            continue
        out: dict = {"line": s}
        if m_tok:
            out["tokens"] = int(m_tok.group(1))
            out["seconds"] = float(m_tok.group(2))
        if m_tps:
            out["tokens_per_s"] = float(m_tps.group(1))
        elif out.get("seconds"):
            out["tokens_per_s"] = out["tokens"] / out["seconds"]
        m_gbs = re.search(_NUM + r"\s*GB/s", s)
        if m_gbs:
            out["gb_per_s"] = float(m_gbs.group(1))
        return out
    return None


def run_dsa(args, cfg: dict, threads: int, ctx: int, parallel: int, logdir: Path) -> dict:
    vocab = int(cfg["vocab_size"])
    prompt = prompt_args(ctx, vocab, seed=ctx, logdir=logdir)
    # --batch B: the prompt for the first sequence, pseudo-random ones of the same length for the
    # others (dsa_run's own), so no two sequences share a prefix, as with llama-batched-bench.
    cmd = [args.dsa_run, "--model", str(args.model), *prompt,
           "--max-new-tokens", str(args.n_gen + 1), "--threads", str(threads), "--fp8-dot", args.dsa_fp8_dot, "--quiet"]
    if parallel > 1:
        cmd += ["--batch", str(parallel)]
    shown = " ".join(cmd[:3]) + f" {prompt[0]} '<{ctx} ids in [0, {vocab})>' " + " ".join(cmd[5:])
    tag = f"t{threads}_ctx{ctx}" + (f"_b{parallel}" if parallel > 1 else "")
    reps = []
    for rep in range(args.reps):
        quiet = wait_quiet(args)
        log(f"dsa: T={threads} ctx={ctx} batch={parallel} rep {rep + 1}/{args.reps}")
        t0 = time.time()
        try:
            p = run_cmd(args, cmd)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {args.timeout} s", "command": shown}
        (logdir / f"dsa_{tag}_r{rep}.log").write_text(p.stdout + "\n--- stderr ---\n" + p.stderr)
        if p.returncode != 0:
            return {"error": f"exit {p.returncode}: {p.stderr.strip()[-500:]}", "command": shown}
        pre, dec = parse_dsa_stage(p.stdout, "prefill"), parse_dsa_stage(p.stdout, "decode")
        if pre is None or dec is None:
            return {"error": "could not parse dsa_run output", "stdout": p.stdout[-2000:], "command": shown}
        mem = next((ln.strip() for ln in p.stdout.splitlines() if ln.strip().startswith("memory:")), None)
        reps.append({"prefill": pre, "decode": dec, "memory": mem, "wall_s": round(time.time() - t0, 2),
                     **quiet, "loadavg_after": loadavg()})
    best = lambda k: max(r[k]["tokens_per_s"] for r in reps)  # noqa: E731
    return {"command": shown, "prompt_id_range": vocab, "runs": reps,
            "prefill_tokens_per_s": best("prefill"), "decode_tokens_per_s": best("decode")}


# ---------------------------------------------------------------------------------------------
# llama.cpp


def run_llama_bench(args, extra: list[str], logname: str, logdir: Path) -> dict:
    cmd = [args.llama_bench, "-m", str(args.gguf), "-o", "json", "-r", str(args.reps),
           "-fa", args.flash_attn, "--progress"] + extra
    quiet = wait_quiet(args)
    log("llama.cpp: " + " ".join(cmd[1:]))
    t0 = time.time()
    try:
        p = run_cmd(args, cmd)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s", "command": " ".join(cmd)}
    (logdir / f"{logname}.log").write_text(p.stdout + "\n--- stderr ---\n" + p.stderr)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stderr.strip()[-800:]}", "command": " ".join(cmd)}
    try:
        start = p.stdout.index("[")
        rows = json.loads(p.stdout[start:])
    except ValueError as e:
        return {"error": f"could not parse llama-bench JSON: {e}", "stdout": p.stdout[-2000:],
                "command": " ".join(cmd)}
    return {"command": " ".join(cmd), "rows": rows, "wall_s": round(time.time() - t0, 2),
            **quiet, "loadavg_after": loadavg()}


def fa_key(v) -> str:
    """llama-bench reports flash_attn as a bool, an int or a string, depending on its version."""
    if isinstance(v, str):
        return "fa1" if v.lower() in ("1", "on", "true", "enabled") else "fa0"
    return "fa1" if v else "fa0"


def parse_batched_bench(text: str) -> list[dict]:
    """Result rows of llama-batched-bench: its markdown table
        |    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
    or, with --output-format jsonl, lines {"n_kv_max": ..., "speed_pp": ..., "speed_tg": ...}."""
    rows = []
    keys = ("pp", "tg", "pl", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed")
    for ln in text.splitlines():
        ln = ln.strip()
        if ln.startswith('{"n_kv_max"'):
            try:
                rows.append(json.loads(ln))
            except ValueError:
                pass
            continue
        cells = [c.strip() for c in ln.strip("|").split("|")] if ln.startswith("|") else []
        if len(cells) == len(keys) and re.fullmatch(r"\d+", cells[0]):
            try:
                rows.append({k: (int(v) if i < 4 else float(v)) for i, (k, v) in enumerate(zip(keys, cells))})
            except ValueError:
                pass
    return rows


def run_batched_bench(args, threads: int, ctx: int, parallel: int, logdir: Path) -> dict:
    """llama-batched-bench -npp L -ntg N -npl B: B prefills of L tokens from an empty cache, then
    N decode steps of the B sequences together, both timed: the sequence dsa_run runs (with
    --batch B). The prompts are not shared (no -pps), so the cache holds B (L + N) rows.
    One process per -fa value."""
    out: dict = {"tool": "llama-batched-bench"}
    runs = []
    for fa in args.flash_attn.split(","):
        fa = fa.strip()
        # "-npp L,16": a cheap second test after the measured one. llama-batched-bench prints its
        # rows through llama.cpp's asynchronous logger, whose worker may not get to print the last
        # row before the process exits (seen in about one run out of three on a busy machine, and in
        # nearly every run under SCHED_FIFO; llama.cpp issue 22142); the row of the measured test then comes
        # out while the second one runs.
        cmd = [args.llama_batched_bench, "-m", str(args.gguf), "-c", str(parallel * (ctx + args.n_gen)),
               "-npp", f"{ctx},16", "-ntg", str(args.n_gen), "-npl", str(parallel), "-t", str(threads), "-fa", fa]
        k = fa_key(fa)
        for rep in range(args.reps):
            quiet = wait_quiet(args)
            log(f"llama.cpp: T={threads} ctx={ctx} batch={parallel} fa={fa} rep {rep + 1}/{args.reps}: " + " ".join(cmd[1:]))
            t0 = time.time()
            run = {"command": " ".join(cmd), "flash_attn": k, **quiet}
            runs.append(run)
            try:
                p = run_cmd(args, cmd)
            except subprocess.TimeoutExpired:
                run["error"] = f"timed out after {args.timeout} s"
                break
            tag = f"t{threads}_ctx{ctx}" + (f"_b{parallel}" if parallel > 1 else "")
            (logdir / f"llama_{tag}_{k}_r{rep}.log").write_text(p.stdout + "\n--- stderr ---\n" + p.stderr)
            rows = [r for r in parse_batched_bench(p.stdout + "\n" + p.stderr)
                    if r.get("pp") == ctx and r.get("pl", r.get("n_pl", parallel)) == parallel]
            run.update({"wall_s": round(time.time() - t0, 2), "loadavg_after": loadavg()})
            if p.returncode != 0 or not rows:
                run["error"] = f"exit {p.returncode}, {len(rows)} result lines: {p.stderr.strip()[-800:]}"
                break
            run["result"] = rows[-1]
            e = out.setdefault(k, {"prefill_samples_ts": [], "decode_samples_ts": []})
            e["prefill_samples_ts"].append(rows[-1]["speed_pp"])
            e["decode_samples_ts"].append(rows[-1]["speed_tg"])
    for k in ("fa0", "fa1"):
        if k in out:
            for ph in ("prefill", "decode"):
                out[k][ph + "_tokens_per_s"] = max(out[k][ph + "_samples_ts"])
    out["runs"] = runs
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        out["prefill_run"] = out["decode_run"] = {"error": "; ".join(errors)}
    ok = [r["result"] for r in runs if "result" in r]
    if ok:
        out["info"] = {k: ok[0].get(k) for k in ("n_batch", "n_ubatch", "n_threads", "n_threads_batch")}
    return out


def run_llama(args, threads: int, ctx: int, parallel: int, logdir: Path) -> dict:
    if args.llama_tool == "llama-batched-bench":
        return run_batched_bench(args, threads, ctx, parallel, logdir)
    return run_llama_bench_pair(args, threads, ctx, logdir)


def run_llama_bench_pair(args, threads: int, ctx: int, logdir: Path) -> dict:
    warm = [] if ctx <= args.warmup_max_ctx else ["--no-warmup"]
    out: dict = {"tool": "llama-bench"}
    pp = run_llama_bench(args, ["-p", str(ctx), "-n", "0", "-t", str(threads)] + warm,
                         f"llama_pp_t{threads}_ctx{ctx}", logdir)
    tg = run_llama_bench(args, ["-p", "0", "-n", str(args.n_gen), "-d", str(ctx), "-t", str(threads)],
                         f"llama_tg_t{threads}_ctx{ctx}", logdir)
    for phase, res in (("prefill", pp), ("decode", tg)):
        out[phase + "_run"] = {k: v for k, v in res.items() if k != "rows"}
        if "error" in res:
            continue
        for row in res["rows"]:
            k = fa_key(row.get("flash_attn"))
            samples = row.get("samples_ts") or [row.get("avg_ts")]
            out.setdefault(k, {})[phase + "_tokens_per_s"] = max(samples)
            out[k][phase + "_mean_tokens_per_s"] = row.get("avg_ts")
            out[k][phase + "_stddev"] = row.get("stddev_ts")
            out[k][phase + "_samples_ts"] = samples
        if "info" not in out and res["rows"]:
            r0 = res["rows"][0]
            out["info"] = {k: r0.get(k) for k in ("build_commit", "build_number", "cpu_info", "backends",
                                                     "model_type", "model_size", "model_n_params", "type_k",
                                                     "type_v", "n_batch", "n_ubatch", "n_threads")}
    return out


# ---------------------------------------------------------------------------------------------
# report


def fmt(v, digits=1) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}f}"


def ratio(a, b) -> str:
    if not a or not b:
        return "-"
    return f"{a / b:.2f}x"


def table(results: dict) -> str:
    st = results["settings"]
    batched = any(e.get("parallel", 1) != 1 for e in results["entries"])
    hdr = ("| threads | context " + ("| batch " if batched else "") + "| dsa prefill | llama.cpp prefill fa=0 "
           "| fa=1 | dsa / best | dsa decode | llama.cpp decode fa=0 | fa=1 | dsa / best |")
    lines = ["tokens/s (prefill: the whole prompt from an empty cache; decode: "
             f"{st['n_gen']} steps after a context of that length; best of {st.get('reps', 1)}; "
             f"dsa --fp8-dot {st.get('dsa_fp8_dot', 'exact')}"
             + ("; batch B: B sequences at once, the whole batch's tokens/s" if batched else "") + ")", "", hdr,
             "|---:|---:|" + ("---:|" if batched else "") + "---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in results["entries"]:
        d, l0, l1 = e.get("dsa", {}), e.get("llama", {}).get("fa0", {}), e.get("llama", {}).get("fa1", {})
        cells = [str(e["threads"]), str(e["context"])] + ([str(e.get("parallel", 1))] if batched else [])
        for ph in ("prefill", "decode"):
            dv = d.get(ph + "_tokens_per_s")
            a, b = l0.get(ph + "_tokens_per_s"), l1.get(ph + "_tokens_per_s")
            best = max([x for x in (a, b) if x] or [0]) or None
            cells += [fmt(dv) if "error" not in d else "error", fmt(a), fmt(b), ratio(dv, best)]
        lines.append("| " + " | ".join(cells) + " |")
    errs = [(e["threads"], e["context"], e.get("parallel", 1), who, msg)
            for e in results["entries"]
            for who, msg in (("dsa", e.get("dsa", {}).get("error")),
                             ("llama.cpp prefill", e.get("llama", {}).get("prefill_run", {}).get("error")),
                             ("llama.cpp decode", e.get("llama", {}).get("decode_run", {}).get("error")))
            if msg]
    for t, c, b, who, msg in errs:
        lines.append(f"error: T={t} ctx={c} batch={b} {who}: {msg}")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    threads = sorted({e["threads"] for e in results["entries"]})
    # Against the batch size when it varies (--parallel), else against the context.
    by_batch = len({e.get("parallel", 1) for e in results["entries"]}) > 1
    xkey = (lambda e: e.get("parallel", 1)) if by_batch else (lambda e: e["context"])
    styles = {"dsa": ("tab:blue", "o", "-"), "fa0": ("tab:orange", "s", "--"), "fa1": ("tab:green", "^", "--")}
    for ax, ph in zip(axes, ("prefill", "decode")):
        for t in threads:
            es = sorted((e for e in results["entries"] if e["threads"] == t), key=xkey)
            series = {
                "dsa": [(xkey(e), e.get("dsa", {}).get(ph + "_tokens_per_s")) for e in es],
                "fa0": [(xkey(e), e.get("llama", {}).get("fa0", {}).get(ph + "_tokens_per_s")) for e in es],
                "fa1": [(xkey(e), e.get("llama", {}).get("fa1", {}).get(ph + "_tokens_per_s")) for e in es],
            }
            names = {"dsa": "dsa", "fa0": "llama.cpp, no flash attn", "fa1": "llama.cpp, flash attn"}
            for k, pts in series.items():
                pts = [(x, y) for x, y in pts if y]
                if not pts:
                    continue
                c, m, ls = styles[k]
                lab = names[k] + (f", {t} thr" if len(threads) > 1 else "")
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=c, marker=m, linestyle=ls,
                        alpha=1.0 if t == threads[-1] else 0.5, label=lab)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        if by_batch:
            ctxs = sorted({e["context"] for e in results["entries"]})
            ax.set_xlabel("batch (sequences decoded together)")
            ax.set_ylabel("tokens/s, whole batch")
            ax.set_title(f"{ph} ({'all prompts' if ph == 'prefill' else 'after'} {'/'.join(map(str, ctxs))} tokens each)")
        else:
            ax.set_xlabel("context (tokens)")
            ax.set_ylabel("tokens/s")
            ax.set_title(f"{ph} ({'whole prompt' if ph == 'prefill' else 'after a context of that length'})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    s = results["settings"]
    lcp = s.get("llama_cpp_version", "?") + (f", llama-cpp-python {s['llama_cpp_python_version']}"
                                            if s.get("llama_cpp_python_version") else "")
    fig.suptitle(f"dsa vs llama.cpp on {s.get('model_name', '?')}, {','.join(map(str, threads))} threads"
                 f" (dsa {s.get('dsa_version', '?')}; llama.cpp {lcp}, GGUF {s.get('gguf_type', '?')})", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    log(f"plot: {path}")


# ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", type=Path, help="only print the table (and plot) of an existing JSON")
    ap.add_argument("--dsa-run")
    ap.add_argument("--dsa-fp8-dot", choices=("exact", "fp32"), default="exact",
                    help="dsa_run --fp8-dot: the FP8 block dot of its linear layers (default exact, dsa's default)")
    ap.add_argument("--llama-bench", help="llama-bench binary (with --llama-tool llama-bench)")
    ap.add_argument("--llama-batched-bench", help="llama-batched-bench binary (the default tool)")
    ap.add_argument("--llama-tool", choices=("llama-batched-bench", "llama-bench"), default="llama-batched-bench",
                    help="llama-batched-bench (default): prefill then decode in one process, as dsa_run; "
                         "llama-bench: -p L -n 0 and -p 0 -n N -d L (twice the prefills)")
    ap.add_argument("--model", type=Path, help="HF checkpoint directory dsa_run loads")
    ap.add_argument("--gguf", type=Path, help="the same checkpoint converted by convert_hf_to_gguf.py")
    ap.add_argument("--contexts", default="1024,8192,32768")
    ap.add_argument("--threads", default=str(os.cpu_count() or 1))
    ap.add_argument("--parallel", default="1",
                    help="batch sizes B: B sequences at once (dsa_run --batch B, llama-batched-bench -npl B)")
    ap.add_argument("--n-gen", type=int, default=32, help="decode steps timed per context (default 32)")
    ap.add_argument("--reps", type=int, default=1, help="repetitions; the table shows the best of them")
    ap.add_argument("--nice", type=int, default=None,
                    help="run both engines under nice -n N, each in a session of its own whose autogroup "
                         "nice is N as well (N < 0 needs root): less disturbance from other work")
    ap.add_argument("--max-busy", type=float, default=0.3,
                    help="before each run, wait while more than this fraction of the CPUs is busy")
    ap.add_argument("--max-wait", type=float, default=300, help="... but at most this many seconds")
    ap.add_argument("--flash-attn", default="0,1", help="llama-bench -fa values (default 0,1)")
    ap.add_argument("--warmup-max-ctx", type=int, default=4096,
                    help="with llama-bench: its warmup (a full extra prefill) only up to this context")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per process")
    ap.add_argument("--meta", action="append", default=[], help="KEY=VALUE recorded under settings")
    ap.add_argument("--json", type=Path, help="write results here")
    ap.add_argument("--plot", type=Path, help="write a PNG plot here")
    args = ap.parse_args()

    if args.report:
        results = json.loads(args.report.read_text())
        print(table(results))
        if args.plot:
            plot(results, args.plot)
        return

    for need in ("dsa_run", args.llama_tool.replace("-", "_"), "model", "gguf", "json"):
        if getattr(args, need) is None:
            ap.error(f"--{need.replace('_', '-')} is required")
    cfg = json.loads((args.model / "config.json").read_text())
    contexts = [int(c) for c in re.split(r"[ ,]+", args.contexts.strip()) if c]
    threads = [int(t) for t in re.split(r"[ ,]+", args.threads.strip()) if t]
    parallel = [int(b) for b in re.split(r"[ ,]+", args.parallel.strip()) if b]
    if any(b < 1 for b in parallel):
        ap.error(f"--parallel {args.parallel!r}: batch sizes are >= 1")
    if args.llama_tool == "llama-bench" and parallel != [1]:
        ap.error("--parallel needs --llama-tool llama-batched-bench (llama-bench runs one sequence)")
    too_long = [c for c in contexts if c + args.n_gen + 1 > int(cfg["max_position_embeddings"])]
    if too_long:
        sys.exit(f"contexts {too_long} + {args.n_gen + 1} exceed max_position_embeddings = "
                 f"{cfg['max_position_embeddings']} of {args.model}")
    logdir = args.json.parent / "logs"
    logdir.mkdir(parents=True, exist_ok=True)

    settings = {"model": str(args.model), "model_name": args.model.name, "gguf": str(args.gguf),
                "contexts": contexts, "threads": threads, "parallel": parallel, "n_gen": args.n_gen, "reps": args.reps,
                "flash_attn": args.flash_attn, "warmup_max_ctx": args.warmup_max_ctx, "nice": args.nice,
                "max_busy": args.max_busy, "max_wait": args.max_wait,
                "dsa_run": args.dsa_run, "dsa_fp8_dot": args.dsa_fp8_dot, "llama_tool": args.llama_tool,
                "llama_binary": args.llama_bench if args.llama_tool == "llama-bench" else args.llama_batched_bench,
                "config": {k: cfg.get(k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                   "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
                                                   "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
                                                   "num_experts_per_tok", "index_n_heads", "index_head_dim",
                                                   "index_topk", "vocab_size", "max_position_embeddings")},
                "host": {"machine": platform.machine(), "nproc": os.cpu_count(), "platform": platform.platform()},
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "loadavg_start": loadavg()}
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
        settings["host"]["cpu"] = cpu
    except (OSError, StopIteration):
        pass
    for kv in args.meta:
        k, _, v = kv.partition("=")
        settings[k] = v
    results = {"settings": settings, "entries": []}

    def save() -> None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")

    for t, c, b in ((t, c, b) for t in threads for c in contexts for b in parallel):
        entry = {"threads": t, "context": c, "parallel": b}
        results["entries"].append(entry)
        entry["dsa"] = run_dsa(args, cfg, t, c, b, logdir)
        save()
        entry["llama"] = run_llama(args, t, c, b, logdir)
        if "info" in entry["llama"]:
            info = entry["llama"].pop("info")
            if "llama_info" not in settings:
                settings["llama_info"] = info
                if "llama_cpp_version" not in settings and info.get("build_commit"):
                    settings["llama_cpp_version"] = f"commit {info['build_commit']}"
        else:
            entry["llama"].pop("info", None)
        save()
        print(table(results).splitlines()[-1], file=sys.stderr, flush=True)
    settings["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    settings["loadavg_end"] = loadavg()
    save()
    print(table(results))
    print(f"\nJSON: {args.json}")
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
