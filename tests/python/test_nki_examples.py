"""The NKI kernels of examples/nki run on numeq.nki: each against an oracle independent of the
code under test (numeq.reference's exact results, numpy float64 / IEEE fp32, within a bound derived
here), and against the consistency law: a kernel that computes a catalogue op gives, bit for bit,
the op-level emulation on the platform its dataflow amounts to (``Run.kernel_platform``, the same as
``Run.platform`` unless the kernel chose a narrower accumulator).

Where the law cannot hold yet, the test asserts it anyway, marked ``xfail(strict=True)`` with what
numeq lacks.

Unit roundoff: u = 2^-24 (fp32), 2^-8 (bf16); gamma_n = n u / (1 - n u) (Higham, Accuracy and
Stability of Numerical Algorithms, 2nd ed., s3.1): recursive summation of n terms in any order
errs by at most gamma_{n-1} * sum |terms| (Higham eq. 4.4).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import numeq
import numeq.nki
from nki_support import example

U32 = 2.0 ** -24
U_BF16 = 2.0 ** -8


def gamma(n: int, u: float = U32) -> float:
    return n * u / (1 - n * u)


@functools.lru_cache(maxsize=None)
def ran(name: str, kernel: str | None = None, accumulator: str | None = None) -> tuple[tuple, numeq.nki.Run]:
    """(inputs, run) of example ``name``'s kernel (``kernel``, or the one named as the file) on its
    default inputs, one run per session; ``accumulator``: matmul_psum_groups' accumulator dtype."""
    m = example(name)
    fn = getattr(m, kernel or name)
    args = m.inputs()
    extra: dict[str, Any] = {}
    if "matmul" in name:
        a, b = args
        call: tuple = (np.ascontiguousarray(a.T), b)
        if hasattr(m, "GROUP"):
            extra = {"group": m.GROUP, "accumulator": m.ACCUMULATORS[accumulator or "float32"][0]}
        return args, numeq.nki.run(fn, *call, **extra)
    if name == "flash_attention":
        extra = {"block": m.BLOCK}
    if name == "spmd_scale_shift":
        return args, numeq.nki.run(fn[m.GRID], *args, m.ALPHA, m.BETA)
    return args, numeq.nki.run(fn, *args, **extra)


def no_errors(run: numeq.nki.Run) -> None:
    assert run.completed and not run.errors, "\n".join(map(str, run.findings))


# --- matmuls ------------------------------------------------------------------------------------

