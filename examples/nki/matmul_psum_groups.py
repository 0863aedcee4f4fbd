"""Tiled matmul with PSUM groups (the structure of the NKI tutorial's fully optimised matmul):
the K tiles of an output tile are taken ``group`` at a time into a PSUM tile, and each group's sum
is added into an SBUF accumulator on the Vector engine (tensor_tensor add, fp32 arithmetic:
nki.isa.tensor_tensor docs); the first group is copied in. The op-level model of this is the
platform option ``psum_group``: ``trainium.trn2[psum_group=G]``.

The accumulator's dtype is the kernel's ``accumulator`` argument. float32 (the default) keeps
every group's sum exact to fp32. bfloat16, the input dtype, is what the NKI tutorial's fully
optimised matmul uses (FACTS.md s3): every group's sum is added in fp32 and rounded to bf16 as it
enters the accumulator, so the result is not the fp32-accumulator plan's; its op-level model is
the platform options ``psum_group=G,group_accumulator=bf16``.

Run: ``python3 examples/nki/matmul_psum_groups.py`` (fp32 accumulator) or
``python3 examples/nki/matmul_psum_groups.py --accumulator bfloat16``.
"""

from __future__ import annotations

import argparse

import numpy as np

import numeq.nki
from _common import check_matmul, matmul_inputs

with numeq.nki.installed():
    import nki
    import nki.isa as nisa
    import nki.language as nl


@nki.jit
def matmul_psum_groups(a_t, b, group=2, accumulator=nl.float32):
    """out[M, N] = a_t.T @ b; a_t [K, M], b [K, N]; K tiles in PSUM groups of ``group``, the groups
    summed in an SBUF tile of dtype ``accumulator`` (float32 or bfloat16), the output's dtype too."""
    K, M = a_t.shape
    _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    out = nl.ndarray((M, N), accumulator, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            total = nl.ndarray((TM, TN), accumulator, buffer=nl.sbuf)
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
# The accumulator's name -> (its NKI dtype, the matching numeq format of the output).
ACCUMULATORS = {"float32": (nl.float32, "fp32"), "bfloat16": (nl.bfloat16, "bf16")}


def inputs(seed: int = 0, m: int = 128, k: int = 512, n: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """a [M, K] and b [K, N] of bf16 values (standard normal, rounded)."""
    return matmul_inputs(seed, m, k, n)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accumulator", choices=sorted(ACCUMULATORS), default="float32",
                        help="dtype of the SBUF tile the group sums are added into (default float32)")
    dtype, out = ACCUMULATORS[parser.parse_args().accumulator]
    # The law on the run's platform; beside it the fp32-accumulator plan (the same for float32).
    check_matmul(matmul_psum_groups, *inputs(), out=out, platforms=[f"trainium.trn2[psum_group={GROUP}]"],
                 group=GROUP, accumulator=dtype)
