"""The golden primitives (tests/data/primitives.safetensors, copied from ../shared/golden) and the
golden tiny model through the Python API, under the golden README's tolerances."""

import numpy as np
import pytest

import dsa
from conftest import DATA, as_bf16_array, as_bits, bf16_ulp_diff, tiny_golden_dir, tiny_random_dir


def test_hadamard(golden):
    y = dsa.hadamard_transform(as_bf16_array(golden["hadamard.x"]), 128 ** -0.5)
    ulp = bf16_ulp_diff(as_bits(y), golden["hadamard.y"])
    assert ulp.max() <= 1 and np.mean(ulp != 0) <= 0.005


def test_hadamard_f32(golden):
    x = golden["hadamard_f32.x"]
    y = dsa.hadamard_transform(x, 1.0)
    tol = 1e-5 * np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    assert np.all(np.abs(y - golden["hadamard_f32.y"]) <= tol)


@pytest.mark.parametrize("fmt", ["ue8m0", "fp32"])
def test_act_quant(golden, fmt):
    q, s = dsa.act_quant(as_bf16_array(golden["act_quant.x"]), scale_format=fmt)
    np.testing.assert_array_equal(q, golden[f"act_quant.{fmt}.q"])
    np.testing.assert_array_equal(s, golden[f"act_quant.{fmt}.s"])


def test_weight_quant(golden):
    q, s = dsa.weight_quant(golden["weight_quant.w"])
    np.testing.assert_array_equal(q, golden["weight_quant.q"])
    np.testing.assert_array_equal(s, golden["weight_quant.s"])


def test_indexer(golden):
    g = {k.split(".", 1)[1]: v for k, v in golden.items() if k.startswith("indexer.")}
    m, n = g["q"].shape[0], g["k"].shape[0]
    full = np.tile(np.array([[0, n]], np.int32), (m, 1))
    got = dsa.lightning_indexer_scores(g["q"], g["w"], g["k"], g["k_scale"], full)
    ref = g["score"]
    fin = np.isfinite(ref)
    scale = np.max(np.where(fin, np.abs(ref), 0), axis=1, keepdims=True)
    assert np.all(np.abs(np.where(fin, got, 0) - np.where(fin, ref, 0)) <= 1e-5 * scale)


def test_topk(golden):
    score, ends, k = golden["topk.score"], golden["topk.ends"], int(golden["topk.k"][0])
    ranges = np.stack([np.zeros_like(ends), ends], axis=1).astype(np.int32)
    np.testing.assert_array_equal(dsa.topk_indices(score, k, ranges), golden["topk.indices"])


def test_sparse_mla(golden):
    out, lse = dsa.sparse_mla_attention(as_bf16_array(golden["sparse_mla.q"]), as_bf16_array(golden["sparse_mla.kv"]),
                                        golden["sparse_mla.indices"], float(golden["sparse_mla.scale"][0]))
    np.testing.assert_allclose(out, golden["sparse_mla.out"], atol=2e-3)
    want = golden["sparse_mla.lse"]
    assert np.array_equal(np.isinf(lse), np.isinf(want)) and np.array_equal(lse[np.isinf(want)], want[np.isinf(want)])
    fin = np.isfinite(want)
    np.testing.assert_allclose(lse[fin], want[fin], atol=1e-4)


def test_kl_dense(golden):
    loss, grad = dsa.indexer_kl_loss_dense(golden["kl_dense.attn"], golden["kl_dense.index"])
    np.testing.assert_allclose(loss[0], golden["kl_dense.loss"][0], rtol=1e-4)
    np.testing.assert_allclose(grad, golden["kl_dense.grad_index"], atol=1e-5)


def test_kl_sparse(golden):
    loss, grad = dsa.indexer_kl_loss_sparse(golden["kl_sparse.attn"], golden["kl_sparse.index"],
                                            golden["kl_sparse.topk"])
    np.testing.assert_allclose(loss[0], golden["kl_sparse.loss"][0], rtol=1e-4)
    np.testing.assert_allclose(grad, golden["kl_sparse.grad_index"], atol=1e-5)


