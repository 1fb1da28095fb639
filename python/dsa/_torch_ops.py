"""dsa's ops as PyTorch custom ops: ``torch.ops.dsa.<name>`` (docs/python.md, "dsa inside PyTorch").

Each public op of dsa is registered with ``torch.library.custom_op`` under its Python name, its
positional arguments those of the Python function and its keyword arguments after them (less
``out=`` and ``stream=``: a custom op returns new tensors and runs on torch's current stream), with
a fake implementation that gives torch.compile and the meta device the outputs' shapes and dtypes
without running anything. The implementation is the Python function itself: outputs and
workspaces come from torch's caching allocator, the kernels run on torch's current stream, and
nothing in dsa synchronises with the host, so a call can be captured in a CUDA graph.

``dsa.<op>(...)`` called with torch tensors (every array argument a torch tensor, no ``out=`` or
``stream=``) goes through ``torch.ops.dsa.<op>``, so torch.compile(fullgraph=True) sees one node
per call. With ``out=`` or ``stream=``, or NumPy arrays, it calls dsa directly as before. The cache
packers have a second, in-place op for ``out=`` (``kv_cache_fp8_pack_into``,
``indexer_cache_pack_into``): writing new tokens into an existing cache is what an engine does at
every step.

Ops are registered when ``dsa`` is imported after torch, else at the first call with a torch tensor,
or by ``dsa.register_torch_ops()``. dsa never imports torch itself.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from . import _arrays as A
from . import _core

_FP8 = "float8_e4m3fn"


_torch: Any = None  # the torch module once the ops are registered (read without sys.modules under dynamo)


def _t():
    return _torch if _torch is not None else sys.modules["torch"]


def _dt(name: str):
    t = _t()
    return getattr(t, name)


# ---- the fake (meta) implementations: output shapes and dtypes only -------------------------------


def _new(like: Any, shape: Tuple[Any, ...], dtype: str) -> Any:
    return like.new_empty(shape, dtype=_dt(dtype))


def _none(*_: Any) -> None:
    return None


def _fake_pack(row_bytes: int) -> Callable[..., Any]:
    def fake(x: Any, *rest: Any) -> Any:
        slots = rest[-2]
        rows = x.shape[0] if slots is None else _t().library.get_ctx().new_dynamic_size()
        return _new(x, (rows, row_bytes), "uint8")
    return fake


def _fake_linear(x: Any, w: Any, out_dtype: Optional[str], threads: Any) -> Any:
    dtype = out_dtype if out_dtype is not None else ("float32" if x.dtype == _dt("float32") else "bfloat16")
    return _new(x, (x.shape[0], w.shape[0]), dtype)


def _fake_paged_scores(q, w, cache, block_table, block_size, ranges, n, threads, kernels):
    return _new(q, (q.shape[0], block_table.shape[1] * block_size if n is None else n), "float32")


def _fake_backward(q, w, k, k_scale, ranges, grad_scores, need_q, need_w, need_k, threads):
    return (_new(q, tuple(q.shape) if need_q else (0,), "float32"),
            _new(q, tuple(w.shape) if need_w else (0,), "float32"),
            _new(q, tuple(k.shape) if need_k else (0,), "float32"))


def _fake_kl(attn: Any, *_: Any) -> Any:
    return _new(attn, (1,), "float32"), _new(attn, (attn.shape[0], attn.shape[2]), "float32")


def _fake_sparse_mla(q, kv, indices, softmax_scale, d_v, out_dtype, return_probs, num_splits, threads, kernels):
    s, h = q.shape[0], q.shape[1]
    return (_new(q, (s, h, d_v), out_dtype), _new(q, (s, h), "float32"),
            _new(q, (s, indices.shape[1]) if return_probs else (0,), "float32"))


def _fake_sparse_mha(q, k_nope, k_rope, v, indices, softmax_scale, rounding, return_lse, threads):
    s, h = q.shape[0], q.shape[1]
    return _new(q, (s, h, v.shape[2]), "bfloat16"), _new(q, (s, h) if return_lse else (0,), "float32")


# ---- the ops --------------------------------------------------------------------------------------
#
# name: (arguments, returns, fake). An argument is "<type> <name>" with the Python parameter's name;
# the schema takes its default from the Python function. "dtype" is a str in the schema (a dsa
# dtype name; a torch dtype is mapped to its name before the call). "Tensor(a!)" is written in place.

_SPECS: Dict[str, Tuple[str, str, Callable[..., Any]]] = {
    "hadamard_transform": ("Tensor x, float scale, int? threads", "Tensor",
                           lambda x, *_: x.new_empty(x.shape)),
    "act_quant": ("Tensor x, int group_size, str scale_format, int? threads", "(Tensor, Tensor)",
                  lambda x, g, *_: (_new(x, tuple(x.shape), _FP8), _new(x, (x.shape[0], x.shape[1] // g), "float32"))),
    "act_dequant": ("Tensor q, Tensor s, int group_size, dtype dtype, int? threads", "Tensor",
                    lambda q, s, g, dtype, *_: _new(q, tuple(q.shape), dtype)),
    "weight_quant": ("Tensor w, int? threads", "(Tensor, Tensor)",
                     lambda w, *_: (_new(w, tuple(w.shape), _FP8),
                                    _new(w, ((w.shape[0] + 127) // 128, (w.shape[1] + 127) // 128), "float32"))),
    "weight_dequant": ("Tensor q, Tensor s, dtype dtype, int? threads", "Tensor",
                       lambda q, s, dtype, *_: _new(q, tuple(q.shape), dtype)),
    "kv_cache_fp8_pack": ("Tensor kv, Tensor? slots, int? threads", "Tensor",
                          _fake_pack(int(_core.kv_fp8_row_bytes))),
    "kv_cache_fp8_unpack": ("Tensor cache, int? threads", "Tensor",
                            lambda c, *_: _new(c, (c.shape[0], int(_core.kv_dim)), "bfloat16")),
    "indexer_cache_pack": ("Tensor k, Tensor k_scale, Tensor? slots, int? threads", "Tensor",
                           _fake_pack(int(_core.indexer_cache_row_bytes))),
    "indexer_cache_unpack": ("Tensor cache, int? threads", "(Tensor, Tensor)",
                             lambda c, *_: (_new(c, (c.shape[0], int(_core.indexer_cache_dim)), _FP8),
                                            _new(c, (c.shape[0],), "float32"))),
    "fp8_linear": ("Tensor x, Tensor w, Tensor w_scale, str act_format, dtype out_dtype, int? threads", "Tensor",
                   lambda x, w, ws, fmt, dtype, *_: _new(x, (x.shape[0], w.shape[0]), dtype)),
    "linear": ("Tensor x, Tensor w, dtype? out_dtype, int? threads", "Tensor", _fake_linear),
    "rms_norm": ("Tensor x, Tensor weight, float eps, int? threads", "Tensor",
                 lambda x, *_: _new(x, tuple(x.shape), "bfloat16")),
    "add_rms_norm": ("Tensor x, Tensor(a!) residual, Tensor weight, float eps, int? threads", "Tensor",
                     lambda x, *_: _new(x, tuple(x.shape), "bfloat16")),
    "layer_norm": ("Tensor x, Tensor weight, Tensor bias, float eps, int? threads", "Tensor",
                   lambda x, *_: _new(x, tuple(x.shape), "bfloat16")),
    "rope_apply": ("Tensor(a!) x, Tensor positions, str layout, int? dim, float base, float factor, "
                   "int original_max_position, int max_position, float beta_fast, float beta_slow, int? threads",
                   "()", _none),
    "swiglu": ("Tensor gate, Tensor up, int? threads", "Tensor",
               lambda g, *_: _new(g, tuple(g.shape), "bfloat16")),
    "lightning_indexer_scores": ("Tensor q, Tensor w, Tensor k, Tensor? k_scale, Tensor? ranges, int? threads, "
                                 "str? kernels", "Tensor",
                                 lambda q, w, k, *_: _new(q, (q.shape[0], k.shape[0]), "float32")),
    "lightning_indexer_scores_paged": ("Tensor q, Tensor w, Tensor cache, Tensor block_table, int block_size, "
                                       "Tensor ranges, int? n, int? threads, str? kernels", "Tensor",
                                       _fake_paged_scores),
    "lightning_indexer_backward": ("Tensor q, Tensor w, Tensor k, Tensor? k_scale, Tensor? ranges, "
                                   "Tensor grad_scores, bool need_q, bool need_w, bool need_k, int? threads",
                                   "(Tensor, Tensor, Tensor)", _fake_backward),
    "lightning_indexer_weights": ("Tensor proj, Tensor q_scale, float head_scale, float dim_scale, int? threads",
                                  "Tensor", lambda p, *_: _new(p, tuple(p.shape), "float32")),
    "indexer_kl_loss_dense": ("Tensor attn, Tensor index_scores, Tensor? ranges, int? threads", "(Tensor, Tensor)",
                              _fake_kl),
    "indexer_kl_loss_sparse": ("Tensor attn, Tensor index_scores, Tensor topk, int? threads", "(Tensor, Tensor)",
                               _fake_kl),
    "moe_route": ("Tensor logits, Tensor? bias, int top_k, int n_group, int topk_group, str scoring, "
                  "bool norm_topk_prob, float routed_scaling_factor, int? threads", "(Tensor, Tensor)",
                  lambda lg, b, k, *_: (_new(lg, (lg.shape[0], k), "int32"), _new(lg, (lg.shape[0], k), "float32"))),
    "moe_combine": ("Tensor expert_out, Tensor rows, Tensor weights, Tensor? shared, int? threads", "Tensor",
                    lambda e, r, *_: _new(e, (r.shape[0], e.shape[1]), "bfloat16")),
    "sparse_mla_attention": ("Tensor q, Tensor kv, Tensor indices, float softmax_scale, int d_v, dtype out_dtype, "
                             "bool return_probs, int num_splits, int? threads, str? kernels",
                             "(Tensor, Tensor, Tensor)", _fake_sparse_mla),
    "sparse_mha_attention": ("Tensor q, Tensor k_nope, Tensor k_rope, Tensor v, Tensor indices, float softmax_scale, "
                             "str rounding, bool return_lse, int? threads", "(Tensor, Tensor)", _fake_sparse_mha),
    "topk_indices": ("Tensor scores, int k, Tensor? ranges, int? threads", "Tensor",
                     lambda s, k, *_: _new(s, (s.shape[0], k), "int32")),
    "topk_indices_paged": ("Tensor scores, int k, Tensor block_table, int block_size, Tensor? ranges, int? threads",
                           "Tensor", lambda s, k, *_: _new(s, (s.shape[0], k), "int32")),
    "gather_rows": ("Tensor src, Tensor indices, int? threads", "Tensor",
                    lambda src, idx, *_: src.new_empty((idx.shape[0], idx.shape[1], src.shape[1]))),
}

# The in-place op of an op whose out= is the cache it writes into: (its name, its arguments).
_INTO = {
    "kv_cache_fp8_pack": ("kv_cache_fp8_pack_into", "Tensor kv, Tensor(a!) cache, Tensor? slots, int? threads"),
    "indexer_cache_pack": ("indexer_cache_pack_into",
                           "Tensor k, Tensor k_scale, Tensor(a!) cache, Tensor? slots, int? threads"),
}


def _drop_empty(name: str, result: Any, args: Dict[str, Any]) -> Any:
    """The op's fixed outputs as the Python function returns them: optional outputs not asked for
    come back from the op as empty placeholders (an op's outputs are fixed by its schema)."""
    if name == "sparse_mla_attention":
        return result if args["return_probs"] else result[:2]
    if name == "sparse_mha_attention":
        return result if args["return_lse"] else result[0]
    if name == "lightning_indexer_backward":
        return tuple(g if args[f] else None for g, f in zip(result, ("need_q", "need_w", "need_k")))
    if name == "rope_apply":
        return args["x"]
    return result


def _with_placeholders(name: str, result: Any, args: Dict[str, Any]) -> Any:
    """The inverse of _drop_empty, in the implementation: what the Python function returned, as the
    schema's fixed outputs."""
    t = _t()
    if name == "sparse_mla_attention" and not args["return_probs"]:
        return result[0], result[1], result[1].new_empty((0,))
    if name == "sparse_mha_attention":
        return result if args["return_lse"] else (result, result.new_empty((0,), dtype=t.float32))
    if name == "lightning_indexer_backward":
        empty = args["q"].new_empty((0,), dtype=t.float32)
        return tuple(empty.clone() if g is None else g for g in result)
    if name == "rope_apply":
        return None
    return result


# ---- registration ---------------------------------------------------------------------------------

_FUNCTIONS: Dict[str, Callable[..., Any]] = {}  # name -> the Python function (undecorated)
_ops: Any = None  # torch.ops.dsa once registered


def _parse(arguments: str):
    """[(type, name)] of a schema's argument list."""
    return [tuple(a.strip().rsplit(" ", 1)) for a in arguments.split(",")]


def _default_text(v: Any) -> str:
    if v is None or isinstance(v, bool):
        return str(v)
    if isinstance(v, str):
        return '"' + v + '"'
    return repr(v)


def _kwonly(fn: Callable[..., Any], arguments: str):
    """The schema's keyword-only arguments: the Python function's, less tensors (a custom op's
    tensors are positional: ``slots`` of the cache packers)."""
    params = inspect.signature(fn).parameters
    return {n for t, n in _parse(arguments)
            if n in params and params[n].kind is inspect.Parameter.KEYWORD_ONLY and not t.startswith("Tensor")}


def _schema(fn: Callable[..., Any], arguments: str, returns: str) -> str:
    params = inspect.signature(fn).parameters
    kwonly = _kwonly(fn, arguments)
    parts = []
    for typ, name in _parse(arguments):
        if name in kwonly and "*" not in parts:
            parts.append("*")
        typ = typ.replace("dtype", "str")
        p = params.get(name)
        default = p.default if p is not None else inspect.Parameter.empty
        parts.append(f"{typ} {name}" if default is inspect.Parameter.empty else f"{typ} {name}={_default_text(default)}")
    return "(" + ", ".join(parts) + ") -> " + returns


def _register_one(torch: Any, op_name: str, fn: Callable[..., Any], arguments: str, returns: str,
                  fake: Callable[..., Any], name: str, out_arg: Optional[str] = None) -> None:
    kinds = _parse(arguments)
    names = [n for _, n in kinds]
    mutated = [n for t, n in kinds if t.endswith("(a!)")]
    params = inspect.signature(fn).parameters
    defaults = {n: params[n].default for n in names if n in params and params[n].default is not inspect.Parameter.empty}

    def bind(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Every argument by name (torch passes keyword arguments left at their defaults as absent)."""
        kw = dict(defaults)
        kw.update(zip(names, args))
        kw.update(kwargs)
        return kw

    def impl(*args: Any, **kwargs: Any) -> Any:
        kw = bind(args, kwargs)
        if out_arg is not None:
            fn(**{("out" if n == out_arg else n): v for n, v in kw.items()})
            return None
        return _with_placeholders(name, fn(**kw), kw)

    def fake_impl(*args: Any, **kwargs: Any) -> Any:
        kw = bind(args, kwargs)
        return fake(*[kw[n] for n in names])

    op = torch.library.custom_op(f"dsa::{op_name}", impl, mutates_args=tuple(mutated),
                                 schema=_schema(fn, arguments, returns))
    op.register_fake(fake_impl)


# ---- derivatives ----------------------------------------------------------------------------------
#
# The ops with a derivative in dsa's own terms: the Hadamard transform is its own adjoint (H is
# symmetric: dx = H dy * scale), and the float32 indexer score's gradients are
# lightning_indexer_backward's. Every other op registers none (torch's error on a backward).


# setup_context gets the positional inputs with their defaults filled in; backward returns one
# gradient per positional input.


def _hadamard_setup(ctx: Any, inputs: Tuple[Any, ...], keyword_only_inputs: Dict[str, Any], output: Any) -> None:
    ctx.scale = inputs[1]


def _hadamard_backward(ctx: Any, grad: Any) -> Tuple[Any, ...]:
    return _ops.hadamard_transform(grad.contiguous(), ctx.scale), None


def _scores_setup(ctx: Any, inputs: Tuple[Any, ...], keyword_only_inputs: Dict[str, Any], output: Any) -> None:
    ctx.save_for_backward(*inputs)  # q, w, k, k_scale, ranges


def _scores_backward(ctx: Any, grad: Any) -> Tuple[Any, ...]:
    q, w, k, k_scale, ranges = ctx.saved_tensors
    need_q, need_w, need_k = ctx.needs_input_grad[:3]
    gq, gw, gk = _ops.lightning_indexer_backward(q, w, k, k_scale, ranges, grad.contiguous(),
                                                 need_q=need_q, need_w=need_w, need_k=need_k)
    return gq if need_q else None, gw if need_w else None, gk if need_k else None, None, None


_AUTOGRAD = {
    "hadamard_transform": (_hadamard_setup, _hadamard_backward),
    "lightning_indexer_scores": (_scores_setup, _scores_backward),
}


def register_torch_ops() -> Any:
    """Registers dsa's ops with torch (``torch.ops.dsa.<name>``) if that is not done yet, importing
    torch; returns ``torch.ops.dsa``. Done by ``import dsa`` when torch was imported first."""
    global _ops, _torch
    if _ops is None:
        import torch
        _torch = torch
        for name, (arguments, returns, fake) in _SPECS.items():
            _register_one(torch, name, _FUNCTIONS[name], arguments, returns, fake, name)
        for name, (into, arguments) in _INTO.items():
            _register_one(torch, into, _FUNCTIONS[name], arguments, "()", _none, name, out_arg="cache")
        _ops = torch.ops.dsa
        for name, (setup, backward) in _AUTOGRAD.items():
            torch.library.register_autograd(f"dsa::{name}", backward, setup_context=setup)
    return _ops


# ---- routing dsa.<op>(torch tensors) through torch.ops.dsa.<op> -----------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v: Any) -> bool:
    return (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
            and math.isfinite(v))


_SCALAR_OK = {
    "int": _is_int,
    "float": _is_real,
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
}


def _routable(args: Dict[str, Any], kinds) -> bool:
    """Whether a call can go through the torch op as given: every array argument a torch tensor
    (None where optional), every scalar of the schema's type. Anything else takes the direct path,
    whose checks name what is wrong with the dsa.Error messages of every other call."""
    tensor = _t().Tensor
    for typ, name in kinds:
        v = args[name]
        optional = typ.endswith("?")
        if optional and v is None:
            continue
        base = typ.rstrip("?").split("(")[0]
        if base == "Tensor":
            if not isinstance(v, tensor):
                return False
        elif base == "dtype":
            if not isinstance(v, str):
                return False
        elif not _SCALAR_OK[base](v):
            return False
    return True


def _dtype_arg(v: Any) -> Any:
    """A torch dtype as its dsa name (the schema takes names; _arrays.dtype_name maps it);
    anything else as it is, for the direct path to name."""
    if isinstance(v, _t().dtype):
        try:
            return A.dtype_name(v)
        except A.Error:
            return v
    return v


def torch_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorates a public op: calls with torch tensors go through ``torch.ops.dsa.<name>``."""
    name = fn.__name__
    _FUNCTIONS[name] = fn
    arguments, _, _ = _SPECS[name]
    kinds = _parse(arguments)
    kwonly = _kwonly(fn, arguments)
    into = _INTO.get(name)
    into_kinds = _parse(into[1]) if into else None
    into_kwonly = _kwonly(fn, into[1]) if into else None
    sig = inspect.signature(fn)
    positional = [p.name for p in sig.parameters.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    defaults = {p.name: p.default for p in sig.parameters.values() if p.default is not inspect.Parameter.empty}
    known = set(sig.parameters)
    first = positional[0]
    dtype_names = [n for t, n in kinds if t.rstrip("?") == "dtype"]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _ops is None:  # not registered: only if this is a torch call, and then first
            torch = sys.modules.get("torch")
            lead = args[0] if args else kwargs.get(first)
            if torch is None or not isinstance(lead, torch.Tensor):
                return fn(*args, **kwargs)
        if len(args) > len(positional) or not set(kwargs) <= known:
            return fn(*args, **kwargs)
        vals = dict(defaults)
        for n, v in zip(positional, args):
            if n in kwargs:
                return fn(*args, **kwargs)  # Python's own TypeError
            vals[n] = v
        vals.update(kwargs)
        if vals.get("stream") is not None or len(vals) < len(known):
            return fn(*args, **kwargs)
        for n in dtype_names:
            vals[n] = _dtype_arg(vals[n])
        out = vals.get("out")
        if out is None:
            if not _routable(vals, kinds):
                return fn(*args, **kwargs)
            ops = register_torch_ops()
            result = getattr(ops, name)(*[vals[n] for _, n in kinds if n not in kwonly],
                                        **{n: vals[n] for n in kwonly})
            return _drop_empty(name, result, vals)
        if into is not None:
            vals["cache"] = out
            if _routable(vals, into_kinds):
                getattr(register_torch_ops(), into[0])(*[vals[n] for _, n in into_kinds if n not in into_kwonly],
                                                       **{n: vals[n] for n in into_kwonly})
                return out
        return fn(*args, **kwargs)

    return wrapper
