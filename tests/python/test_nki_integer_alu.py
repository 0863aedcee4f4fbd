"""numeq.nki's ALU operators on integers and the operators of AWS's operator table, and
tensor_tensor's shape rule.

Oracles are written here from the documentation, independently of numeq: Python integers (or
numpy int64) then a wrap modulo 2^32 for native integer arithmetic, the stored bit patterns for
bitvec operators, float64 numpy rounded once to fp32 for fp32 arithmetic.

Sources: nki.isa.tensor_tensor ("int32/uint32 types: When all input/output tiles are int32 or
uint32, the operation defaults to GpSimd Engine, which uses native integer arithmetic"; "The two
tiles must have the same partition axis size and the same number of elements per partition"),
nki.isa.tensor_scalar (bitvec operators on the Vector engine, integer types, bit patterns; a unary
operator takes operand0 None or 0), nki.api.shared.rst's table of supported math operators
(right_shift is the logical shift), nki.language.abs_max / abs_min (the signed value of the larger
/ smaller magnitude, y on a tie).
"""

from __future__ import annotations

import numpy as np
import pytest

from nki_support import errors, f32, hbm, sbuf
from numeq import nki

nl, nisa = nki.language, nki.isa
rng = np.random.default_rng(41)

I32 = (-(2 ** 31), 2 ** 31 - 1)


def wrap(values, dtype) -> np.ndarray:
    """Python integers modulo 2^bits into ``dtype`` (two's complement for a signed dtype)."""
    info = np.iinfo(dtype)
    bits = 8 * np.dtype(dtype).itemsize
    out = []
    for v in np.asarray(values, dtype=object).reshape(-1):
        v = int(v) % (1 << bits)
        out.append(v - (1 << bits) if info.min < 0 and v >= 1 << (bits - 1) else v)
    return np.array(out, dtype=dtype).reshape(np.shape(values))


def py(a) -> np.ndarray:
    """An integer array as Python integers (exact arithmetic for the oracles)."""
    return np.asarray(a).astype(object)


def binary(op, out_dtype=None, engine=None):
    def kernel(a, b):
        r = nl.ndarray(a.shape, out_dtype or a.dtype, buffer=nl.sbuf)
        kw = {} if engine is None else {"engine": engine}
        nisa.tensor_tensor(dst=r, data1=sbuf(a), data2=sbuf(b), op=op, **kw)
        return hbm(r)
    return kernel


def full_range(shape, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=shape, dtype=np.int64, endpoint=True)
    a.reshape(-1)[:4] = [info.min, info.max, 0, -1 if info.min < 0 else 1]
    return a.astype(dtype)


# --- tensor_tensor: native integer arithmetic on GpSimd --------------------------------------------

def test_int32_add_is_exact_and_runs_on_gpsimd():
    a = np.full((128, 4), 2 ** 24 + 1, np.int32)
    b = np.full((128, 4), 2, np.int32)
    r = nki.run(binary(nl.add), a, b)
    assert r.outputs.dtype == np.int32 and (r.outputs == 2 ** 24 + 3).all()  # fp32 would give 16777218
    assert [i.engine for i in r.trace if i.name == "tensor_tensor"] == ["gpsimd"]
    assert r.errors == []


@pytest.mark.parametrize("name, f", [
    ("add", lambda x, y: x + y), ("subtract", lambda x, y: x - y), ("multiply", lambda x, y: x * y),
    ("maximum", lambda x, y: np.maximum(x, y)), ("minimum", lambda x, y: np.minimum(x, y)),
    ("equal", lambda x, y: x == y), ("not_equal", lambda x, y: x != y), ("greater", lambda x, y: x > y),
    ("greater_equal", lambda x, y: x >= y), ("less", lambda x, y: x < y), ("less_equal", lambda x, y: x <= y),
    ("logical_and", lambda x, y: (x != 0) & (y != 0)), ("logical_or", lambda x, y: (x != 0) | (y != 0)),
    ("logical_xor", lambda x, y: (x != 0) ^ (y != 0))])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
