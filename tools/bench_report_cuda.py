#!/usr/bin/env python3
"""The GPU section of docs/performance.md from the JSON of the CUDA benchmarks (bench/cuda,
ctest label cuda_bench; files bench_cuda_<area>.json): every kernel's time, TFLOP/s and GB/s,
their fractions of the device limits measured in the same binary (copy bandwidth, FMA peaks,
cuBLAS bf16 GEMM: the JSON context's probe_* entries and the of_peak / of_copy counters), and the
published figure it is measured against.

The published anchors live here, once, with their sources. They were measured on other GPUs
(H800 SXM5, A100) than the one a run uses, so the table states the anchor and its device next
to our figure rather than a ratio across devices; the one anchor that is itself a ratio
(fast-hadamard-transform's time against memcpy) is compared as a ratio, with our own memcpy
baseline of the same bytes.

usage: tools/bench_report_cuda.py RESULTS_DIR      (tools/bench_report.py calls gpu_report too)
"""
import json
import pathlib
import re
import sys

# Published figures, with where they were published. value None: no figure is published.
ANCHORS = {
    "sparse_mla_decode_fp8": {
        "value": 410.0, "unit": "TFLOP/s", "device": "H800 SXM5, CUDA 12.8",
        "what": "FlashMLA token-level sparse MLA decode, FP8 KV cache (656-byte rows), bf16 matmul, "
                "compute-bound configuration",
        "source": "https://github.com/deepseek-ai/FlashMLA (README: News 2025.09.29 and Performance)",
    },
    "sparse_mla_prefill": {
        "value": 640.0, "unit": "TFLOP/s", "device": "H800 SXM5, CUDA 12.8",
        "what": "FlashMLA token-level sparse MLA prefill, forward",
        "source": "https://github.com/deepseek-ai/FlashMLA (README: News 2025.09.29 and Performance)",
    },
    "sparse_mla_decode_bf16": {
        "value": 660.0, "unit": "TFLOP/s", "device": "H800 SXM5, CUDA 12.8",
        "short": "none for a sparse bf16 cache; FlashMLA dense bf16 decode 660 TFLOP/s (H800 SXM5)",
        "what": "no sparse bf16-cache decode figure is published; FlashMLA's DENSE bf16 MLA decode: "
                "660 TFLOP/s compute-bound, 3000 GB/s memory-bound",
        "source": "https://github.com/deepseek-ai/FlashMLA (README: Performance)",
    },
    "hadamard": {
        "value": None, "unit": "x memcpy time", "device": "A100",
        "what": "fast-hadamard-transform, time against memcpy (torch.clone) of the same tensor: bf16 n <= 512 "
                "1.0x, 512-8192 <= 1.2x, 16384 1.3x, 32768 1.8x; fp32 n <= 8192 1.0x, 16384 1.1x, 32768 1.2x",
        "source": "https://github.com/Dao-AILab/fast-hadamard-transform (README: Speed)",
    },
    "lightning_indexer": {
        "value": None, "unit": "TFLOP/s", "device": "SM90",
        "what": "DeepGEMM fp8_mqa_logits / fp8_paged_mqa_logits (V3.2 indexer logits on the FP8 tensor cores); "
                "the README publishes no throughput figure for them",
        "source": "https://github.com/deepseek-ai/DeepGEMM (README: News 2025.09.28, PR #200; "
                  "'V3.2 MQA kernels for the indexer')",
    },
    "fp8_linear": {
        "value": 1550.0, "unit": "TFLOP/s", "device": "H800",
        "what": "DeepGEMM FP8 GEMM peak (1 x 128 / 128 x 128 scaled FP8 on the tensor cores)",
        "source": "https://github.com/deepseek-ai/DeepGEMM (README: News 2025.04.18)",
    },
    "memory_bound": {
        "value": 1.0, "unit": "of copy", "device": "this GPU",
        "what": "no published kernel figure: the roofline is the device-to-device copy measured in the same run",
        "source": "bench/cuda/bench_cuda_machine.cpp (probe_copy_d2d_GBps)",
    },
}

# fast-hadamard-transform's published time / memcpy time, by dtype and n (upper bounds of its bins).
FHT_RATIO = {
    "bf16": [(512, 1.0), (8192, 1.2), (16384, 1.3), (32768, 1.8)],
    "f32": [(8192, 1.0), (16384, 1.1), (32768, 1.2)],
}

# Issue 35's first-version targets of the fast (tensor-core) kernels on an H100 SXM, shown beside
# their anchors: what docs/performance.md states each fast row against.
TARGETS = {
    "BM_cuda_sparse_mla_decode_fp8_fast": "first target >= 150 TFLOP/s (H100)",
    "BM_cuda_sparse_mla_prefill_bf16_fast": "first target >= 250 TFLOP/s (H100)",
    "BM_cuda_lightning_indexer_fp8_fast": "first target >= 300 TFLOP/s at m >= 64, <= 20 us for m = 1 over 128K keys (H100)",
}

