"""numpy's reduction order for every memory layout: numeq.sum(..., platform="numpy"),
numeq.ops.sum / mean emulated on "numpy", and numeq.numpy_reduction.

Oracle: numpy itself (np.sum, np.add.reduce, np.mean), bit for bit, over C, Fortran, transposed,
sliced (negative and step > 1 strides) and randomly permuted layouts, every axis, axis tuple and
None, float16 / float32 / float64; the bound is checked against numeq.reference.sum_exact with
exact fractions. The sweep up to 10^6 elements is marked long.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import numeq

DTYPES = (np.float16, np.float32, np.float64)
FMT = {np.float16: "fp16", np.float32: "fp32", np.float64: "fp64"}


def _data(rng, shape, dtype) -> np.ndarray:
    """Mixed magnitudes and cancellation, so that the order of the additions shows."""
    top = 2 if dtype == np.float16 else 12
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-8 if dtype == np.float16 else -12, top, size=shape))
    return x.astype(dtype)


def _layouts(rng, shape, dtype):
    """(name, array of `shape`) in layouts that change numpy's iteration order."""
    base = _data(rng, shape, dtype)
    yield "C", base
    yield "F", np.asfortranarray(base)
    if len(shape) >= 2:
        yield "transposed", np.ascontiguousarray(base.T).T
    big = _data(rng, tuple(2 * s + 3 for s in shape), dtype)
    cut = tuple(slice(0, s) for s in shape)
    yield "step2", big[tuple(slice(1, None, 2) for _ in shape)][cut]
    yield "reversed", big[tuple(slice(None, None, -1) for _ in shape)][cut]
    yield "mixed", big[tuple(slice(None, None, -2) if i % 2 else slice(2, None, 1 + i % 3)
                             for i in range(len(shape)))][cut]
    perm = rng.permutation(len(shape))
    yield "permuted", np.ascontiguousarray(base.transpose(perm)).transpose(np.argsort(perm))


def _axis_choices(ndim):
    return [None] + [c for r in range(0, ndim + 1) for c in itertools.combinations(range(ndim), r)] + [-1]


def _same(a, b) -> bool:
    """Equal as values of b's dtype, zero signs and NaNs included."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b)
    if a.shape != b.shape:
        return False
    b = b.astype(np.float64)
    return bool(np.all((a == b) | (np.isnan(a) & np.isnan(b)))) and bool(np.all(np.signbit(a) == np.signbit(b)))


def _check_sum(x, axis, counts, bad, tag):
    counts[0] += 1
    want = np.sum(x, axis=axis)
    assert _same(np.add.reduce(x, axis=axis), want)  # np.sum is add.reduce
    if _same(numeq.sum(x, axis=axis, platform="numpy"), want):
        counts[1] += 1
    else:
        bad.append((tag, x.shape, x.strides, axis))


SHAPES = [(1,), (7,), (8,), (9,), (127,), (128,), (129,), (300,), (3, 130), (130, 3), (17, 40), (2, 3, 100),
          (5, 40, 7), (1, 9, 1, 20), (2, 3, 4, 5)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_sum_every_layout_and_axis_matches_numpy(dtype):
    rng = np.random.default_rng(14)
    counts, bad = [0, 0], []
    for shape in SHAPES:
        for name, x in _layouts(rng, shape, dtype):
            for axis in _axis_choices(len(shape)):
                _check_sum(x, axis, counts, bad, name)
    print(f"{dtype.__name__}: {counts[1]}/{counts[0]} match np.sum")
    assert not bad, f"{len(bad)} of {counts[0]} differ from np.sum, e.g. {bad[:5]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_sum_at_block_and_buffer_boundaries(dtype):
    """Pairwise blocks (8, 128) and numpy's 8192-element buffer, along and across the sum."""
    rng = np.random.default_rng(15)
    counts, bad = [0, 0], []
    for n in (1, 7, 8, 9, 127, 128, 129, 8191, 8192, 8193):
        for shape in ((n,), (3, n), (n, 3)):
            for name, x in _layouts(rng, shape, dtype):
                if name in ("permuted",):
                    continue
                for axis in _axis_choices(len(shape)):
                    _check_sum(x, axis, counts, bad, name)
    print(f"{dtype.__name__}: {counts[1]}/{counts[0]} match np.sum")
    assert not bad, f"{len(bad)} of {counts[0]} differ from np.sum, e.g. {bad[:5]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_builtin_plan_holds_for_every_length(dtype):
    """The numpy platform's own plan (numeq.plan, and through JSON) is np.sum of a contiguous 1-d
    array of any length, not only of the length it was built for."""
    rng = np.random.default_rng(16)
    fmt = {np.float16: "fp16", np.float32: "fp32", np.float64: "fp64"}[dtype]
    p = numeq.plan("numpy", op="sum", in_fmt=fmt, out=fmt)
    q = numeq.Plan.from_json(p.to_json())
    bad = []
    for n in (1, 2, 3, 7, 8, 9, 100, 129, 1000, 5000):
        for _ in range(10):
            x = (rng.standard_normal(n) * np.exp2(rng.integers(-8, 8, n))).astype(dtype)
            want = np.sum(x).tobytes()
            for plan in (p, q):
                if dtype(numeq.sum(x, plan=plan)).tobytes() != want:
                    bad.append(n)
    assert not bad, f"{len(bad)} sums differ from np.sum, at lengths {sorted(set(bad))}"


