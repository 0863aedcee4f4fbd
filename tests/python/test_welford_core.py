"""numeq._core.cases_bn_stats / cases_bn_aggr (cases/bn_stats.hpp: nki.isa.bn_stats and bn_aggr as
values, the arithmetic of the layernorm's bn_stats variant) against an oracle written here: the
documented formulas one IEEE binary32 operation at a time on numpy float32 scalars (each a
correctly rounded operation), counts summed in Python floats (exact for integer counts).

Bit for bit on every element that is not NaN (signed zeros included); where the oracle gives NaN
the extension gives NaN (a NaN's sign and payload are not part of the result: the header says so).
"""

from __future__ import annotations

import numpy as np
import pytest

from numeq import _core

F = np.float32


def welford(values: np.ndarray) -> tuple[np.float32, np.float32, np.float32]:
    """(count, mean, M2) of a 1-D float32 array: mean += (x - mean) / k, M2 += (x - mean_old)(x - mean)."""
    mean, m2 = F(0), F(0)
    for k, x in enumerate(values, start=1):
        delta = F(x - mean)
        mean = F(mean + F(delta / F(k)))
        m2 = F(m2 + F(delta * F(x - mean)))
    return F(len(values)), mean, m2


def stats_oracle(x: np.ndarray) -> np.ndarray:
    out = np.empty((x.shape[0], 6), dtype=F)
    with np.errstate(all="ignore"):
        for p in range(x.shape[0]):
            out[p, 0:3] = welford(x[p, 0::2])
            out[p, 3:6] = welford(x[p, 1::2])
    return out


def chan(triples: list[tuple[np.float32, np.float32, np.float32]]) -> tuple[np.float32, np.float32]:
    """Chan, Golub and LeVeque's pairwise update in order; n exact (a Python float sum of the counts)."""
    n, mean, m2 = triples[0]
    n = float(n)
    for nb, mean_b, m2_b in triples[1:]:
        total = n + float(nb)
        t = F(total)
        delta = F(mean_b - mean)
        mean = F(mean + F(delta * F(nb / t)))
        weight = F(F(n * float(nb)) / t)
        m2 = F(F(m2 + m2_b) + F(F(delta * delta) * weight))
        n = total
    return mean, F(m2 / F(n))


def naive(triples: list[tuple[np.float32, np.float32, np.float32]]) -> tuple[np.float32, np.float32]:
    """s = sum mean_i n_i, q = sum (M2_i + mean_i^2 n_i), each from its first term; q / n - mean^2."""
    n = F(sum(float(c) for c, _, _ in triples))
    s = q = None
    for c, mean, m2 in triples:
        ds = F(mean * c)
        dq = F(m2 + F(F(mean * mean) * c))
        s = ds if s is None else F(s + ds)
        q = dq if q is None else F(q + dq)
    mean = F(s / n)
    return mean, F(F(q / n) - F(mean * mean))


def aggr_oracle(stats: np.ndarray, merge: str) -> np.ndarray:
    out = np.empty((stats.shape[0], 2), dtype=F)
    with np.errstate(all="ignore"):
        for p in range(stats.shape[0]):
            row = stats[p].astype(F)
            triples = [(row[i], row[i + 1], row[i + 2]) for i in range(0, row.size, 3)]
            out[p] = (chan if merge == "chan" else naive)(triples)
    return out


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    differ = (got.view(np.uint32) != want.view(np.uint32)) & ~nan
    assert not differ.any(), f"{differ.sum()} elements differ, first at {np.argwhere(differ)[0]}: " \
                             f"{got[differ][0]!r} vs {want[differ][0]!r}"


