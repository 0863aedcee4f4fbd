"""The review manifest: the example manifests load; every kind of bad manifest gives a
ManifestError naming the file, the line (checked against the text itself: the named line holds the
key) and the key, with the valid choices; a fuzz of mutated manifests raises nothing else."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numeq.review import ManifestError, load, parse
from numeq.review.model import Buffer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "reviews"
CORRECT = EXAMPLES / "correct-port" / "manifest.toml"


@pytest.fixture()
def port(tmp_path: Path) -> Path:
    """A copy of the correct example (manifest, outputs, profile, shared inputs) to edit."""
    shutil.copytree(EXAMPLES / "correct-port", tmp_path / "port")
    return tmp_path / "port" / "manifest.toml"


@pytest.mark.parametrize("name", ["correct-port", "buggy-port", "unsupported-claim"])
def test_examples_load(name):
    m = load(EXAMPLES / name / "manifest.toml")
    a, b = m.inputs["a"], m.inputs["b"]
    assert m.op_name == "matmul" and a.shape[1] == b.shape[0]
    assert m.outputs["gpu"].shape == m.outputs["nki"].shape == (a.shape[0], b.shape[1])
    assert m.tiling is not None and m.tiling.target == "trn2" and len(m.tiling.buffers) == 4
    assert m.performance is not None and len(m.performance.timings.baseline) == 30
    # the line of each buffer is the line of its [[tiling.buffers]] header
    lines = (EXAMPLES / name / "manifest.toml").read_text().splitlines()
    for buf in m.tiling.buffers:
        assert lines[buf.line - 1].startswith("[[tiling.buffers]]")
        assert f'name = "{buf.name}"' in lines[buf.line]
    assert isinstance(m.tiling.buffers[0], Buffer)


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, count))


def _error(path: Path) -> tuple[str, int]:
    with pytest.raises(ManifestError) as e:
        load(path)
    msg = str(e.value)
    m = re.match(rf"{re.escape(str(path))}:(\d+): ", msg)
    return msg, int(m.group(1)) if m else 0


@pytest.mark.parametrize("old,new,key,words", [
    ('op = "matmul"', 'op = "matmull"', "op", ["op", "'matmull' is not valid", "softmax"]),
    ('in_fmt = "bf16"', 'in_fmt = "bf17"', "in_fmt", ["operation.in_fmt", "bf16", "e4m3"]),
    ('memory = "psum"', 'memory = "dram"', "memory", ["tiling.buffers[2].memory", "sbuf, psum, hbm"]),
    ('bufs = 4', 'bufs = 4.5', "bufs", ["tiling.buffers[2].bufs", "expected an integer", "got a number"]),
    ('bufs = 4', 'bufs = 0', "bufs", ["tiling.buffers[2].bufs", "not an integer in 1 .. 64"]),
    ('k_tile = 128', 'k_tile = true', "k_tile", ["tiling.k_tile", "got a boolean"]),
    ('shape = [128, 128]\nbufs = 2\n\n[[tiling.buffers]]            # b tile', 'shape = [128, -1]\nbufs = 2\n\n'
     '[[tiling.buffers]]            # b tile', "shape", ["tiling.buffers[0].shape[1]", "expected an integer"]),
    ('claimed_speedup = 1.4', 'claimed_speedup = -1.5', "claimed_speedup", ["performance.claimed_speedup", "(0, "]),
    ('claimed_speedup = 1.4', 'claimed_speedup = nan', "claimed_speedup", ["performance.claimed_speedup"]),
    ('unit = "us"', 'unit = "minutes"', "unit", ["performance.timings.unit", "s, ms, us, ns"]),
    ('gpu = "nvidia.h100"', 'gpu = 100', "gpu", ["platforms.gpu", "expected a string, got an integer"]),
])
def test_bad_values_name_key_and_line(port, old, new, key, words):
    _edit(port, old, new)
    msg, line = _error(port)
    for w in words:
        assert w in msg, (w, msg)
    assert line > 0, msg
    assert re.match(rf"\s*{key}\s*=", port.read_text().splitlines()[line - 1]), (line, msg)


def test_unknown_key_lists_valid_ones(port):
    _edit(port, "k_tile = 128\n", "k_tile = 128\nk_tiles = 64\n")
    msg, line = _error(port)
    assert "tiling.k_tiles: unknown key" in msg and "k_tile" in msg and "psum_group" in msg
    assert port.read_text().splitlines()[line - 1].startswith("k_tiles")
    _edit(port, "k_tiles = 64\n", "")
    _edit(port, 'a = "inputs.npz:a"', 'a = "inputs.npz:a"\nx = "inputs.npz:a"')
    msg, _ = _error(port)
    assert "inputs.x: unknown key" in msg and "the inputs of matmul: a, b; optional c" in msg


def test_missing_required(port):
    _edit(port, 'nki = "outputs.npz:nki"\n', "")
    msg, line = _error(port)
    assert "outputs.nki: missing" in msg
    assert port.read_text().splitlines()[line - 1].strip() == "[outputs]"


@pytest.mark.parametrize("old,new,words", [
    ('a = "inputs.npz:a"', 'a = "inputs.npz:z"', ["has no array 'z'", "a, b"]),
    ('a = "inputs.npz:a"', 'a = "inputs.npz"', ["is an .npz archive; name the array"]),
    ('a = "inputs.npz:a"', 'a = "nothing.npy"', ["no file 'nothing.npy'"]),
    ('a = "inputs.npz:a"', 'a = ":a"', ["names no file"]),
])
def test_array_references(port, old, new, words):
    _edit(port, old, new)
    msg, line = _error(port)
    for w in words:
        assert w in msg, msg
    assert port.read_text().splitlines()[line - 1].startswith("a = ")


def test_corrupt_and_unsupported_arrays(port):
    (port.parent / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    _edit(port, 'simulator = "outputs.npz:simulator"', 'simulator = "bad.npy"')
    msg, _ = _error(port)
    assert "cannot read 'bad.npy' as a numpy array" in msg
    np.save(port.parent / "text.npy", np.array(["a", "b"]))
    _edit(port, 'simulator = "bad.npy"', 'simulator = "text.npy"')
    msg, _ = _error(port)
    assert "holds <U1 values; expected real numbers" in msg
    np.save(port.parent / "obj.npy", np.array([1, None], dtype=object), allow_pickle=True)
    _edit(port, 'simulator = "text.npy"', 'simulator = "obj.npy"')
    msg, _ = _error(port)
    assert "cannot read 'obj.npy'" in msg


def test_only_the_named_members_of_an_archive_are_read(port):
    # An .npz whose other member numpy refuses to load (an object array, pickle off): a manifest
    # naming only its numeric members loads; naming the other is the clear error.
    inputs = port.parent / "inputs.npz"
    with np.load(inputs) as d:
        a, b = d["a"], d["b"]
    np.savez(inputs, a=a, b=b, junk=np.array([1, None], dtype=object))
    load(port)
    _edit(port, 'b = "inputs.npz:b"', 'b = "inputs.npz:junk"')
    msg, _ = _error(port)
    assert "inputs.b" in msg and "junk" in msg


def test_duplicate_buffer_names(port):
    _edit(port, 'name = "b_tile"', 'name = "a_t"')
    msg, _ = _error(port)
    assert "the name 'a_t' is used twice" in msg


def test_malformed_toml_says_where():
    with pytest.raises(ManifestError, match=r"m.toml: not valid TOML: .*line 2"):
        parse('[port]\nname = "x\n', "m.toml")
    with pytest.raises(ManifestError, match="expected TOML text"):
        parse(b"[port]", "m.toml")  # type: ignore[arg-type]
    with pytest.raises(ManifestError, match="manifest: no file"):
        load("/nonexistent/manifest.toml")


def test_sections_must_be_tables():
    with pytest.raises(ManifestError, match=r"m.toml:1: port: expected a table, got a string"):
        parse('port = "x"\n', "m.toml")
    with pytest.raises(ManifestError, match="port: missing"):
        parse("", "m.toml")


def test_optional_sections(port):
    text = port.read_text()
    cut = text[:text.index("[tiling]")]
    port.write_text(cut)
    m = load(port)
    assert m.tiling is None and m.performance is None and m.target == "trn2"


_TEXT = CORRECT.read_text()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzz_mutations_give_manifest_errors_only(tmp_path_factory, data):
    # Delete, duplicate or replace a random span of the text: the result loads or raises
    # ManifestError; nothing else escapes (no KeyError, TypeError, IndexError, ...).
    folder = tmp_path_factory.mktemp("fuzz")
    port = folder / "port"
    shutil.copytree(EXAMPLES / "correct-port", port)
    text = _TEXT
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 40)))
        kind = data.draw(st.sampled_from(["delete", "duplicate", "replace"]))
        if kind == "delete":
            text = text[:i] + text[j:]
        elif kind == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i] + data.draw(st.sampled_from(["0", "-1", '"x"', "[", "]", "=", "\n", "true", "1e999",
                                                         "[[tiling.buffers]]\n", "{}", "9" * 30])) + text[j:]
    (port / "manifest.toml").write_text(text)
    try:
        load(port / "manifest.toml")
    except ManifestError:
        pass


@pytest.mark.parametrize("ref", ["../outside.npz:a", "{abs}:a", "sub/../../outside.npz:a"])
def test_files_outside_the_manifests_folder_are_refused(port, ref):
    # A manifest comes from a port's author: it may name only files in its own folder (or below),
    # unless the reviewer allows more; a kernel file and a profile alike.
    outside = port.parent.parent / "outside.npz"
    with np.load(port.parent / "inputs.npz") as d:
        np.savez(outside, a=d["a"], b=d["b"])
    _edit(port, 'a = "inputs.npz:a"', f'a = "{ref.format(abs=outside)}"')
    msg, _ = _error(port)
    assert "inputs.a:" in msg and "lies outside the manifest's folder" in msg and "--allow-outside" in msg
    assert load(port, allow_outside=True).inputs["a"].shape == (128, 512)


def test_a_profile_outside_the_folder_is_refused(port):
    (port.parent.parent / "p.json").write_text((port.parent / "profile.json").read_text())
    _edit(port, 'file = "profile.json"', 'file = "../p.json"')
    msg, _ = _error(port)
    assert "performance.profiles" in msg and "lies outside the manifest's folder" in msg
