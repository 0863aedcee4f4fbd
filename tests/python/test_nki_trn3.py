"""The trn3 target (Trainium3, NeuronCore-v4): its table, how a run picks it, and what changes on it.

Oracles: the Trainium3 architecture guide and the nc_matmul docstring, quoted at each check (the
values of the table; the moving free size "up to 4096 for float32 dst or 8192 for bfloat16 dst";
"float8_e4m3 (legacy) and float8_e4m3fn cannot be mixed"; a bf16 PSUM destination: "the downcast
from FP32 to BF16 is performed immediately before the write", and an addition upcasts the PSUM
value, adds "at FP32 precision" and rounds again), with the values computed in numpy and ml_dtypes
from inputs whose products and sums are exact in fp32, so that only the documented roundings remain.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from numeq import nki
from nki_support import source_line
from numeq.nki.machine.targets import target

nl, nisa = nki.language, nki.isa
rng = np.random.default_rng(43)
_GUIDE = "trainium3_arch.rst"


def test_the_table_is_the_trainium3_guides():
    t = target("trn3")
    assert (t.name, t.generation, t.core, t.platform) == ("trn3", 4, "NeuronCore-v4", "trainium.trn3")
    # "The NeuronCore-v4 SBUF capacity is 32 MiB ... the PSUM capacity remains the same at 2 MiB."
    assert t["sbuf_partition_bytes"] * t["partitions"] == 32 * 2 ** 20
    assert t["psum_partition_bytes"] * t["partitions"] == 2 * 2 ** 20
    # Engine frequencies (GHz): Tensor 2.4, Vector 1.2, Scalar 1.2, GpSimd 1.2.
    assert [t[k] for k in ("tensor_clock_hz", "vector_clock_hz", "scalar_clock_hz", "gpsimd_clock_hz")] == \
        [2.4e9, 1.2e9, 1.2e9, 1.2e9]
    # "315 MXFP8/MXFP4 TFLOPS ... 79 BF16/FP16/TF32 and 20 FP32 TFLOPS".
    assert (t["peak_flops_mx"], t["peak_flops_bf16"], t["peak_flops_fp32"]) == (315e12, 79e12, 20e12)
    for key in ("sbuf_partition_bytes", "tensor_clock_hz", "vector_clock_hz", "peak_flops_mx"):
        assert t.spec(key).evidence == "documented" and _GUIDE in t.spec(key).source, key
    # The two Trainium3 pages disagree on HBM bandwidth (4.7 and 4.9 TB/s): an assumption citing both.
    hbm = t.spec("hbm_chip_bytes_per_s")
    assert hbm.evidence == "assumed" and "4.7" in hbm.source and "4.9" in hbm.source
    cc = t.spec("collective_cores")  # and on the collective cores (20 and 16)
    assert cc.evidence == "assumed" and "(20)" in cc.source and "(16)" in cc.source


@pytest.mark.parametrize("variable, value", [("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3"), ("NKI_NC_VERSION", "gen4")])
def test_a_run_takes_trn3_where_aws_environment_names_it(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    seen = []

    @nki.jit
    def k(a):
        seen.append(nisa.get_nc_version())
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    run = nki.run(k, np.ones((128, 8), np.float32))
    assert run.target == "trn3" and run.platform.startswith("trainium.trn3") and seen == [nisa.nc_version.gen4]


def _small_ints(shape, dtype, top=15):
    return rng.integers(-top, top + 1, shape).astype(dtype)


def matmul(dst_dtype, chunks=1):
    """dst[128, N] = the sum over ``chunks`` K tiles of a[k]^T @ b[k], in one PSUM tile of dst_dtype."""
    @nki.jit
    def kernel(a, b):
        n = b.shape[-1]
        out = nl.ndarray((128, n), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, n), dst_dtype, buffer=nl.psum)
        for c in range(chunks):
            at = nl.ndarray((128, 128), a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a[c])
            bt = nl.ndarray((128, n), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=bt, src=b[c])
            nisa.nc_matmul(dst=acc, stationary=at, moving=bt, accumulate=c > 0)
        o = nl.ndarray((128, n), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=acc)
        nisa.dma_copy(dst=out, src=o)
        return out
    return kernel


@pytest.mark.parametrize("n, dst, ok_on_trn2", [(512, nl.float32, True), (4096, nl.float32, False),
                                                 (8192, nl.bfloat16, False)])
def test_the_moving_tile_may_fill_the_whole_psum(n, dst, ok_on_trn2):
    # "On NeuronCore-v2 and -v3, the free dimension size of moving tile must not exceed 512 ...
    # Starting NeuronCore-v4 ... up to 4096 for float32 dst or 8192 for bfloat16 dst".
    a = _small_ints((1, 128, 128), ml_dtypes.bfloat16, 3)
    b = _small_ints((1, 128, n), ml_dtypes.bfloat16, 3)
    exact = a[0].astype(np.float64).T @ b[0].astype(np.float64)  # at most 1152 in magnitude: exact in fp32
    run = nki.run(matmul(dst), a, b, target="trn3")
    assert run.errors == []
    expected = exact.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32) if dst == nl.bfloat16 else exact
    np.testing.assert_array_equal(run.outputs, expected)
    on_trn2 = nki.run(matmul(dst), a, b, target="trn2")
    assert ({f.rule for f in on_trn2.errors} >= {"matmul_moving_free"}) == (not ok_on_trn2)


def test_a_bf16_psum_tile_rounds_every_write_and_adds_in_fp32():
    # Each K tile's fp32 result (products of integers up to 15, 128 rows: exact in fp32) is
    # rounded to bf16 as written; the second adds into it: bf16(fp32(psum) + tile).
    a = _small_ints((3, 128, 128), ml_dtypes.bfloat16)
    b = _small_ints((3, 128, 256), ml_dtypes.bfloat16)
    tiles = [a[c].astype(np.float64).T @ b[c].astype(np.float64) for c in range(3)]
    assert all(np.abs(t).max() < 2 ** 24 for t in tiles)
    psum = tiles[0].astype(np.float32).astype(ml_dtypes.bfloat16)
    for t in tiles[1:]:
        psum = (psum.astype(np.float32) + t.astype(np.float32)).astype(ml_dtypes.bfloat16)
    run = nki.run(matmul(nl.bfloat16, chunks=3), a, b, target="trn3")
    assert run.errors == []
    np.testing.assert_array_equal(run.outputs, psum.astype(np.float32))
    # Not the sum rounded once: the repeated roundings show.
    once = sum(tiles).astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.count_nonzero(run.outputs != once) > 0
    # NeuronCore-v3 writes fp32 PSUM only ("The dst tile must be a float32 tile in NeuronCore-v2
    # and NeuronCore-v3").
    assert "matmul_output_memory" in {f.rule for f in nki.run(matmul(nl.bfloat16), a[:1], b[:1], target="trn2").errors}


def test_ocp_e4m3fn_inputs_on_trn3_only_and_never_with_e4m3():
    a = _small_ints((1, 128, 128), ml_dtypes.float8_e4m3fn, 8)
    b = _small_ints((1, 128, 512), ml_dtypes.float8_e4m3fn, 8)
    run = nki.run(matmul(nl.float32), a, b, target="trn3")
    assert run.errors == []
    np.testing.assert_array_equal(run.outputs, a[0].astype(np.float64).T @ b[0].astype(np.float64))
    assert "matmul_dtype" in {f.rule for f in nki.run(matmul(nl.float32), a, b, target="trn2").errors}
    legacy = _small_ints((1, 128, 512), ml_dtypes.float8_e4m3, 8)  # Trainium's e4m3 (max 240)
    mixed = nki.run(matmul(nl.float32), a, legacy, target="trn3")
    (f,) = [f for f in mixed.errors if f.rule == "matmul_dtype"]
    assert "never e4m3 with e4m3fn" in f.message


def test_trn3_holds_the_larger_tile():
    # 240 KiB per partition: over trn2's 224 KiB, within trn3's 256 KiB.
    free = 240 * 1024 // 4

    @nki.jit
    def k(x):
        out = nl.ndarray((128, free), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, free), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.ones((128, free), np.float32)
    assert nki.run(k, x, target="trn3").errors == []
    assert "sbuf_capacity" in {f.rule for f in nki.run(k, x, target="trn2").errors}


def test_the_schedule_runs_at_trn3s_clocks():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        u = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out, src=u)
        return out

    x = np.ones((128, 512), np.float32)
    for name in ("trn2", "trn3"):
        run = nki.run(k, x, target=name)
        s = run.schedule()
        (i,) = [i for i, ins in enumerate(run.trace) if ins.engine == "vector"]
        assert s.finish[i] - s.start[i] == pytest.approx(run.trace[i].cycles / target(name)["vector_clock_hz"])


def test_a_manifest_review_of_trn3_takes_the_same_limits_as_a_run():
    from numeq.review import model, tiling
    from numeq.review import targets as review_targets

    def parts(n, out_dtype, dtype="bf16"):
        buffers = (model.Buffer("stat", "sbuf", dtype, (128, 128), line=10),
                   model.Buffer("mov", "sbuf", dtype, (128, n), line=11),
                   model.Buffer("out", "psum", out_dtype, (128, n), line=12))
        return {"buffers": buffers, "matmuls": (model.Matmul("mm0", "stat", "mov", "out", line=40),)}

    def failed(name, **p):
        return {f.rule for f in tiling.check(model.Tiling(name, **p), review_targets.target(name)) if f.status == "fail"}

    assert failed("trn3", **parts(8192, "bf16")) == set() and failed("trn3", **parts(4096, "fp32")) == set()
    assert {"matmul_moving_free", "matmul_psum_bank", "matmul_output_memory"} <= failed("trn2", **parts(8192, "bf16"))
    assert "matmul_moving_free" in failed("trn3", **parts(8192, "fp32"))  # an fp32 dst: 4096
    assert failed("trn3", **parts(512, "fp32", "e4m3fn")) == set()
    assert "matmul_dtype" in failed("trn2", **parts(512, "fp32", "e4m3fn"))


def test_a_bf16_psum_chain_is_the_kernels_narrow_choice_and_its_platform_reproduces_it():
    # The consistency law: the kernel equals numeq's op-level matmul on Run.kernel_platform, bit
    # for bit; Run.platform (fp32 PSUM) stays the standard, and the choice is a finding.
    import numeq

    a = rng.standard_normal((3, 128, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((3, 128, 256)).astype(ml_dtypes.bfloat16)
    lhs, rhs = np.concatenate(list(a), axis=0).T, np.concatenate(list(b), axis=0)
    wide = nki.run(matmul(nl.float32, chunks=3), a, b, target="trn3")
    assert wide.kernel_platform == wide.platform == "trainium.trn3"
    np.testing.assert_array_equal(wide.outputs, numeq.matmul(lhs, rhs, platform=wide.platform, out="fp32"))
    narrow = nki.run(matmul(nl.bfloat16, chunks=3), a, b, target="trn3")
    assert narrow.platform == "trainium.trn3"
    assert narrow.kernel_platform == "trainium.trn3[psum_group=1,group_accumulator=bf16]"
    np.testing.assert_array_equal(narrow.outputs, numeq.matmul(lhs, rhs, platform=narrow.kernel_platform, out="fp32"))
    assert np.count_nonzero(narrow.outputs != wide.outputs) > 0
    (f,) = [f for f in narrow.warnings if f.rule == "narrow_accumulator"]
    assert "bf16 PSUM" in f.message and "trainium3_arch.rst" in f.source


def _exp32(x: np.ndarray) -> np.ndarray:
    """exp in float64 rounded to fp32 (numpy's exp is within an ulp of binary64: the rounding to
    fp32 is the correctly rounded one but for values within 2^-29 of an fp32 midpoint)."""
    return np.exp(x.astype(np.float64)).astype(np.float32)


def exponential_kernel(dst_dtype, steps):
    """Per step (max_value, reduce_cmd, reduce_init, keep_result): exponential over x's columns of
    that step, the last step's reduce_res written out."""
    @nki.jit
    def kernel(x, m):
        P, F = x.shape
        width = F // len(steps)
        out = nl.ndarray((P, F), nl.float32, buffer=nl.shared_hbm)
        total = nl.ndarray((P, 1), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        mt = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=mt, src=m)
        e = nl.ndarray((P, F), dst_dtype, buffer=nl.sbuf)
        r = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        for i, (cmd, init) in enumerate(steps):
            last = i == len(steps) - 1
            nisa.exponential(dst=e[:, i * width:(i + 1) * width], src=t[:, i * width:(i + 1) * width], max_value=mt,
                             reduce_res=r if last else None, reduce_cmd=getattr(nisa.reduce_cmd, cmd),
                             reduce_init=init)
        o = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=e)
        nisa.dma_copy(dst=out, src=o)
        nisa.dma_copy(dst=total, src=r)
        return out, total
    return kernel


