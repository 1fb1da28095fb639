"""Hostile arguments to every public function (issue 33, class 7): scalar arguments of the wrong
type or out of range, objects that are not supported arrays in every array position, and sizes
that would allocate terabytes. Each must be a dsa.Error in the library's format ("dsa::<op>:
<argument> = <value>; expected <what>"), raised before anything big is allocated: never a
silently truncated value, a TypeError/AttributeError from the binding, or a MemoryError."""

import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dsa

# ---- one valid call of every public op ------------------------------------------------------------


def _ranges(m, n):
    return np.array([[0, n]] * m, np.int32)


def _calls():
    """{op name: (function, positional array arguments {name: array}, keywords)}: a call that
    runs. Array arguments are passed by keyword where the signature allows, else positionally
    in this order."""
    f32, u8, u16, i32 = np.float32, np.uint8, np.uint16, np.int32
    one = lambda shape, dt=f32: np.ones(shape, dt)  # noqa: E731
    zero = lambda shape, dt=f32: np.zeros(shape, dt)  # noqa: E731
    return {
        "hadamard_transform": (dsa.hadamard_transform, {"x": one((2, 16))}, {"scale": 0.25}),
        "act_quant": (dsa.act_quant, {"x": one((2, 256))}, {"group_size": 128, "scale_format": "ue8m0"}),
        "act_dequant": (dsa.act_dequant, {"q": zero((2, 256), u8), "s": one((2, 2))},
                        {"group_size": 128, "dtype": "float32"}),
        "weight_quant": (dsa.weight_quant, {"w": one((4, 8))}, {}),
        "weight_dequant": (dsa.weight_dequant, {"q": zero((4, 8), u8), "s": one((1, 1))}, {"dtype": "float32"}),
        "kv_cache_fp8_pack": (dsa.kv_cache_fp8_pack, {"kv": zero((2, 576), u16)},
                              {"slots": np.array([1, 0], i32)}),
        "kv_cache_fp8_unpack": (dsa.kv_cache_fp8_unpack, {"cache": zero((2, 656), u8)}, {}),
        "indexer_cache_pack": (dsa.indexer_cache_pack, {"k": zero((2, 128), u8), "k_scale": one(2)},
                               {"slots": np.array([0, 1], i32)}),
        "indexer_cache_unpack": (dsa.indexer_cache_unpack, {"cache": zero((2, 132), u8)}, {}),
        "lightning_indexer_scores": (dsa.lightning_indexer_scores,
                                     {"q": one((2, 4, 16)), "w": one((2, 4)), "k": one((5, 16)),
                                      "k_scale": one(5), "ranges": _ranges(2, 5)}, {}),
        "lightning_indexer_scores_paged": (dsa.lightning_indexer_scores_paged,
                                           {"q": zero((2, 4, 128), u8), "w": one((2, 4)),
                                            "cache": zero((8, 132), u8),
                                            "block_table": np.array([[0, 1], [0, 1]], i32)},
                                           {"block_size": 4, "ranges": _ranges(2, 8)}),
        "lightning_indexer_backward": (dsa.lightning_indexer_backward,
                                       {"q": one((2, 4, 16)), "w": one((2, 4)), "k": one((5, 16)),
                                        "k_scale": one(5), "ranges": _ranges(2, 5), "grad_scores": one((2, 5))},
                                       {"need_q": True, "need_w": True, "need_k": True}),
        "lightning_indexer_weights": (dsa.lightning_indexer_weights, {"proj": one((2, 4)), "q_scale": one((2, 4))},
                                      {"head_scale": 0.5, "dim_scale": 0.25}),
        "topk_indices": (dsa.topk_indices, {"scores": one((2, 8))}, {"k": 3, "ranges": _ranges(2, 8)}),
        "topk_indices_paged": (dsa.topk_indices_paged,
                               {"scores": one((2, 8))},
                               {"k": 3, "block_table": np.array([[0, 1], [0, 1]], i32), "block_size": 4,
                                "ranges": _ranges(2, 8)}),
        "gather_rows": (dsa.gather_rows, {"src": one((5, 3)), "indices": zero((2, 2), i32)}, {}),
        "sparse_mla_attention": (dsa.sparse_mla_attention,
                                 {"q": zero((2, 2, 8), u16), "kv": zero((5, 8), u16), "indices": zero((2, 3), i32)},
                                 {"softmax_scale": 0.3, "d_v": 4, "num_splits": 1, "return_probs": True,
                                  "out_dtype": "float32"}),
        "sparse_mha_attention": (dsa.sparse_mha_attention,
                                 {"q": zero((2, 2, 8), u16), "k_nope": zero((5, 2, 6), u16),
                                  "k_rope": zero((5, 2), u16), "v": zero((5, 2, 4), u16),
                                  "indices": zero((2, 3), i32)},
                                 {"softmax_scale": 0.3, "rounding": "bf16", "return_lse": True}),
        "indexer_kl_loss_dense": (dsa.indexer_kl_loss_dense,
                                  {"attn": one((2, 2, 5)), "index_scores": one((2, 5))}, {"ranges": _ranges(2, 5)}),
        "indexer_kl_loss_sparse": (dsa.indexer_kl_loss_sparse,
                                   {"attn": one((2, 2, 5)), "index_scores": one((2, 5)),
                                    "topk": zero((2, 3), i32)}, {}),
        "moe_route": (dsa.moe_route, {"logits": one((3, 8))},
                      {"bias": zero(8), "top_k": 2, "n_group": 2, "topk_group": 1, "scoring": "sigmoid",
                       "norm_topk_prob": True, "routed_scaling_factor": 2.5}),
        "moe_combine": (dsa.moe_combine, {"expert_out": zero((6, 4), u16), "rows": zero((3, 2), i32),
                                          "weights": one((3, 2))}, {"shared": zero((3, 4), u16)}),
        "fp8_linear": (dsa.fp8_linear, {"x": one((2, 128)), "w": zero((4, 128), u8), "w_scale": one((1, 1))},
                       {"act_format": "ue8m0", "out_dtype": "bfloat16"}),
        "linear": (dsa.linear, {"x": one((2, 8)), "w": one((3, 8))}, {"out_dtype": "float32"}),
        "rms_norm": (dsa.rms_norm, {"x": one((2, 8)), "weight": one(8)}, {"eps": 1e-6}),
        "add_rms_norm": (dsa.add_rms_norm, {"x": zero((2, 8), u16), "residual": zero((2, 8), u16),
                                            "weight": one(8)}, {"eps": 1e-6}),
        "layer_norm": (dsa.layer_norm, {"x": one((2, 8)), "weight": one(8), "bias": zero(8)}, {"eps": 1e-6}),
        "rope_apply": (dsa.rope_apply, {"x": zero((2, 1, 8), u16), "positions": np.array([0, 1], i32)},
                       {"layout": "interleaved", "dim": 8, "base": 10000.0, "factor": 1.0,
                        "original_max_position": 4096, "max_position": 4096, "beta_fast": 32.0,
                        "beta_slow": 1.0}),
        "swiglu": (dsa.swiglu, {"gate": zero((2, 8), u16), "up": zero((2, 8), u16)}, {}),
    }


