"""numeq review on the three example ports, every finding checked against an oracle computed here
without numeq's review code: numpy on the outputs (where the planted bug lies), Python's
statistics module on the timings (the median ratio), the FACTS s3 numbers typed in (PSUM banks);
the CLI's exit codes and files; the HTML page in headless Chromium; the example data regenerated
from make_examples.py."""

from __future__ import annotations

import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import numeq
from numeq.review import review
from numeq.review.manifest import ManifestError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "reviews"


@pytest.fixture(scope="module")
def reviews():
    return {name: review(EXAMPLES / name / "manifest.toml")
            for name in ("correct-port", "buggy-port", "unsupported-claim")}


def _finding(r, rule):
    found = [f for f in r.findings if f.rule == rule]
    assert found, f"no finding {rule}: {[f.rule for f in r.findings]}"
    return found


def _rubric(r):
    return {row["criterion"]: row["result"] for row in r.rubric()}


def _outputs(name):
    with np.load(EXAMPLES / name / "outputs.npz") as d:
        return {k: d[k].astype(np.float64) for k in d.files}


def _kept(samples):
    # nki-library's rule, written here from its description: quartiles by linear interpolation
    # (statistics.quantiles, method="inclusive"), samples within 1.5 IQR of them kept.
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return [x for x in samples if lo <= x <= hi]


def test_correct_port(reviews):
    r = reviews["correct-port"]
    assert r.passed
    assert _rubric(r) == {"preserved_behaviour": "pass", "numerical_standard": "pass", "assumptions": "pass",
                          "tiling_limits": "pass", "memory_hierarchy": "pass", "performance_claim": "pass"}
    v = r.correctness.verdicts
    assert (v["gpu"].tier, v["nki"].tier) == ("bit_exact", "bit_exact")
    out = _outputs("correct-port")
    # the two devices' outputs differ (accumulation order) and the port check explains it
    differing = int(np.sum(out["gpu"] != out["nki"]))
    assert differing > 0 and r.correctness.port.equal == out["gpu"].size - differing
    port = _finding(r, "port_check")[0]
    assert port.status == "pass" and "explained by the accumulation order" in port.message
    # the stated rtol=2e-2 holds on the outputs (numpy's own allclose) and numeq's standard is tighter
    assert np.allclose(out["nki"], out["gpu"], rtol=2e-2, atol=1e-5)
    assert r.correctness.tolerance["rtol"] < 2e-2 / 100
    assert np.all(np.abs(out["nki"] - out["gpu"]) <= r.correctness.tolerance["atol"]
                  + r.correctness.tolerance["rtol"] * np.abs(out["gpu"]))


def test_buggy_port_names_the_tile_and_the_psum(reviews):
    r = reviews["buggy-port"]
    assert not r.passed
    rubric = _rubric(r)
    assert rubric["preserved_behaviour"] == rubric["memory_hierarchy"] == rubric["numerical_standard"] == "fail"
    assert rubric["tiling_limits"] == "pass"
    # Where the NKI output departs from a correct NKI output: numpy, on the example files.
    bad = _outputs("buggy-port")["nki"] != _outputs("correct-port")["nki"]
    rows, cols = np.nonzero(bad)
    assert (cols.min(), cols.max(), rows.min(), rows.max()) == (128, 255, 0, 127)
    nki = _finding(r, "verdict_nki")[0]
    assert nki.status == "fail"
    assert f"{int(bad.sum())} of {bad.size} elements fail" in nki.message
    assert "columns 128..255" in nki.message and "rows 0..127 x cols 128..255" in nki.message
    # The kernel without its last K tile, computed here by numpy on a float32 loop of the plan
    # (128-row tiles summed in fp32, tiles added in fp32): equal on the failing elements.
    with np.load(EXAMPLES / "correct-port" / "inputs.npz") as d:
        a, b = d["a"].astype(np.float32), d["b"].astype(np.float32)
    i, j = 5, 200
    acc = np.float32(0)
    for k0 in range(0, 384, 128):
        t = np.float32(0)
        for k in range(k0, k0 + 128):
            t = np.float32(t + np.float32(a[i, k] * b[k, j]))
        acc = t if k0 == 0 else np.float32(acc + t)
    assert _outputs("buggy-port")["nki"][i, j] == acc
    assert "missing_k_tile" in nki.message and "the last K tile (rows 384..511 of K" in nki.message
    # PSUM: 10 copies of a [128, 128] fp32 tile (512 B per partition, one 2 KiB bank each)
    # against 8 banks per partition (FACTS s3).
    psum = [f for f in _finding(r, "psum_capacity") if f.status == "fail"]
    assert psum and "acc" in psum[0].subject + psum[0].message and "10 of 8 banks" in psum[0].message


