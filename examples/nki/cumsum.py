"""Cumulative sum along each row with one Vector-engine scan per tile of 128 rows:
nki.isa.tensor_tensor_scan computes r[:, i] = op1(op0(data0[:, i], r[:, i-1]), data1[:, i]) in fp32;
with data0 all ones, op0 = multiply, op1 = add, data1 = x and initial 0 it is
r[:, i] = r[:, i-1] + x[:, i], the running sum, rounded to fp32 at every step.

Run: ``python3 examples/nki/cumsum.py``.
"""

from __future__ import annotations

import numpy as np

import numeq.nki
from _common import report_error, run

with numeq.nki.installed():
    import nki
    import nki.isa as nisa
    import nki.language as nl


@nki.jit
def cumsum(x):
    """np.cumsum(x, axis=1) for x [R, C], R a multiple of 128; fp32."""
    R, C = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((R, C), nl.float32, buffer=nl.shared_hbm)
    ones = nl.ndarray((P, C), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    for r in nl.affine_range(R // P):
        xt = nl.ndarray((P, C), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[r * P:(r + 1) * P, :])
        run = nl.ndarray((P, C), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=run, data0=ones, data1=xt, initial=0.0, op0=nl.multiply, op1=nl.add)
        nisa.dma_copy(dst=out[r * P:(r + 1) * P, :], src=run)
    return out


def inputs(seed: int = 0, rows: int = 128, cols: int = 512) -> tuple[np.ndarray]:
    """x [rows, cols] of fp32 values."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, cols)).astype(np.float32),)


if __name__ == "__main__":
    (x,) = inputs()
    result = run(cumsum, x)
    sequential = np.zeros_like(x)  # numpy's own fp32 running sum, one rounding per step
    acc = np.zeros(x.shape[0], dtype=np.float32)
    for i in range(x.shape[1]):
        acc = acc + x[:, i]
        sequential[:, i] = acc
    print("equal to the fp32 running sum:", bool(np.array_equal(result.outputs, sequential)))
    report_error(result, np.cumsum(x.astype(np.float64), axis=1))