CALLS = _calls()

#: Array arguments that may be None (optional arrays, or defaults made as arrays).
OPTIONAL = {("kv_cache_fp8_pack", "slots"), ("indexer_cache_pack", "slots"), ("lightning_indexer_scores", "k_scale"),
            ("lightning_indexer_scores", "ranges"), ("lightning_indexer_backward", "k_scale"),
            ("lightning_indexer_backward", "ranges"), ("topk_indices", "ranges"), ("topk_indices_paged", "ranges"),
            ("indexer_kl_loss_dense", "ranges"), ("moe_route", "bias"), ("moe_combine", "shared")}
#: Keyword array arguments of the valid calls.
KEYWORD_ARRAYS = {"slots", "ranges", "bias", "shared", "block_table"}


def _run(op, arrays=None, **kw):
    fn, arr, base = CALLS[op]
    args = dict(arr)
    kwargs = dict(base)
    for name, value in (arrays or {}).items():
        (args if name in args else kwargs)[name] = value
    kwargs.update(kw)
    return fn(**args, **kwargs)


@pytest.mark.parametrize("op", sorted(CALLS))
def test_the_valid_calls_run(op):
    _run(op)


def test_every_public_op_is_covered():
    ops = {n for n in dsa.__all__ if callable(getattr(dsa, n)) and n not in (
        "CudaSequence", "Error", "NonFiniteError", "NonFiniteWarning", "Sequence", "Transformer", "validate", "validate_model", "built_with_cuda", "causal_ranges",
        "cuda_available", "cuda_device_count", "get_cuda_kernels", "get_num_threads", "has_ml_dtypes",
        "register_torch_ops", "set_cuda_kernels", "set_num_threads",
        "sparse_mla_attention_num_splits", "sparse_mla_attention_workspace_size")}
    assert ops == set(CALLS)


# ---- scalar arguments ---------------------------------------------------------------------------------

