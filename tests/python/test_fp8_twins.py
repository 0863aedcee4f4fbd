"""e4m3 (Trainium's IEEE-like float8_e4m3) and e4m3fn (OCP) are the same numbers up to 240: an fp8
op in one is judged on a platform that has only the other's plan, and refused by name beyond 240.
Oracles: ml_dtypes' tables of both formats (every code), numpy float64 products."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import numeq


def test_every_finite_e4m3_value_up_to_240_is_an_e4m3fn_value_and_the_converse():
    e4m3 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3).astype(np.float64)
    e4m3fn = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    finite = set(e4m3[np.isfinite(e4m3)].tolist())
    shared = {v for v in e4m3fn[np.isfinite(e4m3fn)].tolist() if abs(v) <= 240}
    assert max(finite) == 240 and finite == shared


def _operands(fmt: str, top: float = 8.0):
    rng = np.random.default_rng(5)
    a = numeq.round(np.clip(rng.standard_normal((32, 256)) * 2, -top, top), fmt)
    b = numeq.round(np.clip(rng.standard_normal((256, 16)) * 2, -top, top), fmt)
    return a, b


@pytest.mark.parametrize("fmt, platform", [("e4m3fn", "trainium.trn2"), ("e4m3", "nvidia.h100")])
def test_an_fp8_matmul_is_computed_with_the_twin_plan_of_a_platform_that_lacks_its_own(fmt, platform):
    a, b = _operands(fmt)
    op = numeq.ops.matmul(a, b, in_fmt=fmt, out="fp32")
    out = op.emulate(platform)
    twin = "e4m3" if fmt == "e4m3fn" else "e4m3fn"
    assert np.array_equal(out, numeq.ops.matmul(a, b, in_fmt=twin, out="fp32").emulate(platform))
    exact = a.astype(np.float64) @ b.astype(np.float64)  # products and sums of fp8 values: exact in binary64
    assert np.all(np.abs(out - exact) <= op.bound(platform))
    assert numeq.compare(out, op, platform).tier == "bit_exact"


def test_a_port_of_an_e4m3fn_kernel_to_trn2_s_e4m3_is_judged_and_its_tolerance_computed():
    a, b = _operands("e4m3fn")
    sa, sb = np.float64(0.5), np.float64(0.25)
    op = numeq.ops.scaled_fp8_matmul(a, b, sa, sb, in_fmt="e4m3fn")
    gpu = op.emulate("nvidia.h100")
    trn = op.emulate("trainium.trn2")
    assert numeq.compare_port(gpu, trn, op, "nvidia.h100", "trainium.trn2").passed


def test_operands_beyond_240_have_no_e4m3_twin_and_say_so():
    a, b = _operands("e4m3fn", top=400.0)
    a[0, 0] = 448.0
    op = numeq.ops.matmul(a, b, in_fmt="e4m3fn", out="fp32")
    with pytest.raises(ValueError, match="only up to 240.*reach 448"):
        op.emulate("trainium.trn2")


def test_a_cross_format_port_review_runs_and_catches_a_doubled_scale(tmp_path):
    # A CUDA kernel quantising to e4m3fn and its trn2 port to e4m3, values within 240: the review
    # judges both sides (it refused before: "nvidia.h100 has no fp8 matmul plan for 'e4m3'"), and a
    # port that applies its scale twice fails it.
    import subprocess
    import sys

    a, b = _operands("e4m3fn")
    op = numeq.ops.scaled_fp8_matmul(a, b, 0.5, 0.25, in_fmt="e4m3fn")
    gpu, trn = op.emulate("nvidia.h100"), op.emulate("trainium.trn2")
    np.savez(tmp_path / "inputs.npz", a=a, b=b, scale_a=np.float64(0.5), scale_b=np.float64(0.25))
    manifest = tmp_path / "manifest.toml"
    manifest.write_text('schema = 1\n[port]\nname = "fp8 GEMM: e4m3fn on H100, e4m3 on trn2"\n[operation]\n'
                        'op = "scaled_fp8_matmul"\nin_fmt = "e4m3fn"\nout = "fp32"\n[inputs]\na = "inputs.npz:a"\n'
                        'b = "inputs.npz:b"\nscale_a = "inputs.npz:scale_a"\nscale_b = "inputs.npz:scale_b"\n'
                        '[outputs]\ngpu = "outputs.npz:gpu"\nnki = "outputs.npz:nki"\n[platforms]\n'
                        'gpu = "nvidia.h100"\ntrainium = "trainium.trn2"\n')
    codes = []
    for nki_output in (trn, 2 * trn):
        np.savez(tmp_path / "outputs.npz", gpu=gpu, nki=nki_output)
        done = subprocess.run([sys.executable, "-m", "numeq", "review", str(manifest), "--out", str(tmp_path / "rev"),
                               "--quiet"], capture_output=True, text=True, timeout=300)
        codes.append(done.returncode)
    assert codes == [0, 1], codes


_FP8_KERNEL = '''
import nki
import nki.isa as nisa
import nki.language as nl

TILES_SKIPPED = {skipped}


@nki.jit
def fp8_matmul(a_t, b):
    """out[M, N] = a_t.T @ b in fp32 from float8_e4m3 operands, K in tiles of 128 into one PSUM tile."""
    K, M = a_t.shape
    _, N = b.shape
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
    for k in nl.sequential_range(K // 128 - TILES_SKIPPED):
        a_tile = nl.ndarray((128, M), a_t.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((128, N), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a_t[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=b_tile, src=b[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(acc, a_tile, b_tile)
    res = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
'''


def test_a_cross_format_fp8_kernel_is_reviewed_from_the_kernel_itself(tmp_path):
    # Kernel mode: the NKI kernel takes Trainium's float8_e4m3; the CUDA kernel's output (e4m3fn
    # operands, the same values) is given. The correct kernel passes; one that skips its last K
    # tile fails, named; a uint8 array (fp8 bit patterns or values?) is refused, not guessed.
    import subprocess
    import sys

    rng = np.random.default_rng(11)
    a = rng.standard_normal((64, 512)).astype(ml_dtypes.float8_e4m3)
    b = rng.standard_normal((512, 32)).astype(ml_dtypes.float8_e4m3)
    gpu = numeq.ops.matmul(a.astype(np.float64), b.astype(np.float64), in_fmt="e4m3fn", out="fp32").emulate("nvidia.h100")
    np.savez(tmp_path / "in.npz", a=a, b=b, a_t=np.ascontiguousarray(a.T), gpu=gpu.astype(np.float32))
    np.savez(tmp_path / "bits.npz", a=a.view(np.uint8), b=b.view(np.uint8), a_t=np.ascontiguousarray(a.T).view(np.uint8))

    def review(skipped: int, npz: str, *extra: str) -> subprocess.CompletedProcess:
        kernel = tmp_path / f"fp8_matmul_{skipped}.py"
        kernel.write_text(_FP8_KERNEL.format(skipped=skipped))
        return subprocess.run([sys.executable, "-m", "numeq", "review", f"{kernel}::fp8_matmul", "--inputs",
                               str(tmp_path / npz), "--op", "matmul", "--gpu", "nvidia.h100", "--out",
                               str(tmp_path / f"rev{skipped}"), "--quiet",
                               *[x for n in ("a", "b", "a_t") for x in ("--dtype", f"{n}=float8_e4m3")], *extra],
                              capture_output=True, text=True, timeout=300)

    good = review(0, "in.npz", "--gpu-output", "gpu")
    assert good.returncode == 0, good.stderr
    text = (tmp_path / "rev0" / "review.md").read_text()
    assert "given outputs: gpu" in text and "Verdict: PASS" in text
    bad = review(1, "in.npz", "--gpu-output", "gpu")
    assert bad.returncode == 1, bad.stderr
    assert "missing_k_tile" in (tmp_path / "rev1" / "review.md").read_text()
    bits = review(0, "bits.npz")
    assert bits.returncode == 2 and "uint8 integers" in bits.stderr and "view('V1')" in bits.stderr, bits.stderr
