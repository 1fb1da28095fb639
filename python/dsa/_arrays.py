"""Arrays between the user and dsa._core: frameworks, dtypes, allocation and ``out=``.

dsa's compiled functions take every array through DLPack (or the buffer protocol, or
``__cuda_array_interface__``) and check dtype, rank, device and layout themselves. This module
does what they cannot: allocate outputs in the framework and on the device of the inputs (NumPy
or PyTorch), pick the CUDA stream of a call on CUDA arrays (``stream=``, else torch's current
stream), map the element types NumPy has no native dtype for (bfloat16, float8_e4m3fn), and check
``out=`` arguments.

Element types, by name:

========================  ==========================  =====================================
dsa                        PyTorch                     NumPy
========================  ==========================  =====================================
``"float32"``              ``torch.float32``           ``np.float32``
``"bfloat16"``             ``torch.bfloat16``          ``ml_dtypes.bfloat16`` if installed,
                                                       else ``np.uint16`` bit patterns
``"float8_e4m3fn"``        ``torch.float8_e4m3fn``     ``np.uint8`` codes (inputs may also be
                           (``torch.uint8`` codes in   ``ml_dtypes.float8_e4m3fn``)
                           a torch without it)
``"uint8"`` (bytes)        ``torch.uint8``             ``np.uint8``
``"int32"``, ``"int64"``   ``torch.int32/int64``       ``np.int32/int64``
========================  ==========================  =====================================
"""

from __future__ import annotations

import math
import numbers
import operator
import sys
from typing import Any, NoReturn, Optional, Sequence, Tuple

import numpy as np

from . import _core

try:  # optional: NumPy's bfloat16 and float8 dtypes
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None

Error = _core.Error

_NP_BF16 = np.dtype(_ml_dtypes.bfloat16) if _ml_dtypes is not None else None
_NP_E4M3 = np.dtype(_ml_dtypes.float8_e4m3fn) if _ml_dtypes is not None else None

INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
UINT64_MAX = 2**64 - 1
#: The most CPU threads a call may ask for: the binding's bound (python/src/common.hpp), which the
#: C++ refuses at every call; dsa refuses it already where it is given.
MAX_THREADS = int(_core.max_threads)
_THREADS = f"0 (every hardware thread) or a thread count in [1, {MAX_THREADS}]"

# ---- scalar arguments -----------------------------------------------------------------------------
#
# Every scalar argument of every public function is checked here, before anything is allocated or
# handed to _core, with messages in the C++ library's format ("dsa::<op>: <argument> = <value>;
# expected <what>", a dsa.Error): an integer where the C++ takes an integer (operator.index
# semantics: int, NumPy integers, anything with __index__; never bool, float or str, which used
# to be truncated or parsed), a finite real number where it takes a float, a bool for flags, a str
# for names. The ranges the C++ checks are left to it, except where Python allocates from the
# value first (k, top_k, d_v, n, ...): there the op's function checks the range here.


def _bound_text(v: int) -> str:
    return {INT32_MAX: "2^31 - 1", INT64_MAX: "2^63 - 1", INT64_MIN: "-2^63", UINT64_MAX: "2^64 - 1"}.get(v, str(v))


def int_range(lo: int, hi: int) -> str:
    """"an integer in [lo, hi]", the bounds 2^31 - 1 and 2^63 - 1 written so."""
    return f"an integer in [{_bound_text(lo)}, {_bound_text(hi)}]"


def show(v: Any) -> str:
    """A scalar argument as a message prints it: numbers and bools as Python writes them (a huge
    integer by its size), strings quoted and escaped (dsa::quoted: the caller wrote them),
    anything else by its type."""
    if v is None:
        return "None"
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        i = int(v)
        return str(i) if abs(i) < 10**30 else f"an integer of {i.bit_length()} bits"
    if isinstance(v, (float, np.floating)):
        return str(float(v)) if isinstance(v, float) else str(v)
    if isinstance(v, str):
        # A str that is not valid UTF-8 (lone surrogates) cannot cross into C++ as it is.
        return _core.quoted(v.encode("utf-8", "backslashreplace").decode("utf-8"))
    return f"an object of type {type(v).__name__}"


def typed(v: Any) -> str:
    """show(v), with the type for a value of the wrong type (``2.9 (float)``, ``'3' (str)``)."""
    text = show(v)
    if v is None or text.startswith("an object of type"):
        return text
    return f"{text} ({type(v).__name__})"


