"""CUDA arrays: a build with DSA_ENABLE_CUDA=ON runs the same functions on dsa::cuda_backend.

Without a GPU (CI): the build reports itself (built_with_cuda, cuda_device_count,
cuda_available), and every check dsa makes before it touches the device is exercised through
objects exposing ``__cuda_array_interface__`` over a made-up address, which nothing dereferences
(device, dtype, layout and read-only errors, the mixed-device error, the "no device" error, the
refusal to allocate in a framework dsa does not know).

With a GPU and PyTorch (``torch.cuda.is_available()``): every op on CUDA tensors against the same
op on CPU tensors, under the CPU-parity bounds of docs/cuda.md (bit-identical where the table says
so; inputs are exactly representable where an op is bit-identical only on exact arithmetic), out=
written in place on the device, ``stream=`` and torch's current stream honoured, mixed devices
refused, ``__cuda_array_interface__`` producers, and cuBLAS from several Python threads.
"""

import os
import threading

import numpy as np
import pytest

import dsa
from conftest import DATA, bf16_bits, random_e4m3

# ---- the build, without a GPU ------------------------------------------------------------------


def test_build_reports_its_cuda_support():
    assert dsa.built_with_cuda() is bool(dsa.has_cuda)
    n = dsa.cuda_device_count()
    assert isinstance(n, int) and n >= 0
    if not dsa.built_with_cuda():
        assert n == 0
    assert dsa.cuda_available() == (dsa.built_with_cuda() and n > 0)
    # CI sets this for the build it made, so that a CUDA build that silently fell back to the CPU
    # binding (or the reverse) fails here.
    expect = os.environ.get("DSA_EXPECT_CUDA_BUILD")
    if expect is not None:
        assert dsa.built_with_cuda() == (expect == "1")


def test_stream_is_for_cuda_arrays():
    x = np.zeros((2, 128), np.float32)
    with pytest.raises(dsa.Error, match=r"dsa::hadamard_transform: stream = 0; expected None: the arrays are in CPU"):
        dsa.hadamard_transform(x, stream=0)
    with pytest.raises(dsa.Error, match="stream"):
        dsa.act_quant(x, stream=7)


class FakeCudaArray:
    """``__cuda_array_interface__`` (version 3) over an address no one owns: dsa's checks before
    a launch read only the interface, never the memory."""

    ADDRESS = 0x7F00_0000_0000

    def __init__(self, shape, typestr="<f4", readonly=False, strides=None, stream=None):
        self.shape = tuple(shape)
        d = {"shape": self.shape, "typestr": typestr, "data": (self.ADDRESS, readonly), "version": 3,
             "strides": strides}
        if stream is not None:
            d["stream"] = stream
        self.__cuda_array_interface__ = d


def test_cuda_array_interface_in_a_cpu_only_build():
    if dsa.built_with_cuda():
        pytest.skip("a build without CUDA")
    x, y = FakeCudaArray((2, 128)), FakeCudaArray((2, 128))
    with pytest.raises(dsa.Error, match=r"x\.device = cuda:0; expected cpu memory \(this build .* CPU backend only"):
        dsa.hadamard_transform(x, out=y)
    with pytest.raises(dsa.Error, match=r"y\.device = cuda:0; expected cpu memory"):
        dsa.hadamard_transform(np.zeros((2, 128), np.float32), out=y)


@pytest.fixture
def cuda_build():
    if not dsa.built_with_cuda():
        pytest.skip("needs a build with DSA_ENABLE_CUDA=ON")


def test_mixed_devices_are_refused_before_any_launch(cuda_build):
    x = FakeCudaArray((2, 128))
    with pytest.raises(dsa.Error, match=r"dsa::hadamard_transform: y\.device = cpu; expected cuda:0 memory, like "
                                        r"the call's first array"):
        dsa.hadamard_transform(x, out=np.zeros((2, 128), np.float32))
    with pytest.raises(dsa.Error, match=r"y\.device = cuda:0; expected cpu memory, like the call's first array"):
        dsa.hadamard_transform(np.zeros((2, 128), np.float32), out=FakeCudaArray((2, 128)))
    with pytest.raises(dsa.Error, match=r"weight\.device = cpu; expected cuda:0"):
        dsa.rms_norm(FakeCudaArray((2, 64)), np.ones(64, np.float32), out=FakeCudaArray((2, 64), "<u2"))


def test_dlpack_device_decides_the_backend(cuda_build):
    # torch reports its device type as an IntEnum member: it must read as CUDA.
    import enum

    class DLDeviceType(enum.IntEnum):
        kDLCPU = 1
        kDLCUDA = 2

    class WithDevice(FakeCudaArray):
        def __dlpack_device__(self):
            return (DLDeviceType.kDLCUDA, 0)

    with pytest.raises(dsa.Error, match=r"y\.device = cpu; expected cuda:0 memory"):
        dsa.hadamard_transform(WithDevice((2, 128)), out=np.zeros((2, 128), np.float32))


