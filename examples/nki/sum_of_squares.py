"""The sum of squares of each row, as RMSNorm's first step computes it: per tile of 128 rows, the
squares and their row sums in one Scalar-engine instruction (activation square, reduce_res), the
sums written out in fp32. numeq's registered op ``numeq.ops.sum_of_squares`` is what the kernel
computes, so the run's output is that op's emulation on the platform the run reports.

Run: ``python3 examples/nki/sum_of_squares.py``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import numeq
import numeq.nki
from _common import check_op

with numeq.nki.installed():
    import nki
    import nki.isa as nisa
    import nki.language as nl


@nki.jit
def sum_of_squares(x):
    """sum_j x[r, j]^2 for x [R, n] (R a multiple of 128); [R, 1] fp32 out."""
    R, n = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((R, 1), nl.float32, buffer=nl.shared_hbm)
    for r in nl.affine_range(R // P):
        xt = nl.ndarray((P, n), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[r * P:(r + 1) * P, :])
        squares = nl.ndarray((P, n), nl.float32, buffer=nl.sbuf)
        sums = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=squares, op=nl.square, data=xt, reduce_op=nl.add, reduce_res=sums,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.dma_copy(dst=out[r * P:(r + 1) * P, :], src=sums)
    return out


def inputs(seed: int = 0, rows: int = 128, n: int = 512) -> tuple[np.ndarray]:
    """x [rows, n] of bf16 values."""
    return (np.random.default_rng(seed).standard_normal((rows, n)).astype(ml_dtypes.bfloat16),)


if __name__ == "__main__":
    (x,) = inputs()
    check_op(sum_of_squares, (x,), numeq.reference.sum(x.astype(np.float64) ** 2, axis=-1, out="fp64")[:, None],
             "numeq.ops.sum_of_squares",
             lambda platform: numeq.ops.sum_of_squares(x, out="fp32").emulate(platform)[:, None], relative=True,
             what="sums")
