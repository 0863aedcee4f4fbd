"""numeq.review.tiling: the hardware rules of a NKI tiling, against the limits of FACTS s3 ("Limits
and rates a tiling and performance review checks"), typed in here from the NKI architecture
guides, the nc_matmul / bn_stats docstrings and the DMA bandwidth guide, never read from
numeq.review.targets.
"""

from __future__ import annotations

import math
import os
import tempfile

import pytest

from numeq.review import model, targets, tiling
from numeq.review.findings import CRITERIA, STATUSES

B, Mm, Dma, Stage, Tiling = model.Buffer, model.Matmul, model.Dma, model.Stage, model.Tiling

# ---------------------------------------------------------------------------------------------
# The documented limits (FACTS s3), per NeuronCore.
# ---------------------------------------------------------------------------------------------
TARGETS = ("trn1", "inf2", "trn2")
V2 = {"trn1", "inf2"}  # NeuronCore-v2: Vector/GpSimd share SBUF access, Vector/Scalar PSUM access
PARTITIONS = 128
SBUF = {"trn1": 192 * 1024, "inf2": 192 * 1024, "trn2": 224 * 1024}
PSUM = 16 * 1024
PSUM_BANKS = 8
PSUM_BANK = 2 * 1024
K_MAX, K_DOUBLE_ROW = 128, 256  # double_row: trn2 only, fp8 e4m3/e5m2
M_MAX, N_MAX = 128, 512
VEC_SBUF, VEC_PSUM, BN_STATS = 64 * 1024, 4 * 1024, 512
DMA_OVERHEAD, DMA_RECOMMENDED, DMA_TARGET = 256, 2 * 1024, 4 * 1024
STRIDE = 16
BYTES = {"fp32": 4, "bf16": 2, "e4m3": 1, "e5m2": 1, "uint8": 1}


def run(t: str, **parts) -> list:
    return tiling.check(Tiling(t, **parts), targets.target(t))


def rule(findings, name, status=None):
    return [f for f in findings if f.rule == name and (status is None or f.status == status)]


def fails(findings):
    return [f for f in findings if f.status == "fail"]


def mm_parts(k=128, m=128, n=512, dt="bf16", out_dt="fp32", out_shape=None, double_row=False, k_moving=None):
    """One matmul mm0: stat [k, m] x mov [k_moving or k, n] -> out [m, n]."""
    bufs = (B("stat", "sbuf", dt, (k, m), line=10), B("mov", "sbuf", dt, (k_moving or k, n), line=11),
            B("out", "psum", out_dt, out_shape or (m, n), line=12))
    return {"buffers": bufs, "matmuls": (Mm("mm0", "stat", "mov", "out", double_row=double_row, line=40),)}


# ---------------------------------------------------------------------------------------------
# Every finding well formed; a realistic tiling is clean
# ---------------------------------------------------------------------------------------------
def realistic(t: str) -> dict:
    """A bf16 matmul tile loop: double-buffered SBUF inputs, a 2-deep fp32 PSUM accumulator,
    an fp32 SBUF result, DMAs of 4 KiB per partition over 128 partitions."""
    bufs = (B("lhsT", "sbuf", "bf16", (128, 128), bufs=2, line=20),
            B("rhs", "sbuf", "bf16", (128, 512), bufs=2, line=21),
            B("acc", "psum", "fp32", (128, 512), bufs=2, line=22),
            B("res", "sbuf", "fp32", (128, 512), bufs=2, line=23),
            B("lhs_hbm", "hbm", "bf16", (4096, 4096), line=24))
    return {"buffers": bufs, "matmuls": (Mm("mm", "lhsT", "rhs", "acc", line=30),),
            "stages": (Stage("evict", "vector", "tensor_copy", ("res", "acc"), line=31),),
            "dmas": (Dma("load_rhs", "rhs", "load", 4096, 128, line=32),
                     Dma("store_res", "res", "store", 2048 * 2, 128, line=33))}