def test_cuda_array_interface_is_checked_like_any_array(cuda_build):
    y = FakeCudaArray((2, 128))
    with pytest.raises(dsa.Error, match=r"x\.dtype = float64; expected float32 or bfloat16"):
        dsa.hadamard_transform(FakeCudaArray((2, 128), "<f8"), out=y)
    with pytest.raises(dsa.Error, match=r"x\.ndim = 1"):
        dsa.hadamard_transform(FakeCudaArray((128,)), out=y)
    with pytest.raises(dsa.Error, match=r"x\.strides = \(1, 2\) elements; expected a C-contiguous"):
        dsa.hadamard_transform(FakeCudaArray((2, 128), strides=(4, 8)), out=y)
    with pytest.raises(dsa.Error, match=r"strides = 6 bytes; expected multiples of the element size"):
        dsa.hadamard_transform(FakeCudaArray((2, 128), strides=(512, 6)), out=y)
    with pytest.raises(dsa.Error, match=r"y = a read-only array; expected a writable array"):
        dsa.hadamard_transform(FakeCudaArray((2, 128)), out=FakeCudaArray((2, 128), readonly=True))
    with pytest.raises(dsa.Error, match=r"typestr '>f4'"):
        dsa.hadamard_transform(FakeCudaArray((2, 128), ">f4"), out=y)
    with pytest.raises(dsa.Error, match=r"stream 0"):
        dsa.hadamard_transform(FakeCudaArray((2, 128), stream=0), out=y)
    with pytest.raises(dsa.Error, match=r"stream = 'default' \(str\); expected None, an integer cudaStream_t"):
        dsa.hadamard_transform(FakeCudaArray((2, 128)), out=y, stream="default")


def test_no_allocation_outside_numpy_and_torch(cuda_build):
    with pytest.raises(dsa.Error, match=r"out = None with a CUDA array of type FakeCudaArray; expected out="):
        dsa.hadamard_transform(FakeCudaArray((2, 128)))
    with pytest.raises(dsa.Error, match=r"expected out="):  # the default causal ranges would be allocated too
        dsa.topk_indices(FakeCudaArray((2, 64)), 8, out=FakeCudaArray((2, 8), "<i4"))


def test_cuda_arrays_without_a_device(cuda_build):
    if dsa.cuda_available():
        pytest.skip("a device is present: the made-up address must not be launched on")
    with pytest.raises(dsa.Error, match=r"dsa::hadamard_transform: device = cuda:0; expected a CUDA device; this "
                                        r"process sees none"):
        dsa.hadamard_transform(FakeCudaArray((2, 128)), out=FakeCudaArray((2, 128)))
    with pytest.raises(dsa.Error, match="sees none"):  # the cuBLAS op too
        dsa.linear(FakeCudaArray((2, 64)), FakeCudaArray((8, 64)), out=FakeCudaArray((2, 8)))


# ---- on a GPU: every op against the CPU backend ----------------------------------------------------


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (torch.cuda.is_available())")
    if not dsa.cuda_available():
        pytest.skip("needs a build with DSA_ENABLE_CUDA=ON that sees the device")
    return torch


def _t(a):
    import torch
    return torch.from_numpy(np.ascontiguousarray(a))


def f32(a):
    return _t(np.asarray(a, dtype=np.float32))


def bf16(a):
    import torch
    return _t(bf16_bits(np.asarray(a, dtype=np.float32)).view(np.int16)).view(torch.bfloat16)


def i32(a):
    return _t(np.asarray(a, dtype=np.int32))


def u8(a):
    return _t(np.asarray(a, dtype=np.uint8))


def moved(x, device):
    """Every torch tensor in x (nested tuples, lists and dicts) on `device`."""
    import torch
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (tuple, list)):
        return type(x)(moved(e, device) for e in x)
    if isinstance(x, dict):
        return {k: moved(v, device) for k, v in x.items()}
    return x


def both(fn, *args, **kwargs):
    """fn on the CPU tensors, and fn on CUDA copies of them (results back on the host)."""
    import torch
    ref = fn(*args, **kwargs)
    got = fn(*moved(args, "cuda"), **moved(kwargs, "cuda"))
    for g in (got if isinstance(got, tuple) else (got,)):
        assert g is None or g.device.type == "cuda"
    torch.cuda.synchronize()
    return ref, moved(got, "cpu")


def bits(t):
    import torch
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16)
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    if t.element_size() == 1 and t.dtype not in (torch.uint8, torch.int8):
        return t.view(torch.uint8)  # float8_e4m3fn
    return t


