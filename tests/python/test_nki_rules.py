"""The limit rules test_nki_findings.py does not plant: each a small kernel breaking exactly one
rule, found with that rule at the kernel's line, and the same kernel without the break clean.

The rules' numbers come from the review's target table (documented NKI architecture guides and
nki.isa docstrings); the expected findings here are written from those documents, not read back
from numeq's rule code.
"""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

from numeq import nki

nl, nisa = nki.language, nki.isa


def _line(fn, text: str) -> str:
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return f"test_nki_rules.py:{start + i}"
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def _rules_at(run) -> set[tuple[str, str, str]]:
    return {(f.rule, f.severity, f.where) for f in run.findings}


@nki.jit
def _partial(a, start, count):
    # Copy `count` partitions starting at `start` (NKI architecture guides: an access of more than
    # 64 partitions starts at 0; 33 to 64 at 0 or 64; up to 32 at 0, 32, 64 or 96).
    t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    u = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=a)
    nisa.tensor_copy(dst=u[start:start + count, :], src=t[start:start + count, :])  # the access
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=u)
    return out


@pytest.mark.parametrize("start,count,allowed", [(0, 128, True), (0, 65, True), (1, 65, False), (64, 64, True),
                                                 (32, 64, False), (96, 32, True), (16, 32, False), (100, 8, False)])
def test_partition_start(start, count, allowed):
    run = nki.run(_partial, np.ones((128, 512), np.float32), start, count)
    line = _line(_partial.func, "the access")
    starts = {f.where for f in run.findings if f.rule == "partition_start"}
    assert starts == (set() if allowed else {line})
    # Fewer than 128 partitions is slow but legal: a warning at the same line.
    partial = {(f.rule, f.severity) for f in run.findings if f.where == line and f.rule == "partial_partitions"}
    assert partial == (set() if count == 128 else {("partial_partitions", "warning")})


def test_accumulating_onto_a_non_matmul_result():
    @nki.jit
    def k(a_t, b):
        at = nl.ndarray((128, 128), a_t.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((128, 512), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a_t)
        nisa.dma_copy(dst=bt, src=b)
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=acc, src=bt)  # PSUM now holds a copy, not a matmul result
        nisa.nc_matmul(acc, at, bt, accumulate=True)  # the break
        return a_t

    a_t = np.ones((128, 128), ml_dtypes.bfloat16)
    b = np.ones((128, 512), ml_dtypes.bfloat16)
    run = nki.run(k, a_t, b)
    assert ("accumulate_non_matmul", "error", _line(k.func, "the break")) in _rules_at(run)


@pytest.mark.parametrize("stationary,moving,ok", [("bfloat16", "bfloat16", True), ("float32", "float32", True),
                                                  ("float32", "tfloat32", True), ("bfloat16", "float16", True),
                                                  ("float8_e4m3", "float8_e5m2", True),
                                                  ("float32", "bfloat16", False), ("tfloat32", "float16", False),
                                                  ("int8", "int8", False)])
def test_matmul_input_dtypes(stationary, moving, ok):
    # nki.isa.nc_matmul: fp8 (e4m3, e5m2), bf16, fp16, tf32, fp32; fp32/tf32 only with each other.
    @nki.jit
    def k(a, b):
        at = nl.ndarray((128, 64), stationary, buffer=nl.sbuf)
        bt = nl.ndarray((128, 64), moving, buffer=nl.sbuf)
        nisa.memset(dst=at, value=1)
        nisa.memset(dst=bt, value=1)
        acc = nl.ndarray((64, 64), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, at, bt)  # the matmul
        return a

    run = nki.run(k, np.zeros(1, np.float32), np.zeros(1, np.float32))
    found = {f.rule for f in run.errors if f.where == _line(k.func, "the matmul")}
    assert ("matmul_dtype" in found) == (not ok), run.findings


def test_stationary_over_128_columns_and_result_over_one_bank():
    @nki.jit
    def k(a):
        at = nl.ndarray((128, 256), nl.bfloat16, buffer=nl.sbuf)
        bt = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(dst=at, value=1)
        nisa.memset(dst=bt, value=1)
        acc = nl.ndarray((128, 4, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc[:, 0:2, :], at, bt)  # M = 256
        return a

    run = nki.run(k, np.zeros(1, np.float32))
    rules = {f.rule for f in run.errors}
    assert "matmul_stationary_free" in rules


def test_gpsimd_evacuating_psum_is_an_error_and_a_warning():
    @nki.jit
    def k(a_t, b):
        at = nl.ndarray((128, 128), a_t.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((128, 512), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a_t)
        nisa.dma_copy(dst=bt, src=b)
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, at, bt)
        o = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=acc, engine=nisa.engine.gpsimd)  # the evacuation
        return a_t

    run = nki.run(k, np.ones((128, 128), ml_dtypes.bfloat16), np.ones((128, 512), ml_dtypes.bfloat16))
    line = _line(k.func, "the evacuation")
    assert {("engine_access", "error", line), ("psum_gpsimd", "warning", line)} <= _rules_at(run)


def test_vector_engine_reading_hbm_is_an_error():
    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=a)  # the read: HBM reaches SBUF by DMA only
        return a

    run = nki.run(k, np.ones((128, 4), np.float32))
    assert ("engine_access", "error", _line(k.func, "the read")) in _rules_at(run)