def test_buffered_runs_across_unmerged_axes():
    """Strided axes that do not merge make numpy copy the input in 8192-element buffers cut at
    multiples of the inner run: sweeps of unequal runs (e.g. 8150 + 1850 per 10000)."""
    rng = np.random.default_rng(16)
    counts, bad = [0, 0], []
    for dtype in DTYPES:
        big = _data(rng, (6, 400, 100), dtype)
        for x in (big[::2, ::2, ::2], big[::2, ::2, :50], big[:, ::4, ::2], big[::-2, :, ::3]):
            for axis in _axis_choices(3):
                _check_sum(x, axis, counts, bad, dtype.__name__)
    print(f"{counts[1]}/{counts[0]} match np.sum")
    assert not bad, f"{len(bad)} of {counts[0]} differ from np.sum, e.g. {bad[:5]}"


def test_byte_swapped_and_misaligned_arrays_go_through_the_buffer():
    """numpy copies a byte-swapped or misaligned input through its buffer even without a cast."""
    rng = np.random.default_rng(23)
    counts, bad = [0, 0], []
    for dtype in (">f2", ">f4", ">f8"):
        for shape in ((20000,), (3, 9000), (9000, 3), (40, 50, 30)):
            base = _data(rng, shape, np.dtype(dtype).newbyteorder("=")).astype(dtype)
            for x in (base, np.asfortranarray(base), base[..., ::-1]):
                for axis in _axis_choices(x.ndim):
                    _check_sum(x, axis, counts, bad, dtype)
    for shape in ((20000,), (300, 70)):
        buf = np.zeros(int(np.prod(shape)) * 4 + 1, np.uint8)
        x = np.ndarray(shape, np.float32, buffer=buf, offset=1)
        x[...] = _data(rng, shape, np.float32)
        assert not x.flags.aligned
        for axis in _axis_choices(len(shape)):
            _check_sum(x, axis, counts, bad, "misaligned")
    print(f"{counts[1]}/{counts[0]} match np.sum")
    assert not bad, f"{len(bad)} of {counts[0]} differ from np.sum, e.g. {bad[:5]}"


def test_follows_numpys_buffer_size():
    """numeq.sum reads np.getbufsize(): the runs change with it as numpy's do."""
    rng = np.random.default_rng(22)
    counts, bad = [0, 0], []
    x = _data(rng, (6, 400, 100), np.float32)[::2, ::2, ::2]
    old = np.getbufsize()
    try:
        for size in (1024, 3008):
            np.setbufsize(size)
            for axis in _axis_choices(3):
                _check_sum(x, axis, counts, bad, size)
    finally:
        np.setbufsize(old)
    assert not bad, f"{len(bad)} of {counts[0]} differ from np.sum, e.g. {bad[:5]}"