def test_integer_arithmetic_wraps_modulo_2_32(name, f, dtype):
    a, b = full_range((128, 16), dtype), full_range((128, 16), dtype)
    b[0, :3] = a[0, :3]  # some equal pairs for the comparisons
    r = nki.run(binary(getattr(nl, name)), a, b)
    expected = wrap(np.vectorize(lambda x, y: int(f(x, y)), otypes=[object])(py(a), py(b)), dtype)
    np.testing.assert_array_equal(r.outputs, expected)
    assert r.errors == []


def test_mixed_int32_and_uint32_operands_compare_by_value():
    a = np.array([[-1, 5, -(2 ** 31), 7]], np.int32)
    b = np.array([[1, 2 ** 32 - 1, 2 ** 31, 7]], np.uint32)
    for op, f in ((nl.maximum, max), (nl.add, lambda x, y: x + y), (nl.less, lambda x, y: int(x < y))):
        out = nki.run(binary(op, out_dtype=nl.uint32), a, b).outputs
        np.testing.assert_array_equal(out, wrap([[f(int(x), int(y)) for x, y in zip(a[0], b[0])]], np.uint32))


def test_integer_overflow_saturates_under_the_other_assumption():
    a = np.array([[2 ** 31 - 1, -(2 ** 31), 3, 65536]], np.int32)
    b = np.array([[1, -1, 4, 65536]], np.int32)
    for op, f in ((nl.add, lambda x, y: x + y), (nl.multiply, lambda x, y: x * y)):
        exact = [f(int(x), int(y)) for x, y in zip(a[0], b[0])]
        out = nki.run(binary(op), a, b, assume={"integer_overflow": "saturate"}).outputs
        np.testing.assert_array_equal(out[0], np.clip(exact, *I32).astype(np.int32))
        out = nki.run(binary(op), a, b).outputs  # the default: wrap
        np.testing.assert_array_equal(out, wrap([exact], np.int32))


def test_vector_engine_and_psum_operands_compute_int32_in_fp32():
    a = np.full((128, 4), 2 ** 24 + 1, np.int32)
    b = np.full((128, 4), 2, np.int32)
    fp32 = np.int32(f32(np.float64(f32(2 ** 24 + 1)) + 2))  # 16777218: the operand rounds to 2^24 first
    r = nki.run(binary(nl.add, engine=nisa.engine.vector), a, b)
    assert (r.outputs == fp32).all() and [i.engine for i in r.trace if i.name == "tensor_tensor"] == ["vector"]

    def via_psum(x, y):
        p = nl.ndarray(x.shape, x.dtype, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=sbuf(x))
        r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=r, data1=p, data2=sbuf(y), op=nl.add)  # falls back to the Vector engine
        return hbm(r)
    r = nki.run(via_psum, a, b)
    assert (r.outputs == fp32).all() and [i.engine for i in r.trace if i.name == "tensor_tensor"] == ["vector"]
    assert r.errors == []


def test_float_tiles_keep_fp32_arithmetic_on_the_vector_engine():
    a = rng.standard_normal((128, 8)).astype(np.float32)
    b = rng.standard_normal((128, 8)).astype(np.float32)
    r = nki.run(binary(nl.multiply), a, b)
    np.testing.assert_array_equal(r.outputs, f32(a.astype(np.float64) * b))
    assert [i.engine for i in r.trace if i.name == "tensor_tensor"] == ["vector"]


# --- bitvec operators -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int16, np.uint8])
def test_bitwise_operators_act_on_bit_patterns(dtype):
    a, b = full_range((128, 8), dtype), full_range((128, 8), dtype)
    unsigned = np.dtype(f"u{np.dtype(dtype).itemsize}")
    pa, pb = a.view(unsigned).astype(object), b.view(unsigned).astype(object)
    for op, f in ((nl.bitwise_and, lambda x, y: x & y), (nl.bitwise_or, lambda x, y: x | y),
                  (nl.bitwise_xor, lambda x, y: x ^ y)):
        r = nki.run(binary(op), a, b)
        np.testing.assert_array_equal(r.outputs, wrap(f(pa, pb), dtype))
        assert r.errors == []