def rows(rng: np.random.Generator, p: int, n: int, kind: str) -> np.ndarray:
    """p rows of n float32 values: normal around an offset (cancellation in the variance), wide-range,
    subnormal, near fp32's largest finite value, or with NaN and +-Inf planted."""
    if kind == "offset":
        x = (rng.standard_normal((p, n)) * 0.01 + 1000).astype(F)
    elif kind == "wide":
        x = (rng.standard_normal((p, n)) * np.exp2(rng.integers(-60, 60, (p, n)))).astype(F)
    elif kind == "subnormal":
        x = (rng.standard_normal((p, n)) * 2.0**-140).astype(F)
    elif kind == "huge":
        x = (rng.uniform(-1, 1, (p, n)) * 3e38).astype(F)
    else:
        x = rng.standard_normal((p, n)).astype(F)
    if kind == "specials" and n:
        for value in (np.nan, np.inf, -np.inf):
            x[rng.integers(0, p, max(1, p // 4)), rng.integers(0, n, max(1, p // 4))] = value
    return x


KINDS = ["normal", "offset", "wide", "subnormal", "huge", "specials"]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 64, 511, 512])
@pytest.mark.parametrize("kind", KINDS)
def test_bn_stats_matches_float32_welford(n: int, kind: str) -> None:
    x = rows(np.random.default_rng(1000 * n + KINDS.index(kind)), 16, n, kind)
    got = _core.cases_bn_stats(x)
    assert_same(got, stats_oracle(x))
    # float64 arrays of the same values read the same; n = 1 leaves the odd half empty: (0, 0, 0).
    assert_same(_core.cases_bn_stats(x.astype(np.float64)), got)
    if n == 1:
        assert np.all(got[:, 3:6] == 0) and not np.signbit(got[:, 3:6]).any()


def test_bn_stats_of_the_documented_largest_instruction_on_128_partitions() -> None:
    x = rows(np.random.default_rng(7), 128, 512, "specials")
    assert_same(_core.cases_bn_stats(x), stats_oracle(x))


@pytest.mark.parametrize("merge", ["chan", "naive"])
@pytest.mark.parametrize("kind", KINDS)
def test_bn_aggr_of_bn_stats_chunks(merge: str, kind: str) -> None:
    # A row of 1300 in instructions of at most 512 elements (the layernorm's chunks), then one
    # bn_aggr of the six triples; and a single chunk (one bn_aggr of two triples).
    x = rows(np.random.default_rng(50 + KINDS.index(kind)), 8, 1300, kind)
    stats = np.concatenate([_core.cases_bn_stats(x[:, c:c + 512]) for c in range(0, 1300, 512)], axis=1)
    assert_same(stats, np.concatenate([stats_oracle(x[:, c:c + 512]) for c in range(0, 1300, 512)], axis=1))
    assert_same(_core.cases_bn_aggr(stats, merge), aggr_oracle(stats, merge))
    one = _core.cases_bn_stats(x[:, :5])
    assert_same(_core.cases_bn_aggr(one, merge), aggr_oracle(one, merge))


@pytest.mark.parametrize("merge", ["chan", "naive"])
def test_bn_aggr_of_arbitrary_triples(merge: str) -> None:
    # Triples no bn_stats writes: zero counts, negative zeros, single triples, NaN and Inf, counts
    # of one (single-element groups), fractional counts.
    rng = np.random.default_rng(99)
    for m in (1, 2, 5):
        stats = rng.standard_normal((64, 3 * m)).astype(F)
        stats[:, 0::3] = rng.integers(0, 4, (64, m))
        stats[:8, 0::3] = 1
        stats[8:16, 1::3] = -0.0
        stats[16:20, 0::3] = -0.0
        stats[20:24, 0::3] = rng.uniform(0, 5, (4, m)).astype(F)
        stats[24:28, 2::3] = np.inf
        stats[28:32, 1] = np.nan
        stats[32:36, 1::3] = F(3e38)
        got = _core.cases_bn_aggr(stats, merge)
        assert_same(got, aggr_oracle(stats, merge))


def test_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="merge"):
        _core.cases_bn_aggr(np.zeros((2, 3), F), "mean_of_means")
    with pytest.raises(ValueError, match="multiple of 3"):
        _core.cases_bn_aggr(np.zeros((2, 4), F), "chan")
    with pytest.raises(ValueError, match="x: expected shape"):
        _core.cases_bn_stats(np.zeros(5, F))
    with pytest.raises(ValueError, match="compute"):
        _core.cases_bn_stats(np.zeros((2, 4), F), "fp64")