def matmul_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|fp32 result - exact| <= gamma_K sum_k |a_ik b_kj|: the products are exact in fp32 (bf16 x
    bf16 has 16 significand bits, e4m3 x e4m3 8), K tiles and groups add in fp32 in some order
    (gamma_{K-1}), and the exact result rounded once more is within u of it (gamma_K covers both)."""
    return gamma(a.shape[1]) * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


# (example, the platform its run reports, numeq's name of its input format): every kernel that
# accumulates in fp32. K tiles of 128 are the platform's default; double_row takes K tiles of 256;
# the PSUM-group kernel sums groups of GROUP = 2 K tiles in an fp32 SBUF tile; legacy_matmul is the
# older interface (nl.load, psum += nl.matmul).
FP32_MATMULS = [("matmul_basic", "trainium.trn2", "bf16"), ("matmul_mnk", "trainium.trn2", "bf16"),
                ("matmul_kouter", "trainium.trn2", "bf16"), ("matmul_nmk", "trainium.trn2", "bf16"),
                ("matmul_fp8_double_row", "trainium.trn2[fp8_double_row=on]", "e4m3"),
                ("matmul_psum_groups", "trainium.trn2[psum_group=2]", "bf16"),
                ("legacy_matmul", "trainium.trn2", "bf16")]
LOOP_ORDERS = ["matmul_mnk", "matmul_kouter", "matmul_nmk"]


@pytest.mark.parametrize("name", [name for name, _, _ in FP32_MATMULS])
def test_matmul_within_the_fp32_summation_bound(name: str) -> None:
    (a, b), run = ran(name)
    no_errors(run)
    exact = numeq.reference.matmul(a, b, out="fp64")
    error = np.abs(run.outputs.astype(np.float64) - exact)
    assert np.all(error <= matmul_bound(a, b))
    assert np.max(error) > 0  # fp32 accumulation of 128+ products does round somewhere


@pytest.mark.parametrize("name,platform,in_fmt", FP32_MATMULS)
def test_matmul_run_reports_its_platform(name: str, platform: str, in_fmt: str) -> None:
    (a, b), run = ran(name)
    assert run.platform == platform
    if name == "matmul_psum_groups":  # the platform option is the kernel's structure: GROUP tiles
        assert platform == f"trainium.trn2[psum_group={example(name).GROUP}]"


# --- the law: each kernel that computes a registered op ----------------------------------------
# Example -> (the registered op it computes: a row of numeq.ops.specs(), the op's inputs by role
# from the example's inputs, its parameters from the example module and inputs). The law: the
# run's output is, bit for bit, numeq.ops.<op>(...).emulate(run.platform), with out="fp32".
REGISTERED: dict[str, tuple[str, Callable[..., dict], Callable[..., dict]]] = {
    **{name: ("matmul", lambda m, a, b: {"a": a, "b": b}, (lambda f: lambda m, a, b: {"in_fmt": f})(in_fmt))
       for name, _, in_fmt in FP32_MATMULS},
    # each exp times the rounded reciprocal of its row sum: the catalogue's reciprocal form
    "softmax": ("softmax", lambda m, x: {"x": x}, lambda m, x: {"variant": "max_subtracted", "reciprocal": True}),
    "rmsnorm": ("rmsnorm", lambda m, x, g: {"x": x, "gamma": g[0]}, lambda m, x, g: {"eps": m.EPS}),
    "layernorm": ("layernorm", lambda m, x, g, b: {"x": x, "gamma": g[0], "beta": b[0]},
                  lambda m, x, g, b: {"eps": m.EPS, "variant": "bn_stats"}),
    "sum_of_squares": ("sum_of_squares", lambda m, x: {"x": x}, lambda m, x: {}),
    # the scores' K is d = 64, one tile; one query block of all Lq rows, key blocks of BLOCK
    "flash_attention": ("attention", lambda m, q, k, v: {"q": q, "k": k, "v": v},
                        lambda m, q, k, v: {"causal": True, "variant": "flash", "block_rows": q.shape[0],
                                            "block_cols": m.BLOCK}),
}


@pytest.mark.parametrize("name", REGISTERED)
def test_kernel_gives_its_registered_ops_emulation(name: str) -> None:
    op_name, inputs_of, params_of = REGISTERED[name]
    spec = numeq.ops.spec(op_name)  # a registry row: its inputs and parameters are the op's
    args, run = ran(name)
    no_errors(run)
    m = example(name)
    inputs, params = inputs_of(m, *args), params_of(m, *args)
    assert set(spec.required()) <= set(inputs) <= {i.name for i in spec.inputs}
    assert set(params) - {"in_fmt"} <= {p.name for p in spec.params}
    op = getattr(numeq.ops, op_name)(**inputs, **params, out="fp32")
    emulated = op.emulate(run.platform)
    assert np.array_equal(run.outputs.reshape(emulated.shape), emulated)


def test_loop_orders_agree_bit_for_bit() -> None:
    """m-n-k, k-outer and n-m-k give each output element its K tiles in the same order."""
    outs = [ran(name)[1].outputs for name in LOOP_ORDERS]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_psum_groups_bf16_within_bound() -> None:
    """Each group's sum rounds to bf16 as it enters the accumulator (K / (128 G) roundings of
    partial sums, each within 2^-8 of a value at most sum |a||b| (1 + gamma_K))."""
    m = example("matmul_psum_groups")
    (a, b), run = ran("matmul_psum_groups", accumulator="bfloat16")
    no_errors(run)
    assert run.outputs.dtype == np.dtype(ml_dtypes.bfloat16)  # the output is the accumulator's dtype
    groups = a.shape[1] // (128 * m.GROUP)
    exact = numeq.reference.matmul(a, b, out="fp64")
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    bound = (gamma(a.shape[1]) + groups * U_BF16 * (1 + gamma(a.shape[1]))) * magnitude
    error = np.abs(run.outputs.astype(np.float64) - exact)
    assert np.all(error <= bound)
    assert np.max(error / magnitude) > gamma(a.shape[1])  # the bf16 roundings show beyond the fp32 bound


def test_psum_groups_bf16_law() -> None:
    m = example("matmul_psum_groups")
    (a, b), run = ran("matmul_psum_groups", accumulator="bfloat16")
    # the hardware's standard (fp32 accumulation on the kernel's tiling) and the kernel's own choice
    assert run.platform == f"trainium.trn2[psum_group={m.GROUP}]"
    assert run.kernel_platform == f"trainium.trn2[psum_group={m.GROUP},group_accumulator=bf16]"
    emulated = numeq.matmul(a, b, platform=run.kernel_platform, in_fmt="bf16", out="bf16")
    assert np.array_equal(run.outputs.astype(np.float64), emulated)
    # and not the fp32-accumulator plan: the accumulator's roundings show
    fp32_groups = numeq.matmul(a, b, platform=f"trainium.trn2[psum_group={m.GROUP}]", in_fmt="bf16", out="bf16")
    assert not np.array_equal(run.outputs.astype(np.float64), fp32_groups)


# --- softmax, rmsnorm, layernorm, cumsum ------------------------------------------------------

def test_softmax_within_bound() -> None:
    """Per element: x_j - m rounds (relative u), so exp(x_j - m) errs by u + |x_j - m| u and rounds
    (u); the row sum adds gamma_{n-1}; reciprocal and multiply round once each. Relative bound
    (n + 4 + 2 D) u (1.01 for second-order terms), D the row's largest |x_j - m|."""
    (x,), run = ran("softmax")
    no_errors(run)
    x64 = x.astype(np.float64)
    exact = numeq.reference.softmax(x, out="fp64")
    n = x.shape[1]
    spread = (x64.max(axis=1) - x64.min(axis=1))[:, None]
    bound = (n + 4 + 2 * spread) * U32 * 1.01 * exact
    assert np.all(np.abs(run.outputs - exact) <= bound)


