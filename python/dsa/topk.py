"""The "topk" family (docs/architecture.md, "Op families"): top-k selection (plain and through a
page table) and gather_rows."""

from __future__ import annotations

from typing import Any, Optional

from . import _arrays as A
from . import _core
from ._torch_ops import torch_op
from .indexer import _BLOCK, _ranges


_K = "an integer in [1, 2^31 - 1] (k > the row's range pads with -1)"


@torch_op
def topk_indices(scores: Any, k: int, ranges: Any = None, *, out: Any = None, threads: Optional[int] = None,
                 stream: Any = None) -> Any:
    """Per row of ``scores`` [m, n] float32, the k largest scores within the row's range
    (ranges [m, 2] int32; the whole row when None) as int32 column indices in ascending order,
    -1 padded when the range holds fewer than k positions; NaN ranks above every number and -inf
    below (torch.topk's order); ties go to the smaller index. Returns [m, k]."""
    op = "topk_indices"
    # k sizes the [m, k] output: checked before it is allocated (2**40 used to allocate 4 TiB first).
    k = A.int_arg(op, "k", k, 1, A.INT32_MAX, _K)
    threads = A.threads_arg(op, threads)
    with A.launch(op, scores, stream) as st:
        (indices,) = A.outputs(op, out, ("indices",))
        if indices is None or ranges is None:
            m, n = A.shape(scores, op, "scores", 2)
            ranges = _ranges(op, ranges, scores, m, n, False)
            if indices is None:
                indices = A.empty(op, "indices", (m, k), "int32", scores)
        _core.topk_indices(A.core(scores), A.core(ranges), k, A.core(indices), threads, st)
    return indices


@torch_op
def topk_indices_paged(scores: Any, k: int, block_table: Any, block_size: int, ranges: Any = None, *, out: Any = None,
                       threads: Optional[int] = None, stream: Any = None) -> Any:
    """topk_indices mapped through a page table to physical cache slots: logical position p of
    row t becomes ``block_table[t, p // block_size] * block_size + p % block_size`` (-1 stays -1;
    order is ascending logical position). Returns slots [m, k] int32."""
    op = "topk_indices_paged"
    k = A.int_arg(op, "k", k, 1, A.INT32_MAX, _K)
    block_size = A.int_arg(op, "block_size", block_size, 1, A.INT64_MAX, _BLOCK)
    threads = A.threads_arg(op, threads)
    with A.launch(op, scores, stream) as st:
        (slots,) = A.outputs(op, out, ("slots",))
        if slots is None or ranges is None:
            m, n = A.shape(scores, op, "scores", 2)
            ranges = _ranges(op, ranges, scores, m, n, False)
            if slots is None:
                slots = A.empty(op, "slots", (m, k), "int32", scores)
        _core.topk_indices_paged(A.core(scores), A.core(ranges), k, A.core(block_table), block_size, A.core(slots),
                                 threads, st)
    return slots


@torch_op
def gather_rows(src: Any, indices: Any, *, out: Any = None, threads: Optional[int] = None, stream: Any = None) -> Any:
    """``dst[t, j, :] = src[indices[t, j], :]`` (zeros where the index is -1): src [n, d] of any
    dtype (copied bit for bit), indices [m, k] int32. Returns dst [m, k, d]."""
    op = "gather_rows"
    threads = A.threads_arg(op, threads)
    with A.launch(op, src, stream) as st:
        (dst,) = A.outputs(op, out, ("dst",))
        if dst is None:
            (_, d), dtype = A.info(src, op, "src", 2)
            m, k = A.shape(indices, op, "indices", 2)
            dst = A.empty_like_dtype(op, "dst", src, (m, k, d), src, dtype)
        _core.gather_rows(A.core(src), A.core(indices), A.core(dst), threads, st)
    return dst
