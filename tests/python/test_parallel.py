"""dsa.parallel: the V3.2 forward over torch.distributed ranks (docs/python.md, "Across ranks").
One rank gives dsa.Transformer's bits; two ranks (torchrun, gloo) pass the example's check and the
golden tiny-model replay; each rank reads only its slice; a checkpoint's bad headers and an index
that names files outside the directory are errors. Skipped without torch."""

import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import dsa

torch = pytest.importorskip("torch")
import dsa.parallel as P  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
TINY = REPO / "models" / "tiny-random"
GOLDEN = REPO / "tests" / "data" / "tiny-dsv32"


def test_one_rank_is_the_single_process_forward_bit_for_bit():
    ref = dsa.Transformer.load(TINY, threads=1)
    m = P.Transformer.load(TINY, threads=1)
    assert m.world == 1 and m.heads_parallel is False
    a, b = ref.new_sequence(40), m.new_sequence(40)
    tokens = list(range(3, 35))
    for _ in range(4):
        want = ref.forward(a, tokens)
        got = m.forward(b, tokens).numpy()
        np.testing.assert_array_equal(got, want)
        tokens = [int(want.argmax())]


def test_one_rank_chunked_prefill_is_the_single_process_one():
    ref = dsa.Transformer.load(TINY, threads=1)
    m = P.Transformer.load(TINY, threads=1)
    tokens = list(range(7, 47))
    for chunk in (16, 39):  # the last chunk of 39 + 1 is one token: the decode path, as in C++
        want = ref.forward(ref.new_sequence(48), tokens, max_chunk=chunk)
        got = m.forward(m.new_sequence(48), tokens, max_chunk=chunk).numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("tokens, match", [
    ([1.0, 2.0], r"tokens\[0\]"), (True, "tokens"), ([1, 512], r"tokens\[1\] = 512"), ([], "tokens.size"),
    (np.array([1.5]), "tokens.dtype"), (list(range(41)), "tokens.size"),
])
def test_forward_rejects_bad_tokens(tokens, match):
    m = P.Transformer.load(TINY)
    with pytest.raises(dsa.Error, match=match):
        m.forward(m.new_sequence(40), tokens)


def test_forward_rejects_a_sequence_of_another_model():
    a, b = P.Transformer.load(TINY), P.Transformer.load(TINY)
    with pytest.raises(dsa.Error, match="seq"):
        a.forward(b.new_sequence(8), [1])
    with pytest.raises(dsa.Error, match="seq"):
        a.forward(dsa.Transformer.load(TINY).new_sequence(8), [1])


def _torchrun(tmp_path, *args, ranks=2):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                           *map(str, args)], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)