def test_validate_report(golden):
    r = dsa.validate(DATA / "primitives.safetensors", threads=2)
    assert r["pass"] and r["failed"] == 0 and r["errors"] == 0
    names = [g["name"] for g in r["groups"]]
    assert names == ["hadamard", "hadamard_f32", "act_quant", "weight_quant", "indexer", "topk", "sparse_mla",
                     "kl_dense", "kl_sparse"]
    for g in r["groups"]:
        assert g["pass"] and g["error"] is None and g["comparisons"]
        for c in g["comparisons"]:
            assert c["pass"] and c["max_error"] <= c["tolerance"]
    topk = next(g for g in r["groups"] if g["name"] == "topk")
    np.testing.assert_array_equal(topk["outputs"]["topk.indices"], golden["topk.indices"])
    had = next(g for g in r["groups"] if g["name"] == "hadamard")
    assert as_bits(had["outputs"]["hadamard.y"]).shape == golden["hadamard.y"].shape


def test_validate_errors(tmp_path):
    with pytest.raises(dsa.Error, match="no-such-file"):
        dsa.validate(tmp_path / "no-such-file.safetensors")
    with pytest.raises(dsa.Error, match="expected.safetensors"):
        dsa.validate_model(tiny_random_dir())  # a model without golden outputs


def test_validate_model_golden_tiny():
    r = dsa.validate_model(tiny_golden_dir(), threads=2)
    assert r["pass"], r["checks"]
    assert len(r["cosines"]) == 9 and min(r["cosines"]) >= 0.99
    assert sum(1 - a for a in r["argmax_match"]) <= 1
    assert len(r["topk_agreement"]) == 3 and min(r["topk_agreement"]) >= 0.98
    assert r["outputs"]["step0.logits"].shape == (1, 512)


GOLDEN_PROMPT = [511, 466, 496, 272, 227, 33, 397, 303, 317, 232, 256, 309, 298, 275, 396, 114, 421, 193, 335, 275,
                 206, 278, 118, 324, 450, 222, 466, 222, 258, 184, 224, 266, 309, 41, 14, 59, 120, 334, 373, 84, 312,
                 440, 43, 146, 409, 256, 35, 315, 194, 316, 9, 282, 15, 394, 386, 146, 278, 172, 217, 90, 315, 201,
                 430, 239, 232, 140, 390, 389, 498, 480, 257, 314, 365, 422, 483, 368, 185, 349, 120, 385]


def test_transformer_golden_greedy():
    # The first 6 tokens DeepSeek's reference generated greedily (tools/CMakeLists.txt, dsa_run_tiny_golden).
    m = dsa.Transformer.load(tiny_golden_dir(), threads=2)
    seq = m.new_sequence(len(GOLDEN_PROMPT) + 8)
    logits = m.forward(seq, np.array(GOLDEN_PROMPT, np.int64))
    ids = []
    for _ in range(6):
        ids.append(int(np.argmax(logits)))
        logits = m.forward(seq, [ids[-1]])
    assert ids == [328, 166, 246, 89, 428, 79]
    assert seq.length == len(GOLDEN_PROMPT) + 6
    t = m.phase_times
    assert set(t) == {"indexer", "topk", "attention", "moe", "other", "total"} and t["total"] > 0


def test_transformer_tiny_random():
    m = dsa.Transformer.load(tiny_random_dir(), threads=1)
    cfg = m.config
    assert cfg["vocab_size"] == 512 and m.num_layers == cfg["num_hidden_layers"]
    s1, s2 = m.new_sequence(16), m.new_sequence(16)
    a = m.forward(s1, [5, 17, 42, 99])
    b, layers = m.forward(s2, [5, 17, 42, 99], trace=True, max_chunk=2)
    assert a.dtype == np.float32 and a.shape == (512,)
    np.testing.assert_array_equal(a, b)  # chunked prefill computes the same bits
    assert len(layers) == 2 * m.num_layers and layers[0]["topk"].shape[0] == 2
    m2 = dsa.Transformer.load(tiny_random_dir(), threads=2)
    np.testing.assert_array_equal(m2.forward(m2.new_sequence(16), [5, 17, 42, 99]), a)  # thread count
    with pytest.raises(dsa.Error, match=r"tokens\[1\] = 600; expected a token id in \[0, vocab_size = 512\)"):
        m.forward(s1, [1, 600])
    with pytest.raises(dsa.Error):
        m.forward(m2.new_sequence(4), [1])  # a sequence of another transformer
    with pytest.raises(dsa.Error, match="max_tokens"):
        m.new_sequence(0)
    m.reset_phase_times()
    assert m.phase_times["total"] == 0
