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

import sys
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _core

try:  # optional: NumPy's bfloat16 and float8 dtypes
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None

Error = _core.Error

_NP_BF16 = np.dtype(_ml_dtypes.bfloat16) if _ml_dtypes is not None else None
_NP_E4M3 = np.dtype(_ml_dtypes.float8_e4m3fn) if _ml_dtypes is not None else None

_default_threads = 0


def set_num_threads(n: int) -> None:
    """Sets the CPU thread count the ops use when ``threads=`` is not given (0: every hardware
    thread, the default)."""
    global _default_threads
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise Error(f"dsa::set_num_threads: n = {n!r}; expected an integer >= 0")
    _default_threads = int(n)


def get_num_threads() -> int:
    """The thread count used when ``threads=`` is not given (0: every hardware thread)."""
    return _default_threads


def threads_arg(op: str, threads: Optional[int]) -> int:
    if threads is None:
        return _default_threads
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
        raise Error(f"dsa::{op}: threads = {threads!r}; expected None or an integer >= 0")
    return int(threads)


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
    if stream is None:
        return 0
    if not isinstance(stream, bool) and isinstance(stream, (int, np.integer)):
        if int(stream) < 0:
            raise Error(f"dsa::{op}: stream = {stream!r}; expected a cudaStream_t handle >= 0")
        return int(stream)
    handle = getattr(stream, "cuda_stream", None)
    if isinstance(handle, int):
        return handle
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    handle = getattr(stream, "ptr", None)
    if isinstance(handle, int):
        return handle
    raise Error(f"dsa::{op}: stream = {stream!r}; expected None, an integer cudaStream_t or a stream object "
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
            raise Error(f"dsa::{op}: stream = {stream!r}; expected None: the arrays are in CPU memory "
                        "(streams are for CUDA arrays)")
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
            raise Error(f"dsa::{op}: stream.device = {stream.device}; expected {device} (the arrays' device)")
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

_NAMES = {"float32", "bfloat16", "float8_e4m3fn", "uint8", "int32", "int64", "uint16"}


def dtype_name(d: Any) -> str:
    """The dsa name of a dtype given as a name, a NumPy dtype or a torch dtype."""
    if isinstance(d, str):
        if d in _NAMES:
            return d
        raise Error(f"dsa: dtype = {d!r}; expected one of {sorted(_NAMES)}")
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
        raise Error(f"dsa: dtype = {d}; expected float32, bfloat16, float8_e4m3fn, uint8, int32 or int64")
    try:
        nd = np.dtype(d)
    except TypeError:
        raise Error(f"dsa: dtype = {d!r}; expected a dtype name, a NumPy dtype or a torch dtype") from None
    if _NP_BF16 is not None and nd == _NP_BF16:
        return "bfloat16"
    if _NP_E4M3 is not None and nd == _NP_E4M3:
        return "float8_e4m3fn"
    if nd.name in _NAMES:
        return nd.name
    raise Error(f"dsa: dtype = {nd}; expected float32, bfloat16, float8_e4m3fn, uint8, int32 or int64")


def array_dtype_name(a: Any) -> str:
    """dsa's name of an array's element type (uint16 NumPy arrays hold bfloat16 bits)."""
    if is_torch(a):
        return dtype_name(a.dtype)
    name = dtype_name(a.dtype)
    return "bfloat16" if name == "uint16" else name


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


# ---- allocation -----------------------------------------------------------------------------------


def _no_allocation(like: Any) -> None:
    """CUDA arrays of frameworks other than torch: dsa does not allocate in them."""
    if not isinstance(like, np.ndarray) and not is_torch(like) and is_cuda(like):
        raise Error(f"dsa: out = None with a CUDA array of type {type(like).__name__}; expected out= (and every "
                    "optional array argument) given: dsa allocates only NumPy arrays and torch tensors")


def empty(shape: Sequence[int], dtype: str, like: Any, zero: bool = False) -> Any:
    """A new array of dsa dtype `dtype` in the framework and on the device of `like`."""
    shape = tuple(int(s) for s in shape)
    _no_allocation(like)
    if is_torch(like):
        torch = _torch()
        f = torch.zeros if zero else torch.empty
        return f(shape, dtype=_torch_dtype(dtype), device=like.device)
    f = np.zeros if zero else np.empty
    np_dtype = _numpy_dtype(dtype)
    if dtype == "bfloat16" and isinstance(like, np.ndarray) and like.dtype == np.uint16:
        np_dtype = np.dtype(np.uint16)  # a caller working in bf16 bit patterns gets bit patterns
    return f(shape, dtype=np_dtype)


def empty_like_dtype(like: Any, shape: Sequence[int], same_as: Any) -> Any:
    """A new array of the same dtype object as `same_as` (so uint16 bf16 bits stay uint16)."""
    shape = tuple(int(s) for s in shape)
    _no_allocation(like)
    if is_torch(like):
        torch = _torch()
        return torch.empty(shape, dtype=same_as.dtype, device=like.device)
    return np.empty(shape, dtype=same_as.dtype)


def shape_of(a: Any, op: str, name: str) -> Tuple[int, ...]:
    """The shape of an array argument, or dsa.Error if it is not an array."""
    if a is None:
        raise Error(f"dsa::{op}: {name} = None; expected an array (NumPy, PyTorch or another DLPack producer)")
    s = getattr(a, "shape", None)
    if s is None:
        raise Error(f"dsa::{op}: {name} = an object of type {type(a).__name__}; expected an array "
                    "(NumPy, PyTorch or another DLPack producer)")
    return tuple(int(e) for e in s)


def dim(a: Any, op: str, name: str, rank: int, axis: int) -> int:
    """Extent `axis` of array argument `name`, which must have rank `rank`."""
    s = shape_of(a, op, name)
    if len(s) != rank:
        raise Error(f"dsa::{op}: {name}.ndim = {len(s)}; expected {rank} (an array of rank {rank})")
    return s[axis]


def outputs(op: str, out: Any, names: Sequence[str]) -> Tuple[Any, ...]:
    """The arrays of `out=`: None (allocate all), one array (one output), or a tuple/list with one
    entry per output (None entries are allocated)."""
    n = len(names)
    if out is None:
        return (None,) * n
    if n == 1 and not isinstance(out, (tuple, list)):
        return (out,)
    if not isinstance(out, (tuple, list)) or len(out) != n:
        raise Error(f"dsa::{op}: out = {type(out).__name__}; expected None or a tuple of {n} arrays "
                    f"({', '.join(names)})")
    return tuple(out)


def ranges_array(like: Any, m: int, n: int, causal: bool) -> Any:
    """[m, 2] int32 key ranges in the framework and on the device of `like`: causal rows (query t
    at position n - m + t sees [0, n - m + t + 1)), or every row [0, n)."""
    _no_allocation(like)
    r = np.zeros((m, 2), dtype=np.int32)
    if causal:
        r[:, 1] = np.clip(np.arange(n - m + 1, n + 1, dtype=np.int64), 0, n)
    else:
        r[:, 1] = n
    if is_torch(like):
        torch = _torch()
        return torch.from_numpy(r).to(like.device)
    return r


def causal_ranges(m: int, n: Optional[int] = None, like: Any = None) -> Any:
    """[m, 2] int32 causal key ranges: query row t is at position n - m + t (n defaults to m, a
    prefill) and sees keys [0, n - m + t + 1). In `like`'s framework/device if given."""
    n = m if n is None else n
    if m < 0 or n < m:
        raise Error(f"dsa::causal_ranges: (m, n) = ({m}, {n}); expected 0 <= m <= n")
    return ranges_array(like, m, n, True)