@pytest.mark.parametrize("dst_dtype", [nl.float32, nl.bfloat16])
def test_exponential_subtracts_exponentiates_and_sums_in_fp32(dst_dtype):
    # nki.isa.exponential: dst = exp(src - max_value), "accumulator += dst[i]", in fp32; chained
    # calls continue the Vector accumulator (reset_reduce, then reduce, then load_reduce's start).
    x = rng.standard_normal((128, 96)).astype(np.float32) * 4
    m = x.max(axis=1, keepdims=True)
    steps = [("reset_reduce", 0.0), ("reduce", 0.0), ("reduce", 0.0)]
    run = nki.run(exponential_kernel(dst_dtype, steps), x, m, target="trn3")
    assert run.errors == []
    e, total = run.outputs
    y = _exp32(np.subtract(x, m, dtype=np.float32))  # the subtraction rounded to fp32 first
    expected = y if dst_dtype == nl.float32 else y.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(e, expected)
    running = np.zeros(128, np.float32)
    for j in range(96):  # one fp32 addition per element, in order (vector_reduce_order: sequential)
        running = np.float32(running + y[:, j])
    np.testing.assert_array_equal(total[:, 0], running)
    # load_reduce starts from reduce_init.
    loaded = nki.run(exponential_kernel(nl.float32, [("load_reduce", 2.5)]), x, m, target="trn3")
    running = np.full(128, 2.5, np.float32)
    for j in range(96):
        running = np.float32(running + y[:, j])
    np.testing.assert_array_equal(loaded.outputs[1][:, 0], running)


