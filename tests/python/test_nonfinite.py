"""Transformer.forward on checkpoints whose finite weights overflow at run time (issue 33, class
1): non-finite logits are a dsa.NonFiniteError naming where the values first stopped being
finite, never plausible numbers; a non-finite value that did not reach the logits is a warning."""

import json
import shutil
import struct
import warnings

import numpy as np
import pytest

import dsa
from conftest import DATA

PROMPT = [5, 17, 3, 99, 42, 7, 250, 1]


def hostile_copy(tmp_path, name, fill):
    """tests/data/tiny-dsv32 with every element of tensor `name` set to the bytes `fill`."""
    src = DATA / "tiny-dsv32"
    dst = tmp_path / "model"
    dst.mkdir()
    shutil.copy(src / "config.json", dst / "config.json")
    data = bytearray((src / "model.safetensors").read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    begin, end = header[name]["data_offsets"]
    base = 8 + n
    for i in range(base + begin, base + end, len(fill)):
        data[i:i + len(fill)] = fill
    (dst / "model.safetensors").write_bytes(bytes(data))
    return dst


def test_intact_model_has_no_site():
    m = dsa.Transformer.load(DATA / "tiny-dsv32", threads=2)
    seq = m.new_sequence(32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logits = m.forward(seq, PROMPT)
    assert np.isfinite(logits).all()
    assert seq.first_nonfinite is None


def test_nonfinite_logits_raise_naming_the_site(tmp_path):
    d = hostile_copy(tmp_path, "model.layers.1.self_attn.q_b_proj.weight_scale_inv", struct.pack("<f", 3.0e38))
    m = dsa.Transformer.load(d, threads=2)
    seq = m.new_sequence(32)
    with pytest.raises(dsa.NonFiniteError, match="first stopped being finite in layer 1's attention output at "
                                                 "position 0") as e:
        m.forward(seq, PROMPT)
    assert isinstance(e.value, dsa.Error)
    assert seq.first_nonfinite == {"layer": 1, "stage": "attention output", "position": 0,
                                   "text": "layer 1's attention output at position 0"}
    # propagate: the NaN logits come back, and the site stays the first one.
    seq2 = m.new_sequence(32)
    logits = m.forward(seq2, PROMPT, nonfinite="propagate")
    assert not np.isfinite(logits).all()
    assert seq2.first_nonfinite["layer"] == 1
    seq2.reset()
    assert seq2.first_nonfinite is None


def test_nonfinite_inside_the_model_with_finite_logits_warns(tmp_path):
    # The indexer's weights_proj at +-3e38 (bf16): the index scores go NaN, top-k still selects
    # (NaN ranks first), the logits stay finite.
    name = "model.layers.0.self_attn.indexer.weights_proj.weight"
    d = hostile_copy(tmp_path, name, struct.pack("<H", 0x7F61))
    m = dsa.Transformer.load(d, threads=2)
    seq = m.new_sequence(32)
    with pytest.warns(dsa.NonFiniteWarning, match="layer 0's index scores at position 0"):
        logits = m.forward(seq, PROMPT)
    assert np.isfinite(logits).all()
    assert seq.first_nonfinite["stage"] == "index scores"


def test_nonfinite_argument_is_checked():
    m = dsa.Transformer.load(DATA / "tiny-dsv32", threads=1)
    seq = m.new_sequence(8)
    with pytest.raises(dsa.Error, match="nonfinite"):
        m.forward(seq, [1], nonfinite="ignore")
    with pytest.raises(dsa.Error, match="nonfinite"):
        m.forward(seq, [1], nonfinite=True)
