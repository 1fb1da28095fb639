"""The reference DeepSeek-V3.2 forward pass and dsa_validate's golden replays, from Python."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Dict, List, Optional

import numpy as np

from . import _arrays as A
from . import _core

Sequence = _core.Sequence
NonFiniteError = _core.NonFiniteError

if hasattr(_core, "CudaSequence"):
    CudaSequence = _core.CudaSequence
else:
    class CudaSequence:  # type: ignore[no-redef]
        """The caches of a sequence in device memory; a build without CUDA has none (the name
        exists so that code checking ``isinstance(s, dsa.CudaSequence)`` runs everywhere)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            A.fail("CudaSequence", "()", "a direct construction", "Transformer.new_sequence of a CUDA transformer")


class NonFiniteWarning(RuntimeWarning):
    """A forward pass produced a NaN or infinity that did not reach the logits (see
    ``Sequence.first_nonfinite``)."""


def _path(p: Any, op: str, name: str) -> str:
    """A path argument as the str _core takes: a str or os.PathLike (bytes decoded as the file
    system does); a path that cannot cross into C++ as UTF-8 (undecodable bytes) is a dsa.Error."""
    try:
        path = os.fspath(p)
    except TypeError:
        A.fail(op, name, A.show(p) if isinstance(p, (int, float)) else f"an object of type {type(p).__name__}",
               "a path (str, bytes or os.PathLike)")
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        A.fail(op, name, A.show(path), "a path that is valid UTF-8")
    return path


def _device(op: str, device: Any) -> Optional[int]:
    """A ``device`` argument ('cpu', 'cuda', 'cuda:N' or a torch.device) as None for the CPU or
    the CUDA device index ('cuda' is device 0)."""
    torch = A._torch()
    text = str(device) if torch is not None and isinstance(device, torch.device) else device
    expected = "'cpu', 'cuda' or 'cuda:N'"
    if not isinstance(text, str):
        A.fail(op, "device", A.typed(device), expected)
    if text == "cpu":
        return None
    kind, colon, index = text.partition(":")
    if kind != "cuda" or (colon and not (index.isascii() and index.isdigit())):
        A.fail(op, "device", repr(text), expected)
    if not A.built_with_cuda():
        A.fail(op, "device", repr(text), "'cpu': this dsa was built without its CUDA paths (dsa.built_with_cuda() "
               "is False)")
    return int(index) if index else 0


def _placement(op: str, device: Any, threads: Any, kernels: Any):
    """(device index or None for the CPU, the CPU threads, the CUDA kernels) of an op that runs on
    either: ``threads`` is for the CPU and ``kernels`` for the GPU, each refused with the other."""
    index = _device(op, device)
    if index is None:
        if kernels is not None:
            A.fail(op, "kernels", A.show(kernels), "None with device='cpu' (the CPU has one set of kernels)")
        return None, A.threads_arg(op, threads), None
    if threads is not None:
        A.fail(op, "threads", A.show(threads), "None with device='cuda' (threads set the CPU backend)")
    return index, None, A.kernels_arg(op, kernels)


def _tokens(tokens: Any, op: str = "Transformer.forward") -> Any:
    """Token ids as an int64 vector: an integer, a list/tuple/range of integers (never a bool or
    a float, which NumPy would turn into ids silently), or an array (its dtype is the op's to
    check: int64 or int32)."""
    if tokens is None or isinstance(tokens, (bool, np.bool_, float, np.floating, str)):
        A.fail(op, "tokens", A.typed(tokens), "token ids: an integer, a list of integers or an int64/int32 array")
    if isinstance(tokens, (int, np.integer)):
        return np.array([A.int_arg(op, "tokens", tokens)], dtype=np.int64)
    if isinstance(tokens, range):
        A.int_arg(op, "tokens.start", tokens.start)
        A.int_arg(op, "tokens.stop", tokens.stop)
        return np.arange(tokens.start, tokens.stop, tokens.step, dtype=np.int64)
    if isinstance(tokens, (list, tuple)):
        return np.array([A.int_arg(op, f"tokens[{i}]", t) for i, t in enumerate(tokens)], dtype=np.int64)
    if A.is_torch(tokens):
        return tokens.detach().cpu().numpy()
    return tokens