# benchmark family -> (kernel, anchor key)
FAMILIES = {
    "BM_cuda_hadamard_bf16": ("hadamard_transform bf16", "hadamard"),
    "BM_cuda_hadamard_f32": ("hadamard_transform fp32", "hadamard"),
    "BM_cuda_act_quant_bf16": ("act_quant bf16 -> e4m3", "memory_bound"),
    "BM_cuda_act_dequant_bf16": ("act_dequant e4m3 -> bf16", "memory_bound"),
    "BM_cuda_weight_quant_bf16": ("weight_quant bf16 -> e4m3", "memory_bound"),
    "BM_cuda_weight_dequant_bf16": ("weight_dequant e4m3 -> bf16", "memory_bound"),
    "BM_cuda_lightning_indexer_fp8": ("lightning_indexer_scores fp8 (exact)", "lightning_indexer"),
    "BM_cuda_lightning_indexer_fp8_fast": ("lightning_indexer_scores fp8 (fast, tensor cores)", "lightning_indexer"),
    "BM_cuda_lightning_indexer_paged_fp8": ("lightning_indexer_scores_paged fp8 (exact)", "lightning_indexer"),
    "BM_cuda_lightning_indexer_paged_fp8_fast": ("lightning_indexer_scores_paged fp8 (fast, tensor cores)",
                                                 "lightning_indexer"),
    "BM_cuda_topk_indices": ("topk_indices k=2048", "memory_bound"),
    "BM_cuda_gather_rows_fp8": ("gather_rows 656-byte rows", "memory_bound"),
    "BM_cuda_sparse_mla_decode_bf16": ("sparse_mla_attention decode, bf16 cache (exact)", "sparse_mla_decode_bf16"),
    "BM_cuda_sparse_mla_decode_bf16_fast": ("sparse_mla_attention decode, bf16 cache (fast, tensor cores)",
                                            "sparse_mla_decode_bf16"),
    "BM_cuda_sparse_mla_decode_fp8": ("sparse_mla_attention decode, FP8 cache (exact)", "sparse_mla_decode_fp8"),
    "BM_cuda_sparse_mla_decode_fp8_fast": ("sparse_mla_attention decode, FP8 cache (fast, tensor cores)",
                                           "sparse_mla_decode_fp8"),
    "BM_cuda_sparse_mla_prefill_bf16": ("sparse_mla_attention prefill, bf16 cache (exact)", "sparse_mla_prefill"),
    "BM_cuda_sparse_mla_prefill_bf16_fast": ("sparse_mla_attention prefill, bf16 cache (fast, tensor cores)",
                                             "sparse_mla_prefill"),
    "BM_cuda_linear_bf16_cublas": ("linear bf16 (cuBLAS)", None),
    "BM_cuda_linear_bf16_simt": ("linear bf16 (dsa's SIMT kernel, fp32 FMA)", None),
    "BM_cuda_fp8_linear": ("fp8_linear (exact, fp64 FMA)", "fp8_linear"),
    "BM_cuda_fp8_linear_cublaslt": ("fp8_linear (cuBLASLt block-scaled FP8)", "fp8_linear"),
    "BM_cuda_fp8_linear_fast": ("fp8_linear (fast path, default choice)", "fp8_linear"),
}


def load(results_dir):
    """{stem: (context, rows)} for every bench_cuda_*.json, rows without errors."""
    out = {}
    for path in sorted(pathlib.Path(results_dir).glob("bench_cuda_*.json")):
        data = json.loads(path.read_text())
        rows = [b for b in data.get("benchmarks", [])
                if b.get("run_type", "iteration") == "iteration" and not b.get("error_occurred")]
        errors = [b for b in data.get("benchmarks", []) if b.get("error_occurred")]
        out[path.stem] = (data.get("context", {}), rows, errors)
    return out


def args_of(b):
    return {k: int(v) for k, v in re.findall(r"([A-Za-z_]+):(-?\d+)", b["name"]) if k != "min_time"}


def family(b):
    return b["name"].split("/")[0]


def seconds(b):
    return b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]


def time_str(sec):
    for p, s in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if sec >= p:
            return f"{sec / p:.3g} {s}"
    return f"{sec / 1e-9:.3g} ns"


def num(v, fmt):
    return "-" if v is None else format(v, fmt)


def pct(v):
    return "-" if v is None else f"{100 * v:.0f}%"


def shape_str(b):
    return ", ".join(f"{k} {v}" for k, v in args_of(b).items())