INTS = [
    ("act_quant", "group_size"), ("act_dequant", "group_size"), ("lightning_indexer_scores_paged", "block_size"),
    ("lightning_indexer_scores_paged", "n"), ("topk_indices", "k"), ("topk_indices_paged", "k"),
    ("topk_indices_paged", "block_size"), ("sparse_mla_attention", "d_v"), ("sparse_mla_attention", "num_splits"),
    ("moe_route", "top_k"), ("moe_route", "n_group"), ("moe_route", "topk_group"), ("rope_apply", "dim"),
    ("rope_apply", "original_max_position"), ("rope_apply", "max_position"),
] + [(op, "threads") for op in sorted(CALLS)]

REALS = [
    ("hadamard_transform", "scale"), ("lightning_indexer_weights", "head_scale"),
    ("lightning_indexer_weights", "dim_scale"), ("sparse_mla_attention", "softmax_scale"),
    ("sparse_mha_attention", "softmax_scale"), ("moe_route", "routed_scaling_factor"), ("rms_norm", "eps"),
    ("add_rms_norm", "eps"), ("layer_norm", "eps"), ("rope_apply", "base"), ("rope_apply", "factor"),
    ("rope_apply", "beta_fast"), ("rope_apply", "beta_slow"),
]

FLAGS = [
    ("lightning_indexer_backward", "need_q"), ("lightning_indexer_backward", "need_w"),
    ("lightning_indexer_backward", "need_k"), ("sparse_mla_attention", "return_probs"),
    ("sparse_mha_attention", "return_lse"), ("moe_route", "norm_topk_prob"),
]

NAMES = [("act_quant", "scale_format"), ("sparse_mha_attention", "rounding"), ("moe_route", "scoring"),
         ("fp8_linear", "act_format"), ("rope_apply", "layout")]

DTYPES = [("act_dequant", "dtype"), ("weight_dequant", "dtype"), ("sparse_mla_attention", "out_dtype"),
          ("fp8_linear", "out_dtype"), ("linear", "out_dtype")]


class Indexable:
    """An integer by __index__ (as operator.index takes it)."""

    def __index__(self):
        return 3


class BadIndex:
    def __index__(self):
        raise RuntimeError("no")


def _message(op, name):
    return rf"^dsa::{op}: {name} = .*; expected "


# Values that used to be truncated (2.9 -> 2), parsed ('3') or taken as 1 (True), and ones the
# binding refused with a TypeError or an OverflowError.
BAD_INTS = [2.9, 3.0, np.float64(3.0), "3", True, np.bool_(True), 2**64, -2**64 - 1, 10**5000, 1 + 0j, [3],
            BadIndex(), object()]


@pytest.mark.parametrize("op, name", INTS)
@pytest.mark.parametrize("value", BAD_INTS, ids=lambda v: type(v).__name__)
def test_integer_arguments_refuse_everything_but_integers(op, name, value):
    with pytest.raises(dsa.Error, match=_message(op, name)) as e:
        _run(op, **{name: value})
    if isinstance(value, (float, str, bool)):
        assert f"({type(value).__name__})" in str(e.value)  # says what it got


@pytest.mark.parametrize("op, name", [i for i in INTS if i[1] != "threads"])
def test_integer_arguments_take_numpy_integers_and_index(op, name):
    fn, arr, base = CALLS[op]
    good = base.get(name, 8)  # n of the paged scores: the ranges end at 8
    _run(op, **{name: np.int64(good)})
    _run(op, **{name: np.int32(good)})
    if good == 3:
        _run(op, **{name: Indexable()})


BAD_REALS = ["1", True, np.bool_(False), None, 1 + 0j, math.nan, math.inf, -math.inf, np.float32("nan"), 1e300,
             -1e39, 10**400, object(), [1.0]]


@pytest.mark.parametrize("op, name", REALS)
@pytest.mark.parametrize("value", BAD_REALS, ids=repr)
def test_real_arguments_refuse_non_numbers_and_non_finite_values(op, name, value):
    with pytest.raises(dsa.Error, match=_message(op, name)):
        _run(op, **{name: value})


@pytest.mark.parametrize("op, name", REALS)
def test_real_arguments_take_ints_and_numpy_numbers(op, name):
    good = CALLS[op][2][name]
    _run(op, **{name: np.float32(good)})
    _run(op, **{name: np.float64(good)})
    if float(good).is_integer():
        _run(op, **{name: int(good)})


@pytest.mark.parametrize("op, name", FLAGS)
@pytest.mark.parametrize("value", [1, 0, "yes", "", None, 1.0], ids=repr)
def test_flags_are_bools(op, name, value):
    # 'no' used to count as True, None as False.
    with pytest.raises(dsa.Error, match=_message(op, name) + "True or False"):
        _run(op, **{name: value})
    _run(op, **{name: np.bool_(True)})


