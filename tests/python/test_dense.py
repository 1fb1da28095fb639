"""MoE routing and combine and the dense building blocks against NumPy references."""

import math

import numpy as np
import pytest

import dsa
from conftest import (act_quant_ref, as_bf16_array, as_bits, bf16_bits, bf16_float, bf16_ulp_diff, e4m3_decode,
                      weight_quant_ref)


def route_ref(logits, bias, top_k, n_group, topk_group, scale):
    s = (1.0 / (1.0 + np.exp(-logits.astype(np.float64))))
    b = s + (bias if bias is not None else 0)
    t, e = logits.shape
    gs = e // n_group
    ids = np.zeros((t, top_k), np.int32)
    w = np.zeros((t, top_k))
    for i in range(t):
        groups = b[i].reshape(n_group, gs)
        gscore = np.sort(groups, axis=1)[:, -2:].sum(1) if bias is not None else groups.max(1)
        keep = sorted(range(n_group), key=lambda g: (-gscore[g], g))[:topk_group]
        cand = [x for g in keep for x in range(g * gs, (g + 1) * gs)]
        cand.sort(key=lambda x: (-b[i, x], x))
        sel = sorted(cand[:top_k])
        ids[i] = sel
        w[i] = s[i, sel] / s[i, sel].sum() * scale
    return ids, w


@pytest.mark.parametrize("with_bias", [True, False])
def test_moe_route(rng, with_bias):
    logits = rng.standard_normal((9, 16)).astype(np.float32)
    bias = (rng.standard_normal(16) * 0.1).astype(np.float32) if with_bias else None
    ids, w = dsa.moe_route(logits, bias, top_k=4, n_group=4, topk_group=2, routed_scaling_factor=2.5)
    rids, rw = route_ref(logits, bias, 4, 4, 2, 2.5)
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_allclose(w, rw, rtol=1e-5)


def test_moe_combine(rng):
    t, k, d, r = 3, 2, 64, 5
    e = bf16_bits(rng.standard_normal((r, d)).astype(np.float32))
    sh = bf16_bits(rng.standard_normal((t, d)).astype(np.float32))
    rows = np.array([[0, 4], [2, -1], [1, 3]], np.int32)
    w = rng.random((t, k)).astype(np.float32)
    y = dsa.moe_combine(as_bf16_array(e), rows, w, as_bf16_array(sh))
    ef, shf = bf16_float(e), bf16_float(sh)
    ref = shf.astype(np.float64).copy()
    for i in range(t):
        for j in range(k):
            if rows[i, j] >= 0:
                ref[i] += w[i, j] * ef[rows[i, j]]
    assert bf16_ulp_diff(as_bits(y), bf16_bits(ref.astype(np.float32))).max() <= 1


@pytest.mark.parametrize("xdt", ["float32", "bfloat16"])
def test_linear(rng, xdt):
    x = rng.standard_normal((5, 96)).astype(np.float32)
    w = rng.standard_normal((40, 96)).astype(np.float32)
    if xdt == "bfloat16":
        xb = bf16_bits(x)
        x, xa = bf16_float(xb), as_bf16_array(xb)
    else:
        xa = x
    y = dsa.linear(xa, w, out_dtype="float32")
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    bound = 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T)
    assert np.all(np.abs(y - ref) <= bound)
    yd = dsa.linear(xa, w)
    assert A_name(yd) == xdt


def A_name(a):
    return "float32" if a.dtype == np.float32 else "bfloat16"


