"""numeq.compare and numeq.compare_port: argument checks that run before any work."""

from __future__ import annotations

import numpy as np
import pytest

import numeq


def test_a_wrongly_shaped_output_is_refused_before_any_copy() -> None:
    # Found by an independent probe: a wrongly shaped actual was converted to float64 first. A
    # float16 array whose float64 copy would not fit in memory is refused by its shape alone.
    op = numeq.ops.matmul(np.ones((4, 8)), np.ones((8, 2)), in_fmt="fp32")
    huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.float16), shape=(1 << 20, 1 << 20), strides=(0, 0))
    with pytest.raises(ValueError, match=r"^actual: shape \(1048576, 1048576\) differs from the result of .* \(4, 2\)"):
        numeq.compare(huge, op, "numpy")
    with pytest.raises(ValueError, match=r"^trainium_output: shape \(3,\) differs"):
        numeq.compare_port(np.zeros((4, 2), np.float32), np.zeros(3, np.float32), op, "numpy", "numpy")


def test_op_variants_are_what_the_search_tries():
    # A device that tiles K by 64 (a Trainium kernel's choice): compare names that variant, and it
    # is one of Op.variants; every variant listed is a platform the op emulates.
    rng = np.random.default_rng(4)
    a = numeq.round(rng.standard_normal((8, 512)), "bf16")
    b = numeq.round(rng.standard_normal((512, 8)), "bf16")
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
    names = op.variants("trainium.trn2")
    assert "trainium.trn2" not in names and len(set(names)) == len(names)
    device = op.emulate("trainium.trn2[k_tile=64]")
    v = numeq.compare(device, op, "trainium.trn2")
    assert v.tier == "variant" and v.explained_by in names
    for name in names[:: max(1, len(names) // 12)]:
        assert op.emulate(name).shape == (8, 8)
    with pytest.raises(ValueError, match="platform"):
        op.variants("trainium.trn9")
