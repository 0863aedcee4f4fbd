"""nl.broadcast_to as nki.language documents it: ``broadcast_to(x, shape, dtype=None)`` (shape
positional, an optional dtype to cast to), and the older keyword ``src=``; numpy's broadcast_to
(and ml_dtypes' cast) is the oracle."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import numeq.nki
from numeq import nki

nl, nisa = nki.language, nki.isa


def _kernel(form: str):
    @nki.jit
    def kernel(b):
        t = nl.ndarray((1, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=b)
        if form == "positional":
            w = nl.broadcast_to(t, (128, 64))
        elif form == "dtype":
            w = nl.broadcast_to(t, (128, 64), dtype=nl.bfloat16)
        else:
            w = nl.broadcast_to(src=t, shape=(128, 64))
        out = nl.ndarray((128, 64), w.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=w)
        return out

    return kernel


@pytest.mark.parametrize("form", ["positional", "dtype", "older keyword"])
def test_broadcast_to_repeats_the_row(form: str) -> None:
    b = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    r = numeq.nki.run(_kernel(form), b)
    assert r.completed and not r.errors
    expected = np.broadcast_to(b, (128, 64))
    if form == "dtype":
        expected = expected.astype(ml_dtypes.bfloat16)
    assert r.outputs.dtype == expected.dtype and np.array_equal(r.outputs, expected)


def test_a_shape_that_does_not_broadcast_is_named() -> None:
    @nki.jit
    def bad(b):
        t = nl.ndarray((2, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=b)
        return nl.broadcast_to(t, (128, 64))

    with pytest.raises(ValueError, match=r"shape: a tile of shape \(2, 64\) does not broadcast to \(128, 64\)"):
        numeq.nki.run(bad, np.ones((2, 64), np.float32))
