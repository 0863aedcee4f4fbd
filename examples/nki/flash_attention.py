"""Causal attention forward, flash style: out = softmax(scale * q k^T + causal mask) v for one tile
of 128 queries, the keys and values taken in blocks of B with an online softmax (FlashAttention-2,
arXiv:2307.08691, Algorithm 1). Per key block j:

- S = q k_j^T on the Tensor Engine (q^T stationary [d, 128], k_j^T moving [d, B]: both transposed
  on chip through PSUM), scaled by 1/sqrt(d) on the way out of PSUM;
- the causal mask on GpSimd: affine_select keeps S[p, t] where (q0 + p) - (j0 + t) >= 0 and puts a
  large negative number elsewhere, whose exp is 0;
- m_new = max(m, rowmax S); p = exp(S - m_new) with its row sums (one activation); the correction
  a = exp(m - m_new); l = a * l + rowsum; O = a * O + p v_j (p cast to bf16, transposed through
  PSUM to be the stationary operand of the p v_j matmul);
- finally O / l.

Run: ``python3 examples/nki/flash_attention.py``.
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

MASKED = -3.0e38  # an fp32 score no real score reaches; exp(MASKED - m) is 0


def _transposed(src, rows, cols, dtype):
    """An SBUF tile holding src[rows, cols].T (a Tensor Engine transpose through PSUM)."""
    flipped = nl.ndarray((cols, rows), dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=flipped, data=src)
    back = nl.ndarray((cols, rows), dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=back, src=flipped)
    return back


@nki.jit
def flash_attention(q, k, v, block=32):
    """Causal softmax(q k^T / sqrt(d)) v for q [128, d], k [L, d], v [L, dv] (bf16, d <= 128,
    L a multiple of ``block``); fp32 out."""
    Lq, d = q.shape
    L, dv = v.shape
    scale = 1.0 / float(np.sqrt(d))
    out = nl.ndarray((Lq, dv), nl.float32, buffer=nl.shared_hbm)

    q_sb = nl.ndarray((Lq, d), q.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=q_sb, src=q)
    q_t = _transposed(q_sb, Lq, d, q.dtype)                     # [d, Lq]: the stationary operand

    m = nl.ndarray((Lq, 1), nl.float32, buffer=nl.sbuf)         # running row maximum
    l = nl.ndarray((Lq, 1), nl.float32, buffer=nl.sbuf)         # running row sum
    o = nl.ndarray((Lq, dv), nl.float32, buffer=nl.sbuf)        # running numerator
    for j in nl.sequential_range(L // block):
        j0 = j * block
        k_sb = nl.ndarray((block, d), k.dtype, buffer=nl.sbuf)
        v_sb = nl.ndarray((block, dv), v.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k[j0:j0 + block, :])
        nisa.dma_copy(dst=v_sb, src=v[j0:j0 + block, :])
        k_t = _transposed(k_sb, block, d, k.dtype)              # [d, block]

        s_ps = nl.ndarray((Lq, block), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(s_ps, q_t, k_t)
        s = nl.ndarray((Lq, block), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=s, data=s_ps, op0=nl.multiply, operand0=scale)
        nisa.affine_select(dst=s, pattern=[[-1, block]], channel_multiplier=1, on_true_tile=s,
                           on_false_value=MASKED, cmp_op=nl.greater_equal, offset=-j0)

        m_new = nl.ndarray((Lq, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=m_new, op=nl.maximum, data=s, axis=1)
        if j > 0:
            nisa.tensor_tensor(dst=m_new, data1=m_new, data2=m, op=nl.maximum)
        neg_m = nl.ndarray((Lq, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=neg_m, data=m_new, op0=nl.multiply, operand0=-1.0)
        p = nl.ndarray((Lq, block), nl.float32, buffer=nl.sbuf)
        rowsum = nl.ndarray((Lq, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=p, op=nl.exp, data=s, bias=neg_m, reduce_op=nl.add, reduce_res=rowsum,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)

        p_lo = nl.ndarray((Lq, block), v.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=p_lo, src=p)
        p_t = _transposed(p_lo, Lq, block, v.dtype)             # [block, Lq]
        pv = nl.ndarray((Lq, dv), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(pv, p_t, v_sb)

        if j == 0:
            nisa.tensor_copy(dst=l, src=rowsum)
            nisa.tensor_copy(dst=o, src=pv)
        else:
            a = nl.ndarray((Lq, 1), nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=a, op=nl.exp, data=m, bias=neg_m)
            nisa.tensor_tensor(dst=l, data1=l, data2=a, op=nl.multiply)
            nisa.tensor_tensor(dst=l, data1=l, data2=rowsum, op=nl.add)
            nisa.tensor_scalar(dst=o, data=o, op0=nl.multiply, operand0=a)
            nisa.tensor_tensor(dst=o, data1=pv, data2=o, op=nl.add)
        nisa.tensor_copy(dst=m, src=m_new)

    y = nl.ndarray((Lq, dv), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=o, op0=nl.divide, operand0=l)
    nisa.dma_copy(dst=out, src=y)
    return out


BLOCK = 32


def inputs(seed: int = 0, lq: int = 128, lk: int = 128, d: int = 64, dv: int = 64) -> tuple:
    """q [lq, d], k [lk, d], v [lk, dv] of bf16 values."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(ml_dtypes.bfloat16) for shape in ((lq, d), (lk, d), (lk, dv)))


if __name__ == "__main__":
    q, k, v = inputs()
    check_op(flash_attention, (q, k, v), numeq.reference.attention(q, k, v, causal=True, out="fp64"),
             "numeq.ops.attention(variant='flash')",
             lambda platform: numeq.ops.attention(q, k, v, causal=True, out="fp32", variant="flash",
                                                  block_rows=q.shape[0], block_cols=BLOCK).emulate(platform),
             block=BLOCK)
