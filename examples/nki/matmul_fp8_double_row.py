"""fp8 matmul in the Tensor Engine's double_row mode (NeuronCore-v3): one nc_matmul contracts
K = 256 rows, the stationary operand laid out [128, 2, M] and the moving one [128, 2, N], so each
PE takes two fp8 products (nki.isa.nc_matmul, perf_mode=matmul_perf_mode.double_row: "einsum
'kli,klj->ij'"). Row 2p + l of a K tile of 256 goes to partition p, slot l. Inputs float8_e4m3
(Trainium's IEEE-like e4m3, max 240); PSUM and the output fp32. The op-level model is the platform
option ``fp8_double_row=on`` (K tile 256).

Run: ``python3 examples/nki/matmul_fp8_double_row.py``.
"""


from __future__ import annotations

import ml_dtypes
import numpy as np

import numeq.nki
from _common import check_matmul, matmul_inputs

with numeq.nki.installed():
    import nki
    import nki.isa as nisa
    import nki.language as nl


@nki.jit
def matmul_fp8_double_row(a_t, b):
    """out[M, N] = a_t.T @ b, fp32; a_t [K, M], b [K, N] float8_e4m3, K a multiple of 256."""
    K, M = a_t.shape
    _, N = b.shape
    TK = 2 * nl.tile_size.pmax  # two rows of K per partition
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
    for k in nl.sequential_range(K // TK):
        a_tile = nl.ndarray((TK // 2, 2, M), a_t.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((TK // 2, 2, N), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a_t[k * TK:(k + 1) * TK, :].reshape((TK // 2, 2, M)))
        nisa.dma_copy(dst=b_tile, src=b[k * TK:(k + 1) * TK, :].reshape((TK // 2, 2, N)))
        nisa.nc_matmul(acc, a_tile, b_tile, perf_mode=nisa.matmul_perf_mode.double_row)
    res = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def inputs(seed: int = 0, m: int = 128, k: int = 512, n: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """a [M, K] and b [K, N] of float8_e4m3 values (standard normal, rounded)."""
    return matmul_inputs(seed, m, k, n, ml_dtypes.float8_e4m3)


if __name__ == "__main__":
    check_matmul(matmul_fp8_double_row, *inputs())