@pytest.mark.parametrize("op, name", NAMES)
@pytest.mark.parametrize("value", [1, b"fp32", None, "\udc80", "nope\x1b[2J"], ids=repr)
def test_names_are_strings_and_their_values_are_quoted(op, name, value):
    with pytest.raises(dsa.Error, match=_message(op, name)) as e:
        _run(op, **{name: value})
    assert "\x1b" not in str(e.value)  # text the caller wrote is escaped: no terminal control
    if value == "nope\x1b[2J":
        assert f"{name} = 'nope\\x1b[2J'" in str(e.value)


@pytest.mark.parametrize("op, name", DTYPES)
@pytest.mark.parametrize("value", ["float16", np.float64, 1, True, object(), "\x1b[31m"], ids=repr)
def test_dtype_arguments_are_named_in_the_message(op, name, value):
    with pytest.raises(dsa.Error, match=_message(op, name)) as e:
        _run(op, **{name: value})
    assert "\x1b" not in str(e.value)


def test_messages_show_the_value_and_what_was_expected():
    x = np.ones((3, 8), np.float32)
    with pytest.raises(dsa.Error) as e:
        dsa.topk_indices(x, 2.9)
    assert str(e.value) == ("dsa::topk_indices: k = 2.9 (float); expected an integer in [1, 2^31 - 1] "
                            "(k > the row's range pads with -1)")
    with pytest.raises(dsa.Error) as e:
        dsa.topk_indices(x, "3")
    assert str(e.value).startswith("dsa::topk_indices: k = '3' (str); expected an integer")
    with pytest.raises(dsa.Error) as e:
        dsa.act_quant(np.ones((2, 256), np.float32), group_size=128.7)
    assert str(e.value) == ("dsa::act_quant: group_size = 128.7 (float); expected a positive integer "
                            "(the group length)")
    with pytest.raises(dsa.Error) as e:
        dsa.act_quant(np.ones((2, 256), np.float32), group_size=0)
    assert str(e.value) == "dsa::act_quant: group_size = 0; expected a positive integer (the group length)"
    with pytest.raises(dsa.Error) as e:
        dsa.hadamard_transform(np.ones((2, 16), np.float32), scale="1")
    assert str(e.value) == "dsa::hadamard_transform: scale = '1' (str); expected a finite real number"
    with pytest.raises(dsa.Error) as e:
        dsa.topk_indices(x, 10**5000)  # its decimal digits would exceed Python's int-to-str limit
    assert "k = an integer of 16610 bits" in str(e.value)
    with pytest.raises(dsa.Error) as e:
        dsa.topk_indices(x, type("\x1b[2J", (), {})())  # a type name is the caller's text too
    assert "\x1b" not in str(e.value) and "\\x1b[2J" in str(e.value)


def test_non_finite_scales_are_errors_before_anything_runs():
    # hadamard_transform(scale=nan) used to return NaN rows without an error.
    x = np.ones((2, 16), np.float32)
    y = np.full((2, 16), 7.0, np.float32)
    for bad in (math.nan, math.inf, -math.inf, 1e39):
        with pytest.raises(dsa.Error, match="dsa::hadamard_transform: scale = .*; expected a finite real number"):
            dsa.hadamard_transform(x, bad, out=y)
        assert (y == 7).all()
    # The C++ op refuses it too (so do its other callers): straight to the binding.
    with pytest.raises(dsa.Error, match="dsa::hadamard_transform: scale = nan; expected a finite number"):
        dsa._core.hadamard_transform(x, y, math.nan, 1, 0)
    assert (y == 7).all()
    # Finite scales of any sign, and 0, stay transforms.
    np.testing.assert_array_equal(dsa.hadamard_transform(x, -1.0), -dsa.hadamard_transform(x, 1.0))
    assert not dsa.hadamard_transform(x, 0.0).any()


def test_thread_counts_are_bounded_where_they_are_given():
    # set_num_threads(10**6) used to be accepted, and every op failed afterwards.
    old = dsa.get_num_threads()
    try:
        for bad in (10**6, dsa._arrays.MAX_THREADS + 1, -1, 2.0, "2", True, None):
            with pytest.raises(dsa.Error, match=r"^dsa::set_num_threads: n = .*; expected 0 \(every hardware thread\) "
                                                r"or a thread count in \[1, 4096\]"):
                dsa.set_num_threads(bad)
            assert dsa.get_num_threads() == old
        dsa.set_num_threads(np.int64(1))
        assert dsa.get_num_threads() == 1 and type(dsa.get_num_threads()) is int
        _run("topk_indices")
        dsa.set_num_threads(dsa._arrays.MAX_THREADS)  # the bound itself is a thread count
        assert dsa.get_num_threads() == 4096
    finally:
        dsa.set_num_threads(old)
    with pytest.raises(dsa.Error, match=r"dsa::topk_indices: threads = 4097; expected None, 0"):
        _run("topk_indices", threads=4097)
    # The bound is the binding's: the C++ refuses one more at the call too.
    assert dsa._core.max_threads == 4096
    with pytest.raises(dsa.Error, match="threads = 4097"):
        dsa._core.topk_indices(np.ones((2, 8), np.float32), _ranges(2, 8), 3, np.zeros((2, 3), np.int32), 4097, 0)