def test_example_two_ranks_gloo(tmp_path):
    r = _torchrun(tmp_path, REPO / "examples" / "python" / "distributed_forward.py", TINY, "--steps", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "FAIL" not in r.stdout
    # each rank holds a slice: the two ranks' weights are less than the whole model's
    line = next(x for x in r.stdout.splitlines() if "weights per rank" in x)
    per_rank = json.loads(line.split("weights per rank (MiB) ")[1].split(", peak")[0])
    whole = P.Transformer.load(TINY).weight_bytes / 2**20
    assert len(per_rank) == 2 and all(w < 0.7 * whole for w in per_rank)


def test_golden_replay_two_ranks(tmp_path):
    script = tmp_path / "replay.py"
    script.write_text(
        "import json, os, sys, torch.distributed as dist, dsa.parallel as P\n"
        "dist.init_process_group('gloo')\n"
        "r = P.validate_model(sys.argv[1], threads=1)\n"
        "with open(f'report{dist.get_rank()}.json', 'w') as f:\n"
        "    f.write(json.dumps({'rank': dist.get_rank(), **r}))\n"
        "dist.destroy_process_group()\n"
        "os._exit(0)  # as the example: Gloo can abort an exiting interpreter (pytorch#190489)\n")
    r = _torchrun(tmp_path, script, GOLDEN)
    assert r.returncode == 0, r.stdout + r.stderr
    reports = [json.loads((tmp_path / f"report{i}.json").read_text()) for i in range(2)]
    assert sorted(x["rank"] for x in reports) == [0, 1]
    single = dsa.validate_model(GOLDEN, outputs=False)
    for x in reports:
        assert x["pass"] and x["failed"] == 0 and x["backend"] == "dsa.parallel, 2 ranks, cpu"
        assert [c["tensor"] for c in x["checks"]] == [c["tensor"] for c in single["checks"]]
        # the tiny model's two-block reductions add in one process's order: the same cosines
        np.testing.assert_allclose(x["cosines"], single["cosines"], rtol=0, atol=1e-12)


def test_one_rank_trace_is_the_single_process_trace():
    ref = dsa.Transformer.load(TINY, threads=1)
    m = P.Transformer.load(TINY, threads=1)
    a, b = ref.new_sequence(24), m.new_sequence(24)
    for tokens in (list(range(3, 20)), [5]):  # a prefill, then a decode step
        want_logits, want = ref.forward(a, tokens, trace=True)
        got_logits, got = m.forward(b, tokens, trace=True)
        np.testing.assert_array_equal(got_logits.numpy(), want_logits)
        assert [(d["layer"], d["start"]) for d in got] == [(d["layer"], d["start"]) for d in want]
        for g, w in zip(got, want):
            for key in ("topk", "experts", "ffn_out", "residual"):
                assert g[key].dtype == w[key].dtype, key
                np.testing.assert_array_equal(g[key], w[key], err_msg=key)


def test_one_rank_golden_replay_is_dsa_validate_model():
    """The same C++ replay judges both forward passes: one rank's report is the single process's."""
    single = dsa.validate_model(GOLDEN, threads=1)
    r = P.validate_model(GOLDEN, threads=1, outputs=True)
    assert r["pass"] and r["checks"] == single["checks"] and r["diagnostics"] == single["diagnostics"]
    assert r["cosines"] == single["cosines"] and r["topk_agreement"] == single["topk_agreement"]
    assert r["outputs"].keys() == single["outputs"].keys()
    for name, want in single["outputs"].items():
        np.testing.assert_array_equal(r["outputs"][name], want, err_msg=name)


@pytest.mark.parametrize("trace, match", [
    ({"topk": np.zeros((1, 1))}, r"trace\['topk'\].*int32"),
    ({"ffn_out": np.zeros((1, 256), np.uint16)}, r"trace rows = topk 2, ffn_out 1"),
])
def test_validate_model_with_rejects_a_bad_trace(trace, match):
    """A forward written in Python is checked where the C++ one is trusted: the replay reads each
    array's rows, so their dtypes and row counts are checked before it does."""
    m = P.Transformer.load(GOLDEN, threads=1)
    hidden = m.cfg["hidden_size"]
    layer = {"layer": 0, "start": 0, "topk": np.zeros((2, 2), np.int32), "experts": np.zeros((0, 0), np.int32),
             "ffn_out": np.zeros((2, hidden), np.uint16), "residual": np.zeros((2, hidden), np.uint16), **trace}
    with pytest.raises(dsa.Error, match=match):
        dsa._core.validate_model_with(str(GOLDEN), "test", m.new_sequence,
                                      lambda seq, tokens, chunk: (np.zeros(m.cfg["vocab_size"], np.float32), [layer]),
                                      m.num_layers, 4096, False)


_GPU = dsa.cuda_available() and torch.cuda.is_available()


@pytest.mark.skipif(not _GPU, reason="needs a GPU and dsa's CUDA build")
def test_cuda_one_rank_golden_replay():
    """The forward on CUDA tensors (the CUDA backend's ops) passes the golden replay."""
    r = P.validate_model(GOLDEN, device="cuda")
    assert r["pass"], r


@pytest.mark.skipif(not _GPU or torch.cuda.device_count() < 2, reason="needs two GPUs (NCCL: one per rank)")
def test_example_two_ranks_nccl(tmp_path):
    r = _torchrun(tmp_path, REPO / "examples" / "python" / "distributed_forward.py", TINY, "--steps", "4",
                  "--device", "cuda")
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr


# ---- the checkpoint reader ----------------------------------------------------------------------


def test_load_checks_every_shape_against_the_config(tmp_path):
    """A config.json that does not describe the checkpoint: the first tensor of another shape is
    the error (its slice would otherwise be read as if it were right)."""
    cfg = json.loads((TINY / "config.json").read_text())
    cfg["q_lora_rank"] = 128
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shutil.copy(TINY / "model.safetensors", tmp_path)  # a link out of the directory is refused
    with pytest.raises(dsa.Error, match=r"q_a_proj.weight' shape = \[256, 256\]; expected \[128, 256\]"):
        P.Transformer.load(tmp_path)


def _write(path, header, data=b""):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_checkpoint_reads_slices(tmp_path):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    _write(tmp_path / "model.safetensors", {"w": {"dtype": "F32", "shape": [4, 6], "data_offsets": [0, 96]}},
           a.tobytes())
    ck = P.Checkpoint(str(tmp_path))
    assert ck.shape("w") == (4, 6)
    np.testing.assert_array_equal(ck.read("w", rows=(1, 3), cols=(2, 5)).numpy(), a[1:3, 2:5])


@pytest.mark.parametrize("header, data, match", [
    ({"w": {"dtype": "F32", "shape": [4, 6], "data_offsets": [0, 96]}}, b"\0" * 95, "data_offsets"),
    ({"w": {"dtype": "F32", "shape": [4, 6], "data_offsets": [0, 92]}}, b"\0" * 96, "data_offsets"),
    ({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8, "dtype"),
    ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}, b"", r"shape = \[-1\]"),
    ({"w": {"dtype": "F32"}}, b"", 'missing "shape"'),
])
def test_checkpoint_rejects_bad_headers(tmp_path, header, data, match):
    _write(tmp_path / "model.safetensors", header, data)
    with pytest.raises(dsa.Error, match=match):
        P.Checkpoint(str(tmp_path))


def test_checkpoint_rejects_a_header_longer_than_the_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(dsa.Error, match="header length"):
        P.Checkpoint(str(tmp_path))


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", ".."])
def test_checkpoint_index_names_files_of_the_directory_only(tmp_path, shard):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": shard}}))
    with pytest.raises(dsa.Error, match=r"weight_map\['w'\] = .*; expected a plain file name in the index's directory"):
        P.Checkpoint(str(tmp_path))
