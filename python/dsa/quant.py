"""Walsh-Hadamard transform, FP8 quantizers and the cache-row formats."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _arrays as A
from . import _core
from ._torch_ops import torch_op

_GROUP = "a positive integer (the group length)"
_FORMATS = "'ue8m0' or 'fp32'"


@torch_op
def hadamard_transform(x: Any, scale: float = 1.0, *, out: Any = None, threads: Optional[int] = None,
                       stream: Any = None) -> Any:
    """``y = (x @ H_n) * scale`` over the rows of ``x`` [rows, n] (float32 or bfloat16).

    H_n is the Sylvester Hadamard matrix (natural order), ``H[i, j] = (-1)^popcount(i & j)``, for
    n = 2^m <= 32768, or 12, 20, 28, 40 times a power of two (fast-hadamard-transform's
    convention). Arithmetic in fp32, the result times ``scale`` (a finite number) rounded once to
    the dtype of x. The indexer's ``rotate_activation`` is n = 128, scale = 128 ** -0.5 on
    bfloat16. ``out=x`` transforms in place. Returns y (``out`` itself when given).
    """
    op = "hadamard_transform"
    scale = A.real_arg(op, "scale", scale)
    threads = A.threads_arg(op, threads)
    with A.launch(op, x, stream) as st:
        (y,) = A.outputs(op, out, ("y",))
        if y is None:
            shape, dtype = A.info(x, op, "x", 2)
            y = A.empty_like_dtype(op, "y", x, shape, x, dtype)
        _core.hadamard_transform(A.core(x), A.core(y), scale, threads, st)
    return y


@torch_op
def act_quant(x: Any, *, group_size: int = 128, scale_format: str = "ue8m0", out: Any = None,
              threads: Optional[int] = None, stream: Any = None) -> Tuple[Any, Any]:
    """FP8 activation quantization (DeepSeek ``act_quant``) of ``x`` [rows, cols], 1 x group_size.

    Per group: ``amax = max(max|x|, 1e-4)``, ``v = fl32(amax * fl32(1/448))``; with
    ``scale_format="ue8m0"`` ``s = 2^ceil(log2 v)``, with ``"fp32"`` ``s = v``;
    ``q = e4m3(clamp(x / s, -448, 448))`` rounded to nearest even. Returns ``(q, s)``: q
    [rows, cols] float8_e4m3fn codes, s [rows, cols / group_size] float32 (``x ~ q * s``).
    ``out=(q, s)`` writes into given arrays.
    """
    op = "act_quant"
    # group_size sizes s: checked (an integer >= 1) before s is allocated from it.
    group_size = A.int_arg(op, "group_size", group_size, 1, A.INT64_MAX, _GROUP)
    scale_format = A.str_arg(op, "scale_format", scale_format, _FORMATS)
    threads = A.threads_arg(op, threads)
    with A.launch(op, x, stream) as st:
        q, s = A.outputs(op, out, ("q", "s"))
        if q is None or s is None:
            rows, cols = A.shape(x, op, "x", 2)
            if q is None:
                q = A.empty(op, "q", (rows, cols), "float8_e4m3fn", x)
            if s is None:
                s = A.empty(op, "s", (rows, cols // group_size), "float32", x)
        _core.act_quant(A.core(x), A.core(q), A.core(s), scale_format, group_size, threads, st)
    return q, s


@torch_op
def act_dequant(q: Any, s: Any, *, group_size: int = 128, dtype: Any = "float32", out: Any = None,
                threads: Optional[int] = None, stream: Any = None) -> Any:
    """``y = q * s`` with one scale per 1 x group_size group; y float32 or bfloat16 (``dtype``,
    ignored when ``out`` is given), the fp32 product rounded once."""
    op = "act_dequant"
    group_size = A.int_arg(op, "group_size", group_size, 1, A.INT64_MAX, _GROUP)
    dtype = A.dtype_name(dtype, op, "dtype")
    threads = A.threads_arg(op, threads)
    with A.launch(op, q, stream) as st:
        (y,) = A.outputs(op, out, ("y",))
        if y is None:
            y = A.empty(op, "y", A.shape(q, op, "q", 2), dtype, q)
        _core.act_dequant(A.core(q), A.core(s), A.core(y), group_size, threads, st)
    return y


@torch_op
def weight_quant(w: Any, *, out: Any = None, threads: Optional[int] = None, stream: Any = None) -> Tuple[Any, Any]:
    """FP8 weight quantization in 128 x 128 blocks (ragged at the edges): per block
    ``s = max(amax, 1e-8) / 448`` (fp32), ``q = e4m3(w / s)``. Returns ``(q, s)``: q like w,
    s [ceil(rows / 128), ceil(cols / 128)] float32 (the checkpoint's ``weight_scale_inv``)."""
    op = "weight_quant"
    threads = A.threads_arg(op, threads)
    with A.launch(op, w, stream) as st:
        q, s = A.outputs(op, out, ("q", "s"))
        if q is None or s is None:
            rows, cols = A.shape(w, op, "w", 2)
            if q is None:
                q = A.empty(op, "q", (rows, cols), "float8_e4m3fn", w)
            if s is None:
                s = A.empty(op, "s", ((rows + 127) // 128, (cols + 127) // 128), "float32", w)
        _core.weight_quant(A.core(w), A.core(q), A.core(s), threads, st)
    return q, s


@torch_op
def weight_dequant(q: Any, s: Any, *, dtype: Any = "float32", out: Any = None, threads: Optional[int] = None,
                   stream: Any = None) -> Any:
    """``w = q * s`` with one scale per 128 x 128 block; w float32 or bfloat16 (``dtype``)."""
    op = "weight_dequant"
    dtype = A.dtype_name(dtype, op, "dtype")
    threads = A.threads_arg(op, threads)
    with A.launch(op, q, stream) as st:
        (w,) = A.outputs(op, out, ("w",))
        if w is None:
            w = A.empty(op, "w", A.shape(q, op, "q", 2), dtype, q)
        _core.weight_dequant(A.core(q), A.core(s), A.core(w), threads, st)
    return w


def _pack_rows(op: str, like: Any, n: int, slots: Any) -> int:
    """Rows of a cache allocated for `slots` (n without them): max(slots) + 1. `slots` is checked
    as the op checks it (an int32 vector) before an entry is read: a float or 2-D array, a list or
    any other object is the op's message, never truncated or iterated."""
    if slots is None:
        return n
    A.no_allocation(op, like)
    if A.is_torch(slots) and slots.is_cuda:
        (count,), dtype = A.info(slots, op, "slots", 1)
        if dtype != "int32":
            A.fail(op, "slots.dtype", dtype, "int32")
        return max(int(slots.max()) + 1, 0) if count else 0
    return int(_core.slot_rows(A.core(slots), op))


@torch_op
def kv_cache_fp8_pack(kv: Any, *, slots: Any = None, out: Any = None, threads: Optional[int] = None,
                      stream: Any = None) -> Any:
    """Packs tokens ``kv`` [n, 576] bfloat16 (512 latent + 64 RoPE) into FlashMLA's 656-byte FP8
    rows: 512 e4m3 codes | 4 float32 scales (act_quant ue8m0, groups of 128) | 64 bfloat16 RoPE.

    Without ``slots`` token i goes to row i; with ``slots`` [n] int32 to row ``slots[i]`` (-1
    skips it). ``out`` is the cache [rows, 656] uint8, written in place (rows not written keep
    their bytes); allocated (zeroed, ``max(slots) + 1`` or n rows) when not given.
    """
    op = "kv_cache_fp8_pack"
    threads = A.threads_arg(op, threads)
    with A.launch(op, kv, stream) as st:
        (cache,) = A.outputs(op, out, ("cache",))
        if cache is None:
            rows = _pack_rows(op, kv, A.dim(kv, op, "kv", 2, 0), slots)
            cache = A.empty(op, "cache", (rows, _core.kv_fp8_row_bytes), "uint8", kv, zero=True)
        _core.kv_cache_fp8_pack(A.core(kv), A.core(cache), A.core(slots), threads, st)
    return cache


@torch_op
def kv_cache_fp8_unpack(cache: Any, *, out: Any = None, threads: Optional[int] = None, stream: Any = None) -> Any:
    """Unpacks 656-byte FP8 rows ``cache`` [n, 656] into kv [n, 576] bfloat16 (latent = code *
    scale, RoPE bit for bit)."""
    op = "kv_cache_fp8_unpack"
    threads = A.threads_arg(op, threads)
    with A.launch(op, cache, stream) as st:
        (kv,) = A.outputs(op, out, ("kv",))
        if kv is None:
            kv = A.empty(op, "kv", (A.dim(cache, op, "cache", 2, 0), _core.kv_dim), "bfloat16", cache)
        _core.kv_cache_fp8_unpack(A.core(cache), A.core(kv), threads, st)
    return kv


@torch_op
def indexer_cache_pack(k: Any, k_scale: Any, *, slots: Any = None, out: Any = None,
                       threads: Optional[int] = None, stream: Any = None) -> Any:
    """Packs indexer keys ``k`` [n, 128] (e4m3 codes) and ``k_scale`` [n] float32 into 132-byte
    rows (128 codes | float32 scale), bit for bit; ``slots`` and ``out`` as kv_cache_fp8_pack."""
    op = "indexer_cache_pack"
    threads = A.threads_arg(op, threads)
    with A.launch(op, k, stream) as st:
        (cache,) = A.outputs(op, out, ("cache",))
        if cache is None:
            rows = _pack_rows(op, k, A.dim(k, op, "k", 2, 0), slots)
            cache = A.empty(op, "cache", (rows, _core.indexer_cache_row_bytes), "uint8", k, zero=True)
        _core.indexer_cache_pack(A.core(k), A.core(k_scale), A.core(cache), A.core(slots), threads, st)
    return cache


@torch_op
def indexer_cache_unpack(cache: Any, *, out: Any = None, threads: Optional[int] = None,
                         stream: Any = None) -> Tuple[Any, Any]:
    """Unpacks 132-byte indexer rows ``cache`` [n, 132] into ``(k [n, 128] e4m3, k_scale [n]
    float32)``, bit for bit."""
    op = "indexer_cache_unpack"
    threads = A.threads_arg(op, threads)
    with A.launch(op, cache, stream) as st:
        k, k_scale = A.outputs(op, out, ("k", "k_scale"))
        if k is None or k_scale is None:
            n = A.dim(cache, op, "cache", 2, 0)
            if k is None:
                k = A.empty(op, "k", (n, _core.indexer_cache_dim), "float8_e4m3fn", cache)
            if k_scale is None:
                k_scale = A.empty(op, "k_scale", (n,), "float32", cache)
        _core.indexer_cache_unpack(A.core(cache), A.core(k), A.core(k_scale), threads, st)
    return k, k_scale