def test_softmax_law_tells_the_reciprocal_form_apart() -> None:
    # The law holds for the reciprocal form (REGISTERED); the one-division form differs in some
    # elements, so the law tells the two apart.
    (x,), run = ran("softmax")
    op = numeq.ops.softmax(x, out="fp32", variant="max_subtracted", reciprocal=True)
    divided = numeq.ops.softmax(x, out="fp32", variant="max_subtracted").emulate(run.platform)
    assert not np.array_equal(run.outputs, divided)
    exact = numeq.reference.softmax(x, out="fp64")
    assert np.all(np.abs(op.emulate(run.platform) - exact) <= op.bound(run.platform))


def test_rmsnorm_within_bound() -> None:
    """Squares (u) summed (gamma_{n-1}), / n exact (n a power of two), + eps (u, both positive),
    rsqrt correctly rounded (half the argument's relative error, plus u), then x * r and * gamma
    (u each): relative bound (n / 2 + 4) u (1.01 for second-order terms)."""
    (x, g), run = ran("rmsnorm")
    no_errors(run)
    m = example("rmsnorm")
    exact = numeq.reference.rmsnorm(x, gamma=g[0], eps=m.EPS, out="fp64")
    bound = (x.shape[1] / 2 + 4) * U32 * 1.01 * np.abs(exact)
    assert np.all(np.abs(run.outputs - exact) <= bound)


def layernorm_bound(x: np.ndarray, g: np.ndarray, b: np.ndarray, exact: np.ndarray, eps: float) -> np.ndarray:
    """Absolute bound per element. The mean from fp32 updates errs by at most n u max|x| (each of
    the n updates moves it by at most u max|x|); the variance's relative error is at most
    4 n u (1 + mean^2 / var) (Chan, Golub, LeVeque 1983: updating formulas, condition number
    sqrt(1 + mean^2 / var)); rsqrt halves it (+ u); (x - mean) * r, * gamma, + beta round 4 times."""
    x64, g64, b64 = (t.astype(np.float64) for t in (x, g, b))
    n = x.shape[1]
    mean = x64.mean(axis=1, keepdims=True)
    var = x64.var(axis=1, keepdims=True)
    r = 1 / np.sqrt(var + eps)
    d_mean = n * U32 * np.abs(x64).max(axis=1, keepdims=True)
    d_rel = 2 * n * U32 * (1 + mean ** 2 / var) + U32
    centred = np.abs(exact - b64)
    return 1.01 * (d_mean * r * np.abs(g64) + centred * d_rel + 4 * U32 * (centred + np.abs(b64)))


def test_layernorm_within_bound() -> None:
    (x, g, b), run = ran("layernorm")
    no_errors(run)
    m = example("layernorm")
    exact = numeq.reference.layernorm(x, gamma=g[0], beta=b[0], eps=m.EPS, out="fp64")
    assert np.all(np.abs(run.outputs - exact) <= layernorm_bound(x, g, b, exact, m.EPS))


def test_sum_of_squares_within_bound() -> None:
    """Each bf16 square is exact in fp32 (16 significand bits, within range); n positive terms
    summed in fp32 in any order err by at most gamma_{n-1} times their sum (Higham eq. 4.4)."""
    (x,), run = ran("sum_of_squares")
    no_errors(run)
    exact = np.array([math.fsum(v * v for v in row) for row in x.astype(np.float64).tolist()])
    error = np.abs(run.outputs[:, 0].astype(np.float64) - exact)
    assert np.all(error <= gamma(x.shape[1] - 1) * exact)
    assert np.max(error) > 0  # fp32 sums of 512 squares do round