@pytest.mark.parametrize("t", TARGETS)
def test_realistic_tiling_is_clean_and_well_formed(t):
    fs = run(t, **realistic(t))
    assert fs and all(f.status == "pass" for f in fs), [f for f in fs if f.status != "pass"]
    for f in fs:
        assert f.criterion in ("tiling_limits", "memory_hierarchy") and f.criterion in CRITERIA
        assert f.status in STATUSES and f.evidence and f.subject and f.message
    rules = {f.rule for f in fs}
    for r in ("partition_dim", "partition_start", "psum_capacity", "sbuf_capacity", "matmul_contraction",
              "matmul_stationary_free", "matmul_moving_free", "matmul_output_memory", "matmul_psum_bank", "stage_free_size",
              "dma_small", "dma_partitions", "partial_partitions", "dma_stride", "matmul_fp32"):
        assert len(rule(fs, r)) == 1, r  # one summarising pass per rule
    assert ("engine_port_sharing" in rules) == (t in V2)
    # Instruction limits vs memory hierarchy.
    assert {f.criterion for f in fs if f.rule.startswith(("matmul", "partition"))} == {"tiling_limits"}
    assert {f.criterion for f in fs if f.rule.endswith("capacity") or f.rule.startswith("dma")} == {"memory_hierarchy"}
    # Documented limits cite their source; the target's own citation is used.
    tt = targets.target(t)
    assert rule(fs, "sbuf_capacity")[0].evidence == tt.spec("sbuf_partition_bytes").cite()
    assert rule(fs, "sbuf_capacity")[0].evidence.startswith("documented: ")


def test_target_by_name_and_bad_arguments():
    assert tiling.check(Tiling("trn1", **realistic("trn1")), "trn1") == run("trn1", **realistic("trn1"))
    with pytest.raises(ValueError, match="trn1"):
        tiling.check(Tiling("trn1"), "trn9")
    with pytest.raises(TypeError, match="Tiling"):
        tiling.check({"buffers": []}, "trn1")
    assert tiling.check(Tiling("trn2"), "trn2") == []


@pytest.mark.parametrize("t", TARGETS)
def test_malformed_buffers_fail_by_name(t):
    bad = (B("nodtype", "sbuf", "fp64", (128, 4)), B("nomem", "dram", "bf16", (128, 4)),
           B("zero", "sbuf", "bf16", (128, 0)), B("axis", "sbuf", "bf16", (128, 4), partition_dim=2),
           B("nobufs", "sbuf", "bf16", (128, 4), bufs=0), B("twice", "sbuf", "bf16", (128, 4)),
           B("twice", "psum", "fp32", (128, 4)))
    fs = rule(run(t, buffers=bad), "buffer_valid", "fail")
    assert [f.subject for f in fs] == ["buffer " + b.name for b in bad if b.name != "twice"] + ["buffer twice"]
    assert "fp32" in fs[0].message and "sbuf" in fs[1].message  # the valid choices are named


# ---------------------------------------------------------------------------------------------
# Rule 1: partitions; rule 5: partial-partition starts
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("memory", ["sbuf", "psum"])
@pytest.mark.parametrize("parts", [1, 64, 127, 128, 129, 256])
def test_partition_dim(t, memory, parts):
    # The partition axis may be any axis of the shape.
    fs = run(t, buffers=(B("ok", memory, "fp32", (4, 128), partition_dim=1),
                         B("big", memory, "fp32", (2, parts), partition_dim=1, line=31)))
    bad = rule(fs, "partition_dim", "fail")
    if parts > PARTITIONS:
        assert [f.subject for f in bad] == ["buffer big (line 31)"] and str(parts) in bad[0].message
        assert not rule(fs, "partition_dim", "pass")
    else:
        assert not bad and len(rule(fs, "partition_dim", "pass")) == 1


def test_hbm_buffers_have_no_partitions():
    assert not fails(run("trn1", buffers=(B("w", "hbm", "bf16", (8192, 8192)),)))


def allowed_start(count: int, start: int) -> bool:
    """The partial-partition access rule of the NKI architecture guides (FACTS s3): more than 64
    partitions start at 0; 33-64 at 0 or 64; 32 or fewer at 0, 32, 64 or 96."""
    if count > 64:
        ok = start == 0
    elif count > 32:
        ok = start in (0, 64)
    else:
        ok = start in (0, 32, 64, 96)
    return ok and start + count <= PARTITIONS


