"""Two logical cores (LNC=2, ``kernel[2]``): core_barrier, sendrecv, and what orders the cores' shared
HBM accesses.

Oracles: the values by numpy indexing (a sendrecv swaps the cores' tiles; after a barrier each core
reads the half the other wrote); the findings from the documentation quoted at each test
(nki.isa.core_barrier: "a synchronization point where all specified NeuronCores must reach before
any can proceed", "only (0, 1) is supported"; nki.isa.sendrecv: its Constraints and its
gpsimd_dma sizes; the LNC guide: control flow that differs between cores is undefined), each
planted in a kernel written here and absent from its correct twin.
"""

from __future__ import annotations

import numpy as np
import pytest

from numeq import nki
from nki_support import source_line

nl, nisa = nki.language, nki.isa
rng = np.random.default_rng(45)


@nki.jit
def exchange(x):
    out = nl.ndarray((2, 128, 64), nl.float32, buffer=nl.shared_hbm)
    me = nl.program_id(0)
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[me])
    r = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=t, dst=r, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
    nisa.dma_copy(dst=out[me], src=r)
    return out


def test_sendrecv_swaps_the_cores_tiles():
    x = rng.standard_normal((2, 128, 64)).astype(np.float32)
    run = nki.run(exchange[2], x, target="trn2")
    assert run.findings == []
    np.testing.assert_array_equal(run.outputs, x[::-1])
    assert {ins.program for ins in run.trace if ins.name == "sendrecv"} == {(0,), (1,)}


def halves(barrier: bool):
    @nki.jit
    def k(x):
        out = nl.ndarray((256, 64), nl.float32, buffer=nl.shared_hbm)
        other = nl.ndarray((2, 128, 64), nl.float32, buffer=nl.shared_hbm)
        me = nl.program_id(0)
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[me * 128:(me + 1) * 128])
        nisa.dma_copy(dst=out[me * 128:(me + 1) * 128], src=t)  # WRITE
        if barrier:
            nisa.core_barrier(data=out, cores=(0, 1))
        u = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=out[(1 - me) * 128:(2 - me) * 128])  # READ the other core's half
        nisa.dma_copy(dst=other[me], src=u)
        return out, other

    return k


def test_after_a_barrier_each_core_reads_the_half_the_other_wrote():
    # The documented use: "both cores can perform the write to data in HBM ..., and then signal to
    # each other when the write operation is complete using nisa.core_barrier".
    y = rng.standard_normal((256, 64)).astype(np.float32)
    run = nki.run(halves(True)[2], y, target="trn2")
    assert run.findings == []
    out, other = run.outputs
    np.testing.assert_array_equal(out, y)
    np.testing.assert_array_equal(other, np.stack([y[128:], y[:128]]))


def test_without_the_barrier_the_cross_core_accesses_are_races():
    y = rng.standard_normal((256, 64)).astype(np.float32)
    k = halves(False)
    run = nki.run(k[2], y, target="trn2")
    races = [f for f in run.errors if f.rule == "shared_hbm_race"]
    # Core 1 writes the half core 0 read (write after read) and reads the half core 0 wrote.
    assert {f.where for f in races} == {source_line(k, "# WRITE"), source_line(k, "# READ")}
    assert all("no core_barrier" in f.message for f in races)


def test_a_barrier_one_core_never_reaches_is_a_deadlock_naming_both_lines():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        if nl.program_id(0) == 0:
            nisa.core_barrier(out, (0, 1))  # BARRIER
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)  # LAST
        return out

    run = nki.run(k[2], rng.standard_normal((128, 64)).astype(np.float32), target="trn2")
    assert not run.completed
    (f,) = run.errors
    assert f.rule == "core_deadlock" and f.where == source_line(k, "# BARRIER")
    assert source_line(k, "# LAST") in f.message and "program (1,) ended" in f.message