def test_exponential_is_trn3_only_and_reduce_continues_only_a_defined_accumulator():
    x = rng.standard_normal((128, 32)).astype(np.float32)
    m = np.zeros((128, 1), np.float32)
    on_trn2 = nki.run(exponential_kernel(nl.float32, [("reset_reduce", 0.0)]), x, m, target="trn2")
    assert "target_generation" in {f.rule for f in on_trn2.errors}  # "Available only on NeuronCore-v4 and newer"
    undefined = nki.run(exponential_kernel(nl.float32, [("reduce", 0.0)]), x, m, target="trn3")
    assert "accumulator_undefined" in {f.rule for f in undefined.errors}


@pytest.mark.parametrize("op0, op1, on_trn2", [("multiply", "add", True), ("multiply", None, True), ("add", None, True),
                                               ("subtract", None, False), ("multiply", "maximum", False)])
def test_the_scalar_engine_runs_tensor_scalar_as_each_generation_documents(op0, op1, on_trn2):
    # nki.isa.tensor_scalar: "The Scalar Engine on trn2 only supports some operator combinations"
    # (multiply then add, multiply, add); trainium3_arch.rst: the Trainium3 ScalarE "natively
    # supports the tensor_scalar and tensor_copy instructions (same as VectorE)".
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        u = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=u, data=t, op0=getattr(nl, op0), operand0=3.0, op1=op1 and getattr(nl, op1),
                           operand1=None if op1 is None else 1.0, engine=nisa.engine.scalar)
        nisa.dma_copy(dst=out, src=u)
        return out

    x = rng.standard_normal((128, 16)).astype(np.float32)
    f = {"multiply": np.multiply, "add": np.add, "subtract": np.subtract, "maximum": np.maximum}
    expected = f[op0](x, np.float32(3.0))
    if op1:
        expected = f[op1](expected, np.float32(1.0))
    on_trn3 = nki.run(kernel, x, target="trn3")
    assert on_trn3.errors == []
    np.testing.assert_array_equal(on_trn3.outputs, expected)
    refused = {f.rule for f in nki.run(kernel, x, target="trn2").errors}
    assert ("instruction_constraint" in refused) == (not on_trn2)