@pytest.mark.parametrize("t", TARGETS)
def test_partition_start_table(t):
    """Every count 1..128 at every start 0..127: one tiling per count holding a buffer per start."""
    tt = targets.target(t)
    for count in range(1, PARTITIONS + 1):
        bufs = tuple(B(f"s{start}", "sbuf", "uint8", (count, 1), start_partition=start, line=start + 1)
                     for start in range(PARTITIONS))
        fs = tiling.check(Tiling(t, buffers=bufs), tt)
        failed = {f.subject for f in rule(fs, "partition_start", "fail")}
        expected = {f"buffer s{start} (line {start + 1})" for start in range(PARTITIONS)
                    if not allowed_start(count, start)}
        assert failed == expected, count
        assert not rule(fs, "partition_start", "pass")  # some start is always wrong


@pytest.mark.parametrize("t", TARGETS)
def test_partition_start_pass_and_negative(t):
    good = (B("full", "sbuf", "bf16", (128, 8)), B("half", "psum", "fp32", (64, 8), start_partition=64),
            B("quarter", "sbuf", "bf16", (32, 8), start_partition=96))
    fs = run(t, buffers=good)
    assert not fails(fs) and len(rule(fs, "partition_start", "pass")) == 1
    fs = run(t, buffers=good + (B("neg", "sbuf", "bf16", (16, 8), start_partition=-32),))
    assert [f.subject for f in rule(fs, "partition_start", "fail")] == ["buffer neg"]


# ---------------------------------------------------------------------------------------------
# Rule 2: nc_matmul limits and output; rule 9: unknown names; rule 8: fp32 inputs
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("k", [1, 127, 128, 129, 255, 256, 257])
@pytest.mark.parametrize("dt", ["bf16", "e4m3", "e5m2"])
@pytest.mark.parametrize("double_row", [False, True])
def test_matmul_contraction(t, k, dt, double_row):
    fs = run(t, **mm_parts(k=k, dt=dt, double_row=double_row))
    # double_row on a target without the mode, or on inputs other than fp8: the perf-mode rule (the
    # run's rule for the same fault); K beyond what the mode contracts: the contraction rule.
    mode_ok = not double_row or (t == "trn2" and dt in ("e4m3", "e5m2"))
    k_ok = k <= (K_DOUBLE_ROW if double_row and t == "trn2" else K_MAX)
    assert bool(rule(fs, "matmul_perf_mode", "fail")) != mode_ok
    bad = rule(fs, "matmul_contraction", "fail")
    assert bool(bad) != k_ok
    assert all(f.subject == "matmul mm0 (line 40)" for f in bad)
    assert bool(rule(fs, "matmul_contraction", "pass")) == k_ok
    if mode_ok and k_ok:
        assert not fails(fs)


@pytest.mark.parametrize("t", TARGETS)
def test_double_row_inputs_packed(t):
    """K = 256 fp8 rows in double_row on trn2: 128 partitions of two rows each (assumed packing)."""
    parts = mm_parts(k=256, m=128, n=512, dt="e4m3", double_row=True)
    fs = run(t, **parts)
    assert {f.rule for f in fails(fs)} == (set() if t == "trn2" else {"matmul_perf_mode", "matmul_contraction", "partition_dim"})
    if t == "trn2":
        assert "stat" in rule(fs, "partition_dim", "pass")[0].message
        memory = tiling.memory_use(Tiling(t, **parts), t)
        assert dict(memory["sbuf"]) == {"stat": 2 * 128, "mov": 2 * 512}
    # A 256-row input not read in double_row is not packed.
    fs = run(t, buffers=parts["buffers"][:1])
    assert [f.subject for f in rule(fs, "partition_dim", "fail")] == ["buffer stat (line 10)"]


@pytest.mark.parametrize("t", TARGETS)
def test_matmul_contraction_mismatch_and_tiling_double_row(t):
    fs = run(t, **mm_parts(k=128, k_moving=64))
    bad = rule(fs, "matmul_contraction", "fail")
    assert len(bad) == 1 and "stat" in bad[0].message and "mov" in bad[0].message
    # The tiling-wide double_row flag applies to every matmul.
    parts = mm_parts(k=256, dt="e4m3")
    fs = tiling.check(Tiling(t, double_row=True, **parts), t)
    assert bool(rule(fs, "matmul_contraction", "fail")) == (t != "trn2")