def test_fp8_linear_exact_order(rng):
    t, i, o = 4, 256, 130
    x = rng.standard_normal((t, i)).astype(np.float32)
    wq, ws = weight_quant_ref((rng.standard_normal((o, i)) * 0.05).astype(np.float32))
    y = dsa.fp8_linear(x, wq, ws, out_dtype="float32")
    xq, xs = act_quant_ref(x)
    xd, wd = e4m3_decode(xq), e4m3_decode(wq)
    acc = np.zeros((t, o), np.float32)
    for kb in range(i // 128):
        sl = slice(kb * 128, (kb + 1) * 128)
        dot = (xd[:, sl] @ wd[:, sl].T).astype(np.float32)  # exact in float64, rounded once
        sc = (xs[:, kb:kb + 1] * ws[np.arange(o) // 128, kb][None, :]).astype(np.float32)
        acc = (acc + (dot * sc).astype(np.float32)).astype(np.float32)
    np.testing.assert_allclose(y, acc, rtol=2e-6, atol=1e-6 * np.abs(acc).max())
    yb = dsa.fp8_linear(x, wq, ws)
    assert bf16_ulp_diff(as_bits(yb), bf16_bits(y)).max() <= 1


def test_rms_norm_and_in_place(rng):
    x = bf16_bits((rng.standard_normal((6, 256)) * 2).astype(np.float32))
    wt = rng.random(256).astype(np.float32)
    y = dsa.rms_norm(as_bf16_array(x), wt)
    xf = bf16_float(x).astype(np.float64)
    ref = wt * xf / np.sqrt((xf ** 2).mean(1, keepdims=True) + 1e-6)
    assert bf16_ulp_diff(as_bits(y), bf16_bits(ref.astype(np.float32))).max() <= 1
    xi = as_bf16_array(x.copy())
    r = dsa.rms_norm(xi, wt, out=xi)
    assert r is xi
    np.testing.assert_array_equal(as_bits(xi), as_bits(y))


def test_add_rms_norm_updates_residual(rng):
    x = bf16_bits(rng.standard_normal((3, 128)).astype(np.float32))
    res = bf16_bits(rng.standard_normal((3, 128)).astype(np.float32))
    wt = rng.random(128).astype(np.float32)
    resa = as_bf16_array(res.copy())
    y = dsa.add_rms_norm(as_bf16_array(x), resa, wt)
    h = (bf16_float(x) + bf16_float(res)).astype(np.float32)
    np.testing.assert_array_equal(as_bits(resa), bf16_bits(h))
    ref = wt * h.astype(np.float64) / np.sqrt((h.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-6)
    assert bf16_ulp_diff(as_bits(y), bf16_bits(ref.astype(np.float32))).max() <= 1


def test_layer_norm(rng):
    x = (rng.standard_normal((4, 128)) * 3 + 1).astype(np.float32)
    wt, b = rng.random(128).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    y = dsa.layer_norm(x, wt, b)
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-6) * wt + b
    assert bf16_ulp_diff(as_bits(y), bf16_bits(ref.astype(np.float32))).max() <= 1


def rope_ref(x, pos, layout, base=10000.0):
    """docs/numerics (dsa/numerics/rope.hpp): f_j = fl32(1 / fl32(base^fl32(2j / d))), angle =
    fl32(fl32(pos) * f_j), cos and sin in double rounded to fp32, the rotation in double. Scalar
    Python math (glibc's pow, cos and sin) rather than NumPy's vectorised ones, whose float64
    results may differ in the last bits between builds and flip an fp32 rounding (an angle of 4000
    moves by 2^-12 then, many bf16 ulps of a small output)."""
    t, h, d = x.shape
    f32 = np.float32
    f = [f32(1) / f32(math.pow(base, float(f32(2 * j) / f32(d)))) for j in range(d // 2)]
    ang = [[float(f32(p) * fj) for fj in f] for p in pos.tolist()]
    c = np.array([[float(f32(math.cos(a))) for a in row] for row in ang])[:, None, :]
    s = np.array([[float(f32(math.sin(a))) for a in row] for row in ang])[:, None, :]
    y = x.astype(np.float64).copy()
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        y[..., 0::2], y[..., 1::2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., :d // 2], x[..., d // 2:]
        y[..., :d // 2], y[..., d // 2:] = a * c - b * s, a * s + b * c
    return y


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rope_in_place_on_a_slice(rng, layout):
    t, h, nope, rope = 5, 3, 32, 64
    full = bf16_bits(rng.standard_normal((t, h, nope + rope)).astype(np.float32))
    arr = as_bf16_array(full.copy())
    pos = np.array([0, 1, 7, 100, 4000], np.int32)
    r = dsa.rope_apply(arr[:, :, nope:], pos, layout=layout)
    assert r.base is not None
    np.testing.assert_array_equal(as_bits(arr)[:, :, :nope], full[:, :, :nope])
    ref = rope_ref(bf16_float(full[:, :, nope:]), pos, layout)
    assert bf16_ulp_diff(as_bits(arr)[:, :, nope:], bf16_bits(ref.astype(np.float32))).max() <= 1
    with pytest.raises(dsa.Error, match="positions"):
        dsa.rope_apply(arr[:, :, nope:], np.array([0, 1, 2, 3, 4096], np.int32), layout=layout)


def test_swiglu(rng):
    g = bf16_bits(rng.standard_normal((3, 64)).astype(np.float32))
    u = bf16_bits(rng.standard_normal((3, 64)).astype(np.float32))
    y = dsa.swiglu(as_bf16_array(g), as_bf16_array(u))
    gf, uf = bf16_float(g).astype(np.float64), bf16_float(u).astype(np.float64)
    ref = gf / (1 + np.exp(-gf)) * uf
    assert bf16_ulp_diff(as_bits(y), bf16_bits(ref.astype(np.float32))).max() <= 1


def test_indexer_weights(rng):
    proj = rng.standard_normal((4, 8)).astype(np.float32)
    qs = rng.random((4, 8)).astype(np.float32)
    w = dsa.lightning_indexer_weights(proj, qs, 8 ** -0.5, 128 ** -0.5)
    f = np.float32
    ref = ((proj * f(8 ** -0.5)).astype(f) * qs).astype(f) * f(128 ** -0.5)
    np.testing.assert_array_equal(w, ref.astype(f))
