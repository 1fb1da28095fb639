"""Hadamard, FP8 quantizers and cache rows against NumPy references of docs/design.md's formulas ("FP8 quantizers", "Cache rows")."""

import numpy as np
import pytest

import dsa
from conftest import (act_quant_ref, as_bf16_array, as_bits, bf16_bits, bf16_float, bf16_ulp_diff, e4m3_decode,
                      e4m3_encode, random_e4m3, weight_quant_ref)


def sylvester(n):
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


@pytest.mark.parametrize("n", [2, 128, 1024])
def test_hadamard_f32_matches_matrix_product(rng, n):
    x = rng.standard_normal((8, n)).astype(np.float32)
    y = dsa.hadamard_transform(x, 0.5, threads=2)
    ref = (x.astype(np.float64) @ sylvester(n)) * 0.5
    assert y.dtype == np.float32 and y.shape == x.shape
    tol = 1e-5 * np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    assert np.all(np.abs(y - ref) <= tol)


def test_hadamard_bf16_rotate_activation(rng):
    bits = bf16_bits(rng.standard_normal((64, 128)).astype(np.float32))
    x = as_bf16_array(bits)
    y = dsa.hadamard_transform(x, 128 ** -0.5)
    assert y.dtype == x.dtype
    ref = bf16_bits((bf16_float(bits).astype(np.float64) @ sylvester(128)) * 128 ** -0.5)
    ulp = bf16_ulp_diff(as_bits(y), ref)
    assert ulp.max() <= 1 and np.mean(ulp != 0) <= 0.005


def test_hadamard_in_place_and_uint16_bits(rng):
    bits = bf16_bits(rng.standard_normal((4, 256)).astype(np.float32))
    x = bits.copy()  # uint16 bit patterns are accepted as bfloat16
    expected = dsa.hadamard_transform(bits, 1.0)
    assert expected.dtype == np.uint16
    y = dsa.hadamard_transform(x, 1.0, out=x)
    assert y is x
    np.testing.assert_array_equal(x, expected)


def test_hadamard_non_power_of_two_sizes(rng):
    for n in (12 * 16, 20 * 8, 28 * 4, 40 * 2):
        x = rng.standard_normal((3, n)).astype(np.float32)
        y = dsa.hadamard_transform(x, 1.0)
        # An orthogonal-up-to-scale transform: ||y||^2 = n ||x||^2.
        np.testing.assert_allclose((y.astype(np.float64) ** 2).sum(1), n * (x.astype(np.float64) ** 2).sum(1),
                                   rtol=1e-5)


@pytest.mark.parametrize("fmt", ["ue8m0", "fp32"])
@pytest.mark.parametrize("src", ["float32", "bfloat16"])
def test_act_quant_bit_exact(rng, fmt, src):
    x = (rng.standard_normal((16, 512)) * np.exp(rng.standard_normal((16, 1)) * 3)).astype(np.float32)
    x[3, 128:256] = 0  # an all-zero group: the 1e-4 amax floor
    if src == "bfloat16":
        bits = bf16_bits(x)
        x = bf16_float(bits)
        arg = as_bf16_array(bits)
    else:
        arg = x
    q, s = dsa.act_quant(arg, scale_format=fmt)
    qr, sr = act_quant_ref(x, 128, fmt)
    assert q.dtype == np.uint8 and q.shape == (16, 512) and s.shape == (16, 4)
    np.testing.assert_array_equal(q, qr)
    np.testing.assert_array_equal(s, sr)


def test_act_quant_group_size_and_round_trip(rng):
    x = rng.standard_normal((5, 256)).astype(np.float32)
    q, s = dsa.act_quant(x, group_size=64)
    assert s.shape == (5, 4)
    y = dsa.act_dequant(q, s, group_size=64)
    ref = (e4m3_decode(q).reshape(5, 4, 64) * s[:, :, None]).reshape(5, 256)
    np.testing.assert_array_equal(y, ref.astype(np.float32))
    # e4m3 has 3 mantissa bits: relative error <= 2^-4, plus half the subnormal step 2^-10 s.
    assert np.all(np.abs(y - x) <= np.abs(x) * 2 ** -4 + np.repeat(s, 64, axis=1) * 2 ** -10)
    yb = dsa.act_dequant(q, s, group_size=64, dtype="bfloat16")
    np.testing.assert_array_equal(as_bits(yb), bf16_bits(ref.astype(np.float32)))


