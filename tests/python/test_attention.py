"""Sparse MLA attention (bf16 and FP8 rows, lse, probs) and sparse MHA attention against float64
NumPy references."""

import numpy as np
import pytest

import dsa
from conftest import as_bf16_array, as_bits, bf16_bits, bf16_float, bf16_ulp_diff


def mla_ref(q, kv, idx, scale, d_v):
    s, h, _ = q.shape
    n = kv.shape[0]
    out = np.zeros((s, h, d_v))
    lse = np.full((s, h), np.inf)
    probs = np.zeros((s, idx.shape[1]))
    for t in range(s):
        valid = [(e, j) for e, j in enumerate(idx[t]) if 0 <= j < n]
        if not valid:
            continue
        ent = np.array([e for e, _ in valid])
        rows = kv[[j for _, j in valid]].astype(np.float64)
        logits = scale * q[t].astype(np.float64) @ rows.T  # [h, used]
        mx = logits.max(1, keepdims=True)
        p = np.exp(logits - mx)
        z = p.sum(1, keepdims=True)
        p /= z
        out[t] = p @ rows[:, :d_v]
        lse[t] = (mx + np.log(z))[:, 0]
        np.add.at(probs[t], ent, p.sum(0))
    return out, lse, probs


def test_sparse_mla_bf16(rng):
    s, h, d, n, k = 4, 16, 576, 200, 64
    qb = bf16_bits((rng.standard_normal((s, h, d))).astype(np.float32))
    kvb = bf16_bits((rng.standard_normal((n, d))).astype(np.float32))
    idx = rng.integers(0, n, (s, k)).astype(np.int32)
    idx[1, 10:] = -1
    idx[2, :] = -1  # no valid entry: out 0, lse +inf
    idx[3, 5] = n + 7  # >= n: unused
    scale = d ** -0.5
    out, lse, probs = dsa.sparse_mla_attention(as_bf16_array(qb), as_bf16_array(kvb), idx, scale, return_probs=True)
    ro, rl, rp = mla_ref(bf16_float(qb), bf16_float(kvb), idx, scale, 512)
    assert out.dtype == np.float32 and out.shape == (s, h, 512) and lse.shape == (s, h) and probs.shape == (s, k)
    np.testing.assert_allclose(out, ro, atol=2e-3)
    assert np.array_equal(np.isinf(lse), np.isinf(rl))
    fin = np.isfinite(rl)
    np.testing.assert_allclose(lse[fin], rl[fin], atol=1e-4)
    assert np.all(lse[2] == np.inf) and np.all(out[2] == 0)
    np.testing.assert_allclose(probs, rp, atol=1e-5)
    out_b, lse_b = dsa.sparse_mla_attention(as_bf16_array(qb), as_bf16_array(kvb), idx, scale, out_dtype="bfloat16")
    np.testing.assert_array_equal(lse_b, lse)
    assert bf16_ulp_diff(as_bits(out_b), bf16_bits(out)).max() <= 1


def test_sparse_mla_fp8_rows_equal_unpacked_bf16(rng):
    s, h, n, k = 2, 8, 40, 16
    qb = as_bf16_array(bf16_bits(rng.standard_normal((s, h, 576)).astype(np.float32)))
    kv = as_bf16_array(bf16_bits(rng.standard_normal((n, 576)).astype(np.float32)))
    cache = dsa.kv_cache_fp8_pack(kv)
    idx = rng.integers(-1, n, (s, k)).astype(np.int32)
    o8, l8 = dsa.sparse_mla_attention(qb, cache, idx, 576 ** -0.5)
    # FP8 rows decode exactly to bf16 (power-of-two scales), so the bf16 path on the unpacked
    # rows is the same attention.
    ob, lb = dsa.sparse_mla_attention(qb, dsa.kv_cache_fp8_unpack(cache), idx, 576 ** -0.5)
    np.testing.assert_allclose(o8, ob, atol=1e-5)
    np.testing.assert_allclose(l8, lb, atol=1e-5)


def test_sparse_mla_num_splits_on_cpu(rng):
    qb = as_bf16_array(bf16_bits(rng.standard_normal((2, 4, 64)).astype(np.float32)))
    kv = as_bf16_array(bf16_bits(rng.standard_normal((30, 64)).astype(np.float32)))
    idx = rng.integers(0, 30, (2, 20)).astype(np.int32)
    o1, l1 = dsa.sparse_mla_attention(qb, kv, idx, 0.125, d_v=32)
    o4, l4 = dsa.sparse_mla_attention(qb, kv, idx, 0.125, d_v=32, num_splits=4)
    np.testing.assert_allclose(o4, o1, atol=1e-6)
    np.testing.assert_allclose(l4, l1, atol=1e-6)


def test_sparse_mha_fp32_rounding(rng):
    s, h, n, dn, dr, dv, k = 3, 4, 20, 32, 16, 24, 6
    q = bf16_bits(rng.standard_normal((s, h, dn + dr)).astype(np.float32))
    kn = bf16_bits(rng.standard_normal((n, h, dn)).astype(np.float32))
    kr = bf16_bits(rng.standard_normal((n, dr)).astype(np.float32))
    v = bf16_bits(rng.standard_normal((n, h, dv)).astype(np.float32))
    idx = rng.integers(-1, n, (s, k)).astype(np.int32)
    scale = (dn + dr) ** -0.5
    out, lse = dsa.sparse_mha_attention(*(as_bf16_array(a) for a in (q, kn, kr, v)), idx, scale, rounding="fp32",
                                        return_lse=True)
    qf, knf, krf, vf = (bf16_float(a).astype(np.float64) for a in (q, kn, kr, v))
    ref = np.zeros((s, h, dv))
    for t in range(s):
        js = [j for j in idx[t] if 0 <= j < n]
        for hh in range(h):
            keys = np.concatenate([knf[js, hh], krf[js]], axis=1)
            lg = scale * keys @ qf[t, hh]
            p = np.exp(lg - lg.max())
            p /= p.sum()
            ref[t, hh] = p @ vf[js, hh]
            np.testing.assert_allclose(lse[t, hh], lg.max() + np.log(np.exp(lg - lg.max()).sum()), atol=1e-4)
    np.testing.assert_allclose(bf16_float(as_bits(out)), ref, atol=2e-2, rtol=1e-2)


def test_sparse_mha_broadcast_heads(rng):
    # MQA: keys and values shared by every head (stride 0 over heads), as the absorbed decode.
    s, h, n, d = 2, 4, 10, 32
    q = as_bf16_array(bf16_bits(rng.standard_normal((s, h, d + 8)).astype(np.float32)))
    kn1 = as_bf16_array(bf16_bits(rng.standard_normal((n, 1, d)).astype(np.float32)))
    kr = as_bf16_array(bf16_bits(rng.standard_normal((n, 8)).astype(np.float32)))
    idx = rng.integers(0, n, (s, 5)).astype(np.int32)
    kn = np.broadcast_to(kn1, (n, h, d))
    out_b = dsa.sparse_mha_attention(q, kn, kr, kn, idx, 0.1)
    full = np.ascontiguousarray(kn)
    out_f = dsa.sparse_mha_attention(q, full, kr, full, idx, 0.1)
    np.testing.assert_array_equal(as_bits(out_b), as_bits(out_f))
