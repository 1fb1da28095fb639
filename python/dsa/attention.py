"""Sparse MLA attention (FlashMLA's sparse kernels) and sparse MHA attention (the MLA prefill)."""

from __future__ import annotations

from typing import Any, Optional

from . import _arrays as A
from . import _core


def sparse_mla_attention(q: Any, kv: Any, indices: Any, softmax_scale: float, *, d_v: int = 512,
                         out_dtype: Any = "float32", return_probs: bool = False, num_splits: int = 1,
                         out: Any = None, threads: Optional[int] = None, stream: Any = None):
    """MQA-mode sparse attention of every head over the kv rows its token selected.

    q [s, h, d_qk] bfloat16; kv [n, d_qk] bfloat16, or [n, 656] uint8 FlashMLA FP8 cache rows
    (then d_qk = 576, d_v = 512); indices [s, k] int32 (an entry < 0 or >= n is unused; a row
    listed twice counts twice). ``P = softmax(softmax_scale * q . kv_j)`` over the used entries
    (fp32 logits, online softmax in fp32); out [s, h, d_v] = ``P @ kv[j, :d_v]`` (float32 or
    bfloat16: ``out_dtype``), lse [s, h] the natural-log logsumexp of the scaled logits; a token
    without a used entry gives out 0 and lse +inf. With ``return_probs`` also probs [s, k] =
    the head sum of P at each entry (0 for unused ones), the indexer KL loss's target.
    ``num_splits`` > 1 cuts each token's entries into partial passes merged in order (the CUDA
    backend's split-k; the CPU computes one pass). Returns ``(out, lse)`` or
    ``(out, lse, probs)``; ``out=`` takes the same tuple.
    """
    op = "sparse_mla_attention"
    with A.launch(op, q, stream) as st:
        names = ("out", "lse", "probs") if return_probs else ("out", "lse")
        outs = A.outputs(op, out, names)
        o, lse = outs[0], outs[1]
        probs = outs[2] if return_probs else None
        s, h = A.dim(q, op, "q", 3, 0), A.dim(q, op, "q", 3, 1)
        k = A.dim(indices, op, "indices", 2, 1)
        if o is None:
            o = A.empty((s, h, d_v), A.dtype_name(out_dtype), q)
        if lse is None:
            lse = A.empty((s, h), "float32", q)
        if return_probs and probs is None:
            probs = A.empty((s, k), "float32", q)
        workspace = None
        if num_splits != 1:
            size = _core.sparse_mla_attention_workspace_size(s, h, int(d_v), int(num_splits))
            workspace = A.empty((size,), "uint8", q)
        _core.sparse_mla_attention(A.core(q), A.core(kv), A.core(indices), A.core(o), A.core(lse), A.core(probs),
                                   A.core(workspace), float(softmax_scale), int(d_v), int(num_splits),
                                   A.threads_arg(op, threads), st)
    return (o, lse, probs) if return_probs else (o, lse)


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
    with A.launch(op, q, stream) as st:
        names = ("out", "lse") if return_lse else ("out",)
        outs = A.outputs(op, out, names)
        o = outs[0]
        lse = outs[1] if return_lse else None
        s, h = A.dim(q, op, "q", 3, 0), A.dim(q, op, "q", 3, 1)
        d_v = A.dim(v, op, "v", 3, 2)
        if o is None:
            o = A.empty((s, h, d_v), "bfloat16", q)
        if return_lse and lse is None:
            lse = A.empty((s, h), "float32", q)
        _core.sparse_mha_attention(A.core(q), A.core(k_nope), A.core(k_rope), A.core(v), A.core(indices), A.core(o),
                                   A.core(lse), float(softmax_scale), rounding, A.threads_arg(op, threads), st)
    return (o, lse) if return_lse else o