def test_cumsum_within_bound_and_each_prefix_is_the_platform_sum() -> None:
    """Prefix i errs by at most gamma_i sum_{k<=i} |x_k| (a recursive sum of i + 1 terms, the
    oracle numpy float64 exact here to 2^-53 relative of the same magnitude). And each prefix is
    the Trainium platform's sum of x[:, :i+1] (numeq.ops.sum, the Vector engine's sum plan), bit for
    bit: numeq's catalogue has no cumsum op, its sum op is the law for every prefix."""
    (x,), run = ran("cumsum")
    no_errors(run)
    x64 = x.astype(np.float64)
    exact = np.cumsum(x64, axis=1)
    magnitude = np.cumsum(np.abs(x64), axis=1)
    counts = np.arange(1, x.shape[1] + 1)
    bound = np.array([gamma(int(c)) for c in counts]) * magnitude + 2.0 ** -52 * magnitude
    assert np.all(np.abs(run.outputs - exact) <= bound)
    for i in (0, 1, 7, 100, x.shape[1] - 1):
        prefix = numeq.ops.sum(np.ascontiguousarray(x[:, :i + 1]), in_fmt="fp32", out="fp32")
        assert np.array_equal(run.outputs[:, i], prefix.emulate(run.platform))


# --- attention, transpose, SPMD ----------------------------------------------------------------

def test_flash_attention_within_bound() -> None:
    """Against the exact causal attention. Each weight p_t = exp(s_t - m) / l is perturbed by: the
    bf16 cast of p before the p v matmul (2^-8 relative; the row sum l uses the fp32 p), the score's
    fp32 error (scale * gamma_d sum |q k|, twice: in p_t and through l), and fp32 roundings of the
    exponent's argument, exp, the rescalings (two per key block) and the sums (Lk terms, some
    order): so |out - exact| <= (2^-8 + 2 E + (Lk + 8 blocks + 2 D + 10) u) sum_t w_t |v_t|, w the
    exact weights, D the row's score spread."""
    (q, k, v), run = ran("flash_attention")
    no_errors(run)
    m = example("flash_attention")
    q64, k64, v64 = (t.astype(np.float64) for t in (q, k, v))
    lq, d = q.shape
    lk = k.shape[0]
    scale = 1 / np.sqrt(d)
    scores = scale * (q64 @ k64.T)
    causal = np.tril(np.ones((lq, lk), dtype=bool))
    scores[~causal] = -np.inf
    w = np.exp(scores - scores.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    e_s = (scale * gamma(d) * (np.abs(q64) @ np.abs(k64).T)).max(axis=1, keepdims=True)
    finite = np.where(causal, scores, np.nan)
    spread = (np.nanmax(finite, axis=1) - np.nanmin(finite, axis=1))[:, None]
    blocks = lk // m.BLOCK
    rel = U_BF16 + 2 * e_s + (lk + 8 * blocks + 2 * spread + 10) * U32
    bound = rel * (w @ np.abs(v64))
    exact = numeq.reference.attention(q, k, v, causal=True, out="fp64")
    error = np.abs(run.outputs - exact)
    assert np.all(error <= bound)
    assert np.max(error / bound) > 0.1  # the bf16 cast of p shows: the bound is not vacuous here


def test_flash_attention_run_reports_its_platform() -> None:
    (q, k, v), run = ran("flash_attention")
    # The scores' K is d = 64, one tile: k_tile=64. O = a O + p v adds each block's PSUM result into
    # an SBUF accumulator, which the run reads as PSUM groups of one tile (psum_group=1).
    assert run.platform == "trainium.trn2[k_tile=64,psum_group=1]"


def test_transpose_is_bit_exact() -> None:
    (x,), run = ran("transpose")
    no_errors(run)
    assert np.array_equal(run.outputs.view(np.uint16), x.T.view(np.uint16))
    assert sum(1 for ins in run.trace if ins.name == "nc_transpose") == (x.shape[0] // 128) * (x.shape[1] // 128)


def test_spmd_scale_shift_covers_the_grid() -> None:
    """IEEE fp32: x * alpha rounded, + beta rounded (numpy's float32 ufuncs are correctly rounded);
    the tensor_scalar_fusion assumption's default, 'rounded', is exactly this."""
    m = example("spmd_scale_shift")
    (x,), run = ran("spmd_scale_shift", "scale_shift")
    assert sorted({ins.where for ins in run.trace if ins.name == "tensor_scalar"})  # the kernel ran
    assert sum(1 for ins in run.trace if ins.name == "tensor_scalar") == m.GRID[0] * m.GRID[1]
    no_errors(run)
    assert np.array_equal(run.outputs, x * np.float32(m.ALPHA) + np.float32(m.BETA))


def test_spmd_programs_each_take_their_tile() -> None:
    """What does work today: every program of the grid runs once, with its own program ids."""
    m = example("spmd_scale_shift")
    (x,), run = ran("spmd_scale_shift", "scale_shift")
    loads = [ins for ins in run.trace if ins.name == "dma_copy" and ins.srcs[0][0] == "x"]
    assert len(loads) == m.GRID[0] * m.GRID[1]
