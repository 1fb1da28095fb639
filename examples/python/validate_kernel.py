#!/usr/bin/env python3
"""Validate your own kernel against dsa, on DeepSeek-V3.2 shapes.

"my_sparse_mla" and "my_indexer_scores" below stand in for a kernel of yours (Triton, TileLang,
CuTe DSL, CUDA): they are written in plain PyTorch (or NumPy where torch is not installed). The
script runs them and dsa on the same inputs, prints the largest errors against the tolerances
of dsa's golden data (../shared/golden/README.md, docs/validation.md), PASS/FAIL, and the time
of each.

    python examples/python/validate_kernel.py                 # decode: 4 tokens, 8192 keys
    python examples/python/validate_kernel.py --tokens 64 --threads 2 --numpy
"""

import argparse
import sys
import time

import numpy as np

import dsa

# V3.2: 128 heads, d_qk = 576 (512 latent + 64 rope), d_v = 512, top-k 2048; indexer 64 heads x 128.
HEADS, D_QK, D_V, TOPK = 128, 576, 512, 2048
INDEX_HEADS, INDEX_DIM = 64, 128
# Tolerances of the golden sparse_mla and indexer groups.
TOL_OUT, TOL_LSE, TOL_INDEX_REL = 2e-3, 1e-4, 1e-5


# ---- "your kernels" ---------------------------------------------------------------------------------

def my_sparse_mla_torch(torch, q, kv, indices, scale):
    """Sparse MLA attention in plain torch: q [s, h, 576] bf16, kv [n, 576] bf16, indices [s, k]."""
    valid = (indices >= 0) & (indices < kv.shape[0])
    rows = kv[indices.clamp(0, kv.shape[0] - 1).long()].float()            # [s, k, 576]
    logits = torch.einsum("shd,skd->shk", q.float(), rows) * scale
    logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)                                  # [s, h]
    p = torch.exp(logits - lse[..., None]).nan_to_num(0.0)
    out = torch.einsum("shk,skd->shd", p, rows[..., :D_V])
    return out, lse


def my_sparse_mla_numpy(q, kv, indices, scale):
    valid = (indices >= 0) & (indices < kv.shape[0])
    rows = kv[np.clip(indices, 0, kv.shape[0] - 1)].astype(np.float32)
    logits = np.einsum("shd,skd->shk", q.astype(np.float32), rows) * np.float32(scale)
    logits = np.where(valid[:, None, :], logits, -np.inf)
    mx = logits.max(-1, keepdims=True)
    e = np.exp(logits - mx)
    lse = (mx + np.log(e.sum(-1, keepdims=True)))[..., 0]
    out = np.einsum("shk,skd->shd", e / e.sum(-1, keepdims=True), rows[..., :D_V])
    return out, lse


def my_indexer_torch(torch, q, w, k, k_scale):
    """I[t, s] = k_scale[s] * sum_h w[t, h] * relu(q[t, h] . k[s]), causal over the last rows."""
    m, n = q.shape[0], k.shape[0]
    dots = torch.einsum("thd,sd->ths", q.float(), k.float()).relu()
    scores = torch.einsum("th,ths->ts", w, dots) * k_scale[None, :]
    causal = torch.arange(n)[None, :] <= (n - m + torch.arange(m))[:, None]
    return scores.masked_fill(~causal, float("-inf"))


def my_indexer_numpy(q, w, k, k_scale):
    m, n = q.shape[0], k.shape[0]
    dots = np.maximum(np.einsum("thd,sd->ths", q, k), 0)
    scores = np.einsum("th,ths->ts", w, dots) * k_scale[None, :]
    causal = np.arange(n)[None, :] <= (n - m + np.arange(m))[:, None]
    return np.where(causal, scores, -np.inf)


# ---- the check --------------------------------------------------------------------------------------

def timed(f, reps):
    f()  # warm-up
    t0 = time.perf_counter()
    for _ in range(reps):
        r = f()
    return r, (time.perf_counter() - t0) / reps