class Transformer:
    """The reference DeepSeek-V3.2 forward pass (``dsa::model::transformer`` on the CPU backend,
    or on the CUDA backend when loaded with ``device="cuda"``).

    ::

        m = dsa.Transformer.load("models/tiny-random", threads=2)
        seq = m.new_sequence(64)
        logits = m.forward(seq, [1, 2, 3])     # prefill: float32 logits [vocab] of the last token
        logits = m.forward(seq, [int(logits.argmax())])   # decode one token
        m.phase_times                          # seconds per phase: indexer, topk, attention, moe, other
    """

    def __init__(self, impl: Any) -> None:
        self._impl = impl
        self._sequence_type = CudaSequence if hasattr(impl, "kernels") else Sequence

    @classmethod
    def load(cls, dir: Any, threads: Optional[int] = None, num_layers: Optional[int] = None, *,
             device: Any = "cpu", kernels: Optional[str] = None) -> "Transformer":
        """Opens a checkpoint directory (config.json + *.safetensors in the Hugging Face layout of
        deepseek-ai/DeepSeek-V3.2, FP8 or bf16 weights); ``num_layers`` runs only the first layers.

        ``device="cuda"`` (or ``"cuda:N"``, a torch.device) copies the weights to that GPU once and
        runs every forward call there, on a stream of the transformer's own, as ``dsa_run
        --backend cuda`` does; its sequences are ``dsa.CudaSequence`` (caches in device memory) and
        the logits come back as NumPy arrays as on the CPU. ``kernels`` ('exact' or 'fast';
        default: dsa.get_cuda_kernels()) chooses the CUDA kernels (docs/cuda.md, "Exact and fast
        kernels"); ``threads`` sets the CPU backend only. The CUDA logits agree with the CPU's to
        the bounds of docs/cuda.md, not bit for bit."""
        op = "Transformer.load"
        num_layers = -1 if num_layers is None else A.int_arg(op, "num_layers", num_layers)
        index, threads, kernels = _placement(op, device, threads, kernels)
        if index is None:
            return cls(_core.Transformer.load(_path(dir, op, "dir"), threads, num_layers))
        return cls(_core.CudaTransformer.load(_path(dir, op, "dir"), index, num_layers, kernels))

    @property
    def device(self) -> str:
        """'cpu', or 'cuda:N' for a transformer on a GPU."""
        return f"cuda:{self._impl.device}" if self._sequence_type is CudaSequence else "cpu"

    @property
    def kernels(self) -> Optional[str]:
        """The CUDA kernels ('exact' or 'fast') of a transformer on a GPU; None on the CPU."""
        return self._impl.kernels if self._sequence_type is CudaSequence else None

    @property
    def config(self) -> Dict[str, Any]:
        """The model's config.json as a dict."""
        return json.loads(self._impl.config_json)

    @property
    def num_layers(self) -> int:
        return self._impl.num_layers

    @property
    def threads(self) -> Optional[int]:
        """The CPU threads of each call; None for a transformer on a GPU."""
        return None if self._sequence_type is CudaSequence else self._impl.threads

    def new_sequence(self, max_tokens: int) -> Any:
        """A new, empty sequence (its KV caches: a dsa.Sequence, or a dsa.CudaSequence on a GPU)
        of up to ``max_tokens`` tokens (<= max_position_embeddings)."""
        return self._impl.new_sequence(A.int_arg("Transformer.new_sequence", "max_tokens", max_tokens))

    def forward(self, seq: Sequence, tokens: Any, *, max_chunk: int = 4096, trace: bool = False,
                nonfinite: str = "error"):
        """Appends ``tokens`` (ints, a list, or an int32/int64 array) to ``seq`` and returns the
        float32 logits [vocab] of the last one. More than one token runs the MHA prefill path
        (in chunks of ``max_chunk``), one token the absorbed MQA decode path. With ``trace`` it
        returns ``(logits, layers)``: per layer and chunk a dict with the layer index, the chunk's
        start position, the indexer's ``topk`` [t, k] int32, the routed ``experts`` [t, top_k]
        int32, and the bf16 bits (uint16) of ``ffn_out`` and ``residual`` [t, hidden]. The GIL is
        released while it runs; calls on one Transformer run one at a time.

        Logits that are NaN or infinite raise ``dsa.NonFiniteError`` (a ``dsa.Error``) naming
        where the sequence's values first stopped being finite (``seq.first_nonfinite``); with
        ``nonfinite="propagate"`` they are returned instead. A non-finite value inside the model
        that did not reach the logits (index scores gone NaN, say) is a ``dsa.NonFiniteWarning``."""
        op = "Transformer.forward"
        if not isinstance(seq, self._sequence_type):
            A.fail(op, "seq", A.typed(seq), f"a dsa.{self._sequence_type.__name__} (this transformer's new_sequence)")
        max_chunk = A.int_arg(op, "max_chunk", max_chunk)
        trace = A.flag_arg(op, "trace", trace)
        nonfinite = A.str_arg(op, "nonfinite", nonfinite, "'error' or 'propagate'")
        if nonfinite not in ("error", "propagate"):
            A.fail(op, "nonfinite", repr(nonfinite), "'error' or 'propagate'")
        had_site = seq.first_nonfinite is not None
        out = self._impl.forward(seq, _tokens(tokens), max_chunk, trace, nonfinite == "propagate")
        site = seq.first_nonfinite
        if site is not None and not had_site:
            logits = out[0] if trace else out
            if np.isfinite(logits).all():
                warnings.warn(f"dsa: the model's values stopped being finite in {site['text']}; the logits "
                              "stayed finite, but the run is not a valid result", NonFiniteWarning, stacklevel=2)
        return out

    def forward_batch(self, seqs: List[Sequence], tokens: List[Any], *, max_chunk: int = 4096,
                      all_logits: bool = False, nonfinite: str = "error") -> List[np.ndarray]:
        """Appends ``tokens[i]`` to ``seqs[i]`` for every i in one call (ragged: each sequence at
        its own position, a prefill beside decode steps) and returns each sequence's float32
        logits: [vocab] of its last token, or [t, vocab] of every new token with
        ``all_logits``. Each weight is read once for the whole batch; a sequence's logits are the
        same bits as when it runs alone (docs/design.md, "Batches"). The batch is checked whole
        before anything runs; ``nonfinite`` as for ``forward``."""
        op = "Transformer.forward_batch"
        if not isinstance(seqs, (list, tuple)):
            A.fail(op, "seqs", A.typed(seqs), f"a list of dsa.{self._sequence_type.__name__}")
        if not isinstance(tokens, (list, tuple)):
            A.fail(op, "tokens", A.typed(tokens), "a list of token arrays, one per sequence")
        max_chunk = A.int_arg(op, "max_chunk", max_chunk)
        all_logits = A.flag_arg(op, "all_logits", all_logits)
        nonfinite = A.str_arg(op, "nonfinite", nonfinite, "'error' or 'propagate'")
        if nonfinite not in ("error", "propagate"):
            A.fail(op, "nonfinite", repr(nonfinite), "'error' or 'propagate'")
        had = [s.first_nonfinite is not None if isinstance(s, self._sequence_type) else True for s in seqs]
        out = self._impl.forward_batch(list(seqs), [_tokens(t) for t in tokens], max_chunk, all_logits,
                                       nonfinite == "propagate")
        for s, h, logits in zip(seqs, had, out):
            site = s.first_nonfinite
            if site is not None and not h and np.isfinite(logits).all():
                warnings.warn(f"dsa: the model's values stopped being finite in {site['text']}; the logits "
                              "stayed finite, but the run is not a valid result", NonFiniteWarning, stacklevel=2)
        return out

    @property
    def phase_times(self) -> Dict[str, float]:
        """Wall seconds spent per phase by every forward call so far (indexer, topk, attention,
        moe, other, total)."""
        return self._impl.phase_times

    def reset_phase_times(self) -> None:
        self._impl.reset_phase_times()