def test_shifts_are_logical_on_the_bit_pattern():
    a = np.array([[-1, -8, 1, 2 ** 30, 0x12345678, -(2 ** 31)]], np.int32)
    n = np.array([[1, 2, 31, 1, 4, 31]], np.int32)
    pattern = [int(x) % 2 ** 32 for x in a[0]]
    right = nki.run(binary(nl.right_shift), a, n).outputs
    np.testing.assert_array_equal(right[0], wrap([p >> int(k) for p, k in zip(pattern, n[0])], np.int32))
    assert right[0, 0] == 2 ** 31 - 1  # the logical shift: -1 >> 1 is 0x7fffffff
    left = nki.run(binary(nl.left_shift), a, n).outputs
    np.testing.assert_array_equal(left[0], wrap([p << int(k) for p, k in zip(pattern, n[0])], np.int32))


def test_a_shift_count_outside_the_width_is_reported():
    a = np.array([[1, 2]], np.int32)
    r = nki.run(binary(nl.left_shift), a, np.array([[3, 32]], np.int32))
    assert [f.rule for f in r.errors] == ["instruction_constraint"] and "0..31" in r.errors[0].message


def test_tensor_scalar_bitvec_takes_integer_operands_exactly():
    a = full_range((128, 8), np.uint32)

    def kernel(x):
        r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=sbuf(x), op0=nl.bitwise_and, operand0=0xFFFF0001,
                           op1=nl.right_shift, operand1=3)
        return hbm(r)
    r = nki.run(kernel, a)
    np.testing.assert_array_equal(r.outputs, wrap((py(a) & 0xFFFF0001) >> 3, np.uint32))
    assert r.errors == []


def test_tensor_scalar_invert_and_reverse():
    a = full_range((128, 8), np.int32)

    def kernel(x):
        r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=sbuf(x), op0=nl.Operator("invert", 1), operand0=None)
        s = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=s, data=sbuf(x), op0=nl.left_shift, operand0=1, reverse0=True)  # 1 << (x & 31)
        return hbm(r), hbm(s)
    inv, shifted = nki.run(kernel, np.bitwise_and(a, 31)).outputs
    np.testing.assert_array_equal(inv, wrap(~py(np.bitwise_and(a, 31)), np.int32))
    np.testing.assert_array_equal(shifted, wrap(1 << py(np.bitwise_and(a, 31)), np.int32))


def test_bitvec_operators_on_float_tiles_are_reported_and_keep_the_old_values():
    a = np.array([[3.0, 5.0, 12.0, 7.0]], np.float32)
    b = np.array([[1.0, 4.0, 10.0, 2.0]], np.float32)
    r = nki.run(binary(nl.bitwise_and), a, b)
    np.testing.assert_array_equal(r.outputs, [[1.0, 4.0, 8.0, 2.0]])
    assert [f.rule for f in r.errors] == ["instruction_constraint"] and "integer" in r.errors[0].message


def test_tensor_scalar_mixing_bitvec_and_arithmetic_is_reported():
    def kernel(x):
        r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=sbuf(x), op0=nl.bitwise_and, operand0=3, op1=nl.add, operand1=1)
        return hbm(r)
    r = nki.run(kernel, np.ones((128, 4), np.int32))
    assert any("mix a bitvec and an arithmetic" in f.message for f in errors(r, "instruction_constraint"))


def test_tensor_scalar_arithmetic_on_int32_is_fp32_as_documented():
    a = np.full((128, 4), 2 ** 24 + 1, np.int32)

    def kernel(x):
        r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=sbuf(x), op0=nl.add, operand0=1.0)
        return hbm(r)
    assert (nki.run(kernel, a).outputs == np.int32(f32(np.float64(f32(2 ** 24 + 1)) + 1))).all()


# --- operators of the table: abs_max / abs_min, unary operators, mod and fmod ------------------------

