"""Transformer.forward_batch (issue 38): several sequences in one call, each getting the bits it
gets alone."""

import numpy as np
import pytest

import dsa
from conftest import DATA


@pytest.fixture(scope="module")
def model():
    return dsa.Transformer.load(DATA / "tiny-dsv32", threads=2)


def prompts():
    rng = np.random.default_rng(7)
    return [rng.integers(0, 512, n).astype(np.int64) for n in (5, 1, 9, 3)]


def test_batch_equals_alone(model):
    ps = prompts()
    alone = []
    for p in ps:
        s = model.new_sequence(32)
        first = model.forward(s, p)
        second = model.forward(s, [3])
        alone.append((first, second))
    seqs = [model.new_sequence(32) for _ in ps]
    out = model.forward_batch(seqs, ps)
    assert len(out) == len(ps)
    for o, (want, _) in zip(out, alone):
        assert o.shape == (512,) and o.dtype == np.float32
        np.testing.assert_array_equal(o.view(np.uint32), want.view(np.uint32))
    step = model.forward_batch(seqs, [[3]] * len(seqs))
    for o, (_, want) in zip(step, alone):
        np.testing.assert_array_equal(o.view(np.uint32), want.view(np.uint32))
    assert [s.length for s in seqs] == [len(p) + 1 for p in ps]


def test_all_logits(model):
    seqs = [model.new_sequence(16), model.new_sequence(16)]
    out = model.forward_batch(seqs, [[1, 2, 3], [4]], all_logits=True)
    assert out[0].shape == (3, 512) and out[1].shape == (1, 512)


def test_errors_leave_every_sequence_as_it_was(model):
    seqs = [model.new_sequence(8), model.new_sequence(8)]
    with pytest.raises(dsa.Error, match="tokens\\[1\\] = 600"):
        model.forward_batch(seqs, [[1, 2], [1, 600]])
    assert [s.length for s in seqs] == [0, 0]
    with pytest.raises(dsa.Error, match="each sequence at most once"):
        model.forward_batch([seqs[0], seqs[0]], [[1], [2]])
    with pytest.raises(dsa.Error, match="len\\(tokens\\) = 1"):
        model.forward_batch(seqs, [[1]])
    with pytest.raises(dsa.Error, match="seqs\\[1\\]"):
        model.forward_batch([seqs[0], "x"], [[1], [2]])
    with pytest.raises(dsa.Error, match="seqs"):
        model.forward_batch(seqs[0], [[1]])
