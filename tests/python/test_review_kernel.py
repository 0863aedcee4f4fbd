"""numeq review of an NKI kernel itself (issue 31, section 3, in part): numeq runs the kernel and
reviews its run. Oracles: the op-level emulation of the platform the run reports (bit for bit),
the rubric's independent criteria (a limit the kernel breaks), and the precision flow's ranking of
a planted bf16 accumulation."""

from __future__ import annotations

import subprocess
import sys
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import numeq
import numeq.review
from nki_support import example
from numeq.review.kernel import review_kernel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "reviews" / "kernel-ports"


def _kernel_file(folder):
    """The example kernels (examples/reviews/kernel-ports/kernels.py), copied outside the repository."""
    path = folder / "port.py"
    shutil.copy(EXAMPLES / "kernels.py", path)
    return path


def _psum_groups(accumulator: str):
    m = example("matmul_psum_groups")
    a, b = m.inputs()
    args = {"a_t": np.ascontiguousarray(a.T), "b": b, "group": m.GROUP,
            "accumulator": m.ACCUMULATORS[accumulator][0]}
    return m, a, b, args


def test_an_output_from_elsewhere_is_what_assesses_the_assumptions() -> None:
    # The same values given as the device's output: now a measurement, bit-exact with the model.
    m, a, b, args = _psum_groups("float32")
    device = numeq.matmul(a, b, platform="trainium.trn2[psum_group=2]", out="fp32")
    r = review_kernel(m.matmul_psum_groups, {"a": a, "b": b}, "matmul", kernel_args=args, outputs={"nki": device})
    (f,) = [f for f in r.findings if f.criterion == "assumptions"]
    assert f.rule == "assumptions_measured" and f.status == "pass"


def test_a_correct_kernel_passes_and_its_output_is_the_platforms() -> None:
    m, a, b, args = _psum_groups("float32")
    r = review_kernel(m.matmul_psum_groups, {"a": a, "b": b}, "matmul", kernel_args=args)
    results = {row["criterion"]: row["result"] for row in r.rubric()}
    assert results["preserved_behaviour"] == "pass" and results["tiling_limits"] == "pass", r.rubric()
    assert results["performance_claim"] == "not assessed"
    # numeq's run of its own model measures nothing about the hardware's assumptions
    assert results["assumptions"] == "not assessed"
    assert [f.rule for f in r.findings if f.criterion == "assumptions"] == ["assumptions_unmeasured"]
    assert np.array_equal(r.run.outputs, numeq.matmul(a, b, platform=r.run.platform, out="fp32"))
    assert r.correctness.platforms["nki"] == r.run.platform == "trainium.trn2[psum_group=2]"
    md = r.markdown()
    assert "## The kernel's trace (numeq ran it)" in md and "estimated lower bound on run time" in md
    assert "Precision flow" in md or not r.precision


def test_the_planted_bf16_accumulator_leads_the_precision_flow() -> None:
    m, a, b, args = _psum_groups("bfloat16")
    r = review_kernel(m.matmul_psum_groups, {"a": a, "b": b}, "matmul", kernel_args=args)
    first = r.precision[0]
    assert (first.kind, first.format) == ("accumulation", "bf16") and first.alone > 0.5, first
    assert "group_accumulator=bf16" in r.run.kernel_platform and "group_accumulator" not in r.run.platform
    assert "| accumulation | bf16 |" in r.markdown()


def test_a_kernel_that_breaks_a_limit_fails_tiling(tmp_path) -> None:
    # The port kernel on b with N = 1024: nc_matmul's moving free size is at most 512.
    from numeq.nki import _cli

    with numeq.nki.installed():
        kernel = _cli._import(str(_kernel_file(tmp_path))).matmul_port
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 1024)).astype(ml_dtypes.bfloat16)  # N = 1024: one nc_matmul takes 512
    r = review_kernel(kernel, {"a": a, "b": b}, "matmul", kernel_args={"a_t": np.ascontiguousarray(a.T), "b": b},
                      precision=False)
    results = {row["criterion"]: row for row in r.rubric()}
    assert results["tiling_limits"]["result"] == "fail" and "moving free size" in results["tiling_limits"]["finding"]
    assert not r.passed