@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("m", [1, 128, 129])
@pytest.mark.parametrize("n", [1, 512, 513])
def test_matmul_free_sizes_and_bank(t, m, n):
    fs = run(t, **mm_parts(m=m, n=n))
    assert bool(rule(fs, "matmul_stationary_free", "fail")) == (m > M_MAX)
    assert bool(rule(fs, "matmul_moving_free", "fail")) == (n > N_MAX)
    # fp32 [m, n] output: n * 4 bytes per partition within one 2 KiB bank.
    assert bool(rule(fs, "matmul_psum_bank", "fail")) == (n * 4 > PSUM_BANK)
    assert not rule(fs, "matmul_output_memory", "fail")
    spec_of = {"matmul_stationary_free": "matmul_stationary_free", "matmul_moving_free": "matmul_moving_free",
               "matmul_psum_bank": "psum_bank_bytes"}
    # The [m, n] output with m > 128 also spans too many partitions.
    assert {f.rule for f in fails(fs)} - set(spec_of) == ({"partition_dim"} if m > PARTITIONS else set())
    for f in fails(fs):
        if f.rule in spec_of:
            assert f.subject == "matmul mm0 (line 40)"
            assert f.evidence == targets.target(t).spec(spec_of[f.rule]).cite()


@pytest.mark.parametrize("t", TARGETS)
def test_matmul_output(t):
    assert not fails(run(t, **mm_parts()))
    for kw, word in (({"out_dt": "bf16"}, "fp32"), ({"out_shape": (128, 256)}, "[128, 512]"),
                     ({"out_shape": (64, 512)}, "[128, 512]")):
        bad = rule(run(t, **mm_parts(**kw)), "matmul_output_memory", "fail")
        assert len(bad) == 1 and word in bad[0].message and bad[0].subject == "matmul mm0 (line 40)"
    parts = mm_parts()
    bufs = parts["buffers"][:2] + (B("out", "sbuf", "fp32", (128, 512)),)
    bad = rule(run(t, buffers=bufs, matmuls=parts["matmuls"]), "matmul_output_memory", "fail")
    assert len(bad) == 1 and "PSUM" in bad[0].message
    bufs = (B("stat", "psum", "fp32", (128, 128)),) + parts["buffers"][1:]
    bad = rule(run(t, buffers=bufs, matmuls=parts["matmuls"]), "matmul_operands", "fail")
    assert len(bad) == 1 and "SBUF" in bad[0].message


@pytest.mark.parametrize("t", TARGETS)
def test_matmul_unknown_names(t):
    parts = mm_parts()
    mms = (Mm("mm1", "nope", "mov", "out", line=41), Mm("mm2", "stat", "mov", "gone", line=42))
    fs = run(t, buffers=parts["buffers"], matmuls=parts["matmuls"] + mms)
    bad = rule(fs, "matmul_operands", "fail")
    assert [f.subject for f in bad] == ["matmul mm1 (line 41)", "matmul mm2 (line 42)"]
    assert "'nope'" in bad[0].message and "'gone'" in bad[1].message
    for f in bad:
        assert "stat, mov, out" in f.message  # the valid names


@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("dt,warn", [("fp32", True), ("tf32", False), ("bf16", False), ("fp16", False)])
def test_fp32_matmul_rate(t, dt, warn):
    fs = run(t, **mm_parts(dt=dt))
    w = rule(fs, "matmul_fp32", "warn")
    assert bool(w) == warn and bool(rule(fs, "matmul_fp32", "pass")) == (not warn)
    assert not fails(fs)
    if warn:
        assert w[0].subject == "matmul mm0 (line 40)" and "bf16" in w[0].message
        assert w[0].evidence == targets.target(t).spec("fp32_matmul_rate").cite()


@pytest.mark.parametrize("t", TARGETS)
def test_matmul_input_formats(t):
    parts = mm_parts()
    mixed = (B("stat", "sbuf", "fp32", (128, 128)),) + parts["buffers"][1:]
    assert rule(run(t, buffers=mixed, matmuls=parts["matmuls"]), "matmul_dtype", "fail")
    ints = (B("stat", "sbuf", "int32", (128, 128)),) + parts["buffers"][1:]
    bad = rule(run(t, buffers=ints, matmuls=parts["matmuls"]), "matmul_dtype", "fail")
    assert bad and "int32" in bad[0].message and "bf16" in bad[0].message


