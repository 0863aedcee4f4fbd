"""Tiled matmul with PSUM groups (the structure of the NKI tutorial's fully optimised matmul):
the K tiles of an output tile are taken ``group`` at a time into a PSUM tile, and each group's sum
is added into an fp32 SBUF accumulator on the Vector engine (tensor_tensor add, fp32 arithmetic:
nki.isa.tensor_tensor docs); the first group is copied in. The op-level model of this is the
platform option ``psum_group``: ``trainium.trn2[psum_group=G]``.

Run: ``python3 examples/nki/matmul_psum_groups.py``.
"""


from __future__ import annotations

import ml_dtypes
import numpy as np

import numeq
import numeq.nki

with numeq.nki.installed():
    import nki
    import nki.isa as nisa
    import nki.language as nl


@nki.jit
def matmul_psum_groups(a_t, b, group=2):
    """out[M, N] = a_t.T @ b; a_t [K, M], b [K, N]; K tiles in PSUM groups of ``group``, the groups
    summed in a float32 SBUF tile."""
    K, M = a_t.shape
    _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            total = nl.ndarray((TM, TN), nl.float32, buffer=nl.sbuf)
            for g in nl.sequential_range(K // (TK * group)):
                part = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
                for kk in nl.sequential_range(group):
                    k = g * group + kk
                    a_tile = nl.ndarray((TK, TM), a_t.dtype, buffer=nl.sbuf)
                    b_tile = nl.ndarray((TK, TN), b.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=a_tile, src=a_t[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                    nisa.dma_copy(dst=b_tile, src=b[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                    nisa.nc_matmul(part, a_tile, b_tile)
                if g == 0:
                    nisa.tensor_copy(dst=total, src=part)
                else:
                    nisa.tensor_tensor(dst=total, data1=total, data2=part, op=nl.add)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=total)
    return out


GROUP = 2


def inputs(seed: int = 0, m: int = 128, k: int = 512, n: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """a [M, K] and b [K, N] of bf16 values (standard normal, rounded)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16),
            rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16))


def main() -> None:
    a, b = inputs()
    run = numeq.nki.run(matmul_psum_groups, np.ascontiguousarray(a.T), b, group=GROUP)
    print(run.summary())
    exact = numeq.reference.matmul(a, b, out="fp64")
    print("max |out - exact|:", float(np.max(np.abs(run.outputs.astype(np.float64) - exact))))
    for platform in (run.platform, f"trainium.trn2[psum_group={GROUP}]"):
        emulated = numeq.matmul(a, b, platform=platform, out="fp32")
        print(f"bit-exact with numeq.matmul on {platform}:",
              bool(np.array_equal(run.outputs.astype(np.float64), emulated)))


if __name__ == "__main__":
    main()
