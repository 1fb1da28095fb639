"""Error mapping (dsa::error -> dsa.Error, a ValueError, same message), bad arrays, out= in place,
threads."""

import numpy as np
import pytest

import dsa


def test_error_is_value_error_with_the_cpp_message():
    assert issubclass(dsa.Error, ValueError)
    x = np.zeros((2, 100), np.float32)
    with pytest.raises(dsa.Error) as e:
        dsa.hadamard_transform(x)
    assert str(e.value) == ("dsa::hadamard_transform: x.extent(1) = 100; expected a power of two <= 32768, "
                            "or 12, 20, 28 or 40 times one")
    with pytest.raises(ValueError, match=r"dsa::topk_indices: ranges\(0, 1\) = 5; expected an end in \[start, n\]"):
        dsa.topk_indices(np.zeros((3, 4), np.float32), 2, np.array([[0, 5]] * 3, np.int32))


@pytest.mark.parametrize("bad, match", [
    (np.zeros((2, 128), np.float64), r"x.dtype = float64; expected float32 or bfloat16"),
    (np.zeros((2, 2, 128), np.float32), r"ndim = 3; expected 2"),
    (np.zeros((2, 256), np.float32)[:, ::2], r"x.strides = \(256, 2\) elements; expected a C-contiguous"),
    ([[1.0] * 128], r"x = an object of type list; expected an array"),
    (None, r"x = None; expected an array"),
])
def test_bad_arrays_are_clear_errors(bad, match):
    with pytest.raises(dsa.Error, match=match):
        dsa.hadamard_transform(bad)


def test_bad_output_arrays():
    x = np.ones((2, 128), np.float32)
    ro = np.zeros((2, 128), np.float32)
    ro.flags.writeable = False
    with pytest.raises(dsa.Error, match="y = a read-only array; expected a writable array"):
        dsa.hadamard_transform(x, out=ro)
    with pytest.raises(dsa.Error, match=r"y.extent\(1\) = 64"):
        dsa.hadamard_transform(x, out=np.zeros((2, 64), np.float32))
    with pytest.raises(dsa.Error, match="expected None or a tuple of 2 arrays"):
        dsa.act_quant(x, out=np.zeros((2, 128), np.uint8))
    with pytest.raises(dsa.Error, match="either exactly x"):
        big = np.zeros((3, 128), np.float32)
        dsa.hadamard_transform(big[:2], out=big[1:])


def test_misaligned_and_read_only_inputs():
    raw = np.zeros(2 * 128 * 4 + 1, np.uint8)
    mis = raw[1:].view(np.float32).reshape(2, 128)
    with pytest.raises(dsa.Error, match="aligned"):
        dsa.hadamard_transform(mis)
    ro = np.frombuffer(np.ones((2, 128), np.float32).tobytes(), np.float32).reshape(2, 128)
    assert not ro.flags.writeable
    assert dsa.hadamard_transform(ro).shape == (2, 128)  # read-only inputs are fine


def test_out_is_written_in_place_zero_copy():
    x = np.random.default_rng(1).standard_normal((4, 128)).astype(np.float32)
    y = np.empty_like(x)
    r = dsa.hadamard_transform(x, 2.0, out=y)
    assert r is y
    np.testing.assert_array_equal(y, dsa.hadamard_transform(x, 2.0))
    big = np.zeros((8, 128), np.float32)
    dsa.hadamard_transform(x, 2.0, out=big[2:6])  # a contiguous slice of a larger buffer
    np.testing.assert_array_equal(big[2:6], y)
    assert not big[:2].any() and not big[6:].any()


def test_threads_keyword_and_determinism():
    rng = np.random.default_rng(2)
    s = rng.standard_normal((64, 300)).astype(np.float32)
    a = dsa.topk_indices(s, 16, threads=1)
    b = dsa.topk_indices(s, 16, threads=2)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(dsa.Error, match="threads = -1"):
        dsa.topk_indices(s, 16, threads=-1)
    with pytest.raises(dsa.Error, match="threads"):
        dsa.topk_indices(s, 16, threads="2")
    old = dsa.get_num_threads()
    dsa.set_num_threads(1)
    try:
        assert dsa.get_num_threads() == 1
        np.testing.assert_array_equal(dsa.topk_indices(s, 16), a)
    finally:
        dsa.set_num_threads(old)


def test_bad_enum_strings():
    x = np.ones((2, 128), np.float32)
    # The value is the caller's text: quoted (and escaped) as every such string in a message.
    with pytest.raises(dsa.Error, match="scale_format = 'e5m2'; expected 'ue8m0' or 'fp32'"):
        dsa.act_quant(x, scale_format="e5m2")
    with pytest.raises(dsa.Error, match="layout"):
        dsa.rope_apply(np.zeros((1, 1, 64), np.uint16), np.zeros(1, np.int32), layout="neox")
    with pytest.raises(dsa.Error, match="dtype"):
        dsa.act_dequant(np.zeros((1, 128), np.uint8), np.ones((1, 1), np.float32), dtype="float16")


def test_gil_is_released_during_ops():
    # Two threads running a long op overlap (the GIL is released): the second does not wait for the
    # first to finish. Checked through timing-free means: both run, results agree.
    import threading
    x = np.random.default_rng(3).standard_normal((4096, 1024)).astype(np.float32)
    outs = [None, None]

    def run(i):
        outs[i] = dsa.hadamard_transform(x, threads=1)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    np.testing.assert_array_equal(outs[0], outs[1])


def test_cuda_arrays_need_a_cuda_build(torch):
    if dsa.has_cuda or not torch.cuda.is_available():
        pytest.skip("needs a CPU-only build and a CUDA device")
    with pytest.raises(dsa.Error, match="device"):
        dsa.hadamard_transform(torch.zeros((2, 128), device="cuda"))