def test_sendrecvs_on_different_pipes_deadlock():
    @nki.jit
    def k(x):
        out = nl.ndarray((2, 128, 64), nl.float32, buffer=nl.shared_hbm)
        me = nl.program_id(0)
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[me])
        r = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=r, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=me)  # PIPE
        nisa.dma_copy(dst=out[me], src=r)
        return out

    run = nki.run(k[2], rng.standard_normal((2, 128, 64)).astype(np.float32), target="trn2")
    (f,) = run.errors
    assert f.rule == "core_deadlock" and f.where == source_line(k, "# PIPE")
    assert f"program (1,) waits at sendrecv at {source_line(k, '# PIPE')}" in f.message


def test_barriers_on_different_lines_are_divergent_control_flow():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if nl.program_id(0) == 0:
            nisa.dma_copy(dst=out, src=t)
            nisa.core_barrier(out, (0, 1))  # ZERO
        else:
            nisa.core_barrier(out, (0, 1))  # ONE
        return out

    run = nki.run(k[2], rng.standard_normal((128, 64)).astype(np.float32), target="trn2")
    (f,) = run.findings
    assert f.rule == "core_divergence" and f.severity == "warning"
    assert source_line(k, "# ZERO") in f.message and source_line(k, "# ONE") in f.message


@pytest.mark.parametrize("case", ["sends_elsewhere", "dtype", "shape"])
def test_sendrecvs_that_do_not_pair_name_both_lines(case):
    @nki.jit
    def k(x):
        me = nl.program_id(0)
        dtype = nl.bfloat16 if case == "dtype" and me == 1 else nl.float32
        cols = 32 if case == "shape" and me == 1 else 64
        t = nl.ndarray((128, cols), dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        r = nl.ndarray((128, cols), dtype, buffer=nl.sbuf)
        to = me if case == "sends_elsewhere" and me == 1 else 1 - me  # core 1 sends to itself
        nisa.sendrecv(src=t, dst=r, send_to_rank=to, recv_from_rank=1 - me, pipe_id=3)  # SR
        return x

    run = nki.run(k[2], np.zeros((1, 1), np.float32), target="trn2")
    f = next(f for f in run.errors if f.rule == "sendrecv_pairing")
    assert f.message.count(source_line(k, "# SR")) == 2  # both cores' lines (one line here, named twice)


def test_the_documented_limits_of_core_barrier_and_sendrecv():
    def one(body, grid=2, target="trn2"):
        @nki.jit
        def k(x):
            body(x)
            return x
        kernel = k[grid] if grid else k
        return {f.rule for f in nki.run(kernel, np.zeros((128, 512), np.float32), target=target).errors}

    def barrier(x):
        out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
        nisa.core_barrier(out, (0, 1))

    assert one(barrier, grid=None) == {"instruction_constraint"}  # "only allowed ... when LNC is enabled"
    assert "target_generation" in one(barrier, target="trn1")  # "Available only on NeuronCore-v3 or newer"

    def private_data(x):
        t = nl.ndarray((1, 1), nl.float32, buffer=nl.sbuf)
        nisa.core_barrier(t, (0, 1))

    assert one(private_data) == {"instruction_constraint"}  # "must be data in shared HBM"

    def wide_gpsimd_dma(x):  # 512 fp32 = 2048 B per partition; gpsimd_dma takes 1024 for 32-bit types
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
        r = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        me = nl.program_id(0)
        nisa.sendrecv(src=t, dst=r, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0,
                      dma_engine=nisa.dma_engine.gpsimd_dma)

    assert one(wide_gpsimd_dma) == {"instruction_constraint"}


def test_each_core_has_its_own_sbuf():
    # 128 KiB per partition on each core: together 256 KiB, past trn2's 224 KiB per partition, but each
    # core's SBUF holds its own (LNC=2 runs on two physical cores).
    @nki.jit
    def k(x):
        out = nl.ndarray((2, 128, 1), nl.float32, buffer=nl.shared_hbm)
        me = nl.program_id(0)
        big = nl.ndarray((128, 32768), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=big, value=1.0)
        nisa.core_barrier(out, (0, 1))
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=s, op=nl.add, data=big, axis=1)
        nisa.dma_copy(dst=out[me], src=s)
        return out

    run = nki.run(k[2], np.zeros((1, 1), np.float32), target="trn2")
    assert not {"sbuf_capacity", "sbuf_spill"} & {f.rule for f in run.findings}
    np.testing.assert_array_equal(run.outputs, np.full((2, 128, 1), 32768.0))


