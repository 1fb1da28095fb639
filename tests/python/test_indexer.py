"""Lightning indexer (plain, paged, backward), top-k (plain, paged), gather_rows and the indexer
KL losses against NumPy references."""

import numpy as np
import pytest

import dsa
from conftest import e4m3_decode, random_e4m3


def indexer_ref(q, w, k, k_scale, ranges):
    """I[t,s] = k_scale[s] * sum_h w[t,h] relu(q[t,h].k[s]) in float64; -inf outside ranges."""
    dots = np.einsum("thd,sd->ths", q.astype(np.float64), k.astype(np.float64))
    s = np.einsum("th,ths->ts", w.astype(np.float64), np.maximum(dots, 0)) * k_scale[None, :]
    cols = np.arange(k.shape[0])[None, :]
    inside = (cols >= ranges[:, :1]) & (cols < ranges[:, 1:])
    return np.where(inside, s, -np.inf)


def check_scores(got, ref):
    assert np.array_equal(np.isinf(got), np.isinf(ref))
    fin = np.isfinite(ref)
    scale = np.max(np.where(fin, np.abs(ref), 0), axis=1, keepdims=True) + 1e-30
    diff = np.abs(got[fin] - ref[fin])
    assert np.all(diff <= 1e-5 * np.broadcast_to(scale, ref.shape)[fin])


def test_indexer_fp8_causal_default(rng):
    m, h, d, n = 5, 8, 128, 12
    q, k = random_e4m3(rng, (m, h, d)), random_e4m3(rng, (n, d))
    w = rng.standard_normal((m, h)).astype(np.float32)
    ks = rng.random(n).astype(np.float32) + 0.5
    got = dsa.lightning_indexer_scores(q, w, k, ks)
    ranges = dsa.causal_ranges(m, n)
    np.testing.assert_array_equal(ranges, [[0, 8], [0, 9], [0, 10], [0, 11], [0, 12]])
    check_scores(got, indexer_ref(e4m3_decode(q), w, e4m3_decode(k), ks, ranges))


def test_indexer_f32_explicit_ranges(rng):
    m, h, d, n = 4, 3, 64, 9
    q = rng.standard_normal((m, h, d)).astype(np.float32)
    k = rng.standard_normal((n, d)).astype(np.float32)
    w = rng.standard_normal((m, h)).astype(np.float32)
    ranges = np.array([[0, 9], [2, 5], [3, 3], [8, 9]], np.int32)
    got = dsa.lightning_indexer_scores(q, w, k, None, ranges)
    check_scores(got, indexer_ref(q, w, k, np.ones(n), ranges))


