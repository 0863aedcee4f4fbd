"""The packed MX dtypes' words (``float8_e5m2_x4``, ``float8_e4m3fn_x4``, ``float4_e2m1fn_x4``):
four values of the contraction axis in one element, value j in byte j (fp8, a 32-bit word) or
nibble j (fp4, a 16-bit word) of the little-endian word (machine.dtypes cites the layout). One
packer and one unpacker, used by the MX instructions, ``neuron_dtypes.static_cast`` and tests.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .dtypes import PACKED_ELEMENTS, DType

__all__ = ["ELEMENT_TYPES", "element_format", "pack", "unpack_bits", "unpack_values"]

# The ml_dtypes type of each packed dtype's values (one byte per value, fp4 in the low nibble).
ELEMENT_TYPES = {"e5m2": ml_dtypes.float8_e5m2, "e4m3fn": ml_dtypes.float8_e4m3fn, "e2m1fn": ml_dtypes.float4_e2m1fn}


def element_format(dtype: DType) -> str:
    """The numeq format of a packed dtype's values (e5m2, e4m3fn, e2m1fn)."""
    return PACKED_ELEMENTS[dtype.format][0]


def unpack_bits(words: np.ndarray, dtype: DType) -> np.ndarray:
    """The values' bit patterns, one uint8 each: words [..., n] -> [..., 4n] (value j of word i at
    4i + j)."""
    w = np.ascontiguousarray(words, dtype=dtype.storage)
    if PACKED_ELEMENTS[dtype.format][1] == 8:
        return w.astype("<u4", copy=False).view(np.uint8).reshape(*w.shape[:-1], 4 * w.shape[-1])
    w = w.astype(np.uint16, copy=False)
    nibbles = np.stack([(w >> (4 * j)) & 0xF for j in range(4)], axis=-1).astype(np.uint8)
    return nibbles.reshape(*w.shape[:-1], 4 * w.shape[-1])


def unpack_values(words: np.ndarray, dtype: DType) -> np.ndarray:
    """The values as float32 (exact: every fp8 and fp4 value is an fp32 value): [..., n] -> [..., 4n]."""
    return unpack_bits(words, dtype).view(ELEMENT_TYPES[element_format(dtype)]).astype(np.float32)


def pack(bits: np.ndarray, dtype: DType) -> np.ndarray:
    """Words of ``dtype`` from the values' bit patterns (uint8, [..., 4n] -> [..., n])."""
    b = np.ascontiguousarray(bits, dtype=np.uint8)
    if b.shape[-1] % 4:
        raise ValueError(f"pack: {dtype} packs four values per element; the last axis has {b.shape[-1]}")
    if PACKED_ELEMENTS[dtype.format][1] == 8:
        return b.view("<u4").astype(np.uint32).reshape(*b.shape[:-1], b.shape[-1] // 4)
    q = (b & 0xF).astype(np.uint16).reshape(*b.shape[:-1], b.shape[-1] // 4, 4)
    return (q[..., 0] | (q[..., 1] << 4) | (q[..., 2] << 8) | (q[..., 3] << 12)).astype(np.uint16)