def test_cuda_kernels_setting_and_argument():
    # dsa.set_cuda_kernels / kernels=: 'fast' or 'exact', checked like every name argument, before
    # anything runs; CPU arrays take either (they have one set of kernels).
    old = dsa.get_cuda_kernels()
    assert old == "exact"  # dsa::default_cuda_kernel_path until the fast kernels have run on a GPU
    try:
        for bad in (None, 1, True, b"fast", "turbo", "FAST", "\x1b[2J"):
            with pytest.raises(dsa.Error, match=r"^dsa::set_cuda_kernels: kernels = .*; expected 'fast' \(tensor "
                                                r"cores where the GPU has them\) or 'exact'") as e:
                dsa.set_cuda_kernels(bad)
            assert "\x1b" not in str(e.value)
            assert dsa.get_cuda_kernels() == old
        dsa.set_cuda_kernels("fast")
        assert dsa.get_cuda_kernels() == "fast"
        for op in ("lightning_indexer_scores", "lightning_indexer_scores_paged", "sparse_mla_attention"):
            _run(op)
    finally:
        dsa.set_cuda_kernels(old)
    for op in ("lightning_indexer_scores", "lightning_indexer_scores_paged", "sparse_mla_attention"):
        for good in ("fast", "exact", None):
            _run(op, kernels=good)
        for bad in ("turbo", 0, b"exact"):
            with pytest.raises(dsa.Error, match=rf"^dsa::{op}: kernels = .*; expected None, 'fast' \(tensor cores"):
                _run(op, kernels=bad)
    # The binding checks the name too (the Python layer's message).
    with pytest.raises(dsa.Error, match=r"^dsa::sparse_mla_attention: kernels = 'tensor'; expected None, 'fast'"):
        q = np.zeros((1, 1, 8), np.uint16)
        dsa._core.sparse_mla_attention(q, np.zeros((2, 8), np.uint16), np.zeros((1, 2), np.int32),
                                       np.zeros((1, 1, 8), np.float32), np.zeros((1, 1), np.float32), None, None,
                                       0.5, 8, 1, 1, 0, "tensor")


def test_helpers_check_their_arguments():
    for bad in (2.5, "4", True, 2**64):
        with pytest.raises(dsa.Error, match="dsa::sparse_mla_attention_workspace_size: s = "):
            dsa.sparse_mla_attention_workspace_size(bad, 2, 4, 2)
        with pytest.raises(dsa.Error, match="dsa::sparse_mla_attention_num_splits: sm_count = "):
            dsa.sparse_mla_attention_num_splits(1, 2, 300, bad)
        with pytest.raises(dsa.Error, match="dsa::causal_ranges: m = "):
            dsa.causal_ranges(bad)
    assert dsa.sparse_mla_attention_workspace_size(np.int64(1), 2, 4, 2) > 0
    np.testing.assert_array_equal(dsa.causal_ranges(np.int32(2), 3), [[0, 2], [0, 3]])
    with pytest.raises(dsa.Error, match=r"dsa::causal_ranges: \(m, n\) = \(3, 2\)"):
        dsa.causal_ranges(3, 2)
    with pytest.raises(dsa.Error, match=r"dsa::causal_ranges: n = 4294967296; expected an integer in \[0, 2\^31 - 1\]"):
        dsa.causal_ranges(1, 2**32)  # would not fit the int32 ranges: never wrapped


def test_model_arguments(tmp_path):
    for bad in (1.5, "2", True):
        with pytest.raises(dsa.Error, match="dsa::Transformer.load: threads = "):
            dsa.Transformer.load(tmp_path, threads=bad)
        with pytest.raises(dsa.Error, match="dsa::Transformer.load: num_layers = "):
            dsa.Transformer.load(tmp_path, num_layers=bad)
        with pytest.raises(dsa.Error, match="dsa::validate_model: max_chunk = "):
            dsa.validate_model(tmp_path, max_chunk=bad)
        with pytest.raises(dsa.Error, match="dsa::validate: threads = "):
            dsa.validate(tmp_path, threads=bad)
    with pytest.raises(dsa.Error, match="dsa::Transformer.load: dir = an object of type object; expected a path"):
        dsa.Transformer.load(object())
    with pytest.raises(dsa.Error, match="dsa::validate: file = 3; expected a path"):
        dsa.validate(3)
    with pytest.raises(dsa.Error, match=r"dsa::Transformer.load: dir = .*\\udc80.*; expected a path that is valid UTF-8"):
        dsa.Transformer.load(b"/no\x80such")
    # Token ids: floats and bools used to become ids silently.
    from dsa.model import _tokens
    for bad in (1.7, True, "3", [1, 2.5], [1, True], [1, "2"], [2**64]):
        with pytest.raises(dsa.Error, match=r"dsa::Transformer.forward: tokens(\[\d\])? = "):
            _tokens(bad)
    np.testing.assert_array_equal(_tokens([1, np.int32(2)]), [1, 2])
    np.testing.assert_array_equal(_tokens(range(2, 4)), [2, 3])
    assert _tokens([]).shape == (0,)


