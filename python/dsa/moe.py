"""The "moe" family (docs/architecture.md, "Op families"): the MoE gate's expert routing
(noaux_tc) and the weighted combine of the experts' outputs."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _arrays as A
from . import _core
from ._torch_ops import torch_op


@torch_op
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


@torch_op
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
