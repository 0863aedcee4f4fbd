"""numeq.nki's limit checks on planted bugs: each planted kernel differs from a correct one in one
line (checked here with difflib), and running it gives exactly the planted rule at the kernel line
the rule names (found with inspect: the line carrying the marker ``# <- finding``), while the
correct kernels give no findings at all. Two bugs break no limit (a missing K tile, a bf16
PSUM-group sum): for them numeq.compare against the correct kernel's platform does not pass.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import textwrap
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import numeq
import numeq.nki
from nki_support import example, source_line

nki = numeq.nki
nl, nisa = nki.language, nki.isa
MARK = "# <- finding"


# --- a matmul: two M tiles of 128, two N tiles of 512, one PSUM tile of two banks each ---------

@nki.jit
def mm_ok(a_t, b):
    dt = a_t.dtype
    out = nl.ndarray((256, 1024), nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray((128, 256), dt, buffer=nl.sbuf)
    bt = nl.ndarray((128, 1024), dt, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a_t)
    nisa.dma_copy(dst=bt, src=b)
    for m in range(2):
        acc = nl.ndarray((128, 2, 512), nl.float32, buffer=nl.psum)
        for n in range(2):
            nisa.nc_matmul(acc[:, n, :], at[:, m * 128:(m + 1) * 128], bt[:, n * 512:(n + 1) * 512])
        res = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, :], src=res)
    return out


@nki.jit
def mm_129_partitions(a_t, b):
    dt = a_t.dtype
    out = nl.ndarray((256, 1024), nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray((129, 256), dt, buffer=nl.sbuf)  # <- finding
    bt = nl.ndarray((128, 1024), dt, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a_t)
    nisa.dma_copy(dst=bt, src=b)
    for m in range(2):
        acc = nl.ndarray((128, 2, 512), nl.float32, buffer=nl.psum)
        for n in range(2):
            nisa.nc_matmul(acc[:, n, :], at[:, m * 128:(m + 1) * 128], bt[:, n * 512:(n + 1) * 512])
        res = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, :], src=res)
    return out


@nki.jit
def mm_k256(a_t, b):
    dt = a_t.dtype
    out = nl.ndarray((256, 1024), nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray((128, 256), dt, buffer=nl.sbuf)
    bt = nl.ndarray((128, 1024), dt, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a_t)
    nisa.dma_copy(dst=bt, src=b)
    for m in range(2):
        acc = nl.ndarray((128, 2, 512), nl.float32, buffer=nl.psum)
        for n in range(2):
            nisa.nc_matmul(acc[:, n, :], at.reshape((256, 128)), bt.reshape((256, 512)))  # <- finding
        res = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, :], src=res)
    return out


@nki.jit
def mm_n1024(a_t, b):
    dt = a_t.dtype
    out = nl.ndarray((256, 1024), nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray((128, 256), dt, buffer=nl.sbuf)
    bt = nl.ndarray((128, 1024), dt, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a_t)
    nisa.dma_copy(dst=bt, src=b)
    for m in range(2):
        acc = nl.ndarray((128, 2, 512), nl.float32, buffer=nl.psum)
        for n in range(2):
            nisa.nc_matmul(acc, at[:, m * 128:(m + 1) * 128], bt)  # <- finding
        res = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, :], src=res)
    return out


@nki.jit
def mm_into_sbuf(a_t, b):
    dt = a_t.dtype
    out = nl.ndarray((256, 1024), nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray((128, 256), dt, buffer=nl.sbuf)
    bt = nl.ndarray((128, 1024), dt, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a_t)
    nisa.dma_copy(dst=bt, src=b)
    for m in range(2):
        acc = nl.ndarray((128, 2, 512), nl.float32, buffer=nl.sbuf)
        for n in range(2):
            nisa.nc_matmul(acc[:, n, :], at[:, m * 128:(m + 1) * 128], bt[:, n * 512:(n + 1) * 512])  # <- finding
        res = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, :], src=res)
    return out


@nki.jit
def mm_fp32(a_t, b):
    dt = nl.float32
    out = nl.ndarray((256, 1024), nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray((128, 256), dt, buffer=nl.sbuf)
    bt = nl.ndarray((128, 1024), dt, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a_t)
    nisa.dma_copy(dst=bt, src=b)
    for m in range(2):
        acc = nl.ndarray((128, 2, 512), nl.float32, buffer=nl.psum)
        for n in range(2):
            nisa.nc_matmul(acc[:, n, :], at[:, m * 128:(m + 1) * 128], bt[:, n * 512:(n + 1) * 512])  # <- finding
        res = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, :], src=res)
    return out


# --- elementwise: a PSUM operand (as a matmul leaves one) plus an SBUF one --------------------

@nki.jit
def ew_ok(x, y):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    nisa.dma_copy(dst=yt, src=y)
    xp = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=xp, src=xt)
    s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=xp, data2=yt, op=nl.add)
    nisa.dma_copy(dst=out, src=s)
    return out


@nki.jit
def ew_gpsimd_psum(x, y):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    nisa.dma_copy(dst=yt, src=y)
    xp = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=xp, src=xt)
    s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=xp, data2=yt, op=nl.add, engine=nisa.engine.gpsimd)  # <- finding
    nisa.dma_copy(dst=out, src=s)
    return out


@nki.jit
def ew_both_psum(x, y):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    nisa.dma_copy(dst=yt, src=y)
    xp = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=xp, src=xt)
    s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=xp, data2=xp, op=nl.add)  # <- finding
    nisa.dma_copy(dst=out, src=s)
    return out


@nki.jit
def ew_read_unwritten(x, y):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    nisa.dma_copy(dst=xt, src=y)
    xp = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=xp, src=xt)
    s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=xp, data2=yt, op=nl.add)  # <- finding
    nisa.dma_copy(dst=out, src=s)
    return out


@nki.jit
def ew_out_of_bounds(x, y):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    nisa.dma_copy(dst=yt, src=y[:, 1:513])  # <- finding
    xp = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=xp, src=xt)
    s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=xp, data2=yt, op=nl.add)
    nisa.dma_copy(dst=out, src=s)
    return out


@nki.jit
def ew_small_dmas(x, y):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    for c in range(16): nisa.dma_copy(dst=yt[:, c * 32:(c + 1) * 32], src=y[:, c * 32:(c + 1) * 32])  # <- finding
    xp = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=xp, src=xt)
    s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=xp, data2=yt, op=nl.add)
    nisa.dma_copy(dst=out, src=s)
    return out


# --- many PSUM tiles held at once (k-outer style); the b staging tile allocated last -----------

@nki.jit
def wide_ok(a_t, b):
    accs = [nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for _ in range(8)]
    out = nl.ndarray((128, len(accs) * 512), nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((128, len(accs) * 512), nl.float32, buffer=nl.sbuf)
    at = nl.ndarray((128, 256), a_t.dtype, buffer=nl.sbuf)
    bt = nl.ndarray((128, len(accs) * 512), b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a_t)
    nisa.dma_copy(dst=bt[:, 0:len(accs) * 512], src=b[:, 0:len(accs) * 512])
    for n, acc in enumerate(accs):
        nisa.nc_matmul(acc, at[:, (n % 2) * 128:(n % 2 + 1) * 128], bt[:, n * 512:(n + 1) * 512])
    for n, acc in enumerate(accs):
        nisa.tensor_copy(dst=res[:, n * 512:(n + 1) * 512], src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit
def wide_9_psum_tiles(a_t, b):
    accs = [nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for _ in range(9)]  # <- finding
    out = nl.ndarray((128, len(accs) * 512), nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((128, len(accs) * 512), nl.float32, buffer=nl.sbuf)
    at = nl.ndarray((128, 256), a_t.dtype, buffer=nl.sbuf)
    bt = nl.ndarray((128, len(accs) * 512), b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a_t)
    nisa.dma_copy(dst=bt[:, 0:len(accs) * 512], src=b[:, 0:len(accs) * 512])
    for n, acc in enumerate(accs):
        nisa.nc_matmul(acc, at[:, (n % 2) * 128:(n % 2 + 1) * 128], bt[:, n * 512:(n + 1) * 512])
    for n, acc in enumerate(accs):
        nisa.tensor_copy(dst=res[:, n * 512:(n + 1) * 512], src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit
def wide_sbuf_over(a_t, b):
    accs = [nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for _ in range(8)]
    out = nl.ndarray((128, len(accs) * 512), nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((128, len(accs) * 512), nl.float32, buffer=nl.sbuf)
    at = nl.ndarray((128, 256), a_t.dtype, buffer=nl.sbuf)
    bt = nl.ndarray((128, 120 * 1024), b.dtype, buffer=nl.sbuf)  # <- finding
    nisa.dma_copy(dst=at, src=a_t)
    nisa.dma_copy(dst=bt[:, 0:len(accs) * 512], src=b[:, 0:len(accs) * 512])
    for n, acc in enumerate(accs):
        nisa.nc_matmul(acc, at[:, (n % 2) * 128:(n % 2 + 1) * 128], bt[:, n * 512:(n + 1) * 512])
    for n, acc in enumerate(accs):
        nisa.tensor_copy(dst=res[:, n * 512:(n + 1) * 512], src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


# --- inputs and the table of plants --------------------------------------------------------------

def mm_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return (rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16),
            rng.standard_normal((128, 1024)).astype(ml_dtypes.bfloat16))


def ew_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    return rng.standard_normal((128, 512)).astype(np.float32), rng.standard_normal((128, 512)).astype(np.float32)


def wide_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return (rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16),
            rng.standard_normal((128, 9 * 512)).astype(ml_dtypes.bfloat16))


CORRECT: dict[str, tuple[Any, Callable]] = {"mm": (mm_ok, mm_inputs), "ew": (ew_ok, ew_inputs),
                                            "wide": (wide_ok, wide_inputs)}

# (planted kernel, its correct kernel, the rules expected at the marked line, severity)
PLANTS = [
    (mm_129_partitions, "mm", {"partition_dim"}, "error"),
    # K = 256 in bf16: a tile of 128 partitions viewed as 256 rows of K. SBUF has 128 partitions,
    # so the view's partition axis is what breaks first (a 256-row contraction cannot reach the PE).
    (mm_k256, "mm", {"partition_dim"}, "error"),
    # N = 1024 fp32 results are 4 KiB per partition: over the moving limit and over one PSUM bank.
    (mm_n1024, "mm", {"matmul_moving_free", "matmul_psum_bank"}, "error"),
    (mm_into_sbuf, "mm", {"matmul_output_memory"}, "error"),
    (mm_fp32, "mm", {"matmul_fp32"}, "warning"),
    (ew_gpsimd_psum, "ew", {"engine_access"}, "error"),
    (ew_both_psum, "ew", {"engine_access"}, "error"),
    (ew_read_unwritten, "ew", {"read_uninitialised"}, "error"),
    (ew_out_of_bounds, "ew", {"index_bounds"}, "error"),
    (ew_small_dmas, "ew", {"dma_small"}, "warning"),
    (wide_9_psum_tiles, "wide", {"psum_capacity"}, "error"),
    (wide_sbuf_over, "wide", {"sbuf_capacity"}, "error"),
]


def body(kernel: Any) -> list[str]:
    """The kernel's statements' source lines (after its def line and docstring), without the
    finding marker."""
    lines = inspect.getsourcelines(kernel.func)[0]
    fn = ast.parse(textwrap.dedent("".join(lines))).body[0]
    statements = fn.body
    if isinstance(statements[0], ast.Expr) and isinstance(getattr(statements[0], "value", None), ast.Constant):
        statements = statements[1:]  # the docstring
    return [line.split(MARK)[0].rstrip() for line in lines[statements[0].lineno - 1:]]


def marked_line(kernel: Any) -> str:
    """"file.py:LINE" of the one line of ``kernel`` that carries the marker."""
    return source_line(kernel, MARK, unique=True)


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_kernels_have_no_findings(name: str) -> None:
    kernel, inputs = CORRECT[name]
    run = nki.run(kernel, *inputs())
    assert run.completed and run.findings == [], "\n".join(map(str, run.findings))


def test_correct_matmul_computes_the_product() -> None:
    """The correct kernels are correct: mm_ok's output is the platform's product, bit for bit."""
    a_t, b = mm_inputs()
    run = nki.run(mm_ok, a_t, b)
    assert np.array_equal(run.outputs, numeq.matmul(a_t.T, b, platform=run.platform, in_fmt="bf16"))


@pytest.mark.parametrize("planted,base,rules,severity", PLANTS, ids=[p[0].__name__ for p in PLANTS])
def test_plant_differs_in_one_line(planted: Any, base: str, rules: set, severity: str) -> None:
    diff = [d for d in difflib.ndiff(body(CORRECT[base][0]), body(planted)) if d[:1] in "+-"]
    assert len(diff) == 2, "\n".join(diff)


@pytest.mark.parametrize("planted,base,rules,severity", PLANTS, ids=[p[0].__name__ for p in PLANTS])
def test_plant_gives_exactly_its_rule_at_its_line(planted: Any, base: str, rules: set, severity: str) -> None:
    assert rules <= set(nki.RULES)
    run = nki.run(planted, *CORRECT[base][1]())
    found = {(f.rule, f.where, f.severity) for f in run.findings}
    assert found == {(rule, marked_line(planted), severity) for rule in rules}, "\n".join(map(str, run.findings))


# --- bugs that break no limit: the output judged against the correct kernel's platform ---------

@nki.jit
def mnk_missing_k_tile(a_t, b):
    K, M = a_t.shape
    _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK - 1):
                a_tile = nl.ndarray((TK, TM), a_t.dtype, buffer=nl.sbuf)
                b_tile = nl.ndarray((TK, TN), b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a_tile, src=a_t[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=b_tile, src=b[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(acc, a_tile, b_tile)
            res = nl.ndarray((TM, TN), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out


@nki.jit
def psum_groups_bf16_sum(a_t, b, group=2, accumulator=nl.float32):
    K, M = a_t.shape
    _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    out = nl.ndarray((M, N), accumulator, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            total = nl.ndarray((TM, TN), nl.bfloat16, buffer=nl.sbuf)
            for g in nl.sequential_range(K // (TK * group)):
                part = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
                for kk in nl.sequential_range(group):
                    k = g * group + kk
                    a_tile = nl.ndarray((TK, TM), a_t.dtype, buffer=nl.sbuf)
                    b_tile = nl.ndarray((TK, TN), b.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=a_tile, src=a_t[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                    nisa.dma_copy(dst=b_tile, src=b[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                    nisa.nc_matmul(part, a_tile, b_tile)
                if g == 0:
                    nisa.tensor_copy(dst=total, src=part)
                else:
                    nisa.tensor_tensor(dst=total, data1=total, data2=part, op=nl.add)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=total)
    return out


SILENT = [("matmul_mnk", "matmul_mnk", mnk_missing_k_tile, {}),
          ("matmul_psum_groups", "matmul_psum_groups", psum_groups_bf16_sum, {"group": 2})]


@pytest.mark.parametrize("example_name,kernel,planted,extra", SILENT, ids=["missing_k_tile", "bf16_psum_group_sum"])
def test_silent_bug_found_by_compare(example_name: str, kernel: str, planted: Any, extra: dict) -> None:
    m = example(example_name)
    assert len([d for d in difflib.ndiff(body(getattr(m, kernel)), body(planted)) if d[:1] in "+-"]) == 2
    a, b = m.inputs(m=128, k=256 * (1 + len(extra)), n=512)  # small: numeq.compare's bound costs time per element
    a_t = np.ascontiguousarray(a.T)
    correct = nki.run(getattr(m, kernel), a_t, b, **extra)
    bad = nki.run(planted, a_t, b, **extra)
    assert correct.findings == [] or all(f.severity == "warning" for f in correct.findings)
    assert bad.completed and not bad.errors  # no limit is broken: only the numbers say it
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
    assert numeq.compare(correct.outputs, op, correct.platform, accept="bit_exact").passed
    verdict = numeq.compare(bad.outputs, op, correct.platform, variants=False)  # no variant search: fast
    assert not verdict.passed and verdict.tier == "violation", str(verdict)


@pytest.mark.parametrize("columns, small", [(64, False), (63, True)])
def test_dma_small_is_the_targets_overhead_threshold(columns: int, small: bool) -> None:
    # FACTS.md s3 / the target table: a DMA under dma_overhead_bytes (256 B) per partition is
    # overhead-bound. 64 fp32 columns move exactly 256 B per partition: no finding; 63: one.
    from numeq.review.targets import target

    assert target("trn2")["dma_overhead_bytes"] == 256

    @nki.jit
    def copy(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out

    r = numeq.nki.run(copy, np.ones((128, columns), np.float32))
    assert ("dma_small" in {f.rule for f in r.warnings}) is small