def test_forward_arguments():
    from conftest import tiny_random_dir
    m = dsa.Transformer.load(tiny_random_dir(), threads=1)
    for bad in (1.5, "2", True, 8.0):
        with pytest.raises(dsa.Error, match="dsa::Transformer.new_sequence: max_tokens = "):
            m.new_sequence(bad)
    seq = m.new_sequence(np.int64(16))
    for kw, name in (({"max_chunk": 2.5}, "max_chunk"), ({"trace": "yes"}, "trace"), ({"trace": 1}, "trace")):
        with pytest.raises(dsa.Error, match=f"dsa::Transformer.forward: {name} = "):
            m.forward(seq, [1, 2], **kw)
    for bad in (None, 1.0, [1, 2.0], [True]):
        with pytest.raises(dsa.Error, match=r"dsa::Transformer.forward: tokens(\[\d\])? = "):
            m.forward(seq, bad)
    for bad in (None, object(), 3):
        with pytest.raises(dsa.Error, match="dsa::Transformer.forward: seq = .*; expected a dsa.Sequence"):
            m.forward(bad, [1])
    assert seq.length == 0  # nothing above ran
    assert m.forward(seq, [1, 2], max_chunk=np.int32(1)).ndim == 1
    assert seq.length == 2


# ---- objects that are not supported arrays ------------------------------------------------------------


class DLPackOnly:
    """A producer with __dlpack__ (of a float64 vector) and nothing else: no shape, no dtype."""

    def __dlpack__(self, stream=None, **kw):
        return np.arange(3.0).__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)


class DLPackRaises:
    def __dlpack__(self, stream=None, **kw):
        raise RuntimeError("the producer refuses")


class FakeShape:
    """Claims a 2^40 x 2^40 shape and a dtype it does not have: only the import may be trusted."""

    shape = (2**40, 2**40)
    dtype = np.float32
    ndim = 2

    def __dlpack__(self, stream=None, **kw):
        return np.zeros((2, 2), np.float32).__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)


class BadShape:
    shape = "abc"
    dtype = None


ODD = {
    "dlpack_only": DLPackOnly(),
    "dlpack_raises": DLPackRaises(),
    "fake_shape": FakeShape(),
    "bad_shape": BadShape(),
    "list": [[1.0, 2.0], [3.0, 4.0]],
    "scalar": 3.0,
    "string": "abc",
    "numpy_scalar": np.float32(1),
    "zero_d": np.array(1.0, np.float32),
    "object_dtype": np.array([[object()] * 8] * 2),
    "complex": np.ones((2, 8), np.complex64),
    "float64": np.ones((2, 8), np.float64),
    "non_contiguous": np.ones((2, 16), np.float32)[:, ::2],
    "big_endian": np.ones((2, 8), ">f4"),
    "none": None,
}


def _array_positions():
    for op, (fn, arrays, kw) in sorted(CALLS.items()):
        for name in list(arrays) + [k for k in kw if k in KEYWORD_ARRAYS]:
            yield op, name


@pytest.mark.parametrize("op, name", list(_array_positions()))
@pytest.mark.parametrize("kind", sorted(ODD))
def test_odd_objects_in_every_array_position_are_clear_errors(op, name, kind):
    value = ODD[kind]
    if value is None and (op, name) in OPTIONAL:
        _run(op, {name: None})  # optional: None is its default
        return
    if (op, name) == ("gather_rows", "src") and kind in ("float64", "complex"):
        _run(op, {name: value})  # gather_rows copies any element type
        return
    if kind == "fake_shape":
        # Imported, it is a real 2 x 2 float32 array: a call sized by it may even be valid. What
        # it claims (2^40 x 2^40) is never read: nothing is allocated from it, and an error, if
        # any, is the op's about the real array.
        try:
            _run(op, {name: value})
        except dsa.Error as e:
            assert str(e).startswith(f"dsa::{op}: ") and "1099511627776" not in str(e), str(e)
        return
    with pytest.raises(dsa.Error) as e:
        _run(op, {name: value})
    msg = str(e.value)
    assert msg.startswith(f"dsa::{op}: {name}"), msg  # names the argument ...
    assert "; expected " in msg  # ... and what was expected
    if kind == "dlpack_raises":
        assert "__dlpack__() raised RuntimeError: 'the producer refuses'" in msg
    if kind == "object_dtype":
        assert "__dlpack__() raised" in msg  # NumPy's reason, not just "ndarray"