def test_accumulating_onto_a_non_matmul_psum_value_is_undefined_before_trn3_only():
    # nc_matmul docstring: "On NeuronCore-v2 and NeuronCore-v3, matmul accumulating into a PSUM
    # location that was value-initialized by a non-matmul instruction ... is undefined behavior".
    @nki.jit
    def k(a_t, b):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        at = nl.ndarray((128, 128), a_t.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((128, 512), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a_t)
        nisa.dma_copy(dst=bt, src=b)
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.memset(dst=acc, value=0.5)
        nisa.nc_matmul(dst=acc, stationary=at, moving=bt, accumulate=True)
        o = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=acc)
        nisa.dma_copy(dst=out, src=o)
        return out

    a_t = _small_ints((128, 128), ml_dtypes.bfloat16, 4)
    b = _small_ints((128, 512), ml_dtypes.bfloat16, 4)
    on_trn3 = nki.run(k, a_t, b, target="trn3")
    assert on_trn3.errors == []
    np.testing.assert_array_equal(on_trn3.outputs, 0.5 + a_t.astype(np.float64).T @ b.astype(np.float64))
    assert "accumulate_non_matmul" in {f.rule for f in nki.run(k, a_t, b, target="trn2").errors}


def test_exponential_takes_a_tile_as_reduce_init_with_load_reduce_only():
    # reduce_init "should be unset or set to 0.0 when reduce_cmd is not load_reduce" (the docstring):
    # a (P, 1) tile with reset_reduce is a constraint finding, with load_reduce the start.
    def kernel(cmd):
        @nki.jit
        def k(x, init):
            out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            i = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=i, src=init)
            e = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            nisa.exponential(dst=e, src=t, reduce_res=r, reduce_cmd=cmd, reduce_init=i)
            nisa.dma_copy(dst=out, src=r)
            return out
        return k

    x = np.zeros((128, 4), np.float32)  # exp(0) = 1: four ones per partition
    init = np.arange(128, dtype=np.float32).reshape(128, 1)
    loaded = nki.run(kernel(nisa.reduce_cmd.load_reduce), x, init, target="trn3")
    assert loaded.errors == [] and (loaded.outputs[:, 0] == init[:, 0] + 4).all()
    refused = nki.run(kernel(nisa.reduce_cmd.reset_reduce), x, init, target="trn3")
    assert "instruction_constraint" in {f.rule for f in refused.errors}