def test_weight_quant_bit_exact_and_round_trip(rng):
    w = (rng.standard_normal((320, 416)) * 0.02).astype(np.float32)
    q, s = dsa.weight_quant(w)
    qr, sr = weight_quant_ref(w)
    assert s.shape == (3, 4)
    np.testing.assert_array_equal(q, qr)
    np.testing.assert_array_equal(s, sr)
    wd = dsa.weight_dequant(q, s)
    ref = e4m3_decode(q) * np.repeat(np.repeat(s, 128, 0), 128, 1)[:320, :416]
    np.testing.assert_array_equal(wd, ref.astype(np.float32))
    assert np.max(np.abs(wd - w)) <= np.max(s) * 16


def test_quant_out_in_place(rng):
    x = rng.standard_normal((2, 128)).astype(np.float32)
    q = np.zeros((2, 128), np.uint8)
    s = np.zeros((2, 1), np.float32)
    rq, rs = dsa.act_quant(x, out=(q, s))
    assert rq is q and rs is s
    qr, sr = act_quant_ref(x)
    np.testing.assert_array_equal(q, qr)
    np.testing.assert_array_equal(s, sr)


def test_ml_dtypes_float8_input(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = rng.standard_normal((2, 128)).astype(np.float32)
    q, s = dsa.act_quant(x)
    y1 = dsa.act_dequant(q, s)
    y2 = dsa.act_dequant(q.view(ml_dtypes.float8_e4m3fn), s)
    np.testing.assert_array_equal(y1, y2)
    # ml_dtypes' own e4m3 decoding agrees with the codes.
    np.testing.assert_array_equal(q.view(ml_dtypes.float8_e4m3fn).astype(np.float32), e4m3_decode(q))


def kv_rows(rng, n):
    return bf16_bits((rng.standard_normal((n, 576)) * 3).astype(np.float32))


def test_kv_cache_fp8_pack_layout_and_round_trip(rng):
    bits = kv_rows(rng, 7)
    cache = dsa.kv_cache_fp8_pack(as_bf16_array(bits))
    assert cache.shape == (7, 656) and cache.dtype == np.uint8
    q, s = act_quant_ref(bf16_float(bits[:, :512]))
    np.testing.assert_array_equal(cache[:, :512], q)
    np.testing.assert_array_equal(cache[:, 512:528].copy().view(np.float32), s)
    np.testing.assert_array_equal(cache[:, 528:].copy().view(np.uint16), bits[:, 512:])
    kv = dsa.kv_cache_fp8_unpack(cache)
    assert kv.shape == (7, 576)
    latent = (e4m3_decode(q).reshape(7, 4, 128) * s[:, :, None]).reshape(7, 512).astype(np.float32)
    np.testing.assert_array_equal(as_bits(kv)[:, :512], bf16_bits(latent))
    np.testing.assert_array_equal(as_bits(kv)[:, 512:], bits[:, 512:])


def test_kv_cache_pack_slots_scatter_in_place(rng):
    bits = kv_rows(rng, 3)
    cache = np.full((5, 656), 0xAB, np.uint8)
    slots = np.array([4, -1, 0], np.int32)
    r = dsa.kv_cache_fp8_pack(as_bf16_array(bits), slots=slots, out=cache)
    assert r is cache
    full = dsa.kv_cache_fp8_pack(as_bf16_array(bits))
    np.testing.assert_array_equal(cache[4], full[0])
    np.testing.assert_array_equal(cache[0], full[2])
    assert np.all(cache[1:4] == 0xAB)
    with pytest.raises(dsa.Error, match="distinct slots"):
        dsa.kv_cache_fp8_pack(as_bf16_array(bits), slots=np.array([1, 1, 2], np.int32), out=cache)


def test_indexer_cache_round_trip(rng):
    k = random_e4m3(rng, (6, 128))
    ks = rng.random(6).astype(np.float32)
    cache = dsa.indexer_cache_pack(k, ks)
    assert cache.shape == (6, 132)
    np.testing.assert_array_equal(cache[:, :128], k)
    np.testing.assert_array_equal(cache[:, 128:].copy().view(np.float32)[:, 0], ks)
    k2, ks2 = dsa.indexer_cache_unpack(cache)
    np.testing.assert_array_equal(k2, k)
    np.testing.assert_array_equal(ks2, ks)


def test_e4m3_reference_sanity():
    # The test's own encoder: saturation, ties to even, NaN.
    assert e4m3_encode(np.array([1000.0]))[0] == 0x7E
    assert e4m3_encode(np.array([-1000.0]))[0] == 0xFE
    assert e4m3_decode(e4m3_encode(np.array([1.0625])))[0] == 1.0  # tie between 1 and 1.125 -> even
    assert e4m3_encode(np.array([2.0 ** -10]))[0] == 0  # half the min subnormal: tie to even (0)