_GOLDEN_DTYPES = {"F32": np.float32, "I32": np.int32, "I64": np.int64, "F8_E4M3": np.uint8, "U8": np.uint8}


def _arrays(outputs: Dict[str, Any]) -> Dict[str, np.ndarray]:
    res = {}
    for name, t in outputs.items():
        if t["dtype"] == "BF16":
            a = np.frombuffer(t["data"], dtype=np.uint16)
            if A.has_ml_dtypes():
                a = a.view(A._NP_BF16)
        else:
            a = np.frombuffer(t["data"], dtype=_GOLDEN_DTYPES.get(t["dtype"], np.uint8))
        res[name] = a.reshape(t["shape"])
    return res


def validate(file: Any, *, threads: Optional[int] = None) -> Dict[str, Any]:
    """Runs every case group of a golden-format safetensors file (docs/validation.md: hadamard,
    hadamard_f32, act_quant, weight_quant, indexer, topk, sparse_mla, kl_dense, kl_sparse) through
    dsa's ops, exactly as ``dsa_validate FILE`` does, and returns the report::

        {"file", "backend", "pass", "passed", "failed", "errors", "unknown_groups",
         "groups": [{"name", "pass", "error" (None, or why the group could not run),
                     "comparisons": [{"tensor", "metric", "max_error", "tolerance", "pass"}],
                     "outputs": {expected-tensor name: computed array}}]}

    An expected tensor with no elements compares nothing: it adds a failed comparison of metric
    "elements compared" (max_error 0, tolerance 1), so such a group never passes. ``pass`` is
    true exactly when ``dsa_validate FILE`` exits 0.
    """
    op = "validate"
    report = _core.validate(_path(file, op, "file"), A.threads_arg(op, threads))
    for g in report["groups"]:
        g["outputs"] = _arrays(g["outputs"])
    return report


