"""An SPMD elementwise kernel: y = x * alpha + beta, launched over a 2-D grid as
``scale_shift[g0, g1](x, ...)``. Program (i, j) (``nl.program_id(0)``, ``nl.program_id(1)``)
takes the [128, 512] tile at row block i and column block j; the grid covers x exactly. One
tensor_scalar per tile: multiply then add, each in fp32 (nki.isa.tensor_scalar docs).

Run: ``python3 examples/nki/spmd_scale_shift.py``.
"""

from __future__ import annotations

import numpy as np

import numeq.nki
from _common import run

with numeq.nki.installed():
    import nki
    import nki.isa as nisa
    import nki.language as nl


@nki.jit
def scale_shift(x, alpha, beta):
    """x * alpha + beta for x [128 * g0, 512 * g1] on a grid [g0, g1]; fp32."""
    P, F = nl.tile_size.pmax, 512
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    tile = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x[i * P:(i + 1) * P, j * F:(j + 1) * F])
    y = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=tile, op0=nl.multiply, operand0=alpha, op1=nl.add, operand1=beta)
    nisa.dma_copy(dst=out[i * P:(i + 1) * P, j * F:(j + 1) * F], src=y)
    return out


GRID = (2, 3)
ALPHA, BETA = 1.7, -0.3


def inputs(seed: int = 0) -> tuple[np.ndarray]:
    """x [128 * GRID[0], 512 * GRID[1]] of fp32 values."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((128 * GRID[0], 512 * GRID[1])).astype(np.float32),)


if __name__ == "__main__":
    (x,) = inputs()
    result = run(scale_shift[GRID], x, ALPHA, BETA)
    expected = x * np.float32(ALPHA) + np.float32(BETA)  # two IEEE fp32 operations, each rounded
    print("equal to numpy's fp32 x * alpha + beta:", bool(np.array_equal(result.outputs, expected)))