def _exact_check(op, x, axis, bound, emulated, mean=False):
    """|emulated - exact| <= bound, exactly, with the exact sum from numeq.reference.sum_exact of
    the reduced axes flattened (the order does not matter to an exact sum); mean: over n."""
    nd = x.ndim
    axes = tuple(range(nd)) if axis is None else ((axis,) if isinstance(axis, int) else axis)
    axes = tuple(a % nd for a in axes)
    kept = [d for d in range(nd) if d not in axes]
    flat = np.transpose(x, kept + list(axes)).reshape([x.shape[d] for d in kept] + [-1]).astype(np.float64)
    hi, lo = numeq.reference.sum_exact(flat, axis=-1)
    n = flat.shape[-1] if mean else 1
    for e, b, h, l in zip(np.ravel(emulated), np.ravel(bound), np.ravel(hi), np.ravel(lo)):
        exact = (Fraction(float(h)) + Fraction(float(l))) / n
        assert abs(Fraction(float(e)) - exact) <= Fraction(float(b)), (op, axis)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_ops_sum_and_mean_match_numpy_and_bound_holds(dtype):
    rng = np.random.default_rng(17)
    fmt = FMT[dtype]
    counts = {"sum": [0, 0], "mean": [0, 0], "sum dtype": [0, 0]}
    bad = []
    for shape in ((9,), (129,), (3, 130), (17, 40), (2, 3, 100), (2, 3, 4, 5)):
        for name, x in _layouts(rng, shape, dtype):
            for axis in _axis_choices(len(shape)):
                if axis == ():
                    continue
                op = numeq.ops.sum(x, axis=axis, compute=fmt)
                emu = op.emulation("numpy")
                counts["sum"][0] += 1
                if _same(emu.values, np.sum(x, axis=axis)):
                    counts["sum"][1] += 1
                else:
                    bad.append(("sum", name, shape, axis))
                _exact_check("sum", x, axis, emu.bound, emu.values)
                # np.mean sums float16 in float32 (numpy/_core/_methods.py, _mean).
                mean = numeq.ops.mean(x, axis=axis, compute="fp64" if dtype == np.float64 else "fp32")
                counts["mean"][0] += 1
                _exact_check("mean", x, axis, mean.bound("numpy"), mean.emulate("numpy"), mean=True)
                if _same(mean.emulate("numpy"), np.mean(x, axis=axis)):
                    counts["mean"][1] += 1
                else:
                    bad.append(("mean", name, shape, axis))
                if dtype != np.float64:
                    # A dtype wider than the array's: numpy casts through its buffer.
                    wide = numeq.ops.sum(x, axis=axis, compute="fp64", out="fp64")
                    counts["sum dtype"][0] += 1
                    if _same(wide.emulate("numpy"), np.sum(x, axis=axis, dtype=np.float64)):
                        counts["sum dtype"][1] += 1
                    else:
                        bad.append(("sum dtype", name, shape, axis))
    print(dtype.__name__, {k: f"{v[1]}/{v[0]}" for k, v in counts.items()})
    assert not bad, f"{len(bad)} differ from numpy, e.g. {bad[:5]}"


def test_float16_mean_buffered_in_float32():
    """np.mean of float16 casts to float32 through 8192-element buffers."""
    rng = np.random.default_rng(18)
    counts, bad = [0, 0], []
    for shape in ((20000,), (3, 9000), (9000, 3), (5, 300, 11)):
        for name, x in _layouts(rng, shape, np.float16):
            for axis in _axis_choices(len(shape)):
                if axis == ():
                    continue
                counts[0] += 1
                if _same(numeq.ops.mean(x, axis=axis).emulate("numpy"), np.mean(x, axis=axis)):
                    counts[1] += 1
                else:
                    bad.append((name, shape, axis))
    print(f"{counts[1]}/{counts[0]} match np.mean")
    assert not bad, f"{len(bad)} of {counts[0]} differ from np.mean, e.g. {bad[:5]}"


def test_zero_signs_every_layout():
    """numpy's output starts at +0: a sum of -0s is +0 along any axes."""
    rng = np.random.default_rng(19)
    for dtype in DTYPES:
        for name, x in _layouts(rng, (3, 4, 5), dtype):
            z = np.copysign(np.zeros_like(x), -1.0).astype(dtype)
            z = z[tuple(slice(None, None, s) for s in (1, -1, 2))] if name == "mixed" else z
            for axis in _axis_choices(3):
                assert _same(numeq.sum(z, axis=axis, platform="numpy"), np.sum(z, axis=axis)), (name, axis)