def test_bad_arguments_name_the_parameter() -> None:
    m, a, b, args = _psum_groups("float32")
    with pytest.raises(ValueError, match="op: unknown operation 'matmull'"):
        review_kernel(m.matmul_psum_groups, {"a": a, "b": b}, "matmull", kernel_args=args)
    with pytest.raises(ValueError, match="inputs: matmul needs a, b; missing b"):
        review_kernel(m.matmul_psum_groups, {"a": a}, "matmul", kernel_args=args)


def test_numeq_review_runs_a_kernel_file(tmp_path) -> None:
    kernel = _kernel_file(tmp_path)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 256)).astype(np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 512)).astype(np.float32).astype(ml_dtypes.bfloat16)
    # .npz keeps ml_dtypes arrays as raw bytes: the review reads them by their names' dtypes, so
    # store float32 copies of bf16 values with in_fmt taken from the op's a (float32 here).
    np.savez(tmp_path / "in.npz", a=a.astype(np.float32), b=b.astype(np.float32),
             a_t=np.ascontiguousarray(a.T).astype(np.float32))
    out = subprocess.run([sys.executable, "-m", "numeq", "review", f"{kernel}::matmul_port", "--inputs",
                          str(tmp_path / "in.npz"), "--op", "matmul", "--out", str(tmp_path / "rev"), "--quiet"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    md = (tmp_path / "rev" / "review.md").read_text()
    assert "port.py::matmul_port" in md and "## The kernel's trace (numeq ran it)" in md
    assert (tmp_path / "rev" / "review.html").is_file()
    bad = subprocess.run([sys.executable, "-m", "numeq", "review", f"{kernel}::matmul_port", "--inputs",
                          str(tmp_path / "in.npz")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--op" in bad.stderr


def test_numeq_review_reads_bf16_inputs_with_dtype(tmp_path) -> None:
    # bf16 arrays in an .npz are raw bytes: --dtype names them; the op is then bf16, and the
    # bf16-accumulating kernel fails its review (exit 1) with no stated tolerance.
    kernel = _kernel_file(tmp_path)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 128)).astype(ml_dtypes.bfloat16)
    np.savez(tmp_path / "in.npz", a=a, b=b, a_t=np.ascontiguousarray(a.T))

    def review(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "numeq", "review", *extra, "--quiet"], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)

    raw = review(f"{kernel.name}::matmul_bf16_total", "--inputs", "in.npz", "--op", "matmul")
    assert raw.returncode == 2 and "--dtype a=DTYPE" in raw.stderr
    typed = [f"--dtype={n}=bfloat16" for n in ("a", "b", "a_t")]
    out = review(f"{kernel.name}::matmul_bf16_total", "--inputs", "in.npz", "--op", "matmul", "--out", "rev", *typed)
    assert out.returncode == 1, out.stderr
    md = (tmp_path / "rev" / "review.md").read_text()
    assert "bf16 @ b[256,128] bf16" in md and "the kernel sums its PSUM results in bf16" in md
    ok = review(f"{kernel.name}::matmul_port", "--inputs", "in.npz", "--op", "matmul", "--out", "ok", *typed)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    no_kernel = review(kernel.name, "--inputs", "in.npz", "--op", "matmul")
    assert no_kernel.returncode == 2 and f"{kernel.name}::KERNEL" in no_kernel.stderr
    np.savez(tmp_path / "ab.npz", a=a, b=b)
    missing = review(f"{kernel.name}::matmul_port", "--inputs", "ab.npz", "--op", "matmul", *typed[:2])
    assert missing.returncode == 2 and "no array a_t" in missing.stderr


@pytest.mark.parametrize("name, expected", [
    ("correct", {"preserved_behaviour": "pass", "numerical_standard": "pass", "tiling_limits": "pass",
                 "memory_hierarchy": "pass"}),
    ("bf16-accumulator", {"preserved_behaviour": "fail", "numerical_standard": "fail", "tiling_limits": "pass"}),
    ("limit", {"tiling_limits": "fail", "memory_hierarchy": "not assessed"}),
    ("claim", {"preserved_behaviour": "pass", "tiling_limits": "pass", "performance_claim": "fail"}),
])
def test_the_kernel_port_examples_reach_their_rubric(name: str, expected: dict) -> None:
    r = numeq.review.review(EXAMPLES / f"{name}.toml")
    results = {row["criterion"]: row["result"] for row in r.rubric()}
    assert {k: results[k] for k in expected} == expected, r.rubric()
    if name == "bf16-accumulator":
        # Only the precision flow names the mistake: the bf16 tile the 4 K tiles are summed in.
        first = r.precision[0]
        assert (first.kind, first.format, first.length) == ("accumulation", "bf16", 4) and first.share > 0.5
        assert r.correctness.platforms["nki"] == "trainium.trn2[psum_group=1]"  # judged with an fp32 accumulator
        assert "group_accumulator=bf16" in r.run.kernel_platform  # what the trace amounts to
    if name == "claim":
        # The timings agree with the 200x claim; the kernel's trace does not: its 4 nc_matmuls of
        # max(min(64, M), N) = 256 cycles each at the Tensor Engine's documented clock.
        (floor,) = [f for f in r.findings if f.rule == "trace_lower_bound" and f.subject == "the claimed speedup"]
        clock = numeq.review.targets.target("trn2")["tensor_clock_hz"]
        assert floor.status == "fail" and f"{4 * 256 / clock * 1e6:.3g} us" in floor.message
    if name == "limit":
        assert "partition_dim" in {row["criterion"]: row for row in r.rubric()}["tiling_limits"]["finding"]


def test_a_given_nki_output_is_matched_to_the_assumption_that_reproduces_it() -> None:
    # The "hardware" output: the kernel run under psum_rounding=toward_zero (an fp32 PSUM output,
    # where PSUM's rounding shows). The review finds the assumption that reproduces it.
    m, a, b, args = _psum_groups("float32")
    hardware = numeq.nki.run(m.matmul_psum_groups, assume={"psum_rounding": "toward_zero"}, **args).outputs
    r = review_kernel(m.matmul_psum_groups, {"a": a, "b": b}, "matmul", kernel_args=args,
                      outputs={"nki": hardware}, precision=False)
    (f,) = [f for f in r.findings if f.rule == "run_vs_given"]
    assert f.status == "pass" and "under psum_rounding=toward_zero" in f.message
    assert r.correctness.platforms["nki"] == "trainium.trn2[psum_rounding=toward_zero,psum_group=2]"
    noise = hardware.copy()
    noise[0, 0] = np.nextafter(noise[0, 0], np.float32(np.inf))  # one ulp no assumption explains
    r = review_kernel(m.matmul_psum_groups, {"a": a, "b": b}, "matmul", kernel_args=args,
                      outputs={"nki": noise}, precision=False)
    (f,) = [f for f in r.findings if f.rule == "run_vs_given"]
    assert f.status == "fail"


def test_a_manifests_assumption_overrides_apply_to_the_run(tmp_path) -> None:
    # platforms.trainium with a tiling option (the trace decides it) and an assumption (the run
    # takes it): the run computes under psum_rounding=toward_zero and reports that platform.
    shutil.copytree(EXAMPLES, tmp_path / "kernel-ports")
    text = (EXAMPLES / "correct.toml").read_text().replace(
        'gpu = "nvidia.h100"', 'gpu = "nvidia.h100"\ntrainium = "trainium.trn2[k_tile=128,psum_rounding=toward_zero]"')
    (tmp_path / "kernel-ports" / "correct.toml").write_text(text)
    r = numeq.review.review(tmp_path / "kernel-ports" / "correct.toml")
    assert r.run.assumptions["psum_rounding"] == "toward_zero"
    assert r.correctness.platforms["nki"] == "trainium.trn2[psum_rounding=toward_zero]"
    a, b = r.manifest.inputs["a"], r.manifest.inputs["b"]
    assert np.array_equal(r.run.outputs, numeq.matmul(a, b, platform=r.run.platform, in_fmt="bf16", out="fp32"))


def test_the_performance_section_puts_the_profile_beside_the_trace(tmp_path) -> None:
    # A profile of the candidate whose Tensor Engine is busy 10x what the trace's cost formulas
    # give, and a DMA queue busy as estimated: one finding (the Tensor Engine), and the table puts
    # each engine's estimate beside the profile's figure.
    shutil.copytree(EXAMPLES, tmp_path / "kernel-ports")
    plain = numeq.review.review(EXAMPLES / "claim.toml")
    s = plain.run.summary()
    total = 20e-6
    tensor_pct = 100 * 10 * s.engines["tensor"].busy_s / total
    dma_pct = 100 * s.engines["dma"].busy_s / total
    import json

    (tmp_path / "kernel-ports" / "profile.json").write_text(json.dumps(
        {"summary": [{"total_time": total, "tensor_engine_active_time_percent": tensor_pct,
                      "dma_active_time_percent": dma_pct}]}))
    text = (EXAMPLES / "claim.toml").read_text() + '\n[[performance.profiles]]\nlabel = "candidate"\nfile = "profile.json"\n'
    (tmp_path / "kernel-ports" / "claim.toml").write_text(text)
    r = numeq.review.review(tmp_path / "kernel-ports" / "claim.toml")
    (warn,) = [f for f in r.findings if f.rule == "profile_vs_trace"]
    assert warn.status == "warn" and warn.subject == "candidate: tensor" and "10.0x the trace's estimate" in warn.message
    rows = {row[0]: row for row in r.beside_trace}
    assert rows["tensor engine busy"][3] == "10x" and rows["dma engine busy"][3] == "1x"
    assert rows["vector engine busy"][2] == "-"  # the profile gives no figure for it
    assert rows["kernel time: the profile"][2] == "20 us"
    md = r.markdown()
    assert "| tensor engine busy |" in md and "The performance evidence beside the kernel's trace" in md


def test_a_bf16_accumulator_fails_the_standard_without_a_stated_tolerance(tmp_path) -> None:
    # The author states no tolerance: the kernel's own trace (group_accumulator=bf16) must not
    # become its standard. Judged against the same tiling with fp32 accumulation, numeq's standard
    # fails it, and a finding names the accumulator read from the trace.
    shutil.copytree(EXAMPLES, tmp_path / "kernel-ports")
    text = "\n".join(line for line in (EXAMPLES / "bf16-accumulator.toml").read_text().splitlines()
                     if not line.startswith("tolerance"))
    (tmp_path / "kernel-ports" / "bf16-accumulator.toml").write_text(text)
    r = numeq.review.review(tmp_path / "kernel-ports" / "bf16-accumulator.toml")
    assert r.manifest.stated_tolerance is None
    results = {row["criterion"]: row["result"] for row in r.rubric()}
    assert results["numerical_standard"] == "fail" and results["preserved_behaviour"] == "fail", r.rubric()
    (narrow,) = [f for f in r.findings if f.rule == "narrow_accumulator"]
    assert "in bf16" in narrow.message and "group_accumulator=bf16" in narrow.message
    assert "group_accumulator" not in r.correctness.platforms["nki"]
    (standard,) = [f for f in r.findings if f.rule == "numeq_standard"]
    assert standard.status == "fail" and "rtol=" in standard.message


def test_author_markup_stays_text_in_the_markdown(tmp_path) -> None:
    # Names come from the port's author: Markdown passes raw HTML through, so the review escapes it.
    m, a, b, args = _psum_groups("float32")
    r = review_kernel(m.matmul_psum_groups, {"a": a, "b": b}, "matmul", kernel_args=args,
                      name="<script>alert('port')</script> & co", precision=False)
    md = r.markdown()
    assert "<script>" not in md and "&lt;script&gt;alert('port')&lt;/script&gt; &amp; co" in md
    assert "| kernel | matmul_psum_groups.py::matmul_psum_groups |" in md and "| manifest |" not in md


def test_numeq_review_kernel_mode_takes_params_and_real_outputs_and_refuses_stray_arrays(tmp_path) -> None:
    kernel = _kernel_file(tmp_path)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((128, 256)).astype(np.float32)
    b = rng.standard_normal((256, 512)).astype(np.float32)
    gpu = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)  # stands for the CUDA kernel's output
    np.savez(tmp_path / "in.npz", a=a, b=b, a_t=np.ascontiguousarray(a.T), cuda_out=gpu)

    def review(npz: str = "in.npz", *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "numeq", "review", f"{kernel}::matmul_port", "--inputs",
                               str(tmp_path / npz), "--op", "matmul", "--out", str(tmp_path / "rev"), "--quiet",
                               *extra], capture_output=True, text=True, timeout=300)

    stray = review()  # cuda_out named by nothing: refused, not silently ignored or used
    assert stray.returncode == 2 and "holds cuda_out, which is neither an input of matmul" in stray.stderr, stray.stderr
    ok = review("in.npz", "--gpu-output", "cuda_out")
    assert ok.returncode in (0, 1), ok.stderr
    md = (tmp_path / "rev" / "review.md").read_text()
    assert "inputs: matmul read a, b; the kernel took a_t, b" in md and "given outputs: gpu" in md
    missing = review("in.npz", "--gpu-output", "cuda")
    assert missing.returncode == 2 and "--gpu-output: no array 'cuda'" in missing.stderr
    param = review("in.npz", "--gpu-output", "cuda_out", "--param", "eps=1e-5")
    assert param.returncode == 2 and "matmul has no parameter 'eps'" in param.stderr, param.stderr
    np.savez(tmp_path / "x.npz", x=a, a_t=np.ascontiguousarray(a.T), b=b)
    typed = subprocess.run([sys.executable, "-m", "numeq", "review", f"{kernel}::matmul_port", "--inputs",
                            str(tmp_path / "x.npz"), "--op", "softmax", "--param", "axis=last"],
                           capture_output=True, text=True, timeout=300)
    assert typed.returncode == 2 and "axis='last' is not an integer" in typed.stderr, typed.stderr


def test_a_kernel_s_row_vectors_are_read_as_the_op_s_vectors_and_said_so() -> None:
    # The layernorm example takes gamma and beta as [1, n] (a row the kernel broadcasts over
    # partitions); numeq.ops.layernorm takes them as [n]: the review reads them so, and says it.
    m = example("layernorm")
    x, gamma, beta = m.inputs()
    assert gamma.shape == (1, x.shape[1])
    r = review_kernel(m.layernorm, {"x": x, "gamma": gamma, "beta": beta}, "layernorm", params={"eps": m.EPS})
    assert r.passed
    note = next(n for n in r.correctness.notes if n.startswith("inputs:"))
    assert f"gamma of shape (1, {x.shape[1]}) read as ({x.shape[1]},)" in note
    # a [2, n] array is no vector: refused, naming the input and the shape the op takes
    with pytest.raises(Exception, match="gamma"):
        review_kernel(m.layernorm, {"x": x, "gamma": np.vstack([gamma, gamma]), "beta": beta}, "layernorm",
                      kernel_args={"x": x, "gamma": gamma, "beta": beta}, params={"eps": m.EPS})