def fail(op: str, name: str, value: str, expected: str) -> NoReturn:
    """Raises dsa.Error with the C++ library's message format, escaped and bounded as every
    dsa::error message is (the type names of foreign objects are the caller's text)."""
    text = f"dsa::{op}: {name} = {value}; expected {expected}"
    # A type name may hold lone surrogates, which cannot cross into C++ as UTF-8: written escaped.
    raise Error(_core.printable(text.encode("utf-8", "backslashreplace").decode("utf-8")))


def int_arg(op: str, name: str, v: Any, lo: int = INT64_MIN, hi: int = INT64_MAX,
            expected: Optional[str] = None) -> int:
    """Integer argument `name` as a Python int in [lo, hi] (the C++ type's range by default)."""
    expected = expected or int_range(lo, hi)
    if isinstance(v, (bool, np.bool_)):
        fail(op, name, typed(v), expected)
    try:
        i = operator.index(v)
    except Exception:  # TypeError, or whatever a foreign __index__ raises
        fail(op, name, typed(v), expected)
    if not lo <= i <= hi:
        fail(op, name, show(i), expected)
    return i


_F32_MAX = float(np.finfo(np.float32).max)


def real_arg(op: str, name: str, v: Any, expected: str = "a finite real number") -> float:
    """Float argument `name` as a Python float: a real number (int, float, NumPy integer or
    floating; not bool, str or complex) that is finite once rounded to the C++'s float32."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        fail(op, name, typed(v), expected)
    try:
        f = float(v)
    except (OverflowError, ValueError, TypeError):  # an int beyond the double range
        fail(op, name, show(v), expected + " (within float32)")
    if not math.isfinite(f):
        fail(op, name, show(v), expected)
    with np.errstate(over="ignore"):
        if not np.isfinite(np.float32(f)):
            fail(op, name, show(v), f"{expected} (within float32: |{name}| <= {_F32_MAX:.8g})")
    return f


def flag_arg(op: str, name: str, v: Any) -> bool:
    """Flag argument `name`: True or False (a NumPy bool too), not any truthy object."""
    if not isinstance(v, (bool, np.bool_)):
        fail(op, name, typed(v), "True or False")
    return bool(v)


def str_arg(op: str, name: str, v: Any, expected: str) -> str:
    """Name argument `name` (a format, a layout, ...): a str; its value is the C++'s to check."""
    if not isinstance(v, str):
        fail(op, name, typed(v), expected)
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        fail(op, name, show(v), expected)
    return v


_default_threads = 0


def set_num_threads(n: int) -> None:
    """Sets the CPU thread count the ops use when ``threads=`` is not given (0: every hardware
    thread, the default; at most dsa's bound, 4096, which every op would refuse)."""
    global _default_threads
    _default_threads = int_arg("set_num_threads", "n", n, 0, MAX_THREADS, _THREADS)


def get_num_threads() -> int:
    """The thread count used when ``threads=`` is not given (0: every hardware thread)."""
    return _default_threads


def threads_arg(op: str, threads: Optional[int]) -> int:
    if threads is None:
        return _default_threads
    return int_arg(op, "threads", threads, 0, MAX_THREADS, "None, " + _THREADS)


# The CUDA backend's kernels of the ops that have two (docs/python.md, "CUDA tensors").
KERNELS = ("fast", "exact")
_KERNELS = "'fast' (tensor cores where the GPU has them) or 'exact' (the SIMT kernels, the CPU's bits)"
# The default is the C++ dsa::default_cuda_kernel_path (dsa/cuda/backend.hpp): exact until the
# fast kernels have run on a GPU.
_default_kernels = "exact"


def _kernels_value(op: str, name: str, v: Any, expected: str) -> str:
    v = str_arg(op, name, v, expected)
    if v not in KERNELS:
        fail(op, name, show(v), expected)
    return v


def set_cuda_kernels(kernels: str) -> None:
    """Sets the kernels the CUDA backend runs, when ``kernels=`` is not given, for the ops that
    have two (lightning_indexer_scores on float8 arrays, lightning_indexer_scores_paged,
    sparse_mla_attention): 'fast' (tensor cores where the GPU has them and the call fits them) or
    'exact' (the default: the SIMT kernels, bit-identical with the CPU backend). CPU arrays
    have one set of kernels and are not affected."""
    global _default_kernels
    _default_kernels = _kernels_value("set_cuda_kernels", "kernels", kernels, _KERNELS)