def report(name, errors, t_mine, t_dsa):
    ok = all(e <= tol for _, e, tol in errors)
    print(f"{name}: {'PASS' if ok else 'FAIL'}")
    for what, e, tol in errors:
        print(f"  {what:34s} {e:.3e}  (tol {tol:.0e}){'' if e <= tol else '  EXCEEDS'}")
    print(f"  time: yours {t_mine * 1e3:8.2f} ms   dsa {t_dsa * 1e3:8.2f} ms")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=4, help="query tokens (decode batch)")
    ap.add_argument("--keys", type=int, default=8192, help="cached positions")
    ap.add_argument("--threads", type=int, default=0, help="dsa CPU threads (0: all)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--numpy", action="store_true", help="write 'your kernel' in NumPy even if torch is present")
    args = ap.parse_args()
    torch = None
    if not args.numpy:
        try:
            import torch
        except ImportError:
            print("torch not installed: 'your kernels' run in NumPy")
    s, n = args.tokens, args.keys
    k = min(TOPK, n)
    rng = np.random.default_rng(0)
    dsa.set_num_threads(args.threads)
    print(f"dsa {dsa.__version__}; {'torch ' + torch.__version__ if torch else 'numpy ' + np.__version__}; "
          f"s = {s}, n = {n}, heads = {HEADS}, top-k = {k}")

    # Inputs, as bf16 bit patterns (every framework sees the same values).
    def bf16(shape, scale=1.0):
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        return ((x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16).astype(np.uint16)

    def bf16_f32(bits):
        return (bits.astype(np.uint32) << 16).view(np.float32)

    q_bits, kv_bits = bf16((s, HEADS, D_QK)), bf16((n, D_QK))
    indices = np.sort(np.stack([rng.choice(n, k, replace=False) for _ in range(s)]), axis=1).astype(np.int32)
    indices[0, k // 2:] = -1  # a short row, as top-k pads it
    scale = D_QK ** -0.5

    ok = True
    # 1. Sparse MLA attention.
    if torch:
        q_t = torch.from_numpy(q_bits.astype(np.int16)).view(torch.bfloat16)
        kv_t = torch.from_numpy(kv_bits.astype(np.int16)).view(torch.bfloat16)
        idx_t = torch.from_numpy(indices)
        (mine_out, mine_lse), t_mine = timed(lambda: my_sparse_mla_torch(torch, q_t, kv_t, idx_t, scale), args.reps)
        (ref_out, ref_lse), t_dsa = timed(lambda: dsa.sparse_mla_attention(q_t, kv_t, idx_t, scale), args.reps)
        mine_out, mine_lse, ref_out, ref_lse = (a.numpy() for a in (mine_out, mine_lse, ref_out, ref_lse))
    else:
        qf, kvf = bf16_f32(q_bits), bf16_f32(kv_bits)
        (mine_out, mine_lse), t_mine = timed(lambda: my_sparse_mla_numpy(qf, kvf, indices, scale), args.reps)
        (ref_out, ref_lse), t_dsa = timed(lambda: dsa.sparse_mla_attention(q_bits, kv_bits, indices, scale),
                                          args.reps)
    ok &= report("sparse_mla_attention [s, 128, 576] x top-2048", [
        ("max |out - dsa|", float(np.max(np.abs(mine_out - ref_out))), TOL_OUT),
        ("max |lse - dsa|", float(np.max(np.abs(mine_lse - ref_lse))), TOL_LSE),
    ], t_mine, t_dsa)

    # 2. Lightning indexer scores on FP8 q and k.
    qi = dsa.act_quant(bf16_f32(bf16((s * INDEX_HEADS, INDEX_DIM))))[0].reshape(s, INDEX_HEADS, INDEX_DIM)
    ki, ks = dsa.act_quant(bf16_f32(bf16((n, INDEX_DIM))))
    ks = ks[:, 0].copy()
    w = (rng.standard_normal((s, INDEX_HEADS)) * INDEX_HEADS ** -0.5).astype(np.float32)
    # The value of every e4m3 code (dequantized with scale 1), to feed "your kernel" decoded inputs.
    values = dsa.act_dequant(np.arange(256, dtype=np.uint8).reshape(2, 128), np.ones((2, 1), np.float32)).reshape(-1)
    qf, kf = values[qi], values[ki]
    if torch:
        args_t = [torch.from_numpy(a) for a in (qf, w, kf, ks)]
        mine, t_mine = timed(lambda: my_indexer_torch(torch, *args_t), args.reps)
        mine = mine.numpy()
        f8 = getattr(torch, "float8_e4m3fn", torch.uint8)
        qi_t, ki_t = torch.from_numpy(qi).view(f8), torch.from_numpy(ki).view(f8)
        ref, t_dsa = timed(lambda: dsa.lightning_indexer_scores(qi_t, args_t[1], ki_t, args_t[3]), args.reps)
        ref = ref.numpy()
    else:
        mine, t_mine = timed(lambda: my_indexer_numpy(qf, w, kf, ks), args.reps)
        ref, t_dsa = timed(lambda: dsa.lightning_indexer_scores(qi, w, ki, ks), args.reps)
    fin = np.isfinite(ref)
    same_inf = bool(np.array_equal(np.isinf(mine), np.isinf(ref)))
    row_scale = np.max(np.where(fin, np.abs(ref), 0), axis=1, keepdims=True) + 1e-30
    rel = float(np.max(np.abs(np.where(fin, mine, 0) - np.where(fin, ref, 0)) / row_scale))
    ok &= report(f"lightning_indexer_scores [s, 64, 128] x {n} keys", [
        ("max |I - dsa| / max |row|", rel, TOL_INDEX_REL),
        ("-inf pattern mismatches", 0.0 if same_inf else 1.0, 0.0),
    ], t_mine, t_dsa)
    print("all checks PASS" if ok else "some checks FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