def test_activate2_is_its_documented_pipeline_in_fp32():
    # nki.isa.activate2: "(data op0 imm0) op1 imm1", then the activation, then the reduction; "reverse1=True
    # computes imm1 <op1> result"; "The Scalar Engine always performs math in float32 precision". Oracle: numpy
    # float32 operations (IEEE, one rounding each) and exp correctly rounded to fp32 from binary64.
    @nki.jit
    def k(x, b):
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        red = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        bias = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=bias, src=b)
        e = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
        nisa.activate2(dst=e, op=nl.exp, data=t, imm0=0.5, imm1=bias, op0=nl.multiply, op1=nl.subtract,
                       reverse1=True, reduce_op=nl.abs_max, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        # The registers are shared with activation: this one continues the same accumulator.
        nisa.activation(dst=e, op=nl.copy, data=t, reduce_op=nl.add, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.dma_copy(dst=out, src=e)
        nisa.dma_copy(dst=red, src=r)
        return out, red

    x = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 1)).astype(np.float32)
    run = nki.run(k, x, b, target="trn3")
    assert run.errors == []
    arg = np.subtract(b, np.multiply(x, np.float32(0.5)))
    y = np.exp(arg.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(run.outputs[0], x)  # the activation (copy) overwrote e
    want = y.max(axis=1)  # abs_max of positive values
    for i in range(x.shape[1]):
        want = np.add(want, x[:, i])
    np.testing.assert_array_equal(run.outputs[1][:, 0], want)


@pytest.mark.parametrize("case", ["op1_alone", "pair", "reverse_alone"])
def test_activate2_refuses_what_its_docstring_refuses(case):
    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        e = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        if case == "op1_alone":  # "op1 requires op0 to be set"
            nisa.activate2(dst=e, op=nl.exp, data=t, imm0=None, imm1=1.0, op0=None, op1=nl.add)
        elif case == "pair":  # not one of the six (op0, op1) combinations
            nisa.activate2(dst=e, op=nl.exp, data=t, imm0=1.0, imm1=1.0, op0=nl.add, op1=nl.add)
        else:  # "reverse0 requires op0 to be set"
            nisa.activate2(dst=e, op=nl.exp, data=t, imm0=None, imm1=None, op0=None, op1=None, reverse0=True)
        return x

    x = np.zeros((128, 8), np.float32)
    assert "instruction_constraint" in {f.rule for f in nki.run(k, x, target="trn3").errors}
    assert "target_generation" in {f.rule for f in nki.run(k, x, target="trn2").errors}


def _xorwow(state: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Marsaglia's XORWOW ("Xorshift RNGs", J. Stat. Softw. 8(14), 2003), written here: per lane the
    words x, y, z, w, v and the counter d; each number is v + d after one step."""
    x, y, z, w, v, d = (state[:, i].astype(np.uint64) for i in range(6))
    m = np.uint64(0xFFFFFFFF)
    out = np.empty((len(state), count), np.uint32)
    for j in range(count):
        t = x ^ (x >> np.uint64(2))
        x, y, z, w = y, z, w, v
        v = ((v ^ (v << np.uint64(4))) ^ (t ^ (t << np.uint64(1)))) & m
        d = (d + np.uint64(362437)) & m
        out[:, j] = ((v + d) & m).astype(np.uint32)
    return out, np.stack([x, y, z, w, v, d], axis=1).astype(np.uint32)


def test_the_gpsimd_generator_is_xorwow_from_the_state_rand_set_state_gives():
    # nki.isa.rand_set_state: "Each partition in the source tensor seeds the PRNG states for the
    # corresponding compute lane"; 6 uint32 words for XORWOW on GpSimd (NeuronCore-v3 and newer).
    @nki.jit
    def k(seeds):
        s = nl.ndarray(seeds.shape, nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=seeds)
        nisa.rand_set_state(src_seeds=s, engine=nisa.gpsimd_engine)
        bits = nl.ndarray((seeds.shape[0], 5), nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=bits, engine=nisa.gpsimd_engine)
        after = nl.ndarray(seeds.shape, nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=after, engine=nisa.gpsimd_engine)
        out = nl.ndarray((seeds.shape[0], 11), nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:5], src=bits)
        nisa.dma_copy(dst=out[:, 5:11], src=after)
        return out

    seeds = rng.integers(1, 2 ** 32, (32, 6), dtype=np.uint64).astype(np.uint32)
    for target in ("trn2", "trn3"):
        run = nki.run(k, seeds, target=target)
        assert run.errors == [], run.errors
        want_bits, want_state = _xorwow(seeds, 5)
        np.testing.assert_array_equal(run.outputs[:, :5], want_bits)
        np.testing.assert_array_equal(run.outputs[:, 5:], want_state)
    assert "target_generation" in {f.rule for f in nki.run(k, seeds, target="trn1").errors}


def test_rand2_maps_the_vector_generators_uniform_values_onto_min_max():
    # nki.isa.rand2: uniform in [min, max] in fp32 (NeuronCore-v4). The same generator gives nl.rand's
    # [0, 1) values: rand2 from a fresh run is min + u * (max - min), each step one fp32 rounding.
    def kernel(use_rand2):
        @nki.jit
        def k(lo):
            out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            if use_rand2:
                m = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=m, src=lo)
                nisa.rand2(dst=t, min=m, max=3.0)
            else:
                t = nl.rand((128, 64), dtype=nl.float32)
            nisa.dma_copy(dst=out, src=t)
            return out
        return k

    lo = rng.uniform(-2, 2, (128, 1)).astype(np.float32)
    got = nki.run(kernel(True), lo, target="trn3")
    u = nki.run(kernel(False), lo, target="trn3").outputs
    assert got.errors == []
    np.testing.assert_array_equal(got.outputs, np.add(lo, np.multiply(u, np.subtract(np.float32(3.0), lo))))
    assert (got.outputs >= lo).all() and (got.outputs <= 3.0).all()
    assert "target_generation" in {f.rule for f in nki.run(kernel(True), lo, target="trn2").errors}
    assert "instruction_constraint" in {f.rule for f in nki.run(kernel(True), np.full((128, 1), 5.0, np.float32),
                                                                 target="trn3").errors}