def hadamard_ratio(b, baselines):
    """Our time / memcpy time of the same bytes, and fast-hadamard-transform's published ratio."""
    a = args_of(b)
    dtype = "bf16" if family(b).endswith("bf16") else "f32"
    size = a["rows"] * a["n"] * (2 if dtype == "bf16" else 4)
    base = next((x for x in baselines if x["_bytes"] == size), None)
    ours = seconds(b) / seconds(base) if base else None
    published = next((r for n_max, r in FHT_RATIO[dtype] if a["n"] <= n_max), None)
    return ours, published


def gpu_report(results_dir):
    """The markdown of the GPU section, or None when there is no CUDA benchmark JSON."""
    runs = load(results_dir)
    if not runs:
        return None
    ctx = next((c for c, _, _ in runs.values() if c.get("cuda_device") not in (None, "none")), None)
    out = ["## GPU kernels (CUDA backend)", ""]
    if ctx is None:
        errors = sorted({e.get("error_message", "?") for _, _, errs in runs.values() for e in errs})
        out.append("No GPU figures: every benchmark was skipped (" + "; ".join(errors) + ").")
        return "\n".join(out) + "\n"
    out.append(f"Device: {ctx.get('cuda_device')} (sm_{ctx.get('cuda_compute_capability', '?').replace('.', '')}, "
               f"{ctx.get('cuda_sm_count', '?')} SMs, {ctx.get('cuda_sm_clock_mhz', '?')} MHz, "
               f"L2 {ctx.get('cuda_l2_mib', '?')} MiB, {ctx.get('cuda_memory_gib', '?')} GiB), "
               f"CUDA runtime {ctx.get('cuda_runtime_version', '?')}, driver {ctx.get('cuda_driver_version', '?')}.")
    out.append("")
    out.append("Limits measured in the same run (best of 10, cold L2): "
               f"device-to-device copy {ctx.get('probe_copy_d2d_GBps', '-')} GB/s (read + write), "
               f"fp32 FMA {ctx.get('probe_fp32_fma_TFLOPs', '-')} TFLOP/s, "
               f"fp64 FMA {ctx.get('probe_fp64_fma_TFLOPs', '-')} TFLOP/s, "
               f"cuBLAS bf16 GEMM 8192^3 {ctx.get('probe_bf16_gemm_cublas_TFLOPs', '-')} TFLOP/s.")
    out.append("")
    out += ["| kernel | shape | time | TFLOP/s | GB/s | of peak | of copy | published anchor |",
            "|---|---|---:|---:|---:|---:|---:|---|"]
    baselines = []
    for _, rows, _ in runs.values():
        for b in rows:
            if family(b) == "BM_cuda_hadamard_memcpy_baseline":
                a = args_of(b)
                b["_bytes"] = a["rows"] * a["n"] * a["elem_bytes"]
                baselines.append(b)
    for stem, (_, rows, _) in runs.items():
        for b in rows:
            fam = family(b)
            if fam not in FAMILIES:
                continue
            kernel, key = FAMILIES[fam]
            anchor = ANCHORS.get(key) if key else None
            peak = pct(b.get("of_peak"))
            if b.get("of_peak") is not None and b.get("label", "").startswith("of_peak: "):
                peak += " " + b["label"][len("of_peak: "):]
            if anchor is None:
                anchor_str = "-"
            elif key == "hadamard":
                ours, published = hadamard_ratio(b, baselines)
                anchor_str = (f"{num(ours, '.2f')}x memcpy here; fast-hadamard-transform "
                              f"{num(published, '.1f')}x ({anchor['device']})")
            elif key == "memory_bound":
                anchor_str = "copy roofline (no published figure)"
            elif "short" in anchor:
                anchor_str = anchor["short"]
            elif anchor["value"] is None:
                anchor_str = "none published (DeepGEMM FP8 tensor-core kernel)"
            else:
                anchor_str = f"{anchor['value']:g} {anchor['unit']} ({anchor['device']})"
            if fam in TARGETS:
                anchor_str += "; " + TARGETS[fam]
            out.append(f"| {kernel} | {shape_str(b)} | {time_str(seconds(b))} | {num(b.get('TFLOP/s'), '.2f')} | "
                       f"{num(b.get('GB/s'), '.0f')} | {peak} | {pct(b.get('of_copy'))} | {anchor_str} |")
    out += ["", "Anchors and their sources:", ""]
    for key, a in ANCHORS.items():
        value = "-" if a["value"] is None else f"{a['value']:g} {a['unit']}"
        out.append(f"- `{key}`: {value} on {a['device']}: {a['what']}. Source: {a['source']}.")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tools/bench_report_cuda.py RESULTS_DIR")
    report = gpu_report(sys.argv[1])
    if report is None:
        sys.exit(f"no bench_cuda_*.json in {sys.argv[1]}")
    print(report)


if __name__ == "__main__":
    main()
