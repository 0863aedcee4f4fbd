"""Tiled transpose: out[C, R] = x[R, C].T, 128 x 128 tiles through the Tensor Engine (nc_transpose
writes PSUM; bit-accurate from NeuronCore-v3, nki.isa.nc_transpose docs), each copied back to SBUF
(same dtype: a bit copy) and stored at the mirrored tile position.

Run: ``python3 examples/nki/transpose.py``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import numeq.nki
from _common import run

with numeq.nki.installed():
    import nki
    import nki.isa as nisa
    import nki.language as nl


@nki.jit
def transpose(x):
    """x.T for x [R, C], R and C multiples of 128."""
    R, C = x.shape
    T = nl.tile_size.pmax
    out = nl.ndarray((C, R), x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(R // T):
        for j in nl.affine_range(C // T):
            tile = nl.ndarray((T, T), x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x[i * T:(i + 1) * T, j * T:(j + 1) * T])
            flipped = nl.ndarray((T, T), x.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=tile)
            back = nl.ndarray((T, T), x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=flipped)
            nisa.dma_copy(dst=out[j * T:(j + 1) * T, i * T:(i + 1) * T], src=back)
    return out


def inputs(seed: int = 0, rows: int = 256, cols: int = 384) -> tuple[np.ndarray]:
    """x [rows, cols] of bf16 values."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16),)


if __name__ == "__main__":
    (x,) = inputs()
    result = run(transpose, x)
    print("bits equal to x.T:", bool(np.array_equal(result.outputs.view(np.uint16), x.T.view(np.uint16))))
