"""trainium.trn2's fp8 double_row plans on the fp32 kernels (core/src/fp32_chain_kernels.cpp, pair
chains): the same bits as the plan walked element by element (the evaluator's generic path, taken
here by a plan whose c placement the kernels do not serve; with no c it means the same), on odd
tiles, signed zeros and both fp8 formats. test_trainium checks the plans against an MPFR oracle."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import numeq


@pytest.mark.parametrize("fmt,dtype", [("e4m3", ml_dtypes.float8_e4m3), ("e5m2", ml_dtypes.float8_e5m2)])
@pytest.mark.parametrize("m,k,n,tile,group", [(33, 515, 47, 256, 2), (5, 7, 3, 4, 0), (16, 300, 24, 100, 3)])
def test_pair_chain_kernel_matches_the_plan_walk(fmt, dtype, m, k, n, tile, group):
    rng = np.random.default_rng(m * k + n)
    a = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-6, 6, (m, k)))).astype(dtype)
    b = (rng.standard_normal((k, n)) * np.exp2(rng.integers(-6, 6, (k, n)))).astype(dtype)
    a[0, :3] = 0
    b[:2, 0] = -0.0
    platform = f"trainium.trn2[fp8_double_row=on,k_tile={tile}" + (f",psum_group={group}]" if group else "]")
    fast = numeq.matmul(a, b, platform=platform, out="fp32")
    walked = numeq.plan(platform, "matmul", fmt, "fp32").to_dict()
    walked["c_placement"] = "first"
    slow = numeq.matmul(a, b, plan=walked, in_fmt=fmt, out="fp32")
    np.testing.assert_array_equal(fast.view(np.uint64), slow.view(np.uint64))