def assert_identical(ref, got):
    import torch
    refs, gots = (ref, got) if isinstance(ref, tuple) else ((ref,), (got,))
    assert len(refs) == len(gots)
    for r, g in zip(refs, gots):
        assert r.dtype == g.dtype and r.shape == g.shape
        assert torch.equal(bits(r), bits(g)), (r, g)


def assert_bf16_ulps(ref, got, ulps=1):
    import torch
    assert ref.dtype == got.dtype == torch.bfloat16

    def line(t):
        u = t.view(torch.int16).to(torch.int64)
        mag = u & 0x7FFF
        return torch.where(u < 0, -mag, mag)
    assert int((line(ref) - line(got)).abs().max()) <= ulps


def small_ints(rng, shape, lo=-2, hi=2, scale=1.0):
    """Exactly representable values: products and sums of a few of them are exact in fp32."""
    return rng.integers(lo, hi + 1, shape).astype(np.float32) * np.float32(scale)


def test_hadamard_and_quantizers(torch, rng):
    x = rng.standard_normal((8, 256)).astype(np.float32)
    for xt in (f32(x), bf16(x)):
        assert_identical(*both(dsa.hadamard_transform, xt, 256 ** -0.5))
        assert_identical(*both(dsa.act_quant, xt))
        assert_identical(*both(dsa.act_quant, xt, group_size=64, scale_format="fp32"))
        assert_identical(*both(dsa.weight_quant, xt))
    q, s = dsa.act_quant(f32(x))
    for dt in ("float32", "bfloat16"):
        assert_identical(*both(dsa.act_dequant, q, s, dtype=dt))
    w = rng.standard_normal((200, 300)).astype(np.float32)
    wq, ws = dsa.weight_quant(f32(w))
    assert_identical(*both(dsa.weight_quant, f32(w)))
    for dt in ("float32", "bfloat16"):
        assert_identical(*both(dsa.weight_dequant, wq, ws, dtype=dt))


def test_cache_rows(torch, rng):
    kv = bf16(rng.standard_normal((10, 576)))
    assert_identical(*both(dsa.kv_cache_fp8_pack, kv))
    slots = i32([3, -1, 0, 7, 5, 1, 2, 9, 8, 4])
    assert_identical(*both(dsa.kv_cache_fp8_pack, kv, slots=slots))
    cache = dsa.kv_cache_fp8_pack(kv)
    assert_identical(*both(dsa.kv_cache_fp8_unpack, cache))
    k, ks = u8(random_e4m3(rng, (10, 128))), f32(rng.random(10) + 0.5)
    assert_identical(*both(dsa.indexer_cache_pack, k, ks))
    assert_identical(*both(dsa.indexer_cache_pack, k, ks, slots=slots))
    assert_identical(*both(dsa.indexer_cache_unpack, dsa.indexer_cache_pack(k, ks)))


def test_topk_and_gather(torch, rng):
    scores = f32(rng.standard_normal((4, 1000)))
    assert_identical(*both(dsa.topk_indices, scores, 64))
    assert_identical(*both(dsa.topk_indices, scores, 64, i32(dsa.causal_ranges(4, 1000))))
    table = i32(np.stack([rng.permutation(16) for _ in range(4)]))
    assert_identical(*both(dsa.topk_indices_paged, scores, 64, table, 64))
    idx = i32(rng.integers(-1, 100, (4, 8)))
    assert_identical(*both(dsa.gather_rows, f32(rng.standard_normal((100, 64))), idx))
    assert_identical(*both(dsa.gather_rows, bf16(rng.standard_normal((100, 576))), idx))
    assert_identical(*both(dsa.gather_rows, u8(rng.integers(0, 256, (100, 656))), idx))


