"""The "dense" family (docs/architecture.md, "Op families"): the dense building blocks of the
forward pass, fp8_linear, linear, rms_norm, add_rms_norm, layer_norm, rope_apply, swiglu."""

from __future__ import annotations

from typing import Any, Optional

from . import _arrays as A
from . import _core
from ._torch_ops import torch_op


@torch_op
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


@torch_op
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


@torch_op
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


@torch_op
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


@torch_op
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


@torch_op
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


@torch_op
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
