"""Sparse MLA attention (FlashMLA's sparse kernels) and sparse MHA attention (the MLA prefill)."""

from __future__ import annotations

from typing import Any, Optional

from . import _arrays as A
from . import _core
from ._torch_ops import torch_op

_MAX_SPLITS = int(_core.sparse_mla_max_splits)


@torch_op
def sparse_mla_attention(q: Any, kv: Any, indices: Any, softmax_scale: float, *, d_v: int = 512,
                         out_dtype: Any = "float32", return_probs: bool = False, num_splits: int = 1,
                         out: Any = None, threads: Optional[int] = None, stream: Any = None,
                         kernels: Optional[str] = None):
    """MQA-mode sparse attention of every head over the kv rows its token selected.

    q [s, h, d_qk] bfloat16; kv [n, d_qk] bfloat16, or [n, 656] uint8 FlashMLA FP8 cache rows
    (then d_qk = 576, d_v = 512); indices [s, k] int32 (an entry < 0 or >= n is unused; a row
    listed twice counts twice). ``P = softmax(softmax_scale * q . kv_j)`` over the used entries
    (fp32 logits, online softmax in fp32); out [s, h, d_v] = ``P @ kv[j, :d_v]`` (float32 or
    bfloat16: ``out_dtype``), lse [s, h] the natural-log logsumexp of the scaled logits; a token
    without a used entry gives out 0 and lse +inf. With ``return_probs`` also probs [s, k] =
    the head sum of P at each entry (0 for unused ones), the indexer KL loss's target.
    ``num_splits`` > 1 cuts each token's entries into partial passes merged in order (the CUDA
    backend's split-k; the CPU computes one pass). ``kernels`` picks the CUDA backend's kernels
    for CUDA arrays: 'fast' (tensor cores, checked against the exact kernel with FlashMLA's
    criteria) or 'exact'; None: dsa.set_cuda_kernels' choice ('exact' by default). Returns
    ``(out, lse)`` or ``(out, lse, probs)``; ``out=`` takes the same tuple.
    """
    op = "sparse_mla_attention"
    softmax_scale = A.real_arg(op, "softmax_scale", softmax_scale)
    d_v = A.int_arg(op, "d_v", d_v)
    num_splits = A.int_arg(op, "num_splits", num_splits, 1, _MAX_SPLITS)
    return_probs = A.flag_arg(op, "return_probs", return_probs)
    out_dtype = A.dtype_name(out_dtype, op, "out_dtype")
    threads = A.threads_arg(op, threads)
    kernels = A.kernels_arg(op, kernels)
    with A.launch(op, q, stream) as st:
        names = ("out", "lse", "probs") if return_probs else ("out", "lse")
        outs = A.outputs(op, out, names)
        o, lse = outs[0], outs[1]
        probs = outs[2] if return_probs else None
        s, h, d_qk = A.shape(q, op, "q", 3)
        # d_v sizes out [s, h, d_v] (and the workspace): checked against q before either is
        # allocated, as the op checks it.
        if not 1 <= d_v <= d_qk:
            A.fail(op, "d_v", A.show(d_v), f"1 <= d_v <= d_qk = q.extent(2) = {d_qk}")
        if o is None:
            o = A.empty(op, "out", (s, h, d_v), out_dtype, q)
        if lse is None:
            lse = A.empty(op, "lse", (s, h), "float32", q)
        if return_probs and probs is None:
            probs = A.empty(op, "probs", (s, A.dim(indices, op, "indices", 2, 1)), "float32", q)
        workspace = None
        if num_splits != 1:
            size = _core.sparse_mla_attention_workspace_size(s, h, d_v, num_splits)
            workspace = A.empty(op, "workspace", (size,), "uint8", q)
        _core.sparse_mla_attention(A.core(q), A.core(kv), A.core(indices), A.core(o), A.core(lse), A.core(probs),
                                   A.core(workspace), softmax_scale, d_v, num_splits, threads, st, kernels)
    return (o, lse, probs) if return_probs else (o, lse)


@torch_op
def sparse_mha_attention(q: Any, k_nope: Any, k_rope: Any, v: Any, indices: Any, softmax_scale: float, *,
                         rounding: str = "bf16", return_lse: bool = False, out: Any = None,
                         threads: Optional[int] = None, stream: Any = None):
    """Sparse multi-head attention over MLA keys (DeepSeek-V3.2's MHA prefill).

    q [s, h, d_nope + d_rope], k_nope [n, h, d_nope], k_rope [n, d_rope], v [n, h, d_v], all
    bfloat16 (keys and values may be strided slices, or broadcast over heads with stride 0:
    MQA); indices [s, k] int32. out [s, h, d_v] bfloat16 = softmax(scale * q.k) @ v over the
    used entries; ``rounding`` is where logits and probabilities are rounded: "fp32", "bf16"
    (DeepSeek's reference) or "bf16_split". Returns out, or ``(out, lse)`` with ``return_lse``.
    """
    op = "sparse_mha_attention"
    softmax_scale = A.real_arg(op, "softmax_scale", softmax_scale)
    rounding = A.str_arg(op, "rounding", rounding, "'fp32', 'bf16' or 'bf16_split'")
    return_lse = A.flag_arg(op, "return_lse", return_lse)
    threads = A.threads_arg(op, threads)
    with A.launch(op, q, stream) as st:
        names = ("out", "lse") if return_lse else ("out",)
        outs = A.outputs(op, out, names)
        o = outs[0]
        lse = outs[1] if return_lse else None
        if o is None or (return_lse and lse is None):
            s, h, _ = A.shape(q, op, "q", 3, strided=True)
            if o is None:
                o = A.empty(op, "out", (s, h, A.dim(v, op, "v", 3, 2, strided=True)), "bfloat16", q)
            if return_lse and lse is None:
                lse = A.empty(op, "lse", (s, h), "float32", q)
        _core.sparse_mha_attention(A.core(q), A.core(k_nope), A.core(k_rope), A.core(v), A.core(indices), A.core(o),
                                   A.core(lse), softmax_scale, rounding, threads, st)
    return (o, lse) if return_lse else o


def sparse_mla_attention_workspace_size(s: int, h: int, d_v: int, num_splits: int) -> int:
    """Bytes of workspace ``sparse_mla_attention`` needs with ``num_splits`` > 1 (0 for one):
    8·S·s·h rounded up to 16, plus 4·S·s·h·d_v, S = num_splits (checked 64-bit arithmetic)."""
    op = "sparse_mla_attention_workspace_size"
    args = [A.int_arg(op, n, v) for n, v in (("s", s), ("h", h), ("d_v", d_v), ("num_splits", num_splits))]
    return _core.sparse_mla_attention_workspace_size(*args)


def sparse_mla_attention_num_splits(s: int, h: int, k: int, sm_count: int) -> int:
    """A split count for s tokens of h heads and k index entries on a GPU with ``sm_count``
    multiprocessors (the CUDA backend's split-k heuristic; only speed and fp32 rounding depend
    on it)."""
    op = "sparse_mla_attention_num_splits"
    args = [A.int_arg(op, n, v) for n, v in (("s", s), ("h", h), ("k", k), ("sm_count", sm_count))]
    return _core.sparse_mla_attention_num_splits(*args)
