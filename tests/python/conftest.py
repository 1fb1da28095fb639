"""Shared fixtures and independent NumPy references of the number formats (written from
docs/design.md's definitions, not from dsa's code): bfloat16 and FP8 E4M3FN encodings, the golden
safetensors reader."""

import json
import os
import pathlib
import struct

import numpy as np
import pytest

import dsa

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(20251125)


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


# ---- bfloat16 ------------------------------------------------------------------------------------


def bf16_bits(x):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even, NaN quiet."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)


def bf16_float(bits):
    """bfloat16 bit patterns -> float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_round(x):
    return bf16_float(bf16_bits(x))


def bf16_ulp_diff(a_bits, b_bits):
    """|a - b| in bfloat16 units in the last place (sign-magnitude line)."""
    def line(u):
        u = np.asarray(u, dtype=np.uint16).astype(np.int64)
        mag = u & 0x7FFF
        return np.where(u & 0x8000, -mag, mag)
    return np.abs(line(a_bits) - line(b_bits))


def as_bits(a):
    """The uint16 bits of a NumPy bfloat16 array (ml_dtypes or uint16)."""
    a = np.asarray(a)
    return a.view(np.uint16)


def as_bf16_array(bits):
    """bfloat16 bits as the array type dsa returns for NumPy bfloat16."""
    bits = np.asarray(bits, dtype=np.uint16)
    if dsa.has_ml_dtypes():
        import ml_dtypes
        return bits.view(ml_dtypes.bfloat16)
    return bits


# ---- FP8 E4M3FN ----------------------------------------------------------------------------------


def _e4m3_table():
    vals = np.empty(256, dtype=np.float64)
    for c in range(256):
        e, m = (c >> 3) & 0xF, c & 7
        if (c & 0x7F) == 0x7F:
            v = np.nan
        elif e == 0:
            v = m * 2.0 ** -9
        else:
            v = (1 + m / 8) * 2.0 ** (e - 7)
        vals[c] = -v if c & 0x80 else v
    return vals


E4M3 = _e4m3_table()
_POS = E4M3[:127]  # codes 0..126: 0 .. 448, increasing


def e4m3_decode(codes):
    return E4M3[np.asarray(codes, dtype=np.uint8)]


def e4m3_encode(x):
    """float -> E4M3FN codes: round to nearest even, saturate to +-448, NaN -> 0x7F|sign."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), 448.0)
    hi = np.clip(np.searchsorted(_POS, a, side="left"), 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    dlo, dhi = a - _POS[lo], _POS[hi] - a
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    code = np.where(a == _POS[hi], hi, code).astype(np.uint8)
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    code = code | sign
    return np.where(np.isnan(x), 0x7F | sign, code).astype(np.uint8)


def ceil_pow2(v):
    """2^ceil(log2 v) of positive normal float32 values, on the bits."""
    u = np.asarray(v, dtype=np.float32).view(np.uint32)
    e = (u >> 23) & 0xFF
    e = e + ((u & 0x7FFFFF) != 0)
    return (e.astype(np.uint32) << 23).view(np.float32)


def act_quant_ref(x, group=128, fmt="ue8m0"):
    """DeepSeek act_quant, 1 x group: (codes, scales)."""
    x = np.asarray(x, dtype=np.float32)
    r, c = x.shape
    g = x.reshape(r, c // group, group)
    amax = np.maximum(np.abs(g).max(axis=2), np.float32(1e-4)).astype(np.float32)
    v = (amax * np.float32(1.0 / 448.0)).astype(np.float32)
    s = ceil_pow2(v) if fmt == "ue8m0" else v
    q = np.clip((g / s[:, :, None]).astype(np.float32), -448, 448)
    return e4m3_encode(q).reshape(r, c), s.astype(np.float32)


def weight_quant_ref(w):
    w = np.asarray(w, dtype=np.float32)
    r, c = w.shape
    br, bc = -(-r // 128), -(-c // 128)
    q = np.empty((r, c), dtype=np.uint8)
    s = np.empty((br, bc), dtype=np.float32)
    for i in range(br):
        for j in range(bc):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            sc = np.float32(max(np.float32(np.abs(blk).max()), np.float32(1e-8)) / np.float32(448.0))
            s[i, j] = sc
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = e4m3_encode((blk / sc).astype(np.float32))
    return q, s


def random_e4m3(rng, shape, scale=1.0):
    """Codes of random finite values (no NaN code)."""
    return e4m3_encode(rng.standard_normal(shape) * scale)


# ---- golden safetensors --------------------------------------------------------------------------

_ST = {"F32": np.float32, "BF16": np.uint16, "I32": np.int32, "I64": np.int64, "F8_E4M3": np.uint8, "U8": np.uint8}


def read_safetensors(path):
    """{name: read-only array} of a safetensors file (BF16 as uint16 bits, F8_E4M3 as uint8)."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], dtype=_ST[t["dtype"]]).reshape(t["shape"])
    return out


@pytest.fixture(scope="session")
def golden():
    return read_safetensors(DATA / "primitives.safetensors")


def tiny_golden_dir():
    return DATA / "tiny-dsv32"


def tiny_random_dir():
    return REPO / "models" / "tiny-random"