def validate_model(dir: Any, *, threads: Optional[int] = None, max_chunk: int = 4096, outputs: bool = True,
                   device: Any = "cpu", kernels: Optional[str] = None) -> Dict[str, Any]:
    """Replays a golden model directory (config.json, the checkpoint, expected.safetensors) under
    the golden criteria, as ``dsa_validate --model DIR``: teacher-forced decode steps, per-step
    logits cosine >= 0.99, argmax agreeing on all steps but one, per-layer prefill top-k set
    agreement >= 98%. Returns ``{"model", "backend", "pass", "passed", "failed", "checks":
    [{"tensor", "metric", "max_error", "tolerance", "pass"}], "cosines", "argmax_match",
    "argmax_got", "argmax_want", "topk_agreement", "diagnostics", "outputs"}``.

    The batch rows are replayed one at a time and released; ``outputs`` (the computed tensors in
    the expected file's layout, as ``--dump`` writes them) are kept for the report unless
    ``outputs=False``, and may total at most 4 GiB (checked before the replay starts: a
    ``dsa.Error`` beyond).

    ``device="cuda"`` (``"cuda:N"``, a torch.device; ``kernels`` 'exact' or 'fast') replays on
    the CUDA transformer, as ``dsa_validate --model DIR --backend cuda [--cuda-kernels K]``;
    ``threads`` is for the CPU only."""
    op = "validate_model"
    max_chunk = A.int_arg(op, "max_chunk", max_chunk)
    outputs = A.flag_arg(op, "outputs", outputs)
    index, threads, kernels = _placement(op, device, threads, kernels)
    if index is None:
        report = _core.validate_model(_path(dir, op, "dir"), threads, max_chunk, outputs)
    else:
        report = _core.validate_model_cuda(_path(dir, op, "dir"), index, kernels, max_chunk, outputs)
    report["outputs"] = _arrays(report["outputs"])
    return report
