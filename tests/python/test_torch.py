"""PyTorch tensors: the same bits as NumPy arrays, outputs in torch (bfloat16, float8_e4m3fn),
out= in place. Skipped where torch is not installed (CI does not install it)."""

import numpy as np
import pytest

import dsa
from conftest import as_bf16_array, as_bits, bf16_bits, random_e4m3

torch = pytest.importorskip("torch")


def t_bf16(bits):
    return torch.from_numpy(bits.astype(np.int16)).view(torch.bfloat16)


def np_bits(t):
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def test_hadamard_torch_equals_numpy(rng):
    bits = bf16_bits(rng.standard_normal((8, 128)).astype(np.float32))
    yt = dsa.hadamard_transform(t_bf16(bits), 128 ** -0.5)
    yn = dsa.hadamard_transform(as_bf16_array(bits), 128 ** -0.5)
    assert isinstance(yt, torch.Tensor) and yt.dtype == torch.bfloat16
    np.testing.assert_array_equal(np_bits(yt), as_bits(yn))
    x = torch.randn(4, 256)
    np.testing.assert_array_equal(dsa.hadamard_transform(x).numpy(), dsa.hadamard_transform(x.numpy()))


def test_act_quant_torch_float8(rng):
    x = torch.randn(4, 256)
    q, s = dsa.act_quant(x)
    qn, sn = dsa.act_quant(x.numpy())
    f8 = getattr(torch, "float8_e4m3fn", None)
    assert q.dtype == (f8 if f8 is not None else torch.uint8)
    np.testing.assert_array_equal(q.view(torch.uint8).numpy(), qn)
    np.testing.assert_array_equal(s.numpy(), sn)
    if f8 is not None:  # torch's own decoding agrees with dsa's dequantization
        y = dsa.act_dequant(q, s)
        ref = (q.to(torch.float32).view(4, 2, 128) * s[:, :, None]).view(4, 256)
        assert torch.equal(y, ref)


def test_out_in_place_torch(rng):
    x = torch.randn(3, 128)
    y = torch.empty(3, 128)
    ptr = y.data_ptr()
    r = dsa.hadamard_transform(x, 0.5, out=y)
    assert r is y and y.data_ptr() == ptr
    assert torch.equal(y, torch.from_numpy(dsa.hadamard_transform(x.numpy(), 0.5)))
    xs = x.clone()
    dsa.hadamard_transform(xs, 0.5, out=xs)
    assert torch.equal(xs, y)


def test_attention_and_indexer_torch_equal_numpy(rng):
    q = bf16_bits(rng.standard_normal((2, 4, 576)).astype(np.float32))
    kv = bf16_bits(rng.standard_normal((30, 576)).astype(np.float32))
    idx = rng.integers(-1, 30, (2, 8)).astype(np.int32)
    ot, lt, pt = dsa.sparse_mla_attention(t_bf16(q), t_bf16(kv), torch.from_numpy(idx), 0.05, return_probs=True)
    on, ln, pn = dsa.sparse_mla_attention(as_bf16_array(q), as_bf16_array(kv), idx, 0.05, return_probs=True)
    for a, b in ((ot, on), (lt, ln), (pt, pn)):
        np.testing.assert_array_equal(a.numpy(), b)
    qi, ki = random_e4m3(rng, (3, 8, 128)), random_e4m3(rng, (10, 128))
    w = rng.standard_normal((3, 8)).astype(np.float32)
    st = dsa.lightning_indexer_scores(torch.from_numpy(qi), torch.from_numpy(w), torch.from_numpy(ki))
    sn = dsa.lightning_indexer_scores(qi, w, ki)
    np.testing.assert_array_equal(st.numpy(), sn)
    kt = dsa.topk_indices(st, 4)
    assert kt.dtype == torch.int32
    np.testing.assert_array_equal(kt.numpy(), dsa.topk_indices(sn, 4))


def test_dense_torch(rng):
    x = torch.randn(4, 128).to(torch.bfloat16)
    w = torch.randn(128)
    y = dsa.rms_norm(x, w)
    assert y.dtype == torch.bfloat16
    yn = dsa.rms_norm(np_bits(x), w.numpy())
    np.testing.assert_array_equal(np_bits(y), yn)
    lin = dsa.linear(x, torch.randn(64, 128).to(torch.bfloat16))
    assert lin.dtype == torch.bfloat16 and lin.shape == (4, 64)


def test_torch_errors():
    with pytest.raises(dsa.Error, match="C-contiguous"):
        dsa.hadamard_transform(torch.randn(128, 4).t())
    with pytest.raises(dsa.Error, match="float16"):
        dsa.hadamard_transform(torch.randn(4, 128).half())