def test_unsupported_claim(reviews):
    r = reviews["unsupported-claim"]
    assert _rubric(r)["performance_claim"] == "fail"
    assert _rubric(r)["preserved_behaviour"] == "pass"
    m = r.manifest.performance
    ratio = statistics.median(_kept(m.timings.baseline)) / statistics.median(_kept(m.timings.candidate))
    sp = r.performance["timings"]["speedup"]
    assert sp["ratio"] == pytest.approx(ratio, rel=1e-12)
    lo, hi = sp["interval"]
    assert lo <= ratio <= hi < m.claimed_speedup == 2.5
    claim = [f for f in _finding(r, "claimed_speedup")][0]
    assert claim.status == "fail" and "not supported by the evidence" in claim.message
    # the other two claims (1.5x) lie inside their intervals
    for name in ("correct-port", "buggy-port"):
        s = reviews[name].performance["timings"]["speedup"]
        assert s["interval"][0] <= 1.5 <= s["interval"][1]


def test_markdown_and_html_say_the_same(reviews, tmp_path):
    r = reviews["buggy-port"]
    paths = r.write(tmp_path)
    md = paths["md"].read_text()
    page = paths["html"].read_text()
    for part in ("1. Correctness", "2. Tiling and memory", "3. Performance", "4. Rubric"):
        assert part in md and part in page
    assert "FAIL: 3 of 5 assessed criteria fail (preserved_behaviour, numerical_standard, memory_hierarchy)" in md
    for row in r.rubric():
        assert f"| {row['criterion']} |" in md
    # the same review gives the same bytes
    assert r.html() == page


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is not on PATH: `bash .ci/setup` installs it (Debian package chromium)"
    return exe


def test_html_in_chromium(reviews, tmp_path):
    r = reviews["unsupported-claim"]
    path = r.write(tmp_path)["html"]
    dom = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          path.as_uri()], capture_output=True, text=True, timeout=120).stdout
    for section in ("correctness", "tiling", "performance", "rubric", "target"):
        assert f'id="{section}"' in dom
    assert dom.count("<svg") == 4          # error map, memory, timings and bootstrap, roofline
    assert dom.count("<table") >= 7
    assert "not supported by the evidence" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1200,3000", path.as_uri()], capture_output=True, timeout=120)
    assert shot.stat().st_size > 10_000


def _run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "numeq", "review", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env={**__import__("os").environ,
                                                     "PYTHONPATH": str(Path(numeq.__file__).parents[1])})