# ---------------------------------------------------------------------------------------------
# Rules 3 and 4: PSUM and SBUF capacity
# ---------------------------------------------------------------------------------------------
def psum_oracle(bufs) -> tuple[int, int]:
    """(bytes, banks) per partition: each copy takes whole 2 KiB banks."""
    nbytes = sum(math.prod(b.shape[1:]) * BYTES[b.dtype] * b.bufs for b in bufs)
    banks = sum(b.bufs * math.ceil(math.prod(b.shape[1:]) * BYTES[b.dtype] / PSUM_BANK) for b in bufs)
    return nbytes, banks


@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("case", [
    [(512, 8)],                # 16 KiB exactly, 8 banks: full
    [(512, 9)],                # 18 KiB, 9 banks
    [(256, 8)],                # 8 KiB, 8 banks
    [(256, 9)],                # 9 KiB but 9 banks (each copy rounds up to a bank)
    [(600, 5)],                # 11.7 KiB but 10 banks
    [(512, 4), (1536, 2)],     # 20 KiB, 10 banks
    [(512, 4), (512, 4)],      # 16 KiB, 8 banks
])
def test_psum_capacity(t, case):
    bufs = tuple(B(f"ps{i}", "psum", "fp32", (128, n), bufs=c, line=50 + i) for i, (n, c) in enumerate(case))
    nbytes, banks = psum_oracle(bufs)
    fs = run(t, buffers=bufs)
    bad = rule(fs, "psum_capacity", "fail")
    over = nbytes > PSUM or banks > PSUM_BANKS
    assert bool(bad) == over and bool(rule(fs, "psum_capacity", "pass")) == (not over)
    f = (bad or rule(fs, "psum_capacity"))[0]
    assert f.criterion == "memory_hierarchy"
    assert f"({banks} of {PSUM_BANKS} banks)" in f.message
    if over:
        for b in bufs:
            assert b.name in f.subject and b.name in f.message
    memory = tiling.memory_use(Tiling(t, buffers=bufs), t)
    assert memory["psum"] == [(b.name, math.prod(b.shape[1:]) * 4 * b.bufs) for b in bufs]
    assert memory["psum_banks_used"] == banks and memory["psum_capacity"] == PSUM and memory["psum_banks"] == PSUM_BANKS


def test_psum_capacity_message_numbers():
    bufs = (B("acc", "psum", "fp32", (128, 512), bufs=4, line=31), B("acc2", "psum", "fp32", (128, 1536), bufs=2))
    f = rule(run("trn2", buffers=bufs), "psum_capacity", "fail")[0]
    assert "acc: 4 copies x 2048 B = 8 KiB" in f.message
    assert "20 KiB of 16 KiB" in f.message and "(10 of 8 banks)" in f.message
    assert "acc (line 31)" in f.subject


