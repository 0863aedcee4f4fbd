"""LayerNorm over the last axis with the Vector engine's statistics instructions: bn_stats per
chunk of at most 512 elements (count, mean and count * variance of the even and of the odd
elements; nki.isa.bn_stats docs), bn_aggr merging them into each row's mean and (population)
variance, rsqrt(var + eps) on the Scalar engine, then (x - mean) * rstd in one tensor_scalar, times
gamma and plus beta (tensor_tensor). gamma and beta are read into every partition by DMAs whose
access pattern repeats them (partition step 0).

Run: ``python3 examples/nki/layernorm.py``.
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

EPS = 1e-5


@nki.jit
def layernorm(x, gamma, beta):
    """layernorm(x) * gamma + beta for x [R, n] (R a multiple of 128), gamma, beta [1, n]; fp32 out."""
    R, n = x.shape
    P = nl.tile_size.pmax
    F = nl.tile_size.bn_stats_fmax
    chunks = (n + F - 1) // F
    out = nl.ndarray((R, n), nl.float32, buffer=nl.shared_hbm)
    g = nl.ndarray((P, n), gamma.dtype, buffer=nl.sbuf)
    b = nl.ndarray((P, n), beta.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=gamma.ap([[0, P], [1, n]]))
    nisa.dma_copy(dst=b, src=beta.ap([[0, P], [1, n]]))
    for r in nl.affine_range(R // P):
        xt = nl.ndarray((P, n), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[r * P:(r + 1) * P, :])
        stats = nl.ndarray((P, 6 * chunks), nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(chunks):
            nisa.bn_stats(dst=stats[:, 6 * c:6 * (c + 1)], data=xt[:, c * F:min(n, (c + 1) * F)])
        mean_var = nl.ndarray((P, 2), nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mean_var, data=stats)
        rstd = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=mean_var[:, 1:2], bias=EPS)
        centred = nl.ndarray((P, n), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=centred, data=xt, op0=nl.subtract, operand0=mean_var[:, 0:1],
                           op1=nl.multiply, operand1=rstd)
        nisa.tensor_tensor(dst=centred, data1=centred, data2=g, op=nl.multiply)
        y = nl.ndarray((P, n), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y, data1=centred, data2=b, op=nl.add)
        nisa.dma_copy(dst=out[r * P:(r + 1) * P, :], src=y)
    return out


def inputs(seed: int = 0, rows: int = 128, n: int = 1024) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [rows, n] (bf16, mean 1: a row mean to subtract), gamma and beta [1, n] (bf16)."""
    rng = np.random.default_rng(seed)
    x = (1 + rng.standard_normal((rows, n))).astype(ml_dtypes.bfloat16)
    gamma = (1 + 0.25 * rng.standard_normal((1, n))).astype(ml_dtypes.bfloat16)
    beta = (0.1 * rng.standard_normal((1, n))).astype(ml_dtypes.bfloat16)
    return x, gamma, beta


if __name__ == "__main__":
    x, gamma, beta = inputs()
    exact = numeq.reference.layernorm(x, gamma=gamma[0], beta=beta[0], eps=EPS, out="fp64")
    check_op(layernorm, (x, gamma, beta), exact, "numeq.ops.layernorm(variant='bn_stats')",
             lambda platform: numeq.ops.layernorm(x, gamma=gamma[0], beta=beta[0], eps=EPS, out="fp32",
                                                  variant="bn_stats").emulate(platform))
