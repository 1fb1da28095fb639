"""The "indexer" family (docs/architecture.md, "Op families"): the lightning indexer's scores
(contiguous and paged keys) and backward, its head weights, and the indexer KL losses."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _arrays as A
from . import _core
from ._torch_ops import torch_op


def _ranges(op: str, ranges: Any, like: Any, m: int, n: int, causal: bool) -> Any:
    return A.ranges_array(op, like, m, n, causal) if ranges is None else ranges


def _kl_workspace(op: str, attn: Any, size_fn: Any, *shape: int) -> Any:
    """The KL losses' workspace on the CUDA backend (which needs one; the CPU backend does not)."""
    if not (A.is_cuda(attn) and _core.has_cuda_build):
        return None
    return A.empty(op, "workspace", (size_fn(*shape),), "uint8", attn)


def _ones(op: str, like: Any, n: int) -> Any:
    a = A.empty(op, "k_scale", (n,), "float32", like)
    a[...] = 1
    return a


_BLOCK = "an integer in [1, 2^63 - 1] (cache slots per block)"


@torch_op
def lightning_indexer_scores(q: Any, w: Any, k: Any, k_scale: Any = None, ranges: Any = None, *, out: Any = None,
                             threads: Optional[int] = None, stream: Any = None, kernels: Optional[str] = None) -> Any:
    """Index scores ``I[t, s] = k_scale[s] * sum_h w[t, h] * relu(q[t, h] . k[s])``.

    q [m, H, d] and k [n, d] are both float8_e4m3fn (inference) or both float32 (training);
    w [m, H] float32 (q scale, H^-0.5 and d^-0.5 folded in); k_scale [n] float32 (all ones when
    None); ranges [m, 2] int32 (start, end) per row, causal when None (row t, at position
    n - m + t, sees [0, n - m + t + 1)). Dot products in fp32, ReLU before weighting, k_scale
    after the head sum; -inf outside each row's range. Returns scores [m, n] float32.
    ``kernels`` picks the CUDA backend's kernels for float8 CUDA arrays: 'fast' (tensor cores,
    checked against the exact kernel with DeepGEMM's criterion) or 'exact' (bit-identical with
    the CPU); None: dsa.set_cuda_kernels' choice ('exact' by default).
    """
    op = "lightning_indexer_scores"
    threads = A.threads_arg(op, threads)
    kernels = A.kernels_arg(op, kernels)
    with A.launch(op, q, stream) as st:
        (scores,) = A.outputs(op, out, ("scores",))
        if scores is None or k_scale is None or ranges is None:
            m, n = A.dim(q, op, "q", 3, 0), A.dim(k, op, "k", 2, 0)
            ranges = _ranges(op, ranges, q, m, n, True)  # first: it bounds n by int32
            if k_scale is None:
                k_scale = _ones(op, q, n)
            if scores is None:
                scores = A.empty(op, "scores", (m, n), "float32", q)
        _core.lightning_indexer_scores(A.core(q), A.core(w), A.core(k), A.core(k_scale), A.core(ranges), A.core(scores),
                                       threads, st, kernels)
    return scores


@torch_op
def lightning_indexer_scores_paged(q: Any, w: Any, cache: Any, block_table: Any, block_size: int, ranges: Any, *,
                                   n: Optional[int] = None, out: Any = None, threads: Optional[int] = None,
                                   stream: Any = None, kernels: Optional[str] = None) -> Any:
    """Decode-time index scores over the paged indexer key cache.

    q [m, H, 128] e4m3, w [m, H] float32, cache [slots, 132] uint8 rows (indexer_cache_pack),
    block_table [m, max_blocks] int32, ranges [m, 2] of LOGICAL positions. Position p of row t is
    read from slot ``block_table[t, p // block_size] * block_size + p % block_size``. Returns
    scores [m, n] float32, n = max_blocks * block_size unless given. ``kernels`` as for
    lightning_indexer_scores.
    """
    op = "lightning_indexer_scores_paged"
    block_size = A.int_arg(op, "block_size", block_size, 1, A.INT64_MAX, _BLOCK)
    if n is not None:
        n = A.int_arg(op, "n", n, 0, A.INT32_MAX, "None or an integer in [0, 2^31 - 1] (positions are int32)")
    threads = A.threads_arg(op, threads)
    kernels = A.kernels_arg(op, kernels)
    with A.launch(op, q, stream) as st:
        (scores,) = A.outputs(op, out, ("scores",))
        if scores is None:
            m = A.dim(q, op, "q", 3, 0)
            if n is None:
                max_blocks = A.dim(block_table, op, "block_table", 2, 1)
                n = max_blocks * block_size
                if n > A.INT32_MAX:  # checked before [m, n] is allocated from it
                    A.fail(op, "n", f"None, so block_table.extent(1) * block_size = {max_blocks} * {block_size}",
                           "at most 2^31 - 1 score columns (positions are int32): pass n=")
            scores = A.empty(op, "scores", (m, n), "float32", q)
        _core.lightning_indexer_scores_paged(A.core(q), A.core(w), A.core(cache), A.core(block_table), block_size,
                                             A.core(ranges), A.core(scores), threads, st, kernels)
    return scores


