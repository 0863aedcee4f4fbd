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
