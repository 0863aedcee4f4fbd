"""Row softmax, max-subtracted: per tile of 128 rows, the row maximum negated on the Vector engine
(tensor_reduce max, negate=True), exp(x - max) on the Scalar engine with the row sums gathered in
the same instruction (activation, bias = -max, reduce_res), the sums' reciprocals on the Vector
engine (nisa.reciprocal, fp32) and a per-row multiply (tensor_scalar). Every step computes in fp32
(nki.isa docs); only the final multiply writes the output dtype.

Run: ``python3 examples/nki/softmax.py``.
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


@nki.jit
def softmax(x):
    """softmax(x, axis=-1) for x [R, C], R a multiple of 128; the output is fp32."""
    R, C = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((R, C), nl.float32, buffer=nl.shared_hbm)
    for r in nl.affine_range(R // P):
        xt = nl.ndarray((P, C), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[r * P:(r + 1) * P, :])
        neg_max = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=xt, axis=1, negate=True)
        e = nl.ndarray((P, C), nl.float32, buffer=nl.sbuf)
        sums = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=xt, bias=neg_max, scale=1.0, reduce_op=nl.add, reduce_res=sums,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=sums)
        y = nl.ndarray((P, C), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[r * P:(r + 1) * P, :], src=y)
    return out


def inputs(seed: int = 0, rows: int = 128, cols: int = 512) -> tuple[np.ndarray]:
    """x [rows, cols] of bf16 values (normal, scale 3: rows whose maximum dominates)."""
    rng = np.random.default_rng(seed)
    return ((3 * rng.standard_normal((rows, cols))).astype(ml_dtypes.bfloat16),)


if __name__ == "__main__":
    (x,) = inputs()
    # The kernel multiplies each exp by the reciprocal of its row sum: the catalogue's reciprocal form.
    check_op(softmax, (x,), numeq.reference.softmax(x, out="fp64"), "numeq.ops.softmax(reciprocal=True)",
             lambda platform: numeq.ops.softmax(x, out="fp32", reciprocal=True).emulate(platform),
             relative=True, what="softmax")
