"""NKI's dtypes on numeq: one table, each dtype with its NKI name, its numeq format and the numpy /
ml_dtypes type that stores it.

Kernels compare dtypes (``t.dtype == nl.bfloat16``), pass numpy dtypes where NKI takes its own
(``nl.ndarray(shape, np.float32)``) and branch on ``str(dtype)``; a ``DType`` equals its own
name, the numpy dtype that stores it and every other spelling of the same dtype, and prints as
NKI's name does.

Trainium's ``float8_e4m3`` is the IEEE-like e4m3 (max 240, with Inf) of NeuronCore-v2/-v3, not the
OCP e4m3fn (max 448), which NKI calls ``float8_e4m3fn`` (FACTS.md s1: NKI dtype table,
nki-library kernel_helpers max table). tf32 has no numpy type: it is stored as float32 whose low 13
fraction bits are zero.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["DType", "DTYPES", "FORMAT_BYTES", "FP32_MIN", "PACKED_ELEMENTS", "dtype_of", "storage_dtype"]


class DType:
    """One NKI dtype: ``name`` (NKI's spelling), ``format`` (the numeq format of its values, or
    the integer type's name), ``storage`` (the numpy type holding it), ``kind`` ("float", "int",
    or "packed": four MX values per element). Immutable and one object per dtype (copies and pickles are the same object). Not a
    dataclass: kernels' and test suites' own dataclasses hold dtypes, and ``dataclasses.asdict`` of
    those must keep a dtype a dtype (nki-library's attention_tkg tests pass ``**asdict(cfg)``)."""

    __slots__ = ("name", "format", "storage", "kind")

    def __init__(self, name: str, format: str, storage: Any, kind: str) -> None:  # noqa: A002 - NKI's word
        for slot, value in zip(self.__slots__, (name, format, storage, kind)):
            object.__setattr__(self, slot, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a dtype is immutable: cannot set {name}")

    def __copy__(self) -> "DType":
        return self

    def __deepcopy__(self, memo: dict) -> "DType":
        return self

    def __reduce__(self) -> tuple:
        return (_named, (self.name,))

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype that stores it (so ``np.dtype(nl.bfloat16)`` works, as with NKI's). A
        packed dtype's word carries its name in the numpy dtype's metadata, so that an array made
        with it (``np.zeros(shape, dtype=nl.float8_e4m3fn_x4)``, as nki-library's tests make their
        MX outputs) is read back as that dtype, not as its word's unsigned integer."""
        if self.kind == "packed":
            return np.dtype(self.storage, metadata={_METADATA_KEY: self.name})
        return np.dtype(self.storage)

    @property
    def itemsize(self) -> int:
        return np.dtype(self.storage).itemsize

    @property
    def packed(self) -> bool:
        """A packed MX dtype (``float8_e5m2_x4`` ...): four values per element."""
        return self.kind == "packed"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return other.name == self.name
        try:
            return dtype_of(other, "other") is self
        except (TypeError, ValueError):
            return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq


_METADATA_KEY = "nki_dtype"


def _named(name: str) -> DType:
    """The dtype called ``name`` (unpickling)."""
    return DTYPES[name]


def _float(name: str, fmt: str, storage: Any) -> DType:
    return DType(name, fmt, storage, "float")


def _int(name: str, storage: Any) -> DType:
    return DType(name, np.dtype(storage).name, storage, "int")


DTYPES: dict[str, DType] = {d.name: d for d in (
    _float("float32", "fp32", np.float32),
    _float("tfloat32", "tf32", np.float32),
    _float("bfloat16", "bf16", ml_dtypes.bfloat16),
    _float("float16", "fp16", np.float16),
    _float("float8_e4m3", "e4m3", ml_dtypes.float8_e4m3),
    _float("float8_e4m3fn", "e4m3fn", ml_dtypes.float8_e4m3fn),
    _float("float8_e5m2", "e5m2", ml_dtypes.float8_e5m2),
    _int("int8", np.int8),
    _int("uint8", np.uint8),
    _int("int16", np.int16),
    _int("uint16", np.uint16),
    _int("int32", np.int32),
    _int("uint32", np.uint32),
    DType("bool", "uint8", np.uint8, "int"),
)}
# Trainium3's MX dtypes (nki.language API reference; trainium3_arch.rst, "Quad-MXFP8/MXFP4 Matmul
# Performance"): the scale float8_e8m0fnu ("power-of-two shared scale factor in MX quantization";
# OCP MX v1.0: 2^(bits - 127), 0xFF NaN), and the packed x4 dtypes, each element four values of
# the contraction axis: float8_*_x4 "32-bits wide", float4_e2m1fn_x4 "16-bits wide" (mxfp-matmul
# deep dive). Value j of an element is byte j (fp8) or nibble j (fp4) of its little-endian word,
# as AWS's own packing helpers lay it out (nki-samples mx_cpu_utils.pack_mx_data_into_x4: the fp8
# array viewed as uint32; two fp4 per byte, the first in the low nibble). ``format`` is the
# element format with "_x4"; only the MX instructions read or write their values
# (``instructions.mx``); DMA and same-dtype copies move their bits.
DTYPES.update({d.name: d for d in (
    _float("float8_e8m0fnu", "e8m0fnu", ml_dtypes.float8_e8m0fnu),
    DType("float8_e5m2_x4", "e5m2_x4", np.uint32, "packed"),
    DType("float8_e4m3fn_x4", "e4m3fn_x4", np.uint32, "packed"),
    DType("float4_e2m1fn_x4", "e2m1fn_x4", np.uint16, "packed"),
)})
# The element format of each packed dtype, and how many bits each of its four values takes.
PACKED_ELEMENTS: dict[str, tuple[str, int]] = {"e5m2_x4": ("e5m2", 8), "e4m3fn_x4": ("e4m3fn", 8),
                                               "e2m1fn_x4": ("e2m1fn", 4)}

# Other spellings kernels use for the same dtypes (numpy's and numeq's names, NKI's older ones).
_ALIASES = {"fp32": "float32", "tf32": "tfloat32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
            "float": "float32", "e4m3": "float8_e4m3", "fp8_e4m3": "float8_e4m3", "e4m3fn": "float8_e4m3fn",
            "e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2", "bool_": "bool"}
# nl.fp32.min, the most negative finite fp32 (bit pattern 0xff7fffff): what range_select fills.
FP32_MIN = np.float32(np.finfo(np.float32).min)

# Bytes per element by numeq format name (fp32, bf16, e4m3, int8 ...): what a manifest review's
# buffers are measured in.
FORMAT_BYTES: dict[str, int] = {d.format: d.itemsize for d in DTYPES.values() if d.kind != "packed"}

_BY_NUMPY = {np.dtype(d.storage): d for d in reversed(DTYPES.values()) if d.kind != "packed"}  # float32, not tfloat32
_BY_NUMPY[np.dtype(np.bool_)] = DTYPES["bool"]
_BY_NUMPY[np.dtype(np.uint8)] = DTYPES["uint8"]


def dtype_of(x: Any, parameter: str = "dtype") -> DType:
    """The NKI dtype ``x`` names: a DType, an NKI / numeq name, a numpy or ml_dtypes dtype or type."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        name = _ALIASES.get(x, x)
        if name in DTYPES:
            return DTYPES[name]
        raise ValueError(f"{parameter}: unknown dtype {x!r}; valid: {', '.join(DTYPES)}")
    try:
        np_dtype = np.dtype(x)
    except TypeError:
        raise TypeError(f"{parameter}: expected an NKI dtype (nl.float32, nl.bfloat16, ...), got {x!r}") from None
    named = (np_dtype.metadata or {}).get(_METADATA_KEY)
    if named in DTYPES:  # a packed dtype's word (DType.dtype)
        return DTYPES[named]
    if np_dtype in _BY_NUMPY:
        return _BY_NUMPY[np_dtype]
    raise ValueError(f"{parameter}: numpy dtype {np_dtype} is not an NKI dtype; valid: {', '.join(DTYPES)}")


def storage_dtype(d: DType) -> np.dtype:
    return np.dtype(d.storage)