def get_cuda_kernels() -> str:
    """The kernels used when ``kernels=`` is not given: 'fast' or 'exact'."""
    return _default_kernels


def kernels_arg(op: str, kernels: Optional[str]) -> str:
    """The ``kernels=`` of a call: None for set_cuda_kernels' choice, else 'fast' or 'exact'
    (accepted for CPU arrays too, which have only the one)."""
    if kernels is None:
        return _default_kernels
    return _kernels_value(op, "kernels", kernels, "None, " + _KERNELS)


def _torch():
    """The torch module if the program imported it (dsa never imports torch itself)."""
    return sys.modules.get("torch")


def is_torch(a: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(a, torch.Tensor)


def has_ml_dtypes() -> bool:
    return _ml_dtypes is not None


# ---- devices and streams ----------------------------------------------------------------------------

_DLPACK_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged


def is_cuda(a: Any) -> bool:
    """Whether `a` is an array in CUDA memory (a torch CUDA tensor, a DLPack producer on a CUDA
    device, or an object with ``__cuda_array_interface__``)."""
    if a is None or isinstance(a, np.ndarray):
        return False
    if is_torch(a):
        return a.is_cuda
    dev = getattr(a, "__dlpack_device__", None)
    if dev is not None:
        try:
            return int(dev()[0]) in _DLPACK_CUDA
        except Exception:  # the import in _core reports what is wrong with it
            return False
    return hasattr(a, "__cuda_array_interface__")


def stream_handle(op: str, stream: Any) -> int:
    """The integer cudaStream_t of a ``stream=`` argument: an int, a ``torch.cuda.Stream``
    (``.cuda_stream``), an object with ``__cuda_stream__`` (the CUDA stream protocol) or a CuPy
    stream (``.ptr``); None is 0, the legacy default stream."""
    handle_text = "a cudaStream_t handle in [0, 2^64 - 1]"
    if stream is None:
        return 0
    if not isinstance(stream, (bool, np.bool_)) and isinstance(stream, (int, np.integer)):
        return int_arg(op, "stream", stream, 0, UINT64_MAX, handle_text)
    handle = getattr(stream, "cuda_stream", None)
    if isinstance(handle, int):
        return int_arg(op, "stream.cuda_stream", handle, 0, UINT64_MAX, handle_text)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        try:
            handle = proto()[1]
        except Exception:
            fail(op, "stream.__cuda_stream__()", show(stream), "a (version, handle) tuple")
        return int_arg(op, "stream.__cuda_stream__()[1]", handle, 0, UINT64_MAX, handle_text)
    handle = getattr(stream, "ptr", None)
    if isinstance(handle, int):
        return int_arg(op, "stream.ptr", handle, 0, UINT64_MAX, handle_text)
    fail(op, "stream", typed(stream), "None, an integer cudaStream_t or a stream object "
         "(torch.cuda.Stream, __cuda_stream__, CuPy's .ptr)")


class _Launch:
    """``with launch(...) as stream:`` -- the stream handle for _core, and for torch tensors that
    stream made torch's current stream for the block, so that outputs, workspaces and default
    arguments allocated (or copied) in the block are ordered on the stream the op runs on."""

    __slots__ = ("stream", "_ctx")

    def __init__(self, stream: int, ctx: Any = None):
        self.stream = stream
        self._ctx = ctx

    def __enter__(self) -> int:
        if self._ctx is not None:
            self._ctx.__enter__()
        return self.stream

    def __exit__(self, *exc: Any) -> Any:
        if self._ctx is not None:
            return self._ctx.__exit__(*exc)
        return None


_ON_CPU = _Launch(0)


def launch(op: str, first: Any, stream: Any) -> _Launch:
    """Where a call whose first array is `first` runs. CPU arrays: the CPU backend, and
    ``stream`` must be None. CUDA arrays (in a build with CUDA): the CUDA backend on ``stream``,
    or, when it is None, torch's current stream of the tensor's device for torch tensors and the
    legacy default stream (0) for other producers."""
    if not is_cuda(first):
        if stream is not None:
            fail(op, "stream", show(stream), "None: the arrays are in CPU memory (streams are for CUDA arrays)")
        return _ON_CPU
    if not _core.has_cuda_build:
        return _ON_CPU  # _core rejects the CUDA array, saying this build runs the CPU backend only
    if not is_torch(first):
        return _Launch(stream_handle(op, stream))
    torch = _torch()
    device = first.device
    if stream is None:  # torch's own current stream: what torch allocates on already
        return _Launch(torch.cuda.current_stream(device).cuda_stream)
    if isinstance(stream, torch.cuda.Stream):
        if stream.device != device:
            fail(op, "stream.device", str(stream.device), f"{device} (the arrays' device)")
        s = stream
    else:
        handle = stream_handle(op, stream)
        s = torch.cuda.default_stream(device) if handle == 0 else torch.cuda.ExternalStream(handle, device=device)
    return _Launch(s.cuda_stream, torch.cuda.stream(s))


def built_with_cuda() -> bool:
    """Whether this build of dsa has the CUDA paths (built with DSA_ENABLE_CUDA=ON)."""
    return bool(_core.has_cuda_build)


def cuda_device_count() -> int:
    """The number of CUDA devices dsa sees (0 in a build without CUDA, or without a GPU or a new
    enough driver)."""
    return int(_core.cuda_device_count())


def cuda_available() -> bool:
    """Whether dsa can run ops on CUDA arrays here: built with CUDA and a device is present."""
    return built_with_cuda() and cuda_device_count() > 0


# ---- dtypes -------------------------------------------------------------------------------------

_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float8_e4m3fn": 1, "uint8": 1, "int32": 4, "int64": 8, "uint16": 2}
_NAMES = set(_ITEMSIZE)


def dtype_name(d: Any, op: str = "dtype", name: str = "dtype") -> str:
    """The dsa name of a dtype argument `name` of `op` given as a name, a NumPy dtype or a torch
    dtype."""
    expected = "float32, bfloat16, float8_e4m3fn, uint8, int32 or int64"
    if isinstance(d, str):
        if d in _NAMES:
            return d
        fail(op, name, show(d), "one of " + ", ".join(repr(n) for n in sorted(_NAMES)))
    torch = _torch()
    if torch is not None and isinstance(d, torch.dtype):
        if d == torch.float32:
            return "float32"
        if d == torch.bfloat16:
            return "bfloat16"
        if getattr(torch, "float8_e4m3fn", None) is not None and d == torch.float8_e4m3fn:
            return "float8_e4m3fn"
        for n in ("uint8", "int32", "int64"):
            if d == getattr(torch, n):
                return n
        fail(op, name, str(d), expected)
    if isinstance(d, (bool, np.bool_, numbers.Number)) or d is None:
        # np.dtype(None) is float64 and np.dtype(1) an error: neither is a choice of dtype here.
        fail(op, name, typed(d), "a dtype name, a NumPy dtype or a torch dtype")
    try:
        nd = np.dtype(d)
    except Exception:  # TypeError, or whatever a foreign object makes NumPy raise
        fail(op, name, typed(d), "a dtype name, a NumPy dtype or a torch dtype")
    if _NP_BF16 is not None and nd == _NP_BF16:
        return "bfloat16"
    if _NP_E4M3 is not None and nd == _NP_E4M3:
        return "float8_e4m3fn"
    if nd.name in _NAMES:
        return nd.name
    fail(op, name, str(nd), expected)


def float_dtype_name(a: Any, op: str, name: str, rank: int) -> str:
    """"float32" or "bfloat16": the element type of array argument `name` (uint16 NumPy arrays
    hold bfloat16 bits), checked as ``info`` checks it; any other dtype is the op's message."""
    _, dtype = info(a, op, name, rank)
    if dtype == "float32":
        return dtype
    if dtype in ("bfloat16", "uint16"):
        return "bfloat16"
    fail(op, name + ".dtype", dtype, "float32 or bfloat16")


def _numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        return _NP_BF16 if _NP_BF16 is not None else np.dtype(np.uint16)
    if name == "float8_e4m3fn":
        return np.dtype(np.uint8)
    return np.dtype(name)


def _torch_dtype(name: str):
    torch = _torch()
    if name == "float8_e4m3fn":
        return getattr(torch, "float8_e4m3fn", torch.uint8)
    return getattr(torch, name)


# ---- conversion to what _core takes ---------------------------------------------------------------

_torch_f8_dlpack: Optional[bool] = None


def _torch_float8_via_dlpack() -> bool:
    """Whether this torch exports float8_e4m3fn through DLPack (newer ones do)."""
    global _torch_f8_dlpack
    if _torch_f8_dlpack is None:
        torch = _torch()
        try:
            torch.zeros(1, dtype=torch.float8_e4m3fn).__dlpack__()
            _torch_f8_dlpack = True
        except Exception:  # pragma: no cover - depends on the torch version
            _torch_f8_dlpack = False
    return _torch_f8_dlpack


def core(a: Any) -> Any:
    """`a` as _core takes it: the same memory, with NumPy's ml_dtypes types (which neither DLPack
    nor the buffer protocol carry) viewed as their bits. None stays None; anything that is not an
    array is passed on for _core to reject with a message naming the argument."""
    if a is None:
        return None
    if isinstance(a, np.ndarray):
        if _NP_BF16 is not None and a.dtype == _NP_BF16:
            return a.view(np.uint16)
        if _NP_E4M3 is not None and a.dtype == _NP_E4M3:
            return a.view(np.uint8)
        return a
    if is_torch(a):
        torch = _torch()
        f8 = getattr(torch, "float8_e4m3fn", None)
        if f8 is not None and a.dtype == f8 and not _torch_float8_via_dlpack():
            return a.view(torch.uint8)
        return a
    return a


# ---- array arguments ------------------------------------------------------------------------------


def info(a: Any, op: str, name: str, rank: int, strided: bool = False) -> Tuple[Tuple[int, ...], str]:
    """(shape, dtype name) of array argument `name`, imported as the op will import it, its rank
    and layout checked as the op checks them (same messages): None, a list, a scalar, an object
    whose __dlpack__ fails (dtype object, a torch tensor that requires grad, ...), a wrong rank or
    a strided layout the op refuses are a dsa.Error here, before anything is allocated from a
    shape. `strided`: outer dimensions may be strided (rope_apply, sparse_mha_attention)."""
    shp, dtype = _core.array_info(core(a), op, name, rank, strided)
    return tuple(shp), dtype


def shape(a: Any, op: str, name: str, rank: int, strided: bool = False) -> Tuple[int, ...]:
    """The shape of array argument `name` of rank `rank`, checked as ``info`` checks it. A NumPy
    array's or torch tensor's own ``.shape`` is the imported one; any other object's is never read
    (it may claim any size)."""
    return info(a, op, name, rank, strided)[0]


def dim(a: Any, op: str, name: str, rank: int, axis: int, strided: bool = False) -> int:
    """Extent `axis` of array argument `name`, which must have rank `rank`."""
    return shape(a, op, name, rank, strided)[axis]


def outputs(op: str, out: Any, names: Sequence[str]) -> Tuple[Any, ...]:
    """The arrays of `out=`: None (allocate all), one array (one output), or a tuple/list with one
    entry per output (None entries are allocated)."""
    n = len(names)
    if out is None:
        return (None,) * n
    if n == 1 and not isinstance(out, (tuple, list)):
        return (out,)
    if not isinstance(out, (tuple, list)) or len(out) != n:
        what = f"a {type(out).__name__} of {len(out)} entries" if isinstance(out, (tuple, list)) else typed(out)
        fail(op, "out", what, f"None or a tuple of {n} arrays ({', '.join(names)})")
    return tuple(out)


# ---- allocation -----------------------------------------------------------------------------------
#
# Outputs are allocated only once every scalar argument that sizes them is checked (the ops call
# int_arg & co. first) and the arrays whose shapes size them are imported (``shape``). What is
# still too large for this process (a [m, k] top-k of a legal but huge k) is a dsa.Error naming
# the output and its size, not a MemoryError from NumPy or torch.


def no_allocation(op: str, like: Any) -> None:
    """CUDA arrays of frameworks other than torch: dsa does not allocate in them."""
    if not isinstance(like, np.ndarray) and not is_torch(like) and is_cuda(like):
        fail(op, "out", f"None with a CUDA array of type {type(like).__name__}",
             "out= (and every optional array argument) given: dsa allocates only NumPy arrays and torch tensors")


def _allocate(op: str, name: str, shape: Tuple[int, ...], itemsize: int, make: Any) -> Any:
    count = 1
    for e in shape:
        count *= e
    nbytes = count * itemsize
    what = f"an output of shape {shape} ({nbytes} bytes)"
    if any(e < 0 for e in shape) or nbytes > INT64_MAX:
        fail(op, name, what, "an output the process can allocate")
    try:
        return make()
    except (MemoryError, ValueError, OverflowError, RuntimeError) as e:  # NumPy's and torch's ways
        fail(op, name, what, f"an output the process can allocate ({type(e).__name__}: {show(str(e))})")


def empty(op: str, name: str, shape: Sequence[int], dtype: str, like: Any, zero: bool = False) -> Any:
    """Output `name` of `op`: a new array of dsa dtype `dtype` in the framework and on the device
    of `like`."""
    shape = tuple(int(s) for s in shape)
    no_allocation(op, like)
    if is_torch(like):
        torch = _torch()
        f = torch.zeros if zero else torch.empty
        td = _torch_dtype(dtype)
        return _allocate(op, name, shape, _ITEMSIZE[dtype], lambda: f(shape, dtype=td, device=like.device))
    f = np.zeros if zero else np.empty
    np_dtype = _numpy_dtype(dtype)
    if dtype == "bfloat16" and isinstance(like, np.ndarray) and like.dtype == np.uint16:
        np_dtype = np.dtype(np.uint16)  # a caller working in bf16 bit patterns gets bit patterns
    return _allocate(op, name, shape, np_dtype.itemsize, lambda: f(shape, dtype=np_dtype))


def empty_like_dtype(op: str, name: str, like: Any, shape: Sequence[int], same_as: Any, same_as_dtype: str) -> Any:
    """Output `name`: a new array of the element type of `same_as` (so uint16 bf16 bits stay
    uint16), whose dsa dtype name ``info`` gave as `same_as_dtype`."""
    shape = tuple(int(s) for s in shape)
    no_allocation(op, like)
    if is_torch(like) and is_torch(same_as):
        torch = _torch()
        return _allocate(op, name, shape, same_as.element_size(),
                         lambda: torch.empty(shape, dtype=same_as.dtype, device=like.device))
    if isinstance(same_as, np.ndarray):
        nd = same_as.dtype
    elif same_as_dtype in ("bfloat16", "float8_e4m3fn"):
        nd = _numpy_dtype(same_as_dtype)
    else:
        try:
            nd = np.dtype(same_as_dtype)
        except TypeError:
            fail(op, name, f"an output like an array of dtype {same_as_dtype}", "a dtype NumPy can allocate")
    if is_torch(like):
        return empty(op, name, shape, dtype_name(nd, op, name + ".dtype"), like)
    return _allocate(op, name, shape, nd.itemsize, lambda: np.empty(shape, dtype=nd))


def ranges_array(op: str, like: Any, m: int, n: int, causal: bool) -> Any:
    """[m, 2] int32 key ranges in the framework and on the device of `like`: causal rows (query t
    at position n - m + t sees [0, n - m + t + 1)), or every row [0, n)."""
    no_allocation(op, like)
    if n > INT32_MAX or m > INT32_MAX:  # int32 ranges could not hold them: never wrap silently
        fail(op, "ranges", f"None for (m, n) = ({m}, {n})",
             "given ranges, or m and n <= 2^31 - 1 (ranges are int32)")
    if is_torch(like):  # made on the device by torch: no host copy (capturable in a CUDA graph)
        torch = _torch()
        r = _allocate(op, "ranges", (m, 2), 4, lambda: torch.zeros((m, 2), dtype=torch.int32, device=like.device))
        if causal:
            r[:, 1] = torch.arange(n - m + 1, n + 1, dtype=torch.int64, device=like.device).clamp_(0, n)
        else:
            r[:, 1] = n
        return r
    r = _allocate(op, "ranges", (m, 2), 4, lambda: np.zeros((m, 2), dtype=np.int32))
    if causal:
        r[:, 1] = np.clip(np.arange(n - m + 1, n + 1, dtype=np.int64), 0, n)
    else:
        r[:, 1] = n
    return r


def causal_ranges(m: int, n: Optional[int] = None, like: Any = None) -> Any:
    """[m, 2] int32 causal key ranges: query row t is at position n - m + t (n defaults to m, a
    prefill) and sees keys [0, n - m + t + 1). In `like`'s framework/device if given."""
    op = "causal_ranges"
    m = int_arg(op, "m", m, 0, INT32_MAX)
    n = m if n is None else int_arg(op, "n", n, 0, INT32_MAX)
    if n < m:
        fail(op, "(m, n)", f"({m}, {n})", "0 <= m <= n <= 2^31 - 1")
    return ranges_array(op, like, m, n, True)