@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_sbuf_capacity_boundary(t, delta):
    """uint8 [128, n] holds n bytes per partition: two copies of cap/2 - 1 plus 2 + delta."""
    cap = SBUF[t]
    bufs = (B("big", "sbuf", "uint8", (128, cap // 2 - 1), bufs=2, line=60),
            B("tail", "sbuf", "uint8", (128, 2 + delta)),
            B("ps", "psum", "fp32", (128, 512), bufs=8))  # PSUM does not count
    fs = run(t, buffers=bufs)
    bad = rule(fs, "sbuf_capacity", "fail")
    assert bool(bad) == (delta > 0) and bool(rule(fs, "sbuf_capacity", "pass")) == (delta <= 0)
    if bad:
        assert "big (line 60)" in bad[0].subject and "ps" not in bad[0].subject
        assert f"of {cap // 1024} KiB" in bad[0].message and "big: 2 copies" in bad[0].message
    memory = tiling.memory_use(Tiling(t, buffers=bufs), targets.target(t))
    assert memory["sbuf"] == [("big", cap - 2), ("tail", 2 + delta)] and memory["sbuf_capacity"] == cap


def test_sbuf_capacity_differs_by_target():
    bufs = (B("w", "sbuf", "bf16", (128, 100 * 1024)),)  # 200 KiB per partition
    assert rule(run("trn1", buffers=bufs), "sbuf_capacity", "fail")
    assert rule(run("inf2", buffers=bufs), "sbuf_capacity", "fail")
    assert rule(run("trn2", buffers=bufs), "sbuf_capacity", "pass")


# ---------------------------------------------------------------------------------------------
# Rule 6: Vector / Scalar / GpSimd stages
# ---------------------------------------------------------------------------------------------
STAGE_BUFS = (B("xs", "sbuf", "fp32", (128, 8)), B("xp", "psum", "fp32", (128, 8)))


@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("engine", ["vector", "scalar", "gpsimd"])
@pytest.mark.parametrize("operands,limit", [(("xs",), VEC_SBUF), (("xs", "xp"), VEC_PSUM), (("xp",), VEC_PSUM)])
@pytest.mark.parametrize("delta", [0, 1])
def test_stage_free_size(t, engine, operands, limit, delta):
    st = Stage("st", engine, "tensor_tensor", operands, free_size=limit + delta, line=70)
    fs = run(t, buffers=STAGE_BUFS, stages=(st,))
    bad = rule(fs, "stage_free_size", "fail")
    assert bool(bad) == (delta > 0)
    assert all(f.subject == "stage st (line 70)" and str(limit) in f.message for f in bad)


@pytest.mark.parametrize("t", TARGETS)
def test_stage_free_size_from_first_operand(t):
    bufs = (B("wide", "sbuf", "bf16", (128, VEC_SBUF + 1)), B("narrow", "sbuf", "bf16", (128, 4)))
    assert rule(run(t, buffers=bufs, stages=(Stage("a", "vector", "tensor_copy", ("wide", "narrow")),)),
                "stage_free_size", "fail")
    assert rule(run(t, buffers=bufs, stages=(Stage("a", "vector", "tensor_copy", ("narrow", "wide")),)),
                "stage_free_size", "pass")


@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("free", [1, 512, 513])
def test_bn_stats(t, free):
    bufs = (B("xn", "sbuf", "fp32", (128, free)), B("st6", "sbuf", "fp32", (128, 6)))
    fs = run(t, buffers=bufs, stages=(Stage("bn", "vector", "bn_stats", ("xn", "st6"), line=80),))
    bad = rule(fs, "bn_stats_free", "fail")
    assert bool(bad) == (free > BN_STATS) and bool(rule(fs, "bn_stats_free", "pass")) == (free <= BN_STATS)
    assert all(f.subject == "stage bn (line 80)" for f in bad)


@pytest.mark.parametrize("t", TARGETS)
def test_stage_unknown_operand(t):
    fs = run(t, buffers=STAGE_BUFS, stages=(Stage("cp", "scalar", "activation", ("xs", "ghost"), line=90),))
    bad = rule(fs, "stage_operands", "fail")
    assert len(bad) == 1 and bad[0].subject == "stage cp (line 90)"
    assert "'ghost'" in bad[0].message and "xs, xp" in bad[0].message


@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("a,b,memory,clash", [
    ("vector", "gpsimd", "xs", True), ("vector", "scalar", "xp", True),
    ("vector", "scalar", "xs", False), ("vector", "gpsimd", "xp", False), ("scalar", "gpsimd", "xs", False),
])
def test_engine_port_sharing(t, a, b, memory, clash):
    stages = (Stage("first", a, "tensor_copy", (memory,)), Stage("second", b, "tensor_copy", (memory,)))
    fs = run(t, buffers=STAGE_BUFS, stages=stages)
    warn = rule(fs, "engine_port_sharing", "warn")
    assert bool(warn) == (clash and t in V2)
    if t not in V2:
        assert not rule(fs, "engine_port_sharing")
    for f in warn:
        assert "first" in f.subject and "second" in f.subject and f.criterion == "memory_hierarchy"
    assert not fails(fs)


# ---------------------------------------------------------------------------------------------
# Rule 7: DMA
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("nbytes", [64, 255, 256, 2047, 2048, 4095, 4096, 65536])
def test_dma_size(t, nbytes):
    fs = run(t, buffers=STAGE_BUFS, dmas=(Dma("ld", "xs", "load", nbytes, 128, line=100),))
    warn = rule(fs, "dma_small", "warn")
    assert bool(warn) == (nbytes < DMA_RECOMMENDED) and not fails(fs)
    if warn:
        assert warn[0].subject == "dma ld (line 100)" and f"{nbytes} B" in warn[0].message
        assert ("overhead-bound" in warn[0].message) == (nbytes < DMA_OVERHEAD)
    else:
        (p,) = rule(fs, "dma_small", "pass")
        assert ("ld" in p.message) == (nbytes < DMA_TARGET)  # named when below the 4 KiB target


@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("parts", [1, 64, 127, 128, 129])
def test_dma_partitions(t, parts):
    fs = run(t, buffers=STAGE_BUFS, dmas=(Dma("st", "xs", "store", 4096, parts, line=101),))
    assert bool(rule(fs, "partial_partitions", "warn")) == (parts < PARTITIONS)  # the run's rule too
    assert bool(rule(fs, "dma_partitions", "fail")) == (parts > PARTITIONS)
    assert all(f.subject == "dma st (line 101)" for f in fs if f.status != "pass")


@pytest.mark.parametrize("t", TARGETS)
@pytest.mark.parametrize("stride", [0, 2, 16, 17, 64])
def test_dma_stride(t, stride):
    fs = run(t, buffers=STAGE_BUFS, dmas=(Dma("ld", "xs", "load", 4096, 128, stride_bytes=stride),))
    assert bool(rule(fs, "dma_stride", "warn")) == (stride > STRIDE)
    assert bool(rule(fs, "dma_stride", "pass")) == (stride <= STRIDE)


@pytest.mark.parametrize("t", TARGETS)
def test_dma_unknown_buffer(t):
    fs = run(t, buffers=STAGE_BUFS, dmas=(Dma("ld", "nowhere", "load", 4096, 128, line=7),))
    bad = rule(fs, "dma_buffer", "fail")
    assert len(bad) == 1 and bad[0].subject == "dma ld (line 7)" and "xs, xp" in bad[0].message


# ---------------------------------------------------------------------------------------------
# Properties on random tilings: never raises; capacity, partition and matmul fails iff the oracle
# ---------------------------------------------------------------------------------------------
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402

set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "numeq-hypothesis"))
LONG = os.environ.get("NUMEQ_LONG_TESTS") == "1"
PROPERTY = settings(max_examples=2000 if LONG else 60, deadline=None, database=None, derandomize=not LONG,
                    suppress_health_check=list(HealthCheck))