@torch_op
def lightning_indexer_backward(q: Any, w: Any, k: Any, k_scale: Any, ranges: Any, grad_scores: Any, *,
                               need_q: bool = True, need_w: bool = True, need_k: bool = True, out: Any = None,
                               threads: Optional[int] = None, stream: Any = None) -> Tuple[Any, Any, Any]:
    """Gradients of the float32 index score w.r.t. q, w and k given ``grad_scores`` = dL/dI
    [m, n] (ReLU'(0) = 0, k_scale constant, only in-range positions carry gradient). k_scale
    None = ones, ranges None = causal. Returns ``(grad_q, grad_w, grad_k)``; a gradient with
    ``need_x=False`` is not computed and returned as None."""
    op = "lightning_indexer_backward"
    need_q = A.flag_arg(op, "need_q", need_q)
    need_w = A.flag_arg(op, "need_w", need_w)
    need_k = A.flag_arg(op, "need_k", need_k)
    threads = A.threads_arg(op, threads)
    with A.launch(op, q, stream) as st:
        gq, gw, gk = A.outputs(op, out, ("grad_q", "grad_w", "grad_k"))
        qs, ks = A.shape(q, op, "q", 3), A.shape(k, op, "k", 2)
        m, n = qs[0], ks[0]
        ranges = _ranges(op, ranges, q, m, n, True)  # first: it bounds n by int32
        if k_scale is None:
            k_scale = _ones(op, q, n)
        if gq is None and need_q:
            gq = A.empty(op, "grad_q", qs, "float32", q)
        if gw is None and need_w:
            gw = A.empty(op, "grad_w", A.shape(w, op, "w", 2), "float32", q)
        if gk is None and need_k:
            gk = A.empty(op, "grad_k", ks, "float32", q)
        _core.lightning_indexer_backward(A.core(q), A.core(w), A.core(k), A.core(k_scale), A.core(ranges),
                                         A.core(grad_scores), A.core(gq), A.core(gw), A.core(gk), threads, st)
    return gq, gw, gk


@torch_op
def lightning_indexer_weights(proj: Any, q_scale: Any, head_scale: float, dim_scale: float, *, out: Any = None,
                              threads: Optional[int] = None, stream: Any = None) -> Any:
    """The indexer's per-head weights as DeepSeek-V3.2 folds them:
    ``w = fl32(fl32(fl32(proj * head_scale) * q_scale) * dim_scale)``; proj, q_scale, w [m, H]
    float32 (``out=proj`` in place)."""
    op = "lightning_indexer_weights"
    head_scale = A.real_arg(op, "head_scale", head_scale)
    dim_scale = A.real_arg(op, "dim_scale", dim_scale)
    threads = A.threads_arg(op, threads)
    with A.launch(op, proj, stream) as st:
        (w,) = A.outputs(op, out, ("w",))
        if w is None:
            w = A.empty(op, "w", A.shape(proj, op, "proj", 2), "float32", proj)
        _core.lightning_indexer_weights(A.core(proj), A.core(q_scale), A.core(w), head_scale, dim_scale, threads, st)
    return w


def _kl_outputs(op: str, out: Any, attn: Any) -> Tuple[Any, Any, int, int]:
    """The KL losses' (loss [1], grad_index [m, n]) outputs, from ``out=`` or allocated like
    ``attn``, with m and n."""
    loss, grad = A.outputs(op, out, ("loss", "grad_index"))
    m, _, n = A.shape(attn, op, "attn", 3)
    if loss is None:
        loss = A.empty(op, "loss", (1,), "float32", attn)
    if grad is None:
        grad = A.empty(op, "grad_index", (m, n), "float32", attn)
    return loss, grad, m, n


@torch_op
def indexer_kl_loss_dense(attn: Any, index_scores: Any, ranges: Any = None, *, out: Any = None,
                          threads: Optional[int] = None, stream: Any = None) -> Tuple[Any, Any]:
    """Dense warm-up loss (DeepSeek-V3.2 eq. 3): ``L = sum_t KL(p_t || softmax(I_t))`` over each
    row's key range, p_t = the L1-normalised head sum of ``attn`` [m, h, n] (main attention
    probabilities), I = ``index_scores`` [m, n]; ranges causal when None. Returns
    ``(loss [1] float32, grad_index [m, n] float32)`` with
    ``dL/dI[t, s] = softmax(I_t)[s] * sum(p_t) - p_t[s]`` (0 outside the ranges)."""
    op = "indexer_kl_loss_dense"
    threads = A.threads_arg(op, threads)
    with A.launch(op, attn, stream) as st:
        if ranges is None:
            m, _, n = A.shape(attn, op, "attn", 3)
            ranges = _ranges(op, ranges, attn, m, n, True)  # first: it bounds n by int32
        loss, grad, m, n = _kl_outputs(op, out, attn)
        workspace = _kl_workspace(op, attn, _core.indexer_kl_loss_dense_workspace_size, m)
        _core.indexer_kl_loss_dense(A.core(attn), A.core(index_scores), A.core(ranges), A.core(loss), A.core(grad),
                                    workspace, threads, st)
    return loss, grad


@torch_op
def indexer_kl_loss_sparse(attn: Any, index_scores: Any, topk: Any, *, out: Any = None,
                           threads: Optional[int] = None, stream: Any = None) -> Tuple[Any, Any]:
    """Sparse-stage loss (eq. 4): the dense loss restricted to each row's selection ``topk``
    [m, k] int32 (-1 padded), both distributions renormalised on it. Returns
    ``(loss [1], grad_index [m, n])``, the gradient zero outside the selection."""
    op = "indexer_kl_loss_sparse"
    threads = A.threads_arg(op, threads)
    with A.launch(op, attn, stream) as st:
        loss, grad, m, n = _kl_outputs(op, out, attn)
        workspace = _kl_workspace(op, attn, _core.indexer_kl_loss_sparse_workspace_size, m,
                                  A.dim(topk, op, "topk", 2, 1))
        _core.indexer_kl_loss_sparse(A.core(attn), A.core(index_scores), A.core(topk), A.core(loss), A.core(grad),
                                     workspace, threads, st)
    return loss, grad