def test_cli(tmp_path):
    p = _run(str(EXAMPLES / "unsupported-claim" / "manifest.toml"), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert "# Port review: unsupported-claim" in p.stdout
    assert (tmp_path / "out" / "review.md").is_file() and (tmp_path / "out" / "review.html").is_file()
    bad = tmp_path / "bad.toml"
    bad.write_text('[port]\nname = "x"\n[operation]\nop = "conv2d"\n')
    p = _run(str(bad), cwd=tmp_path)
    assert p.returncode == 2 and "bad.toml:4: operation.op: 'conv2d' is not valid" in p.stderr


def test_examples_regenerate(tmp_path):
    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.write(tmp_path)
    for path in sorted(EXAMPLES.rglob("*")):
        if path.suffix not in (".npz", ".json", ".toml"):
            continue
        new = tmp_path / path.relative_to(EXAMPLES)
        if path.suffix == ".npz":
            with np.load(path) as old_d, np.load(new) as new_d:
                assert old_d.files == new_d.files
                for k in old_d.files:
                    np.testing.assert_array_equal(old_d[k], new_d[k])
        else:
            assert path.read_text() == new.read_text(), path
    assert json.loads((EXAMPLES / "correct-port" / "profile.json").read_text())["summary"][0]["hardware_flops"] == \
        2 * 128 * 512 * 256


def test_plan_follows_the_kernels_k_tile(tmp_path):
    # A kernel that contracts 64 rows of K per nc_matmul (no k_tile key: the stationary tile says
    # so) is judged on 64-row tiles: its output (numeq's trainium.trn2[k_tile=64], checked against
    # a float32 loop in test_trainium.py) is bit-exact there, and the 128-row default is not it.
    port = tmp_path / "port"
    shutil.copytree(EXAMPLES / "correct-port", port)
    text = (port / "manifest.toml").read_text()
    text = text.replace("k_tile = 128\n", "").replace("shape = [128, 128]\nbufs = 2", "shape = [64, 128]\nbufs = 2", 1)
    text = text.replace("shape = [128, 128]\nbufs = 2\n\n[[tiling.buffers]]            # the fp32",
                        "shape = [64, 128]\nbufs = 2\n\n[[tiling.buffers]]            # the fp32")
    (port / "manifest.toml").write_text(text)
    with np.load(EXAMPLES / "correct-port" / "inputs.npz") as d:
        a, b = d["a"], d["b"]
    out = _outputs("correct-port")
    nki = numeq.matmul(a, b, platform="trainium.trn2[k_tile=64]", in_fmt="bf16")
    assert not np.array_equal(nki, out["nki"])
    np.savez_compressed(port / "outputs.npz", gpu=out["gpu"], nki=nki, simulator=out["simulator"])
    r = review(port / "manifest.toml")
    assert r.correctness.platforms["nki"] == "trainium.trn2[k_tile=64]"
    assert r.correctness.verdicts["nki"].tier == "bit_exact"
    assert any("taken from the matmuls' stationary tiles" in n for n in r.correctness.notes)
    assert not [f for f in r.findings if f.status == "fail"]


def _port_copy(tmp_path):
    port = tmp_path / "port"
    shutil.copytree(EXAMPLES / "correct-port", port)
    return port


def test_variant_is_named_and_measures_the_assumption(tmp_path):
    # An NKI output whose array adds pairwise: bit-exact with that named variant, and the
    # assumption finding says the variant is what the measurement confirms.
    port = _port_copy(tmp_path)
    with np.load(EXAMPLES / "correct-port" / "inputs.npz") as d:
        a, b = d["a"], d["b"]
    out = _outputs("correct-port")
    nki = numeq.matmul(a, b, platform="trainium.trn2[pe_order=pairwise]", in_fmt="bf16")
    np.savez_compressed(port / "outputs.npz", gpu=out["gpu"], nki=nki, simulator=out["simulator"])
    r = review(port / "manifest.toml")
    v = r.correctness.verdicts["nki"]
    assert (v.tier, v.explained_by) == ("variant", "trainium.trn2[pe_order=pairwise]")
    a_f = _finding(r, "assumptions_measured")[0]
    assert "trainium.trn2[pe_order=pairwise]" in a_f.message and "the variant changes some" in a_f.message
    assert _rubric(r)["preserved_behaviour"] == "pass"


def test_profile_file_must_exist(tmp_path):
    port = _port_copy(tmp_path)
    (port / "profile.json").unlink()
    with pytest.raises(numeq.review.ManifestError, match=r"manifest.toml:\d+: performance.profiles\[0\].file: no file "
                                                          r"'profile.json'"):
        review(port / "manifest.toml")


def test_softmax_port(tmp_path):
    # Not a matmul: the ladder on the op's own model, Vector-engine rules from the stages.
    x = numeq.ops.generate("normal", (64, 512), "bf16", seed=3)
    op = numeq.ops.softmax(x, in_fmt="bf16", out="bf16")
    np.savez(tmp_path / "sm.npz", x=x, gpu=op.emulate("nvidia.h100"), nki=op.emulate("trainium.trn2"))
    (tmp_path / "m.toml").write_text("""
[port]
name = "softmax"
[operation]
op = "softmax"
in_fmt = "bf16"
out = "bf16"
[inputs]
x = "sm.npz:x"
[outputs]
gpu = "sm.npz:gpu"
nki = "sm.npz:nki"
[platforms]
gpu = "nvidia.h100"
trainium = "trainium.trn2"
[[tiling.buffers]]
name = "x_t"
memory = "sbuf"
dtype = "bf16"
shape = [64, 512]
[[tiling.stages]]
name = "stats"
engine = "vector"
instruction = "bn_stats"
operands = ["x_t"]
free_size = 1024
""")
    r = review(tmp_path / "m.toml")
    assert r.correctness.verdicts["nki"].passed and r.correctness.verdicts["gpu"].passed
    bn = [f for f in r.findings if f.status == "fail"]
    assert len(bn) == 1 and "bn_stats over 1024 elements" in bn[0].message and "512" in bn[0].message
    assert _rubric(r)["performance_claim"] == "not assessed"


def test_cli_schema(tmp_path):
    p = _run("--schema", cwd=tmp_path)
    assert p.returncode == 0
    for key in ("[port]", "[operation]", "[inputs]", "[outputs]", "[platforms]", "[tiling]", "[[tiling.buffers]]",
                "[[tiling.matmuls]]", "[[tiling.dmas]]", "[[tiling.stages]]", "[performance]",
                "[performance.timings]", "[[performance.profiles]]", "psum_group?", "claimed_speedup?"):
        assert key in p.stdout, key
    assert "OPERATIONS: matmul, scaled_fp8_matmul" in p.stdout
    p = _run(cwd=tmp_path)
    assert p.returncode == 2 and "--schema" in p.stderr


@pytest.mark.parametrize("stated, term", [("{ rtol = 1e-3, atol = 0.0 }", "atol too small near zero"),
                                          ("{ rtol = 1e-9, atol = 1e-9 }", "rtol below the platforms' own difference")])
def test_a_stated_tolerance_at_fault_is_not_the_ports(tmp_path, stated: str, term: str):
    # The correct port's outputs are each bit-exact with their platforms; the author's tolerance
    # misses elements (near zero with atol = 0; everywhere with a tolerance below any platform
    # difference): the finding names the faulty term and the port still passes the standard.
    shutil.copytree(EXAMPLES / "correct-port", tmp_path / "correct-port")
    manifest = tmp_path / "correct-port" / "manifest.toml"
    text = manifest.read_text().replace("tolerance = { rtol = 2e-2, atol = 1e-5 }", f"tolerance = {stated}")
    manifest.write_text(text)
    r = numeq.review.review(manifest)
    (f,) = _finding(r, "stated_tolerance")
    assert f.status == "warn" and term in f.message and "not the port, is at fault" in f.message, f.message
    assert _rubric(r)["numerical_standard"] == "pass"
    # The oracle of the term: numpy on the outputs themselves.
    with np.load(EXAMPLES / "correct-port" / "outputs.npz") as o:
        g, n = o["gpu"].astype(np.float64), o["nki"].astype(np.float64)
    missed = ~(np.abs(n - g) <= (1e-3 if "1e-3" in stated else 1e-9) * np.abs(g) + (0.0 if "0.0" in stated else 1e-9))
    assert missed.any() and f"not met on {int(missed.sum())} elements" in f.message


def test_an_rmsnorm_port_rests_on_the_vector_and_scalar_assumptions_only(tmp_path):
    # A norm never touches the PE array: the assumptions the review reports are those whose
    # alternatives change the rmsnorm's output on these inputs (measured here again, by numeq's
    # op-level emulation under each alternative), and none of the PE array's.
    x = np.random.default_rng(9).standard_normal((64, 512)).astype(np.float32)
    op = numeq.ops.rmsnorm(x, eps=1e-5, in_fmt="fp32", out="fp32")
    np.savez(tmp_path / "io.npz", x=x, gpu=op.emulate("nvidia.h100"), nki=op.emulate("trainium.trn2"))
    (tmp_path / "manifest.toml").write_text(
        '[port]\nname = "rmsnorm"\n[operation]\nop = "rmsnorm"\nin_fmt = "fp32"\nout = "fp32"\n'
        'params = { eps = 1e-5 }\n[inputs]\nx = "io.npz:x"\n[outputs]\ngpu = "io.npz:gpu"\nnki = "io.npz:nki"\n'
        '[platforms]\ngpu = "nvidia.h100"\ntrainium = "trainium.trn2"\n')
    r = numeq.review.review(tmp_path / "manifest.toml")
    (f,) = [f for f in r.findings if f.criterion == "assumptions"]
    pe = ("pe_order", "products", "pe_rounding", "accumulator_bits", "fp8_double_row", "fp32_matmul", "psum_rounding")
    assert not any(name in f.message for name in pe), f.message
    from numeq.machines import platform_assumptions

    changed = []
    for a in platform_assumptions("trainium.trn2"):
        if any(not np.array_equal(op.emulate(f"trainium.trn2[{a['name']}={alt}]"), op.emulate("trainium.trn2"),
                                  equal_nan=True) for alt in a["alternatives"] if alt != a["value"]):
            changed.append(f"{a['name']}={a['value']}")
    assert changed and all(c in f.message for c in changed), (changed, f.message)


def test_any_subset_of_a_profiles_fields_is_reviewed(tmp_path):
    # neuron-profile summaries vary by version: every field but total_time may be missing. Each
    # subset gives a review (Markdown and HTML, exit 0 or 1), never a TypeError; a profile without
    # FLOPs or HBM bytes says which it lacks.
    shutil.copytree(EXAMPLES / "correct-port", tmp_path / "correct-port")
    full = json.loads((EXAMPLES / "correct-port" / "profile.json").read_text())["summary"][0]
    fields = [k for k in full if k != "total_time"]
    rng = np.random.default_rng(0)
    dropped = ("hardware_flops", "hbm_read_bytes", "tensor_engine_active_time_percent", "mfu_estimated_percent")
    subsets = [[]] + [[f for f in fields if f != drop] for drop in dropped]
    subsets += [list(rng.choice(fields, size=int(rng.integers(1, len(fields))), replace=False)) for _ in range(2)]
    for keep in subsets:
        summary = {"total_time": full["total_time"], **{k: full[k] for k in keep}}
        (tmp_path / "correct-port" / "profile.json").write_text(json.dumps({"summary": [summary]}))
        r = numeq.review.review(tmp_path / "correct-port" / "manifest.toml")
        assert "<svg" in r.html() and "## 4. Rubric" in r.markdown()
        if "hardware_flops" not in keep:
            (roof,) = [f for f in r.findings if f.rule == "roofline"]
            assert "not assessed: the profile lacks hardware_flops" in roof.message, roof.message


def test_bad_manifests_and_outs_are_refused_not_failed(tmp_path):
    # A misspelt platform and a boolean output are a manifest numeq cannot review (exit 2, the key
    # named), not a failing port; an --out that cannot be written is refused with its reason.
    shutil.copytree(EXAMPLES / "correct-port", tmp_path / "port")
    manifest = tmp_path / "port" / "manifest.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace('gpu = "nvidia.h100"', 'gpu = "nvidia.h1000"'))
    with pytest.raises(numeq.review.ManifestError, match=r"platforms\.gpu: .*unknown platform 'nvidia.h1000'"):
        numeq.review.review(manifest)
    with np.load(tmp_path / "port" / "outputs.npz") as o:
        np.savez(tmp_path / "port" / "bool.npz", gpu=o["gpu"], nki=o["nki"] > 0)
    manifest.write_text(text.replace("outputs.npz:nki", "bool.npz:nki"))
    with pytest.raises(numeq.review.ManifestError, match=r"outputs\.nki: .*boolean values"):
        numeq.review.review(manifest)
    manifest.write_text(text)
    (tmp_path / "a-file").write_text("")
    out = subprocess.run([sys.executable, "-m", "numeq", "review", str(manifest), "--out", str(tmp_path / "a-file" / "x"),
                          "--quiet"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "--out: cannot write the review" in out.stderr and "Traceback" not in out.stderr


def test_numeq_review_without_matplotlib_writes_the_markdown(tmp_path):
    # matplotlib is the reports extra: without it numeq review writes review.md, says in one line
    # how to get the HTML, and exits by the rubric (here 0), with no traceback.
    code = ("import sys; sys.modules['matplotlib'] = None; from numeq.cli import main; "
            f"sys.exit(main(['review', {str(EXAMPLES / 'correct-port' / 'manifest.toml')!r}, '--out', "
            f"{str(tmp_path / 'out')!r}, '--quiet']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out" / "review.md").is_file() and not (tmp_path / "out" / "review.html").exists()
    assert "pip install 'numeq[reports]'" in p.stderr and "Traceback" not in p.stderr


def test_bf16_arrays_stored_as_raw_bytes_are_read_by_their_dtype(tmp_path):
    # numpy keeps ml_dtypes arrays in .npz as raw bytes (|V2): a manifest names the dtype.
    import ml_dtypes

    x = np.asarray(numeq.ops.generate("normal", (64, 512), "bf16", seed=3)).astype(ml_dtypes.bfloat16)
    op = numeq.ops.softmax(x.astype(np.float64), in_fmt="bf16", out="bf16")
    np.savez(tmp_path / "sm.npz", x=x, gpu=np.asarray(op.emulate("nvidia.h100")).astype(ml_dtypes.bfloat16),
             nki=np.asarray(op.emulate("trainium.trn2")).astype(ml_dtypes.bfloat16))
    with np.load(tmp_path / "sm.npz") as z:
        assert z["x"].dtype.kind == "V"  # what the manifest must read
    text = """
[port]
name = "softmax"
[operation]
op = "softmax"
in_fmt = "bf16"
out = "bf16"
[inputs]
x = { array = "sm.npz:x", dtype = "bfloat16" }
[outputs]
gpu = { array = "sm.npz:gpu", dtype = "bfloat16" }
nki = { array = "sm.npz:nki", dtype = "bfloat16" }
[platforms]
gpu = "nvidia.h100"
trainium = "trainium.trn2"
"""
    (tmp_path / "m.toml").write_text(text)
    r = review(tmp_path / "m.toml")
    assert r.correctness.verdicts["nki"].tier == "bit_exact" and r.correctness.verdicts["gpu"].tier == "bit_exact"
    np.testing.assert_array_equal(r.manifest.inputs["x"].astype(np.float64), x.astype(np.float64))
    (tmp_path / "m.toml").write_text(text.replace('{ array = "sm.npz:x", dtype = "bfloat16" }', '"sm.npz:x"'))
    with pytest.raises(ManifestError, match=r"raw 2-byte elements .* dtype = \"bfloat16\""):
        review(tmp_path / "m.toml")
    (tmp_path / "m.toml").write_text(text.replace('dtype = "bfloat16" }\n[outputs]', 'dtype = "float8_e4m3" }\n[outputs]'))
    with pytest.raises(ManifestError, match="2-byte elements; float8_e4m3 takes 1"):
        review(tmp_path / "m.toml")
