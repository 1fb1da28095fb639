"""MoE routing and combine, and the dense building blocks of the forward pass: fp8_linear,
linear, rms_norm, add_rms_norm, layer_norm, rope_apply, swiglu."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _arrays as A
from . import _core


def moe_route(logits: Any, bias: Any = None, *, top_k: int, n_group: int = 1, topk_group: int = 1,
              scoring: str = "sigmoid", norm_topk_prob: bool = True, routed_scaling_factor: float = 1.0,
              out: Any = None, threads: Optional[int] = None, stream: Any = None) -> Tuple[Any, Any]:
    """DeepSeek-V3 ``noaux_tc`` expert selection over ``logits`` [t, E] float32 (= x . W_gate^T).

    s = sigmoid(logits) (or softmax); b = s + bias (``e_score_correction_bias`` [E], selection
    only; None for none); experts in ``n_group`` groups scored by the sum of their top-2 b (max
    without a bias); the best ``topk_group`` groups kept; the ``top_k`` best experts by b; weights
    = their unbiased s, divided by their sum (``norm_topk_prob``), times
    ``routed_scaling_factor``. Returns ``(expert_ids [t, top_k] int32 ascending, weights
    [t, top_k] float32)``.
    """
    op = "moe_route"
    top_k = A.int_arg(op, "top_k", top_k)
    n_group = A.int_arg(op, "n_group", n_group)
    topk_group = A.int_arg(op, "topk_group", topk_group)
    scoring = A.str_arg(op, "scoring", scoring, "'sigmoid' or 'softmax'")
    norm_topk_prob = A.flag_arg(op, "norm_topk_prob", norm_topk_prob)
    routed_scaling_factor = A.real_arg(op, "routed_scaling_factor", routed_scaling_factor)
    threads = A.threads_arg(op, threads)
    with A.launch(op, logits, stream) as st:
        ids, weights = A.outputs(op, out, ("expert_ids", "weights"))
        t, n_experts = A.shape(logits, op, "logits", 2)
        # top_k sizes both outputs: the op's own configuration checks run before they are
        # allocated (top_k <= the selectable experts, and the rest).
        _core.moe_route_check(n_experts, bias is not None, top_k, n_group, topk_group, scoring, norm_topk_prob,
                              routed_scaling_factor)
        if ids is None:
            ids = A.empty(op, "expert_ids", (t, top_k), "int32", logits)
        if weights is None:
            weights = A.empty(op, "weights", (t, top_k), "float32", logits)
        _core.moe_route(A.core(logits), A.core(bias), A.core(ids), A.core(weights), top_k, n_group, topk_group, scoring,
                        norm_topk_prob, routed_scaling_factor, threads, st)
    return ids, weights


def moe_combine(expert_out: Any, rows: Any, weights: Any, shared: Any = None, *, out: Any = None,
                threads: Optional[int] = None, stream: Any = None) -> Any:
    """``y[t] = bf16(sum_j weights[t, j] * expert_out[rows[t, j]] + shared[t])`` in fp32, slot
    order j = 0..k-1, then the shared expert; expert_out [R, d] bfloat16, rows [t, k] int32 (-1:
    none), weights [t, k] float32, shared [t, d] bfloat16 or None. Returns y [t, d] bfloat16."""
    op = "moe_combine"
    threads = A.threads_arg(op, threads)
    with A.launch(op, expert_out, stream) as st:
        (y,) = A.outputs(op, out, ("y",))
        if y is None:
            y = A.empty(op, "y", (A.dim(rows, op, "rows", 2, 0), A.dim(expert_out, op, "expert_out", 2, 1)), "bfloat16",
                        expert_out)
        _core.moe_combine(A.core(expert_out), A.core(rows), A.core(weights), A.core(shared), A.core(y), threads, st)
    return y


def fp8_linear(x: Any, w: Any, w_scale: Any, *, act_format: str = "ue8m0", out_dtype: Any = "bfloat16",
               out: Any = None, threads: Optional[int] = None, stream: Any = None) -> Any:
    """DeepSeek's FP8 ``linear``: ``y [t, out] = x [t, in] . dequant(w)^T`` with x (float32 or
    bfloat16) quantized 1 x 128 (``act_format`` scales), w [out, in] e4m3 codes with float32
    block multipliers ``w_scale`` [ceil(out/128), in/128]; per 128-wide k-block the exact code
    dot rounded to fp32, times fl32(a_scale * w_scale), accumulated in fp32; y rounded once
    (``out_dtype`` bfloat16 or float32)."""
    op = "fp8_linear"
    act_format = A.str_arg(op, "act_format", act_format, "'ue8m0' or 'fp32'")
    out_dtype = A.dtype_name(out_dtype, op, "out_dtype")
    threads = A.threads_arg(op, threads)
    with A.launch(op, x, stream) as st:
        (y,) = A.outputs(op, out, ("y",))
        if y is None:
            y = A.empty(op, "y", (A.dim(x, op, "x", 2, 0), A.dim(w, op, "w", 2, 0)), out_dtype, x)
        _core.fp8_linear(A.core(x), A.core(w), A.core(w_scale), A.core(y), act_format, threads, st)
    return y


def linear(x: Any, w: Any, *, out_dtype: Any = None, out: Any = None, threads: Optional[int] = None,
           stream: Any = None) -> Any:
    """``y [t, out] = x [t, in] . w^T`` for w [out, in]; x, w and y each float32 or bfloat16:
    inputs exact in fp32, products accumulated in fp32, y rounded once. y's dtype is x's unless
    ``out_dtype`` says otherwise."""
    op = "linear"
    if out_dtype is not None:
        out_dtype = A.dtype_name(out_dtype, op, "out_dtype")
    threads = A.threads_arg(op, threads)
    with A.launch(op, x, stream) as st:
        (y,) = A.outputs(op, out, ("y",))
        if y is None:
            dtype = A.float_dtype_name(x, op, "x", 2) if out_dtype is None else out_dtype
            y = A.empty(op, "y", (A.dim(x, op, "x", 2, 0), A.dim(w, op, "w", 2, 0)), dtype, x)
        _core.linear(A.core(x), A.core(w), A.core(y), threads, st)
    return y


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, *, out: Any = None, threads: Optional[int] = None,
             stream: Any = None) -> Any:
    """``y = bf16(weight * x / sqrt(mean(x^2) + eps))`` per row of x [t, d] (float32 or
    bfloat16), weight [d] float32; math in fp32. ``out=x`` (bfloat16 x) normalizes in place."""
    op = "rms_norm"
    eps = A.real_arg(op, "eps", eps)
    threads = A.threads_arg(op, threads)
    with A.launch(op, x, stream) as st:
        (y,) = A.outputs(op, out, ("y",))
        if y is None:
            y = A.empty(op, "y", A.shape(x, op, "x", 2), "bfloat16", x)
        _core.rms_norm(A.core(x), A.core(weight), A.core(y), eps, threads, st)
    return y


def add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6, *, out: Any = None,
                 threads: Optional[int] = None, stream: Any = None) -> Any:
    """The residual block boundary: ``h = fl32(x + residual)``, then ``residual = bf16(h)`` (in
    place: ``residual`` is updated) and ``y = bf16(rms_norm(h))``; x, residual, y [t, d]
    bfloat16, weight [d] float32. Returns y."""
    op = "add_rms_norm"
    eps = A.real_arg(op, "eps", eps)
    threads = A.threads_arg(op, threads)
    with A.launch(op, x, stream) as st:
        (y,) = A.outputs(op, out, ("y",))
        if y is None:
            y = A.empty(op, "y", A.shape(x, op, "x", 2), "bfloat16", x)
        _core.add_rms_norm(A.core(x), A.core(residual), A.core(weight), A.core(y), eps, threads, st)
    return y


def layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-6, *, out: Any = None,
               threads: Optional[int] = None, stream: Any = None) -> Any:
    """``y = bf16((x - mean) / sqrt(var + eps) * weight + bias)`` per row (biased variance, as
    F.layer_norm); x [t, d] float32 or bfloat16, weight and bias [d] float32."""
    op = "layer_norm"
    eps = A.real_arg(op, "eps", eps)
    threads = A.threads_arg(op, threads)
    with A.launch(op, x, stream) as st:
        (y,) = A.outputs(op, out, ("y",))
        if y is None:
            y = A.empty(op, "y", A.shape(x, op, "x", 2), "bfloat16", x)
        _core.layer_norm(A.core(x), A.core(weight), A.core(bias), A.core(y), eps, threads, st)
    return y


def rope_apply(x: Any, positions: Any, *, layout: str = "interleaved", dim: Optional[int] = None,
               base: float = 10000.0, factor: float = 1.0, original_max_position: int = 4096,
               max_position: int = 4096, beta_fast: float = 32.0, beta_slow: float = 1.0,
               threads: Optional[int] = None, stream: Any = None) -> Any:
    """Rotates, IN PLACE, the pairs of every row of x [t, heads, dim] bfloat16 (a strided slice
    such as ``q[:, :, nope:]`` is fine) by the angles of ``positions`` [t] int32:
    ``layout="interleaved"`` pairs (2j, 2j+1) (DeepSeek MLA), ``"half"`` pairs (j, j + dim/2)
    (the V3.2 indexer). Frequencies ``base^(-2j/dim)`` with YaRN interpolation when
    ``max_position > original_max_position``. Returns x."""
    op = "rope_apply"
    layout = A.str_arg(op, "layout", layout, "'interleaved' (pairs 2j, 2j+1) or 'half' (pairs j, j + dim/2)")
    if dim is not None:
        dim = A.int_arg(op, "dim", dim)
    base = A.real_arg(op, "base", base)
    factor = A.real_arg(op, "factor", factor)
    original_max_position = A.int_arg(op, "original_max_position", original_max_position)
    max_position = A.int_arg(op, "max_position", max_position)
    beta_fast = A.real_arg(op, "beta_fast", beta_fast)
    beta_slow = A.real_arg(op, "beta_slow", beta_slow)
    threads = A.threads_arg(op, threads)
    with A.launch(op, x, stream) as st:
        if dim is None:
            dim = A.dim(x, op, "x", 3, 2, strided=True)
        _core.rope_apply(A.core(x), A.core(positions), dim, base, factor, original_max_position, max_position,
                         beta_fast, beta_slow, layout, threads, st)
    return x


def swiglu(gate: Any, up: Any, *, out: Any = None, threads: Optional[int] = None, stream: Any = None) -> Any:
    """``y = bf16(fl32(silu(gate) * up))`` elementwise over [t, n] bfloat16 (``out=gate`` or
    ``out=up`` in place)."""
    op = "swiglu"
    threads = A.threads_arg(op, threads)
    with A.launch(op, gate, stream) as st:
        (y,) = A.outputs(op, out, ("y",))
        if y is None:
            y = A.empty(op, "y", A.shape(gate, op, "gate", 2), "bfloat16", gate)
        _core.swiglu(A.core(gate), A.core(up), A.core(y), threads, st)
    return y
