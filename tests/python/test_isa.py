"""The CPU kernels the loader picks for this CPU (cmake/dsaCpuDispatch.cmake): dsa.cpu_isa names
them, and every level this CPU runs gives the same bits. GLIBC_TUNABLES=glibc.cpu.hwcaps=-<feature>
hides a feature from the loader's choice, so one machine runs each level's library in a child
process."""

import os
import platform
import subprocess
import sys

import pytest

import dsa

LEVELS = ("x86-64", "x86-64-v3", "x86-64-v4")

# Ops over every SIMD kernel family on fixed random inputs: the sha256 of their outputs' bytes, in
# two groups. `same`: outputs the contract makes the same bits on every target (docs/decisions.md).
# `fma`: those whose products are not exact in fp32 -- the fp32-input indexer scores and sparse MLA
# attention's P.V -- fused where the target has FMA (x86-64-v3 and up) and rounded in two steps where
# it has none, so the same bits on every level with FMA ("FMA contraction").
CHILD = r"""
import hashlib
import ml_dtypes
import numpy as np
import dsa
rng = np.random.default_rng(7)
bf16, e4m3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn
same, fma = hashlib.sha256(), hashlib.sha256()
def add(h, *arrays):
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
x = rng.standard_normal((96, 128), dtype=np.float32)
add(same, dsa.hadamard_transform(x.astype(bf16), 128 ** -0.5), dsa.hadamard_transform(x))
add(same, *dsa.act_quant(x.astype(bf16)), *dsa.weight_quant(rng.standard_normal((256, 256), dtype=np.float32)))
q = rng.standard_normal((8, 16, 128), dtype=np.float32)
k = rng.standard_normal((300, 128), dtype=np.float32)
w = rng.standard_normal((8, 16), dtype=np.float32)
scores8 = dsa.lightning_indexer_scores(q.astype(e4m3), w, k.astype(e4m3))
add(same, scores8, dsa.topk_indices(scores8, 64))
add(fma, dsa.lightning_indexer_scores(q, w, k))
qa = (0.1 * rng.standard_normal((4, 32, 576), dtype=np.float32)).astype(bf16)
kv = (0.1 * rng.standard_normal((500, 576), dtype=np.float32)).astype(bf16)
idx = rng.integers(-1, 500, size=(4, 96), dtype=np.int32)
out, lse = dsa.sparse_mla_attention(qa, kv, idx, 576 ** -0.5)
add(same, lse)
add(fma, out)
add(same, dsa.linear(x.astype(bf16), rng.standard_normal((64, 128), dtype=np.float32).astype(bf16)))
print(dsa.cpu_isa, same.hexdigest(), fma.hexdigest())
"""


def dispatched():
    """Whether this package carries the per-level libraries (x86-64 Linux, DSA_CPU_DISPATCH)."""
    return os.path.isdir(os.path.join(os.path.dirname(dsa.__file__), "glibc-hwcaps"))


def cpu_best_level():
    """The best level this CPU has, from /proc/cpuinfo's flags (independently of glibc)."""
    with open("/proc/cpuinfo") as f:
        flags = next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    v3 = {"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"} <= flags
    v4 = v3 and {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= flags
    return "x86-64-v4" if v4 else "x86-64-v3" if v3 else "x86-64"


def run_child(mask):
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    if mask:
        env["GLIBC_TUNABLES"] = "glibc.cpu.hwcaps=" + mask
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, capture_output=True, text=True)
    isa, same, fma = out.stdout.split()
    return isa, same, fma


def test_cpu_isa_names_a_level():
    assert isinstance(dsa.cpu_isa, str) and dsa.cpu_isa
    if platform.machine() in ("x86_64", "AMD64"):
        assert dsa.cpu_isa.split("+")[0] in LEVELS


@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                    reason="the per-level libraries are built for x86-64 Linux")
def test_each_level_the_cpu_runs_gives_the_same_bits():
    pytest.importorskip("ml_dtypes")
    if not dispatched():
        pytest.skip("this build has no per-level CPU libraries (DSA_CPU_DISPATCH=OFF)")
    best = cpu_best_level()
    assert dsa.cpu_isa == best
    results = {}
    # -AVX512F leaves at most x86-64-v3, -AVX2 at most x86-64 (no x86-64-v2 library is built).
    for mask, at_most in (("", "x86-64-v4"), ("-AVX512F", "x86-64-v3"), ("-AVX2", "x86-64")):
        isa, same, fma = run_child(mask)
        assert isa == min(best, at_most, key=LEVELS.index), mask
        results[isa] = (same, fma)
    assert len({same for same, _ in results.values()}) == 1, results
    assert len({fma for isa, (_, fma) in results.items() if isa != "x86-64"}) <= 1, results
