"""Arrays of other frameworks in the dtypes numpy lacks (bfloat16, fp8, fp6, fp4), read through
DLPack by their bits (numeq's _dlpack, used by compare._as_numpy when np.from_dlpack refuses).

torch and JAX are not needed: the producer here is written with ctypes from dlpack.h
(github.com/dmlc/dlpack, include/dlpack/dlpack.h) and the Python specification's capsule
protocol (dmlc/dlpack docs/source/python_spec.rst), with its own struct definitions. The oracle
is ml_dtypes (each DLPack type code's dtype of the same name, viewing the very bit patterns the
producer holds) and numpy's as_strided for strided layouts; the deleter's calls are counted, so a
leak or a double free shows."""

from __future__ import annotations

import ctypes
import os
import sys

import ml_dtypes
import numpy as np
import pytest

import numeq
from numeq import _dlpack
from numeq.testing import assert_equivalent

LONG = os.environ.get("NUMEQ_LONG_TESTS") == "1"
pytestmark = pytest.mark.skipif(sys.byteorder != "little", reason="the bit-pattern buffers are little-endian")


# --- dlpack.h, transcribed -------------------------------------------------------------------
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


PADDED = 1 << 2  # DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
# DLDataTypeCode -> ml_dtypes type of the same name (dlpack.h); bits fixed by the header
CODES = {4: (ml_dtypes.bfloat16, 16), 8: (ml_dtypes.float8_e4m3, 8), 10: (ml_dtypes.float8_e4m3fn, 8),
         11: (ml_dtypes.float8_e4m3fnuz, 8), 12: (ml_dtypes.float8_e5m2, 8), 13: (ml_dtypes.float8_e5m2fnuz, 8),
         14: (ml_dtypes.float8_e8m0fnu, 8), 15: (ml_dtypes.float6_e2m3fn, 6), 16: (ml_dtypes.float6_e3m2fn, 6),
         17: (ml_dtypes.float4_e2m1fn, 4)}
NOT_NUMEQ_FORMATS = {7: "float8_e3m4", 9: "float8_e4m3b11fnuz"}  # DLPack codes numeq has no format for

# --- the capsule side of a producer ------------------------------------------------------------
# The capsules have no destructor and the producer keeps each one: a destructor written in Python
# would run while the consumer may have an exception in flight, which Python code cannot do
# safely. What a destructor would decide is checked instead: a consumed capsule is renamed
# "used_..." (so a producer's destructor leaves it alone) and its deleter has run exactly once.
_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api))
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
NAMES = {False: ctypes.create_string_buffer(b"dltensor"), True: ctypes.create_string_buffer(b"dltensor_versioned")}
DELETED: list[int] = []  # addresses the deleter was called with


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _deleter(address):
    DELETED.append(address)


class NoDevice:
    """A host array of raw bytes offered through __dlpack__ only (no __array__, and no
    __dlpack_device__: the device is known from the capsule alone)."""

    def __init__(self, data, shape, code, bits, *, strides=None, lanes=1, byte_offset=0, data_offset=0,
                 device=(1, 0), version=(1, 0), flags=0, legacy=False, deleter=True, null_data=False, ndim=None):
        data = bytes(data)
        self.buffer = ctypes.create_string_buffer(data, max(len(data), 1))
        self.ndim = len(shape) if ndim is None else ndim
        n = max(self.ndim, len(shape), 1)
        self.shape = (ctypes.c_int64 * n)(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * n)(*strides)
        self.dtype = (code, bits, lanes)
        self.byte_offset, self.data_offset, self.device = byte_offset, data_offset, device
        self.version, self.flags, self.legacy, self.deleter, self.null_data = version, flags, legacy, deleter, null_data
        self.structs, self.capsules = [], []  # all handed out stay alive with the producer

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        versioned = not self.legacy and max_version is not None and max_version[0] >= 1
        t = DLTensor(data=None if self.null_data else ctypes.addressof(self.buffer) + self.data_offset,
                     device=DLDevice(*self.device), ndim=self.ndim, dtype=DLDataType(*self.dtype),
                     shape=ctypes.addressof(self.shape),
                     strides=None if self.strides is None else ctypes.addressof(self.strides),
                     byte_offset=self.byte_offset)
        deleter = ctypes.cast(_deleter, ctypes.c_void_p).value if self.deleter else None
        if versioned:
            managed = DLManagedTensorVersioned(major=self.version[0], minor=self.version[1], deleter=deleter,
                                               flags=self.flags, dl_tensor=t)
        else:
            managed = DLManagedTensor(dl_tensor=t, deleter=deleter)
        self.structs.append(managed)
        self.capsules.append(_capsule_new(ctypes.addressof(managed), ctypes.addressof(NAMES[versioned]), None))
        return self.capsules[-1]