buffer_st = st.builds(
    lambda i, memory, dtype, parts, free, bufs, start: B(f"b{i}", memory, dtype, (parts, free), bufs=bufs,
                                                         start_partition=start),
    st.integers(0, 10**6), st.sampled_from(["sbuf", "psum"]), st.sampled_from(sorted(BYTES)),
    st.integers(1, 160), st.integers(1, 40000), st.integers(1, 4), st.sampled_from([0, 0, 0, 32, 64, 96, 16]))


def unique(bufs):
    seen, out = set(), []
    for b in bufs:
        if b.name not in seen:
            seen.add(b.name)
            out.append(b)
    return tuple(out)


@PROPERTY
@given(t=st.sampled_from(TARGETS), bufs=st.lists(buffer_st, max_size=8).map(unique))
def test_property_buffers(t, bufs):
    fs = tiling.check(Tiling(t, buffers=bufs), targets.target(t))
    sbuf = [b for b in bufs if b.memory == "sbuf"]
    psum = [b for b in bufs if b.memory == "psum"]
    p_bytes, p_banks = psum_oracle(psum)
    expected = set()
    if sum(b.shape[1] * BYTES[b.dtype] * b.bufs for b in sbuf) > SBUF[t]:
        expected.add("sbuf_capacity")
    if p_bytes > PSUM or p_banks > PSUM_BANKS:
        expected.add("psum_capacity")
    if any(b.shape[0] > PARTITIONS for b in bufs):
        expected.add("partition_dim")
    if any(b.shape[0] <= PARTITIONS and not allowed_start(b.shape[0], b.start_partition) for b in bufs):
        expected.add("partition_start")
    assert {f.rule for f in fails(fs)} == expected


@PROPERTY
@given(t=st.sampled_from(TARGETS), k=st.integers(1, 300), k2=st.sampled_from([0, 0, 0, 1]), m=st.integers(1, 140),
       n=st.integers(1, 600), dt=st.sampled_from(["bf16", "fp32", "e4m3"]), double_row=st.booleans(),
       out_dt=st.sampled_from(["fp32", "fp32", "bf16"]))
