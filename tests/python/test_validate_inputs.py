"""dsa.validate and dsa.validate_model on crafted golden files (issue 33): a report that agrees with
``dsa_validate`` on every file (tests/tools/test_validate_cli.cpp runs the same files through the
command line), never a NumPy error, and no group passing with nothing compared."""

import json
import shutil
import struct

import numpy as np
import pytest

import dsa
from conftest import DATA, tiny_golden_dir


def write_safetensors(path, tensors):
    """Writes {name: (dtype, shape, bytes)} as a safetensors file (no data copied for empty ones)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    return path


def f32(*values):
    return np.asarray(values, np.float32).tobytes()


def empty_groups(path):
    """Groups whose tensors all have a zero extent: the file holds no data at all (the CLI test's
    "every group empty" file, less sparse_mla and kl_dense)."""
    return write_safetensors(path, {
        "hadamard.x": ("BF16", [0, 128], b""),
        "hadamard.y": ("BF16", [0, 128], b""),
        "act_quant.x": ("BF16", [0, 128], b""),
        "act_quant.ue8m0.q": ("F8_E4M3", [0, 128], b""),
        "act_quant.ue8m0.s": ("F32", [0, 1], b""),
        "weight_quant.w": ("F32", [0, 0], b""),
        "weight_quant.q": ("F8_E4M3", [0, 0], b""),
        "weight_quant.s": ("F32", [0, 0], b""),
        "topk.score": ("F32", [0, 8], b""),
        "topk.ends": ("I32", [0], b""),
        "topk.k": ("I32", [1], np.asarray([4], np.int32).tobytes()),
        "topk.indices": ("I32", [0, 4], b""),
        # The loss of no rows is compared (0 = 0), the empty gradient is not.
        "kl_dense.attn": ("F32", [0, 2, 8], b""),
        "kl_dense.index": ("F32", [0, 8], b""),
        "kl_dense.loss": ("F32", [1], f32(0)),
        "kl_dense.grad_index": ("F32", [0, 8], b""),
    })


def test_a_group_of_empty_tensors_fails(tmp_path):
    # Issue 33, class 8: such groups passed with nothing compared. Now every empty expected tensor
    # adds a failed "elements compared" comparison, as dsa_validate prints "no elements to compare".
    r = dsa.validate(empty_groups(tmp_path / "empty.safetensors"), threads=1)
    assert not r["pass"]
    assert (r["passed"], r["failed"], r["errors"]) == (0, 5, 0)
    for g in r["groups"]:
        assert not g["pass"] and g["error"] is None, g
        empty = [c for c in g["comparisons"] if c["metric"] == "elements compared"]
        assert empty and all(not c["pass"] and c["max_error"] == 0 and c["tolerance"] == 1 for c in empty)
        for name, a in g["outputs"].items():
            assert a.size == (1 if name == "kl_dense.loss" else 0), name
    kl = next(g for g in r["groups"] if g["name"] == "kl_dense")
    assert [(c["tensor"], c["metric"], c["pass"]) for c in kl["comparisons"]] == [
        ("kl_dense.loss", "rel err", True), ("kl_dense.grad_index", "max abs err", True),
        ("kl_dense.grad_index", "non-finite mismatches", True), ("kl_dense.grad_index", "elements compared", False)]


def test_an_empty_group_beside_a_real_one(tmp_path, golden):
    tensors = {n: ("I32" if a.dtype == np.int32 else "F32", list(a.shape), a.tobytes())
               for n, a in golden.items() if n.startswith("topk.")}
    tensors["hadamard.x"] = ("BF16", [0, 128], b"")
    tensors["hadamard.y"] = ("BF16", [0, 128], b"")
    r = dsa.validate(write_safetensors(tmp_path / "mixed.safetensors", tensors), threads=1)
    assert not r["pass"] and (r["passed"], r["failed"]) == (1, 1)
    assert [(g["name"], g["pass"]) for g in r["groups"]] == [("hadamard", False), ("topk", True)]


def test_an_expected_shape_no_array_holds_is_an_error_not_a_numpy_exception(tmp_path):
    # Issue 33, class 7: kl_dense with no rows and 2^62 keys costs the file nothing and passed in
    # dsa_validate, while dsa.validate raised NumPy's "array is too big" ValueError making the
    # [0, 2^62] float32 gradient array. Now both call the group malformed (exit 2 / "errors").
    n = 1 << 62
    p = write_safetensors(tmp_path / "huge_empty.safetensors", {
        "kl_dense.attn": ("F32", [0, 1, n], b""),
        "kl_dense.index": ("F32", [0, n], b""),
        "kl_dense.loss": ("F32", [1], f32(0)),
        "kl_dense.grad_index": ("F32", [0, n], b""),
    })
    r = dsa.validate(p, threads=1)
    assert not r["pass"] and (r["passed"], r["failed"], r["errors"]) == (0, 0, 1)
    (g,) = r["groups"]
    assert g["name"] == "kl_dense" and not g["pass"] and g["outputs"] == {}
    assert ("group 'kl_dense': tensor 'kl_dense.grad_index' shape = [0, 4611686018427387904]; expected extents "
            "whose product (zero extents aside) times 4 bytes is at most 2^63 - 1 bytes") in g["error"]


def test_every_output_shape_of_a_passing_file_is_an_array(golden):
    # The arrays come back in the expected tensors' shapes (the reason for the check above).
    r = dsa.validate(DATA / "primitives.safetensors", threads=2)
    assert r["pass"]
    for g in r["groups"]:
        for name, a in g["outputs"].items():
            assert a.shape == golden[name].shape, name


def test_paths_are_quoted_and_a_nul_is_refused(tmp_path):
    with pytest.raises(dsa.Error, match=r"file = 'x\\x00y'; expected a path without NUL characters"):
        dsa.validate("x\0y")
    with pytest.raises(dsa.Error, match=r"dir = 'x\\x00y'; expected a path without NUL characters"):
        dsa.validate_model("x\0y")
    other = write_safetensors(tmp_path / "a\x1bb.safetensors", {"foo.x": ("F32", [1], f32(1))})
    with pytest.raises(dsa.Error) as e:
        dsa.validate(other)
    assert "a\\x1bb.safetensors'; expected a golden-format file" in str(e.value) and "\x1b" not in str(e.value)


def test_validate_model_without_outputs(tmp_path):
    # Issue 33, class 4: outputs=False streams the batch rows and keeps no computed tensors (the
    # checks are the same); batch 2 of the golden row checks each row on its own.
    d = tmp_path / "batch2"
    shutil.copytree(tiny_golden_dir(), d)
    src = d / "expected.safetensors"
    raw = src.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    tensors = {}
    for name, t in header.items():
        b = raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]
        shape = list(t["shape"])
        if shape and shape[0] == 1:
            b, shape[0] = b + b, 2
        tensors[name] = (t["dtype"], shape, b)
    write_safetensors(src, tensors)
    full = dsa.validate_model(d, threads=2)
    lean = dsa.validate_model(d, threads=2, outputs=False)
    assert full["pass"] and lean["pass"] and lean["outputs"] == {}
    assert lean["checks"] == full["checks"] and lean["cosines"] == full["cosines"]
    assert full["outputs"]["step0.layer0.ffn_out"].shape == (2, 80, 256)
