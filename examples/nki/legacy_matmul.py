"""Tiled matmul in the older NKI generation's style (``neuronxcc.nki``, NKI 0.1.0): tiles are
values (``nl.load`` returns an SBUF tile), indices are ``nl.arange`` affine expressions, and K tiles
accumulate with ``psum += nl.matmul(at, bt, transpose_x=True)`` into a PSUM tile made by
``nl.zeros``; ``nl.copy`` evacuates it and ``nl.store`` writes HBM.

Run: ``python3 examples/nki/legacy_matmul.py``.
"""

from __future__ import annotations

import numpy as np

import numeq.nki
from _common import check_matmul, matmul_inputs

with numeq.nki.installed():
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


@nki.jit
def legacy_matmul(a_t, b):
    """out[M, N] = a_t.T @ b, fp32; a_t [K, M], b [K, N] (K, M multiples of 128, N of 512)."""
    K, M = a_t.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    i_k = nl.arange(128)[:, None]
    i_m = nl.arange(128)[None, :]
    i_p = nl.arange(128)[:, None]
    i_n = nl.arange(512)[None, :]
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            psum = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                at = nl.load(a_t[k * 128 + i_k, m * 128 + i_m])
                bt = nl.load(b[k * 128 + i_k, n * 512 + i_n])
                psum += nl.matmul(at, bt, transpose_x=True)
            res = nl.copy(psum, dtype=nl.float32)
            nl.store(out[m * 128 + i_p, n * 512 + i_n], value=res)
    return out


def inputs(seed: int = 0, m: int = 256, k: int = 384, n: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """a [M, K] and b [K, N] of bf16 values (standard normal, rounded)."""
    return matmul_inputs(seed, m, k, n)


if __name__ == "__main__":
    check_matmul(legacy_matmul, *inputs())