def test_property_matmul(t, k, k2, m, n, dt, double_row, out_dt):
    parts = mm_parts(k=k, m=m, n=n, dt=dt, out_dt=out_dt, double_row=double_row, k_moving=k + k2)
    fs = tiling.check(Tiling(t, **parts), targets.target(t))
    expected = set()
    fp8 = dt == "e4m3"
    if double_row and (t != "trn2" or not fp8):
        expected.add("matmul_perf_mode")  # no double_row mode on the target, or inputs it does not take
    k_max = K_DOUBLE_ROW if double_row and t == "trn2" else K_MAX
    if k2 or k + k2 > k_max:
        expected.add("matmul_contraction")
    if m > M_MAX:
        expected.add("matmul_stationary_free")
    if n > N_MAX:
        expected.add("matmul_moving_free")
    if out_dt != "fp32":
        expected.add("matmul_output_memory")
    if n * BYTES[out_dt] > PSUM_BANK:
        expected.add("matmul_psum_bank")
    # trn2's fp8 double_row inputs with K > 128 rows: assumed packed two rows per partition.
    pack = 2 if (t == "trn2" and double_row and fp8) else 1
    rows = [k, k + k2]
    packs = [pack if r > PARTITIONS else 1 for r in rows]
    if any(-(-r // p) > PARTITIONS for r, p in zip(rows, packs)) or m > PARTITIONS:
        expected.add("partition_dim")
    sbuf = (m * packs[0] + n * packs[1]) * BYTES[dt]
    if sbuf > SBUF[t]:
        expected.add("sbuf_capacity")
    out_bytes = n * BYTES[out_dt]
    if out_bytes > PSUM or math.ceil(out_bytes / PSUM_BANK) > PSUM_BANKS:
        expected.add("psum_capacity")
    assert {f.rule for f in fails(fs)} == expected
    assert all(f.subject == "matmul mm0 (line 40)" for f in fails(fs) if f.rule.startswith("matmul"))
    assert bool(rule(fs, "matmul_fp32", "warn")) == (dt == "fp32")


names_st = st.sampled_from(["b1", "b2", "b3", "b4", "nope"])


def renamed(b):
    """The buffer as one of b0..b4, so that matmuls, stages and DMAs often name it."""
    return B(f"b{int(b.name[1:]) % 5}", b.memory, b.dtype, b.shape, bufs=b.bufs, start_partition=b.start_partition)


stage_st = st.builds(Stage, st.just("stg"), st.sampled_from(["vector", "scalar", "gpsimd", "tensor", "dsp"]),
                     st.sampled_from(["bn_stats", "tensor_copy"]), st.lists(names_st, max_size=3).map(tuple),
                     st.one_of(st.none(), st.integers(1, 70000)))


@PROPERTY
@given(t=st.sampled_from(TARGETS), bufs=st.lists(buffer_st.map(renamed), max_size=6).map(unique),
       matmuls=st.lists(st.builds(Mm, st.just("mm"), names_st, names_st, names_st, st.booleans()), max_size=3),
       stages=st.lists(stage_st, max_size=4),
       dmas=st.lists(st.builds(Dma, st.just("dma"), names_st, st.sampled_from(["load", "store"]),
                               st.integers(1, 10000), st.integers(1, 200), st.integers(0, 64)), max_size=3))
def test_property_everything_never_raises(t, bufs, matmuls, stages, dmas):
    fs = tiling.check(Tiling(t, buffers=bufs, matmuls=tuple(matmuls), stages=tuple(stages), dmas=tuple(dmas)), t)
    kinds = ("buffer ", "matmul ", "stage ", "dma ", "PSUM buffers ", "SBUF buffers ")
    for f in fs:
        assert f.evidence and f.message
        if f.status in ("fail", "warn"):
            assert f.subject.startswith(kinds), f
    # An unknown name is always reported.
    known = {b.name for b in bufs}
    unknown = any(n not in known for m in matmuls for n in (m.stationary, m.moving, m.psum))
    assert unknown == bool(rule(fs, "matmul_operands", "fail")) or any(
        b.memory != "sbuf" for m in matmuls for b in bufs if b.name in (m.stationary, m.moving))
    assert any(d.buffer not in known for d in dmas) == bool(rule(fs, "dma_buffer", "fail"))