def test_numpy_reduction_orders_by_strides():
    """The reduced axes come back outermost first in numpy's iteration order."""
    x = np.zeros((4, 5, 6), np.float32)
    axes, plan = numeq.numpy_reduction(x, axis=(0, 2))
    assert axes == (0, 2) and isinstance(plan, numeq.Plan)
    axes, _ = numeq.numpy_reduction(np.asfortranarray(x), axis=(0, 2))
    assert axes == (2, 0)  # Fortran order: axis 0 is innermost
    assert "elementwise" in numeq.numpy_reduction(x, axis=0)[1].name  # a kept axis innermost
    assert numeq.plan("numpy", op="sum", in_fmt="fp16", out="fp16") is not None


def test_other_platforms_reduce_several_axes_in_c_order():
    """Another plan over an axis tuple sums each element's terms in C order of the axes; oracle: a
    float32 loop from +0 over x.transpose(kept + axes)."""
    rng = np.random.default_rng(20)
    seq = {"name": "sequential", "initial": 0.0, "output": {"format": "fp32"},
           "reduction": {"kind": "sequential", "arithmetic": {"accumulate": {"format": "fp32"}}}}
    x = _data(rng, (3, 4, 5), np.float32)
    for axes in ((0, 2), (2, 0), (1,), (0, 1, 2), None):
        red = list(range(3)) if axes is None else sorted(axes)
        kept = [d for d in range(3) if d not in red]
        flat = np.transpose(x, kept + red).reshape([x.shape[d] for d in kept] + [-1])
        want = np.zeros(flat.shape[:-1], np.float32)
        for idx in np.ndindex(*want.shape):
            acc = np.float32(0)
            for v in flat[idx]:
                acc = np.float32(acc + v)
            want[idx] = acc
        assert _same(numeq.sum(x, axis=axes, plan=seq), want), axes


def test_axis_errors_are_clear():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"^axis: 2 is out of range"):
        numeq.sum(x, axis=(0, 2), platform="numpy")
    with pytest.raises(ValueError, match=r"^axis: axis 1 is given more than once"):
        numeq.sum(x, axis=(1, -1), platform="numpy")
    with pytest.raises(TypeError, match=r"^axis: expected an integer, a tuple of integers or None"):
        numeq.sum(x, axis=1.0, platform="numpy")
    with pytest.raises(ValueError, match=r"^axis: axis 0 is given more than once"):
        numeq.ops.sum(x, axis=(0, 0))


def _large_cases(rng, dtype):
    for n in (10**5, 3 * 10**5 + 7, 10**6):
        yield "1-d", _data(rng, (n,), dtype)
        yield "1-d step3", _data(rng, (3 * n,), dtype)[::-3]
    for shape in ((1000, 1000), (100, 10001), (10001, 100), (50, 100, 200), (20, 30, 40, 50)):
        for name, x in _layouts(rng, shape, dtype):
            if name in ("step2", "reversed", "mixed", "permuted", "F", "C", "transposed"):
                yield f"{shape} {name}", x


@pytest.mark.long
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_long_sweep_up_to_a_million(dtype):
    rng = np.random.default_rng(21)
    counts, bad = [0, 0], []
    mean_counts = [0, 0]
    for name, x in _large_cases(rng, dtype):
        for axis in _axis_choices(x.ndim):
            if axis == ():
                continue
            _check_sum(x, axis, counts, bad, name)
            mean_counts[0] += 1
            got = numeq.ops.mean(x, axis=axis, compute="fp64" if dtype == np.float64 else "fp32").emulate("numpy")
            if _same(got, np.mean(x, axis=axis)):
                mean_counts[1] += 1
            else:
                bad.append(("mean", name, axis))
    print(f"{dtype.__name__}: sum {counts[1]}/{counts[0]}, mean {mean_counts[1]}/{mean_counts[0]} match numpy")
    assert not bad, f"{len(bad)} differ from numpy, e.g. {bad[:5]}"