@pytest.mark.parametrize("op", sorted(CALLS))
@pytest.mark.parametrize("kind", ["list", "dlpack_only", "fake_shape", "none", "read_only"])
def test_odd_outputs_are_clear_errors(op, kind):
    fn, arrays, kw = CALLS[op]
    if op == "rope_apply":
        return  # in place: no out=
    good = fn(**arrays, **kw)
    n = len(good) if isinstance(good, tuple) else 1
    if kind == "read_only":
        first = good[0] if isinstance(good, tuple) else good
        bad = first.copy()
        bad.flags.writeable = False
    else:
        bad = {"list": [1.0], "dlpack_only": DLPackOnly(), "fake_shape": FakeShape(), "none": None}[kind]
    out = bad if n == 1 else (bad,) + tuple(good[1:])
    if kind == "none":
        out = (None,) * n if n > 1 else None  # None entries are allocated: fine
        fn(**arrays, **kw, out=out)
        return
    with pytest.raises(dsa.Error, match=rf"^dsa::{op}: \w+"):
        fn(**arrays, **kw, out=out)


def test_out_of_the_wrong_arity():
    x = np.ones((2, 256), np.float32)
    with pytest.raises(dsa.Error, match=r"dsa::act_quant: out = a tuple of 3 entries; expected None or a tuple of 2"):
        dsa.act_quant(x, out=(None, None, None))
    with pytest.raises(dsa.Error, match=r"dsa::act_quant: out = 3 \(int\); expected None or a tuple of 2"):
        dsa.act_quant(x, out=3)


# ---- no big allocation before the arguments are checked ------------------------------------------------

