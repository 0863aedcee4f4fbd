"""One nc_matmul: out[M, N] = a[M, K] @ b[K, N] for a single tile (K = 128, M = 128, N = 512).

The kernel takes a already transposed (a_t[K, M]): the Tensor Engine contracts over the partition
axis, so the stationary operand is laid out K x M (nki.isa.nc_matmul docs). The result lands in a
PSUM tile of fp32 (one 2 KiB bank per partition), is copied to SBUF on the Vector engine and
stored to HBM.

Run: ``python3 examples/nki/matmul_basic.py``.
"""

from __future__ import annotations

import numpy as np

import numeq.nki
from _common import check_matmul, matmul_inputs

with numeq.nki.installed():
    import nki
    import nki.isa as nisa
    import nki.language as nl


@nki.jit
def matmul_basic(a_t, b):
    """out = a_t.T @ b for a_t [K <= 128, M <= 128], b [K, N <= 512]; fp32 out."""
    K, M = a_t.shape
    _, N = b.shape
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    a_tile = nl.ndarray((K, M), a_t.dtype, buffer=nl.sbuf)
    b_tile = nl.ndarray((K, N), b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_tile, src=a_t)
    nisa.dma_copy(dst=b_tile, src=b)
    acc = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, a_tile, b_tile)
    res = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def inputs(seed: int = 0, m: int = 128, k: int = 128, n: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """a [M, K] and b [K, N] of bf16 values (standard normal, rounded)."""
    return matmul_inputs(seed, m, k, n)


if __name__ == "__main__":
    check_matmul(matmul_basic, *inputs())
