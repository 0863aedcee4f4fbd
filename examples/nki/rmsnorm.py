"""RMSNorm over the last axis: y = x * rsqrt(mean(x^2) + eps) * gamma. Per tile of 128 rows: the
squares and their row sums in one Scalar-engine instruction (activation square, reduce_res), then
rsqrt(sum / n + eps) in another (activation rsqrt with scale = 1/n and bias = eps; for n a power of
two, sum * (1/n) is the quotient sum / n exactly), then x times its row's factor (tensor_scalar) and
times gamma (tensor_tensor). gamma is read into every partition by one DMA whose access pattern
repeats it (partition step 0).

Run: ``python3 examples/nki/rmsnorm.py``.
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

EPS = 1e-6


@nki.jit
def rmsnorm(x, gamma):
    """rmsnorm(x) * gamma for x [R, n] (R a multiple of 128, n a power of two), gamma [1, n]; fp32 out."""
    R, n = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((R, n), nl.float32, buffer=nl.shared_hbm)
    g = nl.ndarray((P, n), gamma.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=gamma.ap([[0, P], [1, n]]))
    for r in nl.affine_range(R // P):
        xt = nl.ndarray((P, n), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[r * P:(r + 1) * P, :])
        squares = nl.ndarray((P, n), nl.float32, buffer=nl.sbuf)
        sums = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=squares, op=nl.square, data=xt, reduce_op=nl.add, reduce_res=sums,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        factor = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=factor, op=nl.rsqrt, data=sums, scale=1.0 / n, bias=EPS)
        scaled = nl.ndarray((P, n), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=scaled, data=xt, op0=nl.multiply, operand0=factor)
        y = nl.ndarray((P, n), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y, data1=scaled, data2=g, op=nl.multiply)
        nisa.dma_copy(dst=out[r * P:(r + 1) * P, :], src=y)
    return out


def inputs(seed: int = 0, rows: int = 128, n: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """x [rows, n] and gamma [1, n] of bf16 values."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n)).astype(ml_dtypes.bfloat16)
    gamma = (1 + 0.25 * rng.standard_normal((1, n))).astype(ml_dtypes.bfloat16)
    return x, gamma


if __name__ == "__main__":
    x, gamma = inputs()
    check_op(rmsnorm, (x, gamma), numeq.reference.rmsnorm(x, gamma=gamma[0], eps=EPS, out="fp64"), "numeq.ops.rmsnorm",
             lambda platform: numeq.ops.rmsnorm(x, gamma=gamma[0], eps=EPS, out="fp32").emulate(platform),
             relative=True, what="rmsnorm")
