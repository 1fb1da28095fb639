"""dsa's torch custom ops (docs/python.md, "dsa inside PyTorch"): every public op is
``torch.ops.dsa.<name>``; torch.library.opcheck passes for each (schema, fake implementation,
autograd registration, AOT dispatch with dynamic shapes); torch.compile(fullgraph=True) of the
DSA decode chain runs without graph breaks and gives eager's bits; the in-place ops write in
place under torch.compile; a CUDA graph captures a decode step (on a GPU). Skipped without torch."""

import numpy as np
import pytest

import dsa
from test_arguments import CALLS

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):  # pragma: no cover - torch < 2.4
    pytest.skip("torch.library.custom_op needs torch >= 2.4", allow_module_level=True)

OPS = dsa.register_torch_ops()  # conftest imported dsa before torch: registered here
#: Arguments that hold FP8 E4M3 codes (the NumPy calls pass uint8 codes).
FP8 = {("act_dequant", "q"), ("weight_dequant", "q"), ("indexer_cache_pack", "k"),
       ("lightning_indexer_scores_paged", "q"), ("fp8_linear", "w")}


def _tensor(op, name, a, device, fp8=True):
    if not isinstance(a, np.ndarray):
        return a
    if a.dtype == np.uint16:
        t = torch.from_numpy(a.astype(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a.copy())
    if (op, name) in FP8 and fp8:
        t = t.view(torch.float8_e4m3fn)
    return t.to(device)


def _op_call(op, device="cpu", fp8=True):
    """The valid call of test_arguments as (torch.ops.dsa overload, args, kwargs) on `device`;
    FP8 arguments as torch.float8_e4m3fn, or with ``fp8=False`` as uint8 codes (which dsa takes
    too)."""
    _, arrays, keywords = CALLS[op]
    values = {n: _tensor(op, n, a, device, fp8) for n, a in {**arrays, **keywords}.items()}
    overload = getattr(OPS, op).default
    args, kwargs = [], {}
    for arg in overload._schema.arguments:
        if arg.name not in values:
            continue
        (kwargs.__setitem__(arg.name, values[arg.name]) if arg.kwarg_only else args.append(values[arg.name]))
    return overload, tuple(args), kwargs


def test_every_public_op_is_a_torch_op():
    assert OPS is torch.ops.dsa
    for name in set(CALLS) | {"kv_cache_fp8_pack_into", "indexer_cache_pack_into"}:
        assert isinstance(getattr(OPS, name), torch._ops.OpOverloadPacket), name


#: The cache packers with slots: their row count is max(slots) + 1, data the fake implementation
#: cannot see (an unbacked size), so opcheck's fake-tensor comparison does not apply to them; the
#: in-place forms (what an engine calls) are checked below.
DATA_DEPENDENT = {"kv_cache_fp8_pack", "indexer_cache_pack"}


@pytest.mark.parametrize("op", sorted(set(CALLS) - DATA_DEPENDENT))
def test_opcheck(op):
    # FP8 inputs as uint8 codes: opcheck's schema test multiplies its inputs, which torch's CPU
    # kernels do not for float8_e4m3fn (the float8 calls are checked by the tests below).
    overload, args, kwargs = _op_call(op, fp8=False)
    torch.library.opcheck(overload, args, kwargs)


def test_opcheck_packers():
    kv = torch.randn(3, 576).to(torch.bfloat16)
    torch.library.opcheck(OPS.kv_cache_fp8_pack.default, (kv, None))
    cache = torch.zeros(5, 656, dtype=torch.uint8)
    torch.library.opcheck(OPS.kv_cache_fp8_pack_into.default, (kv, cache, torch.tensor([4, -1, 0], dtype=torch.int32)))
    k = torch.randn(3, 128).to(torch.float8_e4m3fn).view(torch.uint8)
    ks = torch.rand(3)
    torch.library.opcheck(OPS.indexer_cache_pack.default, (k, ks, None))
    icache = torch.zeros(4, 132, dtype=torch.uint8)
    torch.library.opcheck(OPS.indexer_cache_pack_into.default, (k, ks, icache, torch.tensor([3, 1, -1], dtype=torch.int32)))


@pytest.mark.parametrize("op", sorted(CALLS))
def test_meta_tensors_give_shapes(op):
    """The fake implementations against the real outputs: shape and dtype of every output."""
    overload, args, kwargs = _op_call(op)
    if op in DATA_DEPENDENT:
        args = (args[0], *args[1:-1], None) if op == "kv_cache_fp8_pack" else (*args[:2], None)
    real = overload(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    meta = overload(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    real = real if isinstance(real, tuple) else (real,)
    meta = meta if isinstance(meta, tuple) else (meta,)
    assert [(r.shape, r.dtype) for r in real if r is not None] == [(m.shape, m.dtype) for m in meta if m is not None]


def _decode_inputs(rng, device="cpu"):
    """A DSA decode step's inputs: FP8 indexer queries and keys, bf16 MLA queries and cache rows."""
    m, heads, n, d = 2, 4, 300, 128
    q_idx = torch.from_numpy(rng.standard_normal((m, heads, d)).astype(np.float32)).to(torch.float8_e4m3fn)
    k_idx = torch.from_numpy(rng.standard_normal((n, d)).astype(np.float32)).to(torch.float8_e4m3fn)
    w = torch.from_numpy(rng.standard_normal((m, heads)).astype(np.float32))
    k_scale = torch.from_numpy(rng.uniform(0.5, 2, n).astype(np.float32))
    q = torch.from_numpy(rng.standard_normal((m, 16, 576)).astype(np.float32)).to(torch.bfloat16)
    kv = torch.from_numpy(rng.standard_normal((n, 576)).astype(np.float32)).to(torch.bfloat16)
    return [t.to(device) for t in (q_idx, w, k_idx, k_scale, q, kv)]


def _decode_step(q_idx, w, k_idx, k_scale, q, kv):
    scores = dsa.lightning_indexer_scores(q_idx, w, k_idx, k_scale)
    idx = dsa.topk_indices(scores, 64)
    out, lse = dsa.sparse_mla_attention(q, kv, idx, 576 ** -0.5, out_dtype="bfloat16")
    return scores, idx, out, lse


def _same_bits(a, b):
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x.view(torch.uint8) if x.element_size() == 1 else x, y.view(torch.uint8)
                           if y.element_size() == 1 else y)


def test_dsa_functions_route_torch_tensors_through_the_ops(rng):
    """dsa.<op>(torch tensors) is one torch.ops.dsa call (what torch.compile sees)."""
    inputs = _decode_inputs(rng)
    seen = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _decode_step(*inputs)
    seen = [e.name for e in prof.events() if e.name.startswith("dsa::")]
    assert {"dsa::lightning_indexer_scores", "dsa::topk_indices", "dsa::sparse_mla_attention"} <= set(seen)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_decode_chain_matches_eager(rng, dynamic):
    torch._dynamo.reset()
    inputs = _decode_inputs(rng)
    eager = _decode_step(*inputs)
    compiled = torch.compile(_decode_step, fullgraph=True, dynamic=dynamic)(*inputs)
    _same_bits(eager, compiled)
    explained = torch._dynamo.explain(_decode_step)(*inputs)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_compile_in_place_ops(rng):
    """rope_apply and add_rms_norm write their tensor arguments, kv_cache_fp8_pack(out=cache) its
    cache, under torch.compile as in eager."""
    def step(x, residual, weight, positions, kv, cache, slots):
        y = dsa.add_rms_norm(x, residual, weight)
        dsa.rope_apply(y.view(2, 2, 64), positions)
        dsa.kv_cache_fp8_pack(kv, slots=slots, out=cache)
        return y

    def inputs():
        g = np.random.default_rng(3)
        t = lambda a: torch.from_numpy(a.astype(np.float32))  # noqa: E731
        return (t(g.standard_normal((2, 128))).to(torch.bfloat16), t(g.standard_normal((2, 128))).to(torch.bfloat16),
                t(g.uniform(0.5, 1.5, 128)), torch.tensor([3, 9], dtype=torch.int32),
                t(g.standard_normal((2, 576))).to(torch.bfloat16), torch.zeros(4, 656, dtype=torch.uint8),
                torch.tensor([2, 0], dtype=torch.int32))

    torch._dynamo.reset()
    a, b = inputs(), inputs()
    ya = step(*a)
    yb = torch.compile(step, fullgraph=True)(*b)
    assert torch.equal(ya, yb)
    for x, y in zip(a, b):
        assert torch.equal(x, y)  # residual and cache written alike
    assert int(b[5][1].sum()) == 0 and int(b[5][0].sum()) != 0  # only slots 2 and 0 written


def test_out_and_stream_keep_the_direct_path(rng):
    """out= (other than a cache) writes into the caller's tensor outside torch's graph, as before."""
    x = torch.randn(3, 128)
    y = torch.empty(3, 128)
    assert dsa.hadamard_transform(x, 0.5, out=y) is y
    assert torch.equal(y, dsa.hadamard_transform(x, 0.5))


def test_errors_are_dsa_errors_through_the_ops():
    """A bad call through the op is the same dsa.Error as a direct call."""
    q = torch.ones(2, 4, 16)
    with pytest.raises(dsa.Error, match=r"dsa::lightning_indexer_scores: .*k"):
        torch.ops.dsa.lightning_indexer_scores(q, torch.ones(2, 4), torch.ones(5, 8))
    with pytest.raises(dsa.Error, match="topk_indices"):
        dsa.topk_indices(torch.ones(2, 8), 0)


@pytest.mark.skipif(not dsa.cuda_available() or not torch.cuda.is_available(), reason="needs a GPU and dsa's CUDA build")
def test_cuda_graph_captures_a_decode_step(rng):
    inputs = _decode_inputs(rng, "cuda")
    eager = _decode_step(*inputs)
    static = [t.clone() for t in inputs]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _decode_step(*static)  # warm-up on a side stream, as torch's CUDA graph recipe does
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _decode_step(*static)
    graph.replay()
    torch.cuda.synchronize()
    _same_bits(eager, captured)
    # new inputs copied into the static tensors: the replay computes on them
    fresh = _decode_inputs(np.random.default_rng(7), "cuda")
    for s, f in zip(static, fresh):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    _same_bits(_decode_step(*fresh), captured)


def _sylvester(n):
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def test_hadamard_backward_against_torch_autograd():
    """dx of y = (x @ H) * scale is (dy @ H) * scale: dsa's registered derivative against torch's
    autograd through the explicit matrix, and opcheck with a tensor that requires grad."""
    x = torch.randn(5, 64, requires_grad=True)
    dy = torch.randn(5, 64)
    dsa.hadamard_transform(x, 0.125).backward(dy)
    xr = x.detach().clone().requires_grad_()
    ((xr @ _sylvester(64)) * 0.125).backward(dy)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-6, atol=1e-6)
    torch.library.opcheck(OPS.hadamard_transform.default, (torch.randn(3, 16, requires_grad=True), 0.5))


def test_indexer_scores_backward_against_torch_autograd():
    """The float32 indexer score's gradients (lightning_indexer_backward, registered as its
    derivative) against torch's autograd of ``k_scale * sum_h w * relu(q . k)`` over the causal
    ranges."""
    g = torch.Generator().manual_seed(5)
    m, h, d, n = 4, 3, 32, 9
    q = torch.randn(m, h, d, generator=g, requires_grad=True)
    w = torch.randn(m, h, generator=g, requires_grad=True)
    k = torch.randn(n, d, generator=g, requires_grad=True)
    k_scale = torch.rand(n, generator=g) + 0.5
    grad = torch.randn(m, n, generator=g)
    scores = dsa.lightning_indexer_scores(q, w, k, k_scale)
    visible = torch.arange(n)[None, :] < (n - m + 1 + torch.arange(m))[:, None]
    assert torch.equal(torch.isfinite(scores), visible)
    scores.backward(torch.where(visible, grad, 0))
    qr, wr, kr = (t.detach().clone().requires_grad_() for t in (q, w, k))
    ref = k_scale * torch.einsum("mh,mhn->mn", wr, torch.relu(torch.einsum("mhd,nd->mhn", qr, kr)))
    (ref * torch.where(visible, grad, 0)).sum().backward()
    for a, b in ((q, qr), (w, wr), (k, kr)):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4)
    torch.library.opcheck(OPS.lightning_indexer_scores.default,
                          (torch.randn(2, 3, 8, requires_grad=True), torch.randn(2, 3, requires_grad=True),
                           torch.randn(5, 8, requires_grad=True), torch.rand(5) + 0.5,
                           torch.tensor([[0, 4], [0, 5]], dtype=torch.int32)))