def test_lightning_indexer(torch, rng):
    m, h, d, n = 4, 8, 128, 300
    q, k = u8(random_e4m3(rng, (m, h, d))), u8(random_e4m3(rng, (n, d)))
    w, ks = f32(rng.standard_normal((m, h))), f32(rng.random(n) + 0.5)
    # The exact kernels (the default) are the CPU's bits; the fast ones are checked below.
    assert_identical(*both(dsa.lightning_indexer_scores, q, w, k, ks, kernels="exact"))
    # fp32 q and k: bit-identical on exact arithmetic (docs/cuda.md), so exactly representable data.
    qf, kf = f32(small_ints(rng, (m, h, d), scale=0.25)), f32(small_ints(rng, (n, d), scale=0.25))
    wf = f32(small_ints(rng, (m, h), scale=0.125))
    assert_identical(*both(dsa.lightning_indexer_scores, qf, wf, kf))
    g = f32(small_ints(rng, (m, n), scale=0.125))
    assert_identical(*both(dsa.lightning_indexer_backward, qf, wf, kf, None, None, g))
    # paged: the keys in 132-byte rows behind a block table
    cache = dsa.indexer_cache_pack(k, ks)
    table = i32(np.arange(300 // 50).reshape(1, -1).repeat(m, 0))
    ranges = i32(dsa.causal_ranges(m, n))  # every array of one call on the tensors' device
    assert_identical(*both(dsa.lightning_indexer_scores_paged, q, w, cache, table, 50, ranges, kernels="exact"))
    proj, qs = f32(rng.standard_normal((m, h))), f32(rng.random((m, h)))
    assert_identical(*both(dsa.lightning_indexer_weights, proj, qs, h ** -0.5, d ** -0.5))


def test_sparse_mla_attention(torch, rng):
    s, h, d, n, k = 4, 16, 576, 200, 64
    q, kv = bf16(rng.standard_normal((s, h, d))), bf16(rng.standard_normal((n, d)))
    idx = rng.integers(0, n, (s, k)).astype(np.int32)
    idx[1, 10:] = -1
    idx[2, :] = -1
    idx = i32(idx)
    scale = d ** -0.5
    for rows in (kv, dsa.kv_cache_fp8_pack(kv)):
        for splits in (1, 3):
            (ro, rl, rp), (go, gl, gp) = both(
                lambda *a: dsa.sparse_mla_attention(*a, scale, return_probs=True, num_splits=splits, kernels="exact"),
                q, rows, idx)
            torch.testing.assert_close(go, ro, atol=4e-3, rtol=0)
            assert torch.equal(torch.isinf(gl), torch.isinf(rl))
            fin = torch.isfinite(rl)
            torch.testing.assert_close(gl[fin], rl[fin], atol=2e-4, rtol=0)
            torch.testing.assert_close(gp, rp, atol=2e-5, rtol=0)
            assert torch.all(go[2] == 0) and torch.all(gl[2] == float("inf"))
        (ro, rl), (go, gl) = both(
            lambda *a: dsa.sparse_mla_attention(*a, scale, out_dtype="bfloat16", kernels="exact"), q, rows, idx)
        # docs/cuda.md: the fp32 bound plus one bf16 rounding on each side (2^-9 |out| each); a
        # small output may differ by several bf16 ulps (seen on an H200: 4).
        torch.testing.assert_close(go.float(), ro.float(), atol=4e-3, rtol=2 ** -8)


def calc_diff(x, y):
    """DeepGEMM's 1 - 2 sum(xy) / sum(x^2 + y^2), non-finite entries as 0."""
    import torch
    x, y = x.double(), y.double()
    x, y = torch.where(torch.isfinite(x), x, 0), torch.where(torch.isfinite(y), y, 0)
    den = (x * x + y * y).sum()
    return 0.0 if den == 0 else float(1 - 2 * (x * y).sum() / den)


def assert_same_nonfinite(got, ref):
    import torch
    for f in (torch.isnan, torch.isposinf, torch.isneginf):
        assert torch.equal(f(got), f(ref))


def assert_flashmla_close(got, ref, abs_tol, rel_tol, cos_tol=5e-6):
    """FlashMLA's check_is_allclose: the non-finite pattern, abs or rel per element, the cos diff."""
    import torch
    got, ref = got.float(), ref.float()
    assert_same_nonfinite(got, ref)
    fin = torch.isfinite(ref)
    err = (got[fin] - ref[fin]).abs()
    assert bool(((err <= abs_tol) | (err <= rel_tol * ref[fin].abs())).all()), float(err.max())
    assert calc_diff(got, ref) < cos_tol


def test_fast_kernels_against_the_exact_ones(torch, rng):
    """kernels='fast' against kernels='exact' (the default) on the same CUDA tensors, with the
    anchors' criteria (docs/cuda.md): the indexer's scores with DeepGEMM's, sparse MLA attention
    with FlashMLA's; dsa.set_cuda_kernels changes the default."""
    cuda = lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()  # noqa: E731
    m, h, d, n = 16, 64, 128, 3000
    q, k = cuda(random_e4m3(rng, (m, h, d))), cuda(random_e4m3(rng, (n, d)))
    w, ks = cuda(rng.standard_normal((m, h)).astype(np.float32) * 0.01), cuda(rng.random(n).astype(np.float32) + 0.5)
    exact = dsa.lightning_indexer_scores(q, w, k, ks, kernels="exact")
    fast = dsa.lightning_indexer_scores(q, w, k, ks, kernels="fast")
    assert_same_nonfinite(fast, exact)
    assert calc_diff(fast, exact) < 5e-6
    assert dsa.get_cuda_kernels() == "exact"
    assert torch.equal(bits(dsa.lightning_indexer_scores(q, w, k, ks)), bits(exact))
    old = dsa.get_cuda_kernels()
    try:
        dsa.set_cuda_kernels("fast")
        assert torch.equal(bits(dsa.lightning_indexer_scores(q, w, k, ks)), bits(fast))  # deterministic
    finally:
        dsa.set_cuda_kernels(old)
    cache = dsa.indexer_cache_pack(k, ks)
    table = cuda(np.stack([rng.permutation(n // 50) for _ in range(m)]).astype(np.int32))
    ranges = cuda(dsa.causal_ranges(m, n))
    pe = dsa.lightning_indexer_scores_paged(q, w, cache, table, 50, ranges, kernels="exact")
    pf = dsa.lightning_indexer_scores_paged(q, w, cache, table, 50, ranges, kernels="fast")
    assert_same_nonfinite(pf, pe)
    assert calc_diff(pf, pe) < 5e-6

    s, h, dqk, n, topk = 4, 128, 576, 4096, 2048
    q = bf16(rng.standard_normal((s, h, dqk))).cuda()
    kv = bf16(rng.standard_normal((n, dqk)) * 1.5).cuda()
    idx = rng.integers(0, n, (s, topk)).astype(np.int32)
    idx[1, 1000:] = -1
    idx[2, :] = -1
    idx = cuda(idx)
    for rows in (kv, dsa.kv_cache_fp8_pack(kv)):
        for splits in (1, 8):
            ro, rl = dsa.sparse_mla_attention(q, rows, idx, dqk ** -0.5, num_splits=splits, kernels="exact")
            go, gl = dsa.sparse_mla_attention(q, rows, idx, dqk ** -0.5, num_splits=splits, kernels="fast")
            assert_flashmla_close(go, ro, 1e-3, 2.01 / 128)
            assert_flashmla_close(gl, rl, 1e-6, 8.01 / 65536)
            assert torch.all(go[2] == 0) and torch.all(gl[2] == float("inf"))


def test_sparse_mha_attention(torch, rng):
    s, h, n, k = 3, 4, 50, 16
    q = bf16(rng.standard_normal((s, h, 192)))
    k_nope, k_rope = bf16(rng.standard_normal((n, h, 128))), bf16(rng.standard_normal((n, 64)))
    v = bf16(rng.standard_normal((n, h, 128)))
    idx = i32(rng.integers(-1, n, (s, k)))
    for rounding in ("fp32", "bf16", "bf16_split"):
        (ro, rl), (go, gl) = both(lambda *a: dsa.sparse_mha_attention(*a, 192 ** -0.5, rounding=rounding,
                                                                      return_lse=True), q, k_nope, k_rope, v, idx)
        assert_bf16_ulps(ro, go, 1)
        torch.testing.assert_close(gl, rl, rtol=2 ** -21, atol=0)


def test_indexer_kl_losses(torch, rng):
    m, h, n, k = 4, 4, 64, 16
    attn = rng.random((m, h, n)).astype(np.float32)
    attn /= attn.sum(2, keepdims=True)
    scores = f32(rng.standard_normal((m, n)))
    (rl, rg), (gl, gg) = both(dsa.indexer_kl_loss_dense, f32(attn), scores)
    torch.testing.assert_close(gl, rl, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gg, rg, rtol=0, atol=1e-6)
    topk = i32(np.stack([rng.permutation(n)[:k] for _ in range(m)]))
    (rl, rg), (gl, gg) = both(dsa.indexer_kl_loss_sparse, f32(attn), scores, topk)
    torch.testing.assert_close(gl, rl, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gg, rg, rtol=0, atol=1e-6)
    assert torch.equal(gg == 0, rg == 0)


def test_moe(torch, rng):
    logits, bias = f32(rng.standard_normal((8, 64))), f32(rng.standard_normal(64) * 0.1)
    (ri, rw), (gi, gw) = both(lambda *a: dsa.moe_route(*a, top_k=6, n_group=8, topk_group=4,
                                                       routed_scaling_factor=2.5), logits, bias)
    assert torch.equal(gi, ri)
    torch.testing.assert_close(gw, rw, rtol=2 ** -18, atol=0)
    eo = bf16(rng.standard_normal((20, 64)))
    rows, w, shared = i32(rng.integers(-1, 20, (4, 3))), f32(rng.random((4, 3))), bf16(rng.standard_normal((4, 64)))
    assert_identical(*both(dsa.moe_combine, eo, rows, w, shared))
    assert_identical(*both(dsa.moe_combine, eo, rows, w))


def test_dense_blocks(torch, rng):
    x = rng.standard_normal((4, 256)).astype(np.float32)
    wq, ws = dsa.weight_quant(f32(rng.standard_normal((192, 256))))
    for xt in (f32(x), bf16(x)):
        for dt in ("bfloat16", "float32"):
            assert_identical(*both(dsa.fp8_linear, xt, wq, ws, out_dtype=dt))
    # linear runs on cuBLAS: bit-identical on exact arithmetic (small integers).
    xi, wi = small_ints(rng, (4, 64), -1, 1), small_ints(rng, (32, 64), -1, 1)
    for xt in (f32(xi), bf16(xi)):
        for wt in (f32(wi), bf16(wi)):
            for dt in ("float32", "bfloat16"):
                assert_identical(*both(dsa.linear, xt, wt, out_dtype=dt))
    weight, bias = f32(rng.random(256) + 0.5), f32(rng.standard_normal(256))
    for xt in (f32(x), bf16(x)):
        assert_identical(*both(dsa.rms_norm, xt, weight))
        assert_identical(*both(dsa.layer_norm, xt, weight, bias))
    res = bf16(rng.standard_normal((4, 256)))
    ref_res, got_res = res.clone(), res.clone().cuda()
    ref = dsa.add_rms_norm(bf16(x), ref_res, weight)
    got = dsa.add_rms_norm(bf16(x).cuda(), got_res, weight.cuda())
    torch.cuda.synchronize()
    assert_identical((ref, ref_res), (got.cpu(), got_res.cpu()))
    g, u = bf16(rng.standard_normal((4, 256))), bf16(rng.standard_normal((4, 256)))
    assert_bf16_ulps(*both(dsa.swiglu, g, u))
    pos = i32([0, 1, 7, 4000, 100])
    for layout in ("interleaved", "half"):
        xr = bf16(rng.standard_normal((5, 4, 192)))
        ref, got = xr.clone(), xr.clone().cuda()
        dsa.rope_apply(ref[:, :, 128:], pos, layout=layout, max_position=16384, factor=4.0)
        dsa.rope_apply(got[:, :, 128:], pos.cuda(), layout=layout, max_position=16384, factor=4.0)
        torch.cuda.synchronize()
        assert_bf16_ulps(ref, got.cpu())


# ---- on a GPU: out=, streams, devices ---------------------------------------------------------------


def test_out_is_written_in_place_on_the_device(torch, rng):
    x = bf16(rng.standard_normal((8, 128)))
    expect = dsa.hadamard_transform(x, 128 ** -0.5)
    xd = x.cuda()
    ptr = xd.data_ptr()
    y = dsa.hadamard_transform(xd, 128 ** -0.5, out=xd)
    assert y is xd and xd.data_ptr() == ptr
    assert_identical(expect, xd.cpu())
    q = torch.empty((8, 128), dtype=torch.uint8, device="cuda")
    rq, rs = dsa.act_quant(x)
    gq, gs = dsa.act_quant(x.cuda(), out=(q, None))
    assert gq is q and gs.device.type == "cuda"
    torch.cuda.synchronize()
    assert torch.equal(q.cpu(), bits(rq)) and torch.equal(gs.cpu(), rs)


SLEEP_CYCLES = 500_000_000  # a few hundred ms: long enough to see where the op was queued


def _queued_behind_a_sleep(torch, run, stream):
    """Runs `run(out)` after a sleep kernel on `stream`, then checks that `out` is still untouched
    once the default stream has drained (the op is on `stream`, behind the sleep), and right once
    `stream` has."""
    x = torch.randn(64, 1024, device="cuda")
    expect = dsa.hadamard_transform(x.cpu())
    out = torch.full_like(x, float("nan"))
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_CYCLES)
    run(x, out)
    torch.cuda.default_stream().synchronize()
    assert torch.isnan(out.cpu()).all(), "the op did not wait for its stream"
    stream.synchronize()
    assert torch.equal(out.cpu(), expect)


def test_stream_keyword_is_honoured(torch):
    s = torch.cuda.Stream()
    _queued_behind_a_sleep(torch, lambda x, out: dsa.hadamard_transform(x, out=out, stream=s), s)
    _queued_behind_a_sleep(torch, lambda x, out: dsa.hadamard_transform(x, out=out, stream=s.cuda_stream), s)


def test_torch_current_stream_is_the_default(torch):
    s = torch.cuda.Stream()

    def run(x, out):
        with torch.cuda.stream(s):
            dsa.hadamard_transform(x, out=out)
    _queued_behind_a_sleep(torch, run, s)


def test_allocations_follow_the_stream(torch, rng):
    # Outputs, default ranges and the KL workspace are made on the op's stream: the result is right
    # without synchronizing anything but that stream.
    s = torch.cuda.Stream()
    attn = rng.random((4, 2, 32)).astype(np.float32)
    attn /= attn.sum(2, keepdims=True)
    scores = rng.standard_normal((4, 32)).astype(np.float32)
    ref = dsa.indexer_kl_loss_dense(f32(attn), f32(scores))
    a, sc = f32(attn).cuda(), f32(scores).cuda()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLEEP_CYCLES // 10)
    loss, grad = dsa.indexer_kl_loss_dense(a, sc, stream=s)
    s.synchronize()
    torch.testing.assert_close(loss.cpu(), ref[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad.cpu(), ref[1], rtol=0, atol=1e-6)


def test_mixed_devices_are_an_error(torch):
    x = torch.zeros((2, 128), device="cuda")
    with pytest.raises(dsa.Error, match=r"y\.device = cpu; expected cuda:0"):
        dsa.hadamard_transform(x, out=torch.zeros((2, 128)))
    with pytest.raises(dsa.Error, match=r"weight\.device = cpu; expected cuda:0"):
        dsa.rms_norm(x, torch.ones(128))
    with pytest.raises(dsa.Error, match=r"y\.device = cuda:0; expected cpu"):
        dsa.hadamard_transform(torch.zeros((2, 128)), out=x)
    if torch.cuda.device_count() > 1:
        with pytest.raises(dsa.Error, match=r"y\.device = cuda:1; expected cuda:0"):
            dsa.hadamard_transform(x, out=torch.zeros((2, 128), device="cuda:1"))
        x1 = torch.randn((2, 128), device="cuda:1")
        y1 = dsa.hadamard_transform(x1)  # on its own device, whatever the current one
        assert y1.device == x1.device
        assert torch.equal(y1.cpu(), dsa.hadamard_transform(x1.cpu()))


def test_cuda_array_interface_producers(torch, rng):
    class Interface:  # e.g. a Numba device array: __cuda_array_interface__ only
        def __init__(self, t):
            self.shape = tuple(t.shape)
            self.__cuda_array_interface__ = t.__cuda_array_interface__
            self._t = t

    x = f32(rng.standard_normal((4, 256))).cuda()
    y = torch.empty_like(x)
    r = dsa.hadamard_transform(Interface(x), out=Interface(y))
    assert isinstance(r, Interface)
    torch.cuda.synchronize()
    assert torch.equal(y.cpu(), dsa.hadamard_transform(x.cpu()))


def test_linear_from_several_threads(torch, rng):
    # cuBLAS handles are per thread and device: concurrent calls from Python threads are safe.
    x, w = f32(small_ints(rng, (64, 128), -1, 1)).cuda(), f32(small_ints(rng, (96, 128), -1, 1)).cuda()
    expect = dsa.linear(x.cpu(), w.cpu())
    results, errors = [None] * 4, []

    def run(i):
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                y = dsa.linear(x, w)
            s.synchronize()
            results[i] = y.cpu()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for r in results:
        assert torch.equal(r, expect)


# ---- the forward pass on the GPU: Transformer.load(..., device="cuda") ---------------------------


def test_transformer_device_argument():
    tiny = DATA / "tiny-dsv32"
    for bad in ("gpu", "cuda:x", "cuda:-1", "cuda:", "CUDA", 0, None):
        with pytest.raises(dsa.Error, match=r"dsa::Transformer.load: device = .*; expected 'cpu', 'cuda' or 'cuda:N'"):
            dsa.Transformer.load(tiny, device=bad)
    with pytest.raises(dsa.Error, match=r"dsa::Transformer.load: kernels = 'fast'; expected None with device='cpu'"):
        dsa.Transformer.load(tiny, kernels="fast")
    m = dsa.Transformer.load(tiny, threads=1, device="cpu")
    assert (m.device, m.kernels, m.threads) == ("cpu", None, 1)
    with pytest.raises(dsa.Error, match=r"dsa::Transformer.forward: seq = 'not a sequence' \(str\); expected a dsa.Sequence"):
        m.forward("not a sequence", [1])
    with pytest.raises(dsa.Error, match=r"dsa::validate_model: device = 'tpu'; expected 'cpu', 'cuda' or 'cuda:N'"):
        dsa.validate_model(tiny, device="tpu")
    with pytest.raises(dsa.Error, match=r"dsa::validate_model: kernels = 'fast'; expected None with device='cpu'"):
        dsa.validate_model(tiny, kernels="fast")
    if not dsa.built_with_cuda():
        with pytest.raises(dsa.Error, match=r"device = 'cuda'; expected 'cpu': this dsa was built without its CUDA"):
            dsa.Transformer.load(tiny, device="cuda")
        with pytest.raises(dsa.Error, match=r"dsa::validate_model: device = 'cuda:1'; expected 'cpu': this dsa"):
            dsa.validate_model(tiny, device="cuda:1")
        with pytest.raises(dsa.Error, match=r"dsa::CudaSequence: \(\) = a direct construction"):
            dsa.CudaSequence()
        return
    with pytest.raises(dsa.Error, match=r"dsa::Transformer.load: threads = 2; expected None with device='cuda'"):
        dsa.Transformer.load(tiny, threads=2, device="cuda")
    with pytest.raises(dsa.Error, match=r"dsa::Transformer.load: kernels = 'tensor'; expected None, 'fast' .* or 'exact'"):
        dsa.Transformer.load(tiny, device="cuda", kernels="tensor")
    n = dsa.cuda_device_count()
    want = "this process sees none" if n == 0 else rf"cuda:0 to cuda:{n - 1}"
    with pytest.raises(dsa.Error, match=rf"dsa::Transformer.load: device = cuda:{n + 3}; expected .*{want}"):
        dsa.Transformer.load(tiny, device=f"cuda:{n + 3}")
    with pytest.raises(dsa.Error, match=r"dsa::validate_model: threads = 1; expected None with device='cuda'"):
        dsa.validate_model(tiny, threads=1, device="cuda")
    if n == 0:
        with pytest.raises(dsa.Error, match=r"dsa::Transformer.load: device = cuda:0; expected a CUDA device; this "
                                            r"process sees none"):
            dsa.Transformer.load(tiny, device="cuda")
        with pytest.raises(dsa.Error, match=r"dsa::validate_model: device = cuda:0; expected a CUDA device"):
            dsa.validate_model(tiny, device="cuda")


def _cosine(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("kernels", ["exact", "fast"])
def test_transformer_on_the_gpu_matches_the_cpu(torch, kernels):
    # The bound of tests/cuda/test_model_transformer.cpp: the CUDA pass agrees with the CPU one to
    # a logits cosine >= 0.999 with the same argmax (docs/cuda.md), not bit for bit.
    tiny = DATA / "tiny-dsv32"
    cpu = dsa.Transformer.load(tiny, threads=2)
    gpu = dsa.Transformer.load(tiny, device=torch.device("cuda:0"), kernels=kernels)
    assert (gpu.device, gpu.kernels, gpu.threads) == ("cuda:0", kernels, None)
    assert gpu.config == cpu.config and gpu.num_layers == cpu.num_layers
    prompt = np.random.default_rng(3).integers(0, 512, 12)
    sc, sg = cpu.new_sequence(64), gpu.new_sequence(64)
    assert isinstance(sg, dsa.CudaSequence) and sg.max_tokens == 64
    want, got = cpu.forward(sc, prompt), gpu.forward(sg, prompt)
    for _ in range(4):
        assert got.dtype == np.float32 and got.shape == want.shape
        assert _cosine(got, want) >= 0.999 and got.argmax() == want.argmax()
        nxt = int(want.argmax())
        want, got = cpu.forward(sc, [nxt]), gpu.forward(sg, [nxt])
    assert sg.length == sc.length == len(prompt) + 4 and sg.cache_bytes > 0
    assert set(gpu.phase_times) == set(cpu.phase_times) and gpu.phase_times["total"] > 0
    # A sequence of the other backend is refused before anything runs.
    with pytest.raises(dsa.Error, match=r"seq = an object of type Sequence; expected a dsa.CudaSequence"):
        gpu.forward(sc, [1])
    with pytest.raises(dsa.Error, match=r"seq = an object of type CudaSequence; expected a dsa.Sequence"):
        cpu.forward(sg, [1])


def test_transformer_on_the_gpu_batch_and_trace(torch):
    gpu = dsa.Transformer.load(DATA / "tiny-dsv32", device="cuda")
    prompts = [np.random.default_rng(i).integers(0, 512, n) for i, n in enumerate((5, 1, 9))]
    alone = [gpu.forward(gpu.new_sequence(32), p) for p in prompts]
    seqs = [gpu.new_sequence(32) for _ in prompts]
    batch = gpu.forward_batch(seqs, prompts)
    for b, a in zip(batch, alone):  # cuBLAS may tile by shape: the bound of the C++ test
        assert _cosine(b, a) >= 0.9999 and b.argmax() == a.argmax()
    logits, layers = gpu.forward(gpu.new_sequence(32), prompts[2], trace=True)
    assert len(layers) == gpu.num_layers
    assert layers[0]["topk"].shape[0] == len(prompts[2]) and layers[0]["ffn_out"].dtype == np.uint16


@pytest.mark.parametrize("kernels", ["exact", "fast"])
def test_validate_model_on_the_gpu(torch, kernels):
    # dsa_validate --model tests/data/tiny-dsv32 --backend cuda --cuda-kernels K, as data.
    r = dsa.validate_model(DATA / "tiny-dsv32", device="cuda", kernels=kernels, outputs=False)
    assert r["pass"] and r["failed"] == 0 and r["passed"] > 0, r["checks"]
    assert r["backend"].startswith("cuda (device 0: ") and r["backend"].endswith(f", {kernels} kernels")
    assert min(r["cosines"]) >= 0.99 and r["outputs"] == {}