class Producer(NoDevice):
    """A host array of raw bytes offered through __dlpack__ and __dlpack_device__ (no __array__)."""

    def __dlpack_device__(self):
        return self.device


class LegacyProducer(Producer):
    """A producer from before the max_version keyword: __dlpack__(stream=None) only."""

    def __dlpack__(self, *, stream=None):
        return super().__dlpack__(stream=stream)


def _read(producer):
    """_dlpack.read, checking the protocol on the capsule it took: renamed "used_..." and the
    deleter (when not NULL) called exactly once, on that capsule's struct."""
    DELETED.clear()
    try:
        return _dlpack.read(producer, "actual")
    finally:
        if producer.capsules:
            assert _capsule_name(producer.capsules[-1]).startswith(b"used_dltensor")
            assert DELETED == ([ctypes.addressof(producer.structs[-1])] if producer.deleter else [])


def _bits(values):
    return np.asarray(values).view(f"u{np.dtype(values.dtype).itemsize}")


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
@pytest.mark.parametrize("code", sorted(CODES))
def test_every_bit_pattern(code, legacy):
    dtype, bits = CODES[code]
    patterns = np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)
    if bits >= 8:
        producer = Producer(patterns.tobytes(), [patterns.size], code, bits, legacy=legacy)
    elif legacy:  # sub-byte types in a legacy capsule are packed: element i at bits [i*bits, (i+1)*bits)
        packed = sum(int(v) << (i * bits) for i, v in enumerate(patterns))
        producer = Producer(packed.to_bytes(-(-patterns.size * bits // 8), "little"), [patterns.size], code, bits,
                            legacy=True)
    else:  # padded: one byte each, the high bits set to show they are not read
        producer = Producer((patterns | (0xFF << bits & 0xFF)).astype(np.uint8).tobytes(), [patterns.size], code,
                            bits, flags=PADDED)
    got = _read(producer)
    expected = patterns.view(dtype) if bits >= 8 else patterns.astype(np.uint8).view(dtype)
    assert got.dtype == np.dtype(dtype) and got.shape == expected.shape
    np.testing.assert_array_equal(_bits(got), _bits(expected))  # NaN payloads included
    producer.buffer[0] = b"\x7f"  # a copy: what the producer does next does not reach it
    np.testing.assert_array_equal(_bits(got), _bits(expected))


@pytest.mark.parametrize("code", [15, 16, 17])
def test_packed_sub_byte_with_strides(code):
    dtype, bits = CODES[code]
    rng = np.random.default_rng(code)
    flat = rng.integers(0, 1 << bits, 60, dtype=np.uint8)
    packed = sum(int(v) << (i * bits) for i, v in enumerate(flat)).to_bytes(60 * bits // 8 + 1, "little")
    got = _read(Producer(packed, [5, 4], code, bits, strides=[1, 10], byte_offset=3))  # from element 3*8/bits
    first = 3 * 8 // bits
    expected = np.lib.stride_tricks.as_strided(flat[first:], (5, 4), (1, 10))
    np.testing.assert_array_equal(got.view(np.uint8), expected)
    assert got.dtype == np.dtype(dtype)


def _bf16_grid(rows=6, cols=7, seed=1):
    return np.random.default_rng(seed).integers(0, 1 << 16, (rows, cols), dtype=np.uint16)


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
def test_layouts(legacy):
    base = _bf16_grid()
    raw = base.tobytes()

    def check(expected, **kwargs):
        kwargs.setdefault("shape", list(expected.shape))
        shape = kwargs.pop("shape")
        got = _read(Producer(raw, shape, 4, 16, legacy=legacy, **kwargs))
        assert got.dtype == ml_dtypes.bfloat16 and got.flags.c_contiguous
        np.testing.assert_array_equal(got.view(np.uint16), expected)

    check(base)  # NULL strides: row-major compact
    check(base, strides=[7, 1])
    check(base.T, strides=[1, 7])  # transposed
    check(base[::2, 1::3], strides=[14, 3], byte_offset=2)  # non-contiguous, with a byte offset
    check(base[::-1, ::-1], strides=[-7, -1], data_offset=base.nbytes - 2)  # negative strides
    check(np.broadcast_to(base[2], (3, 7)), strides=[0, 1], byte_offset=2 * 14)  # a broadcast row
    check(base.reshape(-1)[5:17].reshape(3, 4), byte_offset=10)
    check(np.asarray(base[3, 4]), shape=[], byte_offset=2 * (3 * 7 + 4))  # 0-d
    for shape in ([0], [3, 0], [0, 5, 2]):  # zero-size: the data pointer may be NULL
        got = _read(Producer(b"", shape, 4, 16, legacy=legacy, null_data=True))
        assert got.shape == tuple(shape) and got.dtype == ml_dtypes.bfloat16
    got = _read(LegacyProducer(raw, [6, 7], 4, 16, deleter=False))  # no max_version keyword; NULL deleter
    np.testing.assert_array_equal(got.view(np.uint16), base)


@pytest.mark.parametrize("wrong", ["gpu_output", "trainium_output"])
def test_compare_reads_a_bf16_output_given_only_through_dlpack(wrong):
    rng = np.random.default_rng(3)
    a = numeq.round(rng.standard_normal((8, 128)), "bf16")
    b = numeq.round(rng.standard_normal((128, 6)), "bf16")
    op = numeq.ops.matmul(a, b, in_fmt="bf16", out="bf16")
    gpu = numeq.matmul(a, b, platform="nvidia.h100", in_fmt="bf16", out="bf16").astype(ml_dtypes.bfloat16)
    trn = numeq.matmul(a, b, platform="trainium.trn2", in_fmt="bf16", out="bf16").astype(ml_dtypes.bfloat16)
    buggy = numeq.round(np.asarray(a @ b * 1.01), "bf16").astype(ml_dtypes.bfloat16)

    def producer(x):
        return Producer(x.tobytes(), list(x.shape), 4, 16)

    for output in (gpu, trn, buggy):
        by_dlpack = numeq.compare(producer(output), op, "nvidia.h100")
        by_array = numeq.compare(output, op, "nvidia.h100")
        assert (by_dlpack.tier, by_dlpack.bit_exact, by_dlpack.failures) == (
            by_array.tier, by_array.bit_exact, by_array.failures)
    assert numeq.compare(producer(gpu), op, "nvidia.h100").tier == "bit_exact"
    assert numeq.compare(producer(buggy), op, "nvidia.h100").tier == "violation"
    assert assert_equivalent(producer(gpu), op, "nvidia.h100").tier == "bit_exact"
    port = numeq.compare_port(producer(gpu), producer(trn), op, "nvidia.h100", "trainium.trn2")
    assert port.passed == numeq.compare_port(gpu, trn, op, "nvidia.h100", "trainium.trn2").passed
    # a refusal names the parameter it concerns
    outputs = {"gpu_output": producer(gpu), "trainium_output": producer(trn)}
    outputs[wrong] = Producer(gpu.tobytes(), list(gpu.shape), 4, 16, lanes=2)
    with pytest.raises(TypeError, match=rf"^{wrong}: DLPack dtype \(code 4, bits 16, lanes 2\)"):
        numeq.compare_port(outputs["gpu_output"], outputs["trainium_output"], op, "nvidia.h100", "trainium.trn2")


CHOICES = r"accepted: numpy's own dtypes .*bfloat16 \(code 4, 16 bits, lanes 1\).*float8_e4m3fn \(code 10"


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
def test_refusals_name_the_parameter_and_the_choices(legacy):
    raw = _bf16_grid().tobytes()
    op = numeq.ops.matmul(np.ones((6, 1)), np.ones((1, 7)), out="bf16")

    def refused(producer, pattern):
        with pytest.raises(TypeError, match=pattern):
            _read(producer)
        with pytest.raises(TypeError, match=pattern):  # the same through numeq.compare
            numeq.compare(producer, op, "nvidia.h100")

    host = r"move it to host memory.*kDLCPU \(1\), kDLCUDAHost \(3\), kDLROCMHost \(11\)"
    refused(Producer(raw, [6, 7], 4, 16, device=(2, 0), legacy=legacy), rf"^actual: DLPack device type 2 .*{host}")
    refused(NoDevice(raw, [6, 7], 4, 16, device=(10, 0), legacy=legacy), rf"^actual: DLPack device type 10 .*{host}")
    refused(Producer(raw, [6, 7], 4, 16, lanes=4, legacy=legacy),
            rf"^actual: DLPack dtype \(code 4, bits 16, lanes 4\) is a vector type.*{CHOICES}")
    refused(Producer(raw, [6, 7], 99, 16, legacy=legacy),
            rf"^actual: DLPack dtype \(code 99, bits 16, lanes 1\) is not one numeq reads.*{CHOICES}")
    refused(Producer(raw, [6, 7], 4, 8, legacy=legacy),  # bfloat16's code with another width
            rf"^actual: DLPack dtype \(code 4, bits 8, lanes 1\).*{CHOICES}")
    for code, name in NOT_NUMEQ_FORMATS.items():
        assert name not in _dlpack._ACCEPTED
        refused(Producer(raw, [6, 7], code, 8, legacy=legacy),
                rf"^actual: DLPack dtype \(code {code}, bits 8.*{CHOICES}")
    if not legacy:
        refused(Producer(raw, [6, 7], 4, 16, version=(2, 0)),
                r"^actual: DLPack version 2\.0: numeq reads DLPack 1\.x only")
        refused(Producer(raw, [6, 7], 4, 16, version=(0, 8)), r"^actual: DLPack version 0\.8: numeq reads DLPack 1\.x")
    # numeq reads DLPack 1.x of any minor version
    assert _read(Producer(raw, [6, 7], 4, 16, version=(1, 3), legacy=legacy)).shape == (6, 7)


def test_fuzz_the_parser():
    """Random structs (3000 cases; ``NUMEQ_LONG_TESTS=1``: 200000, fresh seed): each reads
    exactly what the oracle says or raises TypeError / ValueError, and the deleter runs once
    every time. The oracle reads each element's bits out of the
    producer's buffer as one little-endian integer."""
    rng = np.random.default_rng(None if LONG else 20261204)
    counts = {"read": 0, "refused": 0}
    cases = 200_000 if LONG else 3000
    for _ in range(cases):
        code = int(rng.choice([*CODES, 7, 9, 2, 5, int(rng.integers(0, 256))]))
        dtype, bits = CODES.get(code, (None, 8))
        if rng.random() < 0.1:
            bits = int(rng.integers(0, 256))
        lanes = 1 if rng.random() < 0.9 else int(rng.integers(0, 1 << 16))
        ndim = int(rng.integers(0, 5)) if rng.random() < 0.95 else int(rng.choice([-1, 65, 100]))
        shape = [int(rng.integers(0, 5)) if rng.random() < 0.97 else -1 for _ in range(max(ndim, 0))]
        strides = None if rng.random() < 0.3 else [int(rng.integers(-4, 5)) for _ in shape]
        device = (int(rng.choice([1, 3, 11, 1, 1, 2, 10, int(rng.integers(-5, 40))])), 0)
        legacy, major = bool(rng.random() < 0.3), 1 if rng.random() < 0.95 else int(rng.choice([0, 2, 255]))
        flags = PADDED if rng.random() < 0.5 else 0
        byte_offset = int(rng.integers(0, 8))
        # memory enough for any 16-bit element at the offsets the strides reach (beyond 64
        # dimensions, where numpy's limit refuses the struct before its memory is read: none)
        dims = [max(n, 0) for n in shape] if ndim <= 64 else []
        steps = strides if strides is not None else [int(np.prod(dims[i + 1:])) for i in range(len(dims))]
        lo = sum(min(0, s * (n - 1)) for n, s in zip(dims, steps) if n)
        hi = sum(max(0, s * (n - 1)) for n, s in zip(dims, steps) if n)
        data_offset = -lo * 2 + 1
        data = rng.integers(0, 256, data_offset + byte_offset + 2 * (hi + 2) + 2, dtype=np.uint8).tobytes()
        producer = Producer(data, shape, code, bits, strides=strides, lanes=lanes, byte_offset=byte_offset,
                            data_offset=data_offset, device=device, version=(major, 0), flags=flags, legacy=legacy,
                            ndim=ndim)
        valid = (dtype is not None and bits == CODES[code][1] and lanes == 1 and device[0] in (1, 3, 11)
                 and (legacy or major == 1) and 0 <= ndim <= 64 and min(shape, default=0) >= 0)
        try:
            got = _read(producer)
        except (TypeError, ValueError) as exc:
            assert not valid, exc
            assert str(exc).startswith("actual: ")
            counts["refused"] += 1
            continue
        assert valid
        counts["read"] += 1
        assert got.dtype == np.dtype(dtype) and got.shape == tuple(shape)
        width = 8 if bits < 8 and flags & PADDED and not legacy else bits  # storage bits of one element
        whole = int.from_bytes(data, "little")
        first = 8 * (data_offset + byte_offset)
        expected = np.zeros(got.shape, np.uint16)
        for index in np.ndindex(*got.shape):
            k = sum(i * s for i, s in zip(index, steps))
            expected[index] = (whole >> (first + k * width)) & ((1 << bits) - 1)
        np.testing.assert_array_equal(got.view(f"u{got.dtype.itemsize}").astype(np.uint16), expected)
    assert min(counts.values()) > cases // 5, counts  # both outcomes well exercised