def test_indexer_paged_equals_plain(rng):
    m, h, n, bs = 3, 4, 20, 4
    q, k = random_e4m3(rng, (m, h, 128)), random_e4m3(rng, (n, 128))
    w = rng.standard_normal((m, h)).astype(np.float32)
    ks = rng.random(n).astype(np.float32)
    # Logical blocks of 4 positions scattered over a cache of 8 blocks, a different table per row.
    tables = np.stack([rng.permutation(8)[:5] for _ in range(m)]).astype(np.int32)
    ranges = np.array([[0, 20], [0, 13], [5, 17]], np.int32)
    plain = dsa.lightning_indexer_scores(q, w, k, ks, ranges)
    for t in range(m):
        slots = (tables[t][np.arange(n) // bs] * bs + np.arange(n) % bs).astype(np.int32)
        cache = dsa.indexer_cache_pack(k, ks, slots=slots, out=np.zeros((32, 132), np.uint8))
        paged = dsa.lightning_indexer_scores_paged(q[t:t + 1], w[t:t + 1], cache, tables[t:t + 1], bs,
                                                   ranges[t:t + 1], n=n)
        np.testing.assert_array_equal(paged, plain[t:t + 1])


def test_indexer_backward(rng):
    m, h, d, n = 4, 3, 16, 6
    q = rng.standard_normal((m, h, d)).astype(np.float32)
    k = rng.standard_normal((n, d)).astype(np.float32)
    w = rng.standard_normal((m, h)).astype(np.float32)
    ks = rng.random(n).astype(np.float32) + 0.5
    ranges = dsa.causal_ranges(m, n)
    g = rng.standard_normal((m, n)).astype(np.float32)
    gq, gw, gk = dsa.lightning_indexer_backward(q, w, k, ks, ranges, g)
    cols = np.arange(n)[None, :]
    g64 = np.where((cols >= ranges[:, :1]) & (cols < ranges[:, 1:]), g.astype(np.float64), 0) * ks[None, :]
    dots = np.einsum("thd,sd->ths", q.astype(np.float64), k.astype(np.float64))
    act = (dots > 0).astype(np.float64)
    rq = np.einsum("ts,th,ths,sd->thd", g64, w, act, k)
    rw = np.einsum("ts,ths->th", g64, np.maximum(dots, 0))
    rk = np.einsum("ts,th,ths,thd->sd", g64, w, act, q)
    for got, ref in ((gq, rq), (gw, rw), (gk, rk)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    gq2, gw2, gk2 = dsa.lightning_indexer_backward(q, w, k, ks, ranges, g, need_q=False, need_k=False)
    assert gq2 is None and gk2 is None
    np.testing.assert_array_equal(gw2, gw)


def topk_ref(scores, ranges, k):
    """torch.topk's order: NaN above every number, -inf below; ties to the smaller index."""
    out = np.full((scores.shape[0], k), -1, np.int32)
    for t, (b, e) in enumerate(ranges):
        cand = list(range(b, e))
        cand.sort(key=lambda j: (0, 0.0, j) if np.isnan(scores[t, j]) else (1, -scores[t, j], j))
        sel = sorted(cand[:k])
        out[t, :len(sel)] = sel
    return out


def test_topk_plain(rng):
    s = rng.standard_normal((6, 50)).astype(np.float32)
    s[0] = rng.random(50)
    s[0, 10:20] = 1.5  # ties: the smaller indices win
    s[1, :] = -np.inf
    s[1, 3] = 0.0
    s[2, 5] = np.nan
    s[3, 7] = np.inf
    ranges = np.array([[0, 50], [0, 50], [0, 50], [0, 50], [10, 12], [0, 0]], np.int32)
    got = dsa.topk_indices(s, 8, ranges)
    np.testing.assert_array_equal(got, topk_ref(s, ranges, 8))
    np.testing.assert_array_equal(got[0], np.arange(10, 18))
    assert 5 in got[2]  # the NaN ranks first
    np.testing.assert_array_equal(got[1], np.arange(8))  # -inf is selectable: the 0.0, then the first -inf
    np.testing.assert_array_equal(dsa.topk_indices(s, 8), topk_ref(s, [(0, 50)] * 6, 8))


def test_topk_paged(rng):
    s = rng.standard_normal((2, 16)).astype(np.float32)
    table = np.array([[3, 1, 0, 2], [0, 1, 2, 3]], np.int32)
    got = dsa.topk_indices_paged(s, 5, table, 4)
    logical = topk_ref(s, [(0, 16)] * 2, 5)
    want = np.where(logical < 0, -1, table[np.arange(2)[:, None], logical // 4] * 4 + logical % 4)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int32, np.uint16])
def test_gather_rows(rng, dtype):
    src = (rng.random((10, 7)) * 100).astype(dtype)
    idx = np.array([[3, -1, 9], [0, 0, 5]], np.int32)
    dst = dsa.gather_rows(src, idx)
    assert dst.shape == (2, 3, 7) and dst.dtype == src.dtype
    want = np.where((idx >= 0)[:, :, None], src[np.maximum(idx, 0)], 0)
    np.testing.assert_array_equal(dst, want)
    with pytest.raises(dsa.Error, match=r"indices\(1, 2\) = 10"):
        dsa.gather_rows(src, np.array([[0, 1, 2], [3, 4, 10]], np.int32))


def kl_ref(attn, index, keysets):
    """Loss and gradient of sum_t KL(p_t || softmax(I_t restricted to the key set))."""
    m, _, n = attn.shape
    loss, grad = 0.0, np.zeros((m, n))
    for t in range(m):
        keys = keysets[t]
        if len(keys) == 0:
            continue
        raw = attn[t][:, keys].astype(np.float64).sum(0)
        p = raw / raw.sum() if raw.sum() > 0 else np.zeros_like(raw)
        z = index[t, keys].astype(np.float64)
        sm = np.exp(z - z.max())
        sm /= sm.sum()
        nz = p > 0
        loss += np.sum(p[nz] * (np.log(p[nz]) - np.log(sm[nz])))
        np.add.at(grad[t], keys, sm * p.sum() - p)
    return loss, grad


def causal_attn(rng, m, h):
    a = rng.random((m, h, m))
    a = np.where(np.tril(np.ones((m, m)))[:, None, :].transpose(0, 1, 2) > 0, a, 0)
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)


def test_kl_dense(rng):
    m, h = 12, 4
    attn = causal_attn(rng, m, h)
    index = rng.standard_normal((m, m)).astype(np.float32)
    index[np.triu_indices(m, 1)] = -np.inf
    loss, grad = dsa.indexer_kl_loss_dense(attn, index)
    rl, rg = kl_ref(attn, index, [list(range(t + 1)) for t in range(m)])
    assert loss.shape == (1,)
    np.testing.assert_allclose(loss[0], rl, rtol=1e-4)
    np.testing.assert_allclose(grad, rg, atol=1e-5)


def test_kl_sparse(rng):
    m, h, k = 12, 4, 5
    attn = causal_attn(rng, m, h)
    index = rng.standard_normal((m, m)).astype(np.float32)
    topk = np.full((m, k), -1, np.int32)
    for t in range(m):
        sel = np.sort(rng.permutation(t + 1)[:k])
        topk[t, :len(sel)] = sel
    loss, grad = dsa.indexer_kl_loss_sparse(attn, index, topk)
    rl, rg = kl_ref(attn, index, [[j for j in row if j >= 0] for row in topk])
    np.testing.assert_allclose(loss[0], rl, rtol=1e-4)
    np.testing.assert_allclose(grad, rg, atol=1e-5)
