"""A DLPack consumer for the dtypes numpy lacks: bfloat16 and the fp8 / fp6 / fp4 formats of
another framework's array (torch, JAX, ...), read by their bits into an ml_dtypes array.

numpy's own ``np.from_dlpack`` refuses these type codes (numpy has no such dtypes); this module
reads the capsule of ``x.__dlpack__()`` with ctypes instead. The layouts and type codes are those
of dlpack.h (github.com/dmlc/dlpack, include/dlpack/dlpack.h, DLPack 1.x); the capsule protocol is
the Python specification (dmlc/dlpack docs/source/python_spec.rst, part of the Python array API
standard's data interchange page).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from ._arrays import _FORMAT_OF_DTYPE, _ml

# --- dlpack.h structs -------------------------------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):  # legacy, capsule name "dltensor"
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):  # DLPack >= 1.0, capsule name "dltensor_versioned"
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_MAJOR_VERSION = 1  # the DLPack ABI these structs describe
_FLAG_SUBBYTE_PADDED = 1 << 2  # DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
_HOST_DEVICES = {1: "kDLCPU", 3: "kDLCUDAHost", 11: "kDLROCMHost"}  # memory the CPU reads directly
_MAX_NDIM = 64  # numpy's limit (NPY_MAXDIMS)

# DLDataTypeCode -> ml_dtypes name, a line per width. The bits the header fixes for each code are
# its format's width, read from ml_dtypes (finfo.bits). Only those numeq knows as a format (and
# ml_dtypes holds) are read; e3m4 and e4m3b11fnuz are not numeq formats.
_CODES = {
    4: "bfloat16",
    7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz", 10: "float8_e4m3fn", 11: "float8_e4m3fnuz",
    12: "float8_e5m2", 13: "float8_e5m2fnuz", 14: "float8_e8m0fnu",
    15: "float6_e2m3fn", 16: "float6_e3m2fn",
    17: "float4_e2m1fn",
}
_DTYPES: dict[int, tuple[np.dtype, int]] = {}
for _code, _name in _CODES.items():
    _type = None if _ml is None else getattr(_ml, _name, None)
    if _type is not None and np.dtype(_type) in _FORMAT_OF_DTYPE:
        _DTYPES[_code] = (np.dtype(_type), int(_ml.finfo(_type).bits))
_ACCEPTED = ("accepted: numpy's own dtypes (through np.from_dlpack) and, by their bits, "
             + ", ".join(f"{dt.name} (code {code}, {bits} bits, lanes 1)" for code, (dt, bits) in _DTYPES.items()))

# --- the capsule API (ctypes.pythonapi holds the GIL during each call) --------------------------

_api = ctypes.pythonapi
_get_name = _api.PyCapsule_GetName
_get_name.argtypes, _get_name.restype = [ctypes.py_object], ctypes.c_char_p
_get_pointer = _api.PyCapsule_GetPointer
_get_pointer.argtypes, _get_pointer.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p
_set_name = _api.PyCapsule_SetName
_set_name.argtypes, _set_name.restype = [ctypes.py_object, ctypes.c_void_p], ctypes.c_int
# Capsule names must be statically allocated (python_spec.rst): these buffers live as long as the
# module, i.e. as long as the interpreter, so a producer's destructor may read them at any time.
_USED_NAMES = {b"dltensor": ctypes.create_string_buffer(b"used_dltensor"),
               b"dltensor_versioned": ctypes.create_string_buffer(b"used_dltensor_versioned")}
# The deleter is called with the GIL held (PYFUNCTYPE): the spec requires deleters to take the GIL
# themselves (PyGILState_Ensure, which nests), and holding it keeps a careless one safe too.
_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


def _refuse(parameter: str, what: str) -> TypeError:
    return TypeError(f"{parameter}: {what}; {_ACCEPTED}")


def _check_device(device_type: int, parameter: str) -> None:
    if device_type not in _HOST_DEVICES:
        raise TypeError(f"{parameter}: DLPack device type {device_type} is not host memory; move it to host memory "
                        f"first (e.g. .cpu()); read: {', '.join(f'{n} ({c})' for c, n in _HOST_DEVICES.items())}")


def _capsule(x: Any) -> Any:
    try:
        return x.__dlpack__(max_version=(_MAJOR_VERSION, 0))
    except TypeError:  # a producer older than the max_version keyword (array API standard v2023)
        return x.__dlpack__()


def read(x: Any, parameter: str) -> np.ndarray:
    """A copy of ``x``'s elements (``x.__dlpack__()``) as a C-order numpy array of the ml_dtypes
    dtype of its DLPack type code, bit for bit (NaN payloads included); TypeError / ValueError
    naming ``parameter`` for what it cannot read (another dtype, vector lanes, device memory, a
    DLPack major version other than 1, an inconsistent shape).

    One copy is made, not a view: the caller widens the values to float64 right after, so a view
    would save nothing, and a copy owes nothing to the producer once this returns.
    """
    if hasattr(x, "__dlpack_device__"):
        device = x.__dlpack_device__()
        _check_device(int(device[0]), parameter)
    capsule = _capsule(x)
    name = _get_name(capsule) if type(capsule).__name__ == "PyCapsule" else None
    if name not in _USED_NAMES:
        raise ValueError(f"{parameter}: __dlpack__ returned {type(capsule).__name__} named {name!r}, not an unused "
                         "DLPack capsule ('dltensor_versioned' or 'dltensor')")
    address = _get_pointer(capsule, name)
    if not address:
        raise ValueError(f"{parameter}: the DLPack capsule holds a NULL pointer")
    versioned = name == b"dltensor_versioned"
    managed = (_DLManagedTensorVersioned if versioned else _DLManagedTensor).from_address(address)
    # The Python specification (python_spec.rst, "Implementation"): "The consumer must transfer
    # ownership of the DLManagedTensor from the capsule to its own object. It does so by renaming
    # the capsule to "used_dltensor" [...] but the deleter of the DLManagedTensor will be called
    # by the destructor of the consumer library object". The copy below is that object's whole
    # life, so the capsule is renamed and the deleter called as soon as it is made (or refused;
    # dlpack.h: on a major-version mismatch "the consumer must call the deleter (and it is safe to
    # do so)", as the deleter's place in the struct is kept stable across versions).
    try:
        if versioned and managed.version.major != _MAJOR_VERSION:
            raise TypeError(f"{parameter}: DLPack version {managed.version.major}.{managed.version.minor}: numeq "
                            f"reads DLPack {_MAJOR_VERSION}.x only (the struct layout changes with the major "
                            f"version); pass an array of DLPack {_MAJOR_VERSION}.x or a numpy / ml_dtypes array")
        flags = managed.flags if versioned else 0
        return _copy(managed.dl_tensor, flags, parameter)
    finally:
        deleter = managed.deleter
        if _set_name(capsule, ctypes.addressof(_USED_NAMES[name])) == 0 and deleter:
            _DELETER(deleter)(address)


def _copy(t: _DLTensor, flags: int, parameter: str) -> np.ndarray:
    _check_device(t.device.device_type, parameter)
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    what = f"DLPack dtype (code {code}, bits {bits}, lanes {lanes})"
    if lanes != 1:
        raise _refuse(parameter, f"{what} is a vector type ({lanes} lanes); numeq reads scalar elements")
    if code not in _DTYPES or _DTYPES[code][1] != bits:
        raise _refuse(parameter, f"{what} is not one numeq reads")
    dtype, _ = _DTYPES[code]
    if not 0 <= t.ndim <= _MAX_NDIM:
        raise ValueError(f"{parameter}: DLPack ndim {t.ndim} is not in [0, {_MAX_NDIM}]")
    if t.ndim and not t.shape:
        raise ValueError(f"{parameter}: DLPack shape is NULL for {t.ndim} dimensions")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if any(n < 0 for n in shape):
        raise ValueError(f"{parameter}: DLPack shape {list(shape)} has a negative extent")
    if 0 in shape:
        return np.empty(shape, dtype)  # no element to read: data may be NULL
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:  # NULL strides: row-major compact (python_spec.rst)
        strides = tuple(math.prod(shape[i + 1:]) for i in range(t.ndim))
    if not t.data:
        raise ValueError(f"{parameter}: DLPack data pointer is NULL for shape {list(shape)}")
    base = t.data + t.byte_offset
    # element offsets (in elements) of the first and last element the strides reach
    lo = sum(min(0, s * (n - 1)) for n, s in zip(shape, strides))
    hi = sum(max(0, s * (n - 1)) for n, s in zip(shape, strides))
    mask = (1 << bits) - 1
    if bits % 8 == 0 or flags & _FLAG_SUBBYTE_PADDED:
        # one element per storage unit: a strided view of the producer's memory, copied to C order
        itemsize = dtype.itemsize
        raw = (ctypes.c_char * ((hi - lo + 1) * itemsize)).from_address(base + lo * itemsize)
        view = np.ndarray(shape, dtype=f"u{itemsize}", buffer=raw, offset=-lo * itemsize,
                          strides=tuple(s * itemsize for s in strides))
        out = view.copy()
        if bits % 8:
            out &= mask  # padded fp6 / fp4: the format's bits are the low ones of each byte
        return out.view(dtype)
    # packed fp6 / fp4 (dlpack.h: "little bit-endian": element i is (D >> (i * bits)) & mask)
    first, end = (lo * bits) // 8, -(-((hi + 1) * bits) // 8)
    raw = np.frombuffer((ctypes.c_char * (end - first)).from_address(base + first), np.uint8)
    window = np.zeros(raw.size + 1, np.uint16)
    window[:-1] = raw
    offsets = np.zeros(shape, np.int64)
    for axis, (n, s) in enumerate(zip(shape, strides)):
        offsets += (np.arange(n, dtype=np.int64) * s).reshape((n,) + (1,) * (len(shape) - axis - 1))
    bit = offsets * bits - first * 8
    byte = bit >> 3
    word = window[byte] | (window[byte + 1] << 8)  # an element spans at most two bytes
    values = (word >> (bit & 7).astype(np.uint16)) & mask
    return np.asarray(values, dtype=np.uint8).reshape(shape).view(dtype)