def test_sendrecv_moves_unwritten_elements_as_undefined_not_as_an_error():
    # A DMA moves what it is given: nki-library's rmsnorm_mx_quantize_tkg sends whole MX scale tiles, most
    # of whose partitions quantize_mx never writes. The receiver's elements from them stay undefined
    # (an output stored from them is only partly written), as dma_copy leaves them.
    @nki.jit
    def k(x):
        out = nl.ndarray((2, 128, 64), nl.float32, buffer=nl.shared_hbm)
        me = nl.program_id(0)
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:32, :], src=x[me, 0:32, :])  # rows 32.. never written
        r = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=r, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
        nisa.dma_copy(dst=out[me], src=r)
        return out

    x = rng.standard_normal((2, 128, 64)).astype(np.float32)
    run = nki.run(k[2], x, target="trn2")
    assert run.errors == [] and {f.rule for f in run.findings} == {"output_partly_written"}
    np.testing.assert_array_equal(run.outputs[:, :32], x[::-1, :32])


def test_two_cores_run_on_their_own_engines_in_the_schedule():
    # LNC=2 "will be run on two physical cores": two cores each doing one half take the time one core
    # takes for one half (their engines and DMA engines apart), not twice it.
    @nki.jit
    def k(x):
        out = nl.ndarray((2, 128, 2048), nl.float32, buffer=nl.shared_hbm)
        me = nl.program_id(0)
        t = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[me])
        e = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[me], src=e)
        return out

    x = rng.standard_normal((2, 128, 2048)).astype(np.float32)
    both, one = nki.run(k[2], x, target="trn2").schedule(), nki.run(k, x, target="trn2").schedule()
    assert both.time_s == pytest.approx(one.time_s, rel=1e-9)


def test_a_barrier_holds_its_engine_until_the_other_core_arrives_in_the_schedule():
    # "The barrier will block execution on this engine, other engines will not be blocked": core 1's
    # GpSimd work after the barrier starts once core 0's work before its barrier is done.
    @nki.jit
    def k(x):
        out = nl.ndarray((2, 128, 1), nl.float32, buffer=nl.shared_hbm)
        me = nl.program_id(0)
        t = nl.ndarray((128, 4096), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        if me == 0:
            nisa.activation(dst=t, op=nl.exp, data=t)  # LONG: only core 0
        nisa.core_barrier(out, (0, 1))
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=s, value=2.0, engine=nisa.gpsimd_engine)  # AFTER
        nisa.dma_copy(dst=out[me], src=s)
        return out

    run = nki.run(k[2], np.zeros((1, 1), np.float32), target="trn2")
    sched = run.schedule()
    long_ = next(i for i, ins in enumerate(run.trace) if ins.where == source_line(k, "# LONG"))
    after = next(i for i, ins in enumerate(run.trace) if ins.where == source_line(k, "# AFTER") and ins.program == (1,))
    assert sched.start[after] >= sched.finish[long_] > 0


def test_dynamic_loops_that_run_differently_on_the_cores_are_divergent_control_flow():
    # The LNC guide: "if you use dynamic control flow, and this control-flow is different on the
    # different cores, then the behavior is undefined". A loop bounded by a register each core loads
    # from its own row: equal counts are fine, different ones a finding at the loop's line.
    @nki.jit
    def k(counts):
        me = nl.program_id(0)
        c = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=c, src=counts[me:me + 1, :])
        reg = nisa.register_alloc()
        nisa.register_load(reg, c)
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        for _ in nl.dynamic_range(reg):  # LOOP
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        out = nl.ndarray((2, 128, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[me], src=t)
        return out

    same = nki.run(k[2], np.array([[3], [3]], np.int32), target="trn2")
    assert "core_divergence" not in {f.rule for f in same.findings}
    differ = nki.run(k[2], np.array([[3], [5]], np.int32), target="trn2")
    (f,) = [f for f in differ.findings if f.rule == "core_divergence"]
    assert f.where == source_line(k, "# LOOP") and "3 iterations" in f.message and "5 iterations" in f.message
    np.testing.assert_array_equal(differ.outputs[:, 0, 0], [8.0, 32.0])