# Run in a child whose address space is capped at what it uses plus 1 GiB (RLIMIT_AS): every call
# below must be a dsa.Error, quickly, and the child's peak memory stays small. Before this class of
# fixes, topk_indices(x, 2**40) tried to allocate 4 TiB first (a MemoryError here, or a process
# that pages itself to death without the cap), a fake 2^40 x 2^40 shape sized outputs, and a
# block_size of 2^40 sized the paged scores.
_CHILD = textwrap.dedent(r"""
    import json, resource, sys, time
    import numpy as np
    import dsa

    def vm_bytes():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024

    cap = vm_bytes() + (1 << 30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    f32, i32, u8 = np.float32, np.int32, np.uint8
    s = np.ones((3, 8), f32)
    bt = np.zeros((3, 1), i32)

    class Fake:  # claims 2^40 x 2^40; is 2 x 3
        shape = (2**40, 2**40)
        dtype = np.float32
        def __dlpack__(self, stream=None, **kw):
            return np.zeros((2, 3), np.float32).__dlpack__()
        def __dlpack_device__(self):
            return (1, 0)

    cases = {
        "topk_k": lambda: dsa.topk_indices(s, 2**40, threads=1),
        "topk_k_int32_max": lambda: dsa.topk_indices(s, 2**31 - 1, threads=1),
        "topk_paged_k": lambda: dsa.topk_indices_paged(s, 2**40, bt, 8, threads=1),
        "paged_scores_block_size": lambda: dsa.lightning_indexer_scores_paged(
            np.zeros((3, 1, 128), u8), np.ones((3, 1), f32), np.zeros((8, 132), u8), bt, 2**40,
            np.zeros((3, 2), i32), threads=1),
        "paged_scores_n": lambda: dsa.lightning_indexer_scores_paged(
            np.zeros((3, 1, 128), u8), np.ones((3, 1), f32), np.zeros((8, 132), u8), bt, 8,
            np.zeros((3, 2), i32), n=2**40, threads=1),
        "paged_scores_n_int32_max": lambda: dsa.lightning_indexer_scores_paged(
            np.zeros((3, 1, 128), u8), np.ones((3, 1), f32), np.zeros((8, 132), u8), bt, 8,
            np.zeros((3, 2), i32), n=2**31 - 1, threads=1),
        "moe_top_k": lambda: dsa.moe_route(np.ones((3, 8), f32), top_k=2**40, threads=1),
        "mla_d_v": lambda: dsa.sparse_mla_attention(np.zeros((3, 2, 8), np.uint16), np.zeros((5, 8), np.uint16),
                                                    np.zeros((3, 2), i32), 0.3, d_v=2**40, threads=1),
        "mla_num_splits": lambda: dsa.sparse_mla_attention(np.zeros((3, 2, 8), np.uint16), np.zeros((5, 8), np.uint16),
                                                           np.zeros((3, 2), i32), 0.3, d_v=4, num_splits=2**40,
                                                           threads=1),
        "act_quant_group": lambda: dsa.act_quant(np.ones((2, 256), f32), group_size=-2**40, threads=1),
        "fake_shape_hadamard": lambda: dsa.hadamard_transform(Fake(), threads=1),
        "fake_shape_scores": lambda: dsa.lightning_indexer_scores(np.ones((3, 1, 2), f32), np.ones((3, 1), f32),
                                                                  Fake(), threads=1),
        "fake_shape_gather": lambda: dsa.gather_rows(Fake(), np.zeros((2, 2), i32), threads=1),
        "causal_ranges": lambda: dsa.causal_ranges(2**40),
        "kv_pack_far_slot": lambda: dsa.kv_cache_fp8_pack(np.zeros((1, 576), np.uint16),
                                                          slots=np.array([2**31 - 1], i32), threads=1),
        "kv_pack_float_slots": lambda: dsa.kv_cache_fp8_pack(np.zeros((1, 576), np.uint16),
                                                             slots=np.array([1e12]), threads=1),
        "broadcast_keys": lambda: dsa.lightning_indexer_scores(
            np.ones((3, 1, 16), f32), np.ones((3, 1), f32), np.broadcast_to(np.ones((1, 16), f32), (2**40, 16)),
            threads=1),
        "zero_width_keys": lambda: dsa.lightning_indexer_scores(
            np.ones((3, 1, 0), f32), np.ones((3, 1), f32), np.ones((2**33, 0), f32), threads=1),
    }
    out = {}
    for name, call in cases.items():
        t = time.perf_counter()
        try:
            r = call()
            out[name] = ["returned", str(getattr(r, "shape", ""))]
        except dsa.Error as e:
            out[name] = ["dsa.Error", str(e)]
        except BaseException as e:
            out[name] = [type(e).__name__, str(e)]
        out[name].append(time.perf_counter() - t)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_huge_sizes_fail_fast_and_allocate_nothing_big():
    r = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    peak = out.pop("peak_rss_bytes")
    assert peak < 1 << 30, peak
    expect = {
        "topk_k": "dsa::topk_indices: k = 1099511627776; expected an integer in [1, 2^31 - 1]",
        "topk_k_int32_max": "dsa::topk_indices: indices = an output of shape (3, 2147483647)",
        "topk_paged_k": "dsa::topk_indices_paged: k = 1099511627776",
        "paged_scores_block_size": "dsa::lightning_indexer_scores_paged: n = None, so block_table.extent(1) * "
                                   "block_size = 1 * 1099511627776; expected at most 2^31 - 1",
        "paged_scores_n": "dsa::lightning_indexer_scores_paged: n = 1099511627776",
        "paged_scores_n_int32_max": "dsa::lightning_indexer_scores_paged: scores = an output of shape (3, 2147483647)",
        "moe_top_k": "dsa::moe_route: cfg.top_k = 1099511627776; expected 1 <= top_k <= ",
        "mla_d_v": "dsa::sparse_mla_attention: d_v = 1099511627776; expected 1 <= d_v <= d_qk = q.extent(2) = 8",
        "mla_num_splits": "dsa::sparse_mla_attention: num_splits = 1099511627776; expected an integer in [1, 64]",
        "act_quant_group": "dsa::act_quant: group_size = -1099511627776",
        "fake_shape_hadamard": "dsa::hadamard_transform: x.extent(1) = 3; expected a power of two",
        "fake_shape_scores": "dsa::lightning_indexer_scores: k.extent(1) = 3; expected 2 (q.extent(2)",
        "causal_ranges": "dsa::causal_ranges: m = 1099511627776; expected an integer in [0, 2^31 - 1]",
        "kv_pack_far_slot": "dsa::kv_cache_fp8_pack: cache = an output of shape (2147483648, 656)",
        "kv_pack_float_slots": "dsa::kv_cache_fp8_pack: slots.dtype = float64; expected int32",
        "broadcast_keys": "dsa::lightning_indexer_scores: k.strides = (0, 1) elements; expected a C-contiguous",
        "zero_width_keys": "dsa::lightning_indexer_scores: ranges = None for (m, n) = (3, 8589934592)",
    }
    # Sized by what the import says, (2, 3): the claimed shape is never read.
    assert out.pop("fake_shape_gather")[:2] == ["returned", "(2, 2, 3)"]
    for name, want in expect.items():
        kind, msg, seconds = out[name]
        assert kind == "dsa.Error" and msg.startswith(want), (name, kind, msg)
        assert seconds < 5, (name, seconds)