def test_activation_registers_follow_reduce_cmd():
    # nki.isa.activation's pseudocode: reset / reset_reduce zero the Scalar engine's registers,
    # reduce / reset_reduce add the partition's results, reduce_res receives the registers; they
    # persist across activations. Oracle: numpy float32 sequential sums of the (exact) squares.
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8) / 64

    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        y = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.square, data=t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=y, op=nl.square, data=t, reduce_op=nl.add, reduce_res=r,
                        reduce_cmd=nisa.reduce_cmd.reduce)  # adds onto the first call's sums
        out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=r)
        return out

    squares = x * x
    want = np.zeros(128, np.float32)
    for _ in range(2):
        for j in range(8):
            want = want + squares[:, j]
    run = nki.run(k, x)
    assert run.errors == []
    np.testing.assert_array_equal(run.outputs[:, 0], want)


def test_reduce_res_from_registers_no_activation_reset_is_a_finding():
    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        y = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=r)  # idle: stale registers
        return a

    run = nki.run(k, np.zeros((128, 4), np.float32))
    assert ("accumulator_undefined", "error", _line(k.func, "idle: stale registers")) in _rules_at(run)


@pytest.mark.parametrize("function,x,bad", [("log", 1.0, False), ("log", 2.0 ** -70, True), ("log", -1.0, True),
                                            ("rsqrt", 1e-3, False), ("rsqrt", 2.0 ** -90, True),
                                            ("reciprocal", -3.0, False), ("reciprocal", 2.0 ** 50, True),
                                            ("exp", 80.0, False)])
def test_activation_inputs_outside_the_documented_range(function, x, bad):
    # nki.language docs: log [2^-64, 2^64], rsqrt [2^-87, 2^97], reciprocal +-[2^-42, 2^42];
    # outside, the Scalar engine's output is invalid. exp has no limited range.
    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        y = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=getattr(nl, function), data=t)  # the activation
        return a

    run = nki.run(k, np.full((128, 4), x, np.float32))
    found = {(f.rule, f.where) for f in run.errors}
    assert found == ({("activation_range", _line(k.func, "the activation"))} if bad else set())


@pytest.mark.parametrize("stored", [100, 128])
def test_partitions_a_partial_load_left_out_stay_undefined_until_used(stored):
    # A tile loaded on 100 of its 128 partitions, computed on whole (the Vector and Scalar engines
    # work partition by partition), stored on those 100: no finding, and the values are numpy's.
    # Storing all 128 leaves 28 rows of the output undefined: the output is partly written.
    x = np.arange(100 * 8, dtype=np.float32).reshape(100, 8) / 8

    @nki.jit
    def k(a):
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:100, :], src=a)
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=s, op=nl.add, data=t, axis=1)
        y = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y, data1=t, data2=t, op=nl.multiply)
        nisa.tensor_scalar(dst=y, data=y, op0=nl.add, operand0=s)
        out = nl.ndarray((stored, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=y[0:stored, :])  # the store
        return out

    run = nki.run(k, x)
    if stored == 100:
        assert run.errors == []
        np.testing.assert_array_equal(run.outputs, x * x + x.sum(axis=1, keepdims=True))
    else:
        assert run.errors == []
        (w,) = [f for f in run.findings if f.rule == "output_partly_written"]
        assert "224 of 1024" in w.message
        np.testing.assert_array_equal(run.outputs[:100], x * x + x.sum(axis=1, keepdims=True))


@pytest.mark.parametrize("liveness", ["first_access", "allocation"])
def test_a_tile_takes_memory_from_its_first_access_unless_assumed_from_its_allocation(liveness):
    # nki-library's RoPE at LNC=2 declares its output before its intermediates and fits trn2's SBUF
    # only if the output takes memory from its first write (assumption tile_liveness). Here: eight
    # 32 KiB tiles declared together (256 KiB > 224 KiB), never more than seven in use at once.
    @nki.jit
    def k(x):
        out = nl.ndarray((64, 8192), nl.bfloat16, buffer=nl.shared_hbm)
        a = nl.ndarray((64, 16384), nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        result = nl.ndarray((64, 16384), nl.bfloat16, buffer=nl.sbuf)  # declared early, written last
        parts = [nl.ndarray((64, 16384), nl.bfloat16, buffer=nl.sbuf) for _ in range(6)]
        for p in parts:
            nisa.tensor_scalar(dst=p, data=a, op0=nl.multiply, operand0=2.0)
        for i in (0, 2, 4):
            nisa.tensor_tensor(dst=parts[i], data1=parts[i], data2=parts[i + 1], op=nl.add)
        nisa.tensor_tensor(dst=parts[4], data1=parts[4], data2=parts[2], op=nl.add)
        nisa.tensor_tensor(dst=result, data1=parts[0], data2=parts[4], op=nl.add)
        nisa.dma_copy(dst=out, src=result[:, 0:8192])
        return out

    x = np.ones((64, 16384), ml_dtypes.bfloat16)
    run = nki.run(k, x, target="trn2", assume={"tile_liveness": liveness})
    capacity = [f for f in run.errors if f.rule == "sbuf_capacity"]
    if liveness == "first_access":  # the peak: a and the six parts, 7 x 32 KiB = trn2's 224 KiB
        assert capacity == [] and (run.outputs.astype(np.float32) == 12).all()
        assert run.summary().memory["sbuf"]["peak"] == 7 * 32768
    else:
        # Declared together, the eight take 256 KiB: the compiler spills (each instruction's own
        # tiles fit), unless overflowing SBUF is taken to be an error (assumption sbuf_overflow).
        assert capacity == [] and (run.outputs.astype(np.float32) == 12).all()
        (f,) = [f for f in run.warnings if f.rule == "sbuf_spill"]
        assert f"{8 * 32768} B per partition" in f.message and "is allocated" in f.message
        strict = nki.run(k, x, target="trn2", assume={"tile_liveness": liveness, "sbuf_overflow": "error"})
        (f,) = [f for f in strict.errors if f.rule == "sbuf_capacity"]
        assert f"{8 * 32768} B per partition" in f.message and "is allocated" in f.message
