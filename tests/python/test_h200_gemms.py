"""numeq's nvidia.h100 model against bf16 GEMMs measured on an NVIDIA H200 through cuBLAS
(tests/data/h200-gemms: hardware outputs, an oracle numeq never computed). Each product is
explained bit for bit, by the platform itself or by the named split-K variant cuBLAS used."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import numeq

DATA = Path(__file__).resolve().parents[1] / "data" / "h200-gemms" / "gemms.npz"

CASES = [
    ("64x256x64", "fp32", "nvidia.h100"),
    ("64x256x64", "bf16", "nvidia.h100"),
    ("128x1024x128", "fp32", "nvidia.h100"),
    ("128x1024x128", "bf16", "nvidia.h100"),
    ("128x2048x128", "fp32", "nvidia.h100"),
    ("32x8192x32", "fp32", "nvidia.h100[split_k=4,split_mode=parallel]"),
]


def bf16(bits: np.ndarray) -> np.ndarray:
    return bits.view(ml_dtypes.bfloat16)


@pytest.mark.parametrize(("shape", "out", "explained_by"), CASES)
def test_measured_h200_gemm_is_explained_bit_for_bit(shape: str, out: str, explained_by: str) -> None:
    d = np.load(DATA)
    a, b = bf16(d[f"{shape}_a"]), bf16(d[f"{shape}_b"])
    c = d[f"{shape}_c_{out}"]
    gpu = c if out == "fp32" else bf16(c)
    op = numeq.ops.matmul(a, b, out=out)
    verdict = numeq.compare(gpu, op, "nvidia.h100")
    assert verdict.passed, verdict
    assert verdict.explained_by == explained_by, verdict
    # The named platform's emulation is the GPU's output, element for element.
    emulated = op.emulate(explained_by)
    np.testing.assert_array_equal(emulated, np.asarray(gpu, dtype=np.float64))
    if explained_by == "nvidia.h100":
        assert verdict.tier == "bit_exact"
    else:
        assert verdict.tier == "variant"
        # ... and the platform's default order is not (the variant is what explains it).
        assert not np.array_equal(op.emulate("nvidia.h100"), np.asarray(gpu, dtype=np.float64))