def test_abs_max_and_abs_min_keep_the_sign_and_give_y_on_a_tie():
    a = np.array([[-5.0, 3.0, 1.0, -2.0, 0.0]], np.float32)
    b = np.array([[3.0, -5.0, -1.0, 2.0, -0.0]], np.float32)
    hi = nki.run(binary(nl.abs_max), a, b)
    lo = nki.run(binary(nl.Operator("abs_min", 2)), a, b)
    np.testing.assert_array_equal(hi.outputs, np.where(np.abs(a) > np.abs(b), a, b))
    np.testing.assert_array_equal(lo.outputs, np.where(np.abs(a) < np.abs(b), a, b))
    assert hi.outputs[0, 0] == -5.0 and hi.outputs[0, 2] == -1.0 and lo.outputs[0, 1] == 3.0
    # "Available only on NeuronCore-v4 (trn3) and newer" (current docs; SDK 2.26's operator table
    # lists it for every generation): a warning on every numeq target.
    assert not hi.errors and "operator_generation" in [f.rule for f in hi.warnings]
    ints = nki.run(binary(nl.abs_max), np.array([[-7, 6, -(2 ** 31)]], np.int32), np.array([[6, -7, 5]], np.int32))
    np.testing.assert_array_equal(ints.outputs, [[-7, -7, -(2 ** 31)]])


@pytest.mark.parametrize("name, f", [
    ("abs", np.abs), ("square", lambda x: f32(x.astype(np.float64) ** 2)), ("relu", lambda x: np.maximum(x, 0)),
    ("reciprocal", lambda x: f32(1.0 / x.astype(np.float64)))])
def test_unary_operators_in_tensor_scalar(name, f):
    x = rng.uniform(-4, 4, (128, 8)).astype(np.float32)

    def kernel(a):
        r = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=sbuf(a), op0=nl.Operator(name, 1), operand0=None, op1=nl.add, operand1=1.0)
        return hbm(r)
    r = nki.run(kernel, x)
    np.testing.assert_array_equal(r.outputs, f32(f(x).astype(np.float64) + 1.0))
    assert r.errors == []


def test_a_unary_operator_given_an_operand_is_reported():
    def kernel(a):
        r = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=sbuf(a), op0=nl.abs, operand0=2.0)
        return hbm(r)
    r = nki.run(kernel, -np.ones((128, 4), np.float32))
    assert (r.outputs == 1.0).all()
    assert [f.rule for f in r.errors] == ["instruction_constraint"] and "None or 0" in r.errors[0].message


def test_mod_has_the_divisors_sign_and_fmod_the_dividends():
    a = np.array([[7.0, -7.0, 7.0, -7.0, 5.5]], np.float32)
    b = np.array([[3.0, 3.0, -3.0, -3.0, 2.0]], np.float32)
    np.testing.assert_array_equal(nki.run(binary(nl.mod), a, b).outputs, [[1.0, 2.0, -2.0, -1.0, 1.5]])
    np.testing.assert_array_equal(nki.run(binary(nl.Operator("fmod", 2)), a, b).outputs,
                                  [[1.0, -1.0, 1.0, -1.0, 1.5]])


# --- tensor_tensor's shape rule ----------------------------------------------------------------------

def _pair(shape1, shape2, dst_shape):
    def kernel(a, b):
        r = nl.ndarray(dst_shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=r, data1=sbuf(a), data2=sbuf(b), op=nl.add)
        return hbm(r)
    return nki.run(kernel, np.ones(shape1, np.float32), np.ones(shape2, np.float32))


@pytest.mark.parametrize("shape1, shape2, dst_shape, named", [
    ((128, 4), (64, 8), (128, 4), ["[128, 4]", "[64, 8]"]),       # same size, other partitions
    ((128, 512), (1, 512), (128, 512), ["[128, 512]", "[1, 512]"]),  # no partition broadcast
    ((128, 4), (128, 1), (128, 4), ["[128, 4]", "[128, 1]"]),     # no free-axis broadcast (tensor_scalar's)
    ((128, 4), (128, 4), (128, 8), ["[128, 8]", "[128, 4]"])])    # dst of another size
def test_tensor_tensor_operands_of_other_layouts_fail_naming_the_shapes(shape1, shape2, dst_shape, named):
    r = _pair(shape1, shape2, dst_shape)
    assert not r.completed
    [f] = errors(r, "shape_mismatch")
    assert all(s in f.message for s in named), f.message


def test_tensor_tensor_takes_the_same_elements_per_partition_in_another_free_shape():
    r = _pair((128, 4, 8), (128, 32), (128, 2, 16))
    assert r.completed and r.errors == [] and (r.outputs == 2.0).all()
