"""The Tensor Engine's transpose mode: nc_matmul(is_transpose=True).

Sources: nki.isa.nc_matmul ("Tensor Engine can transpose a tile in SBUF by loading it as a
stationary tile and using an identity matrix as the moving tile. Starting NeuronCore-v3, turning on
transpose mode by setting is_transpose=True enables bit-accurate data transpose, which can
transpose tensors with NaN/Inf values properly"; "On NeuronCore-v2, Tensor Engine does not support
transpose mode natively"), nki.isa.nc_transpose ("The output dst tile must have the same data type
as that of data"), the Trainium2 architecture guide ("FP16/BF16 PSUM output for FP16/BF16
transpose").

Oracles: numpy's transpose of the stored bits (NeuronCore-v3), and float64 numpy's
stationary^T @ identity rounded to fp32 (NeuronCore-v2's plain matmul, NaN * 0 = NaN).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nki_support import errors, f32, hbm, sbuf
from numeq import nki

nl, nisa = nki.language, nki.isa
rng = np.random.default_rng(41)


def transposer(dst_dtype=None):
    def kernel(s, i):
        d = nl.ndarray((s.shape[1], i.shape[1]), dst_dtype or s.dtype, buffer=nl.psum)
        nisa.nc_matmul(dst=d, stationary=sbuf(s), moving=sbuf(i), is_transpose=True)
        o = nl.ndarray(d.shape, d.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=d)
        return hbm(o)
    return kernel


def specials(shape, dtype) -> np.ndarray:
    s = rng.standard_normal(shape).astype(dtype)
    s[3, 5], s[7, 1], s[9, 9], s[0, 0] = np.nan, -0.0, np.inf, -np.inf
    return s


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_transpose_mode_passes_the_stationary_bits_through(dtype):
    s = specials((128, 64), dtype)
    r = nki.run(transposer(), s, np.eye(128, dtype=dtype))
    bits = np.dtype(f"u{np.dtype(dtype).itemsize}")
    assert r.outputs.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(r.outputs.view(bits), np.ascontiguousarray(s.T).view(bits))
    assert r.errors == []
    mm = [i for i in r.trace if i.name == "nc_matmul"]
    assert len(mm) == 1 and mm[0].detail.get("transpose") is True and mm[0].flops == 0


def test_transpose_mode_with_the_first_columns_of_the_identity_transposes_those_rows():
    s = specials((128, 32), np.float32)
    r = nki.run(transposer(), s, np.eye(128, 100, dtype=np.float32))
    np.testing.assert_array_equal(r.outputs.view(np.uint32), np.ascontiguousarray(s.T[:, :100]).view(np.uint32))


def test_transpose_mode_writes_the_inputs_dtype():
    s = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    r = nki.run(transposer(dst_dtype=nl.float32), s, np.eye(128, dtype=ml_dtypes.bfloat16))
    assert not r.completed
    assert "bfloat16" in errors(r, "matmul_output_memory")[0].message


def test_transpose_mode_takes_an_identity_moving_tile():
    s = rng.standard_normal((128, 64)).astype(np.float32)
    perm = np.eye(128, dtype=np.float32)[:, ::-1].copy()
    for moving in (2 * np.eye(128, dtype=np.float32), perm):
        r = nki.run(transposer(), s, moving)
        assert not r.completed and "not an identity" in errors(r, "instruction_constraint")[0].message


def test_transpose_mode_transposes_stationary_not_moving():
    """The tile transposed is stationary (the moving tile is the identity), of any shape [K, M]."""
    s = rng.standard_normal((64, 32)).astype(np.float32)
    r = nki.run(transposer(), s, np.eye(64, dtype=np.float32))
    assert r.outputs.shape == (32, 64)
    np.testing.assert_array_equal(r.outputs, s.T)


def test_neuroncore_v2_has_no_transpose_mode_the_matmul_spreads_nan():
    s = specials((128, 64), np.float32)
    r = nki.run(transposer(), s, np.eye(128, dtype=np.float32), target="trn1")
    finite = np.isfinite(s).all(axis=0)  # columns of s (rows of the result) free of NaN / Inf
    # stationary^T @ I in fp32: x * 1 + 0 * (the rest): exact for finite rows (-0.0 becomes +0.0)
    np.testing.assert_array_equal(r.outputs[finite], s.T[finite] + np.float32(0))
    assert not finite.all()
    with np.errstate(invalid="ignore"):  # NaN or Inf times 0 is NaN: it spreads along the row
        np.testing.assert_array_equal(r.outputs, f32(s.T.astype(np.float64) @ np.eye(128)))
    assert np.isnan(r.outputs[5]).all() and r.outputs[0, 0] == -np.inf and np.isnan(r.outputs[0, 1:]).all()
