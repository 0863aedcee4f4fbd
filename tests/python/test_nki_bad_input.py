"""Bad input refused (issue 41 s4): numeq.nki.run, ``kernel[grid]``, ``numeq nki run`` and the kernel
reviews refuse what they cannot run with a clear error naming the parameter and what is valid, never
a traceback, never a silent wrong result; a run is reproducible and leaves nothing behind.

Oracles: the target table's documented capacities (and AWS's documented HBM per chip) for the
refusals' limits; numpy's own .npz writer for the files; the count of programs a grid makes; a
second identical run for the trace; tracemalloc for what is allocated and what stays.
"""

from __future__ import annotations

import gc
import io
import os
import struct
import sys
import textwrap
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

import numeq.nki
from numeq import nki
from numeq.cli import main
from numeq.nki.machine.targets import target as nki_target
from nki_support import example, source_line

nl, nisa = nki.language, nki.isa
MiB = 2 ** 20
SBUF_TRN2 = 224 * 1024  # B per partition, documented (trainium2_arch.rst), as the target table states
PSUM = 16 * 1024  # B per partition, every generation


def _peak_during(fn):
    """fn's result and the most memory Python and numpy held above the start while it ran."""
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    return result, peak


# --- 1. limits checked before memory is allocated ----------------------------------------------------

def test_the_documented_capacities_are_the_tables():
    assert nki_target("trn2")["sbuf_partition_bytes"] == SBUF_TRN2
    assert nki_target("trn1")["psum_partition_bytes"] == PSUM


def test_an_sbuf_tile_73_times_sbuf_is_a_capacity_finding_and_nothing_is_allocated():
    free = 73 * SBUF_TRN2 // 4  # fp32 elements per partition: 73 x SBUF (2 GiB in all)

    def k(a):
        t = nl.ndarray((128, free), nl.float32, buffer=nl.sbuf)  # HUGE
        nisa.memset(dst=t, value=0.0)
        return a

    r, peak = _peak_during(lambda: nki.run(k, np.zeros((4, 4), np.float32)))
    assert peak < 16 * MiB, peak  # the tile is 2 GiB: it was never made
    assert not r.completed
    [f] = r.errors
    assert f.rule == "sbuf_capacity" and f.where == source_line(k, "# HUGE")
    assert str(free * 4) in f.message and str(SBUF_TRN2) in f.message
    assert f.source == nki_target("trn2").spec("sbuf_partition_bytes").cite()


@pytest.mark.parametrize("shape,buffer,rule", [
    ((128, 2 ** 40), "sbuf", "sbuf_capacity"),  # numpy: "Unable to allocate 512 TiB" before
    ((1, SBUF_TRN2 // 4 + 1), "sbuf", "sbuf_capacity"),  # one fp32 over a partition
    ((128, PSUM // 4 + 1), "psum", "psum_capacity"),
    ((2 ** 40, 4), "sbuf", "partition_dim"),  # 16 TiB over 2**40 partitions
])
def test_on_chip_tiles_no_memory_holds_are_refused_before_allocation(shape, buffer, rule):
    def k(a):
        t = nl.ndarray(shape, nl.float32, buffer=getattr(nl, buffer))
        return a

    r, peak = _peak_during(lambda: nki.run(k, np.zeros((4, 4), np.float32)))
    assert peak < 16 * MiB
    assert not r.completed and [f.rule for f in r.errors] == [rule]


def test_a_tile_of_exactly_one_partition_of_sbuf_is_allowed():
    def k(a):
        t = nl.ndarray((128, SBUF_TRN2 // 4), nl.float32, buffer=nl.sbuf)
        p = nl.ndarray((128, PSUM // 4), nl.float32, buffer=nl.psum)
        return a

    r = nki.run(k, np.zeros((4, 4), np.float32))
    assert r.completed and not r.errors


@pytest.mark.parametrize("target,limit", [("trn2", "96 GiB"), ("trn1", "32 GiB"), ("inf2", "32 GiB")])
def test_an_hbm_tensor_beyond_the_chips_hbm_is_refused_naming_shape(target, limit):
    def k(a):
        out = nl.ndarray((2 ** 20, 2 ** 30), nl.float32, buffer=nl.shared_hbm)
        return out

    with pytest.raises(ValueError, match=r"^shape: .*\(1048576, 1073741824\)") as e:
        _peak_during(lambda: nki.run(k, np.zeros((4, 4), np.float32), target=target))
    assert f"HBM holds {limit} per chip" in str(e.value) and "documented" in str(e.value)
    assert isinstance(e.value, numeq.nki.machine.context.TooLarge)


# --- 2. the grid ----------------------------------------------------------------------------------------

def _counting():
    programs = []

    def k(a):
        programs.append(tuple(nl.program_id(i) for i in range(nl.program_ndim())))
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    return k, programs


@pytest.mark.parametrize("grid", [(0,), 0, (2, 0), (-1,), -3, (2.7,), 2.7, 2.0, (True,), True, "2", (None,),
                                  (10 ** 6,), (2 ** 20, 2 ** 20)])
def test_a_bad_grid_is_a_value_error_naming_grid(grid):
    k, programs = _counting()
    with pytest.raises(ValueError, match=r"^grid: .*valid: positive ints .*at most 65536 programs"):
        nki.run(k, np.ones((4, 4), np.float32), grid=grid)
    with pytest.raises(ValueError, match=r"^grid: "):
        nki.jit(k)[grid]
    assert programs == []  # nothing ran


@pytest.mark.parametrize("grid,count", [(3, 3), ((2, 2), 4), ([2, 3], 6), (np.int64(2), 2), ((), 1), (None, 1)])
def test_a_good_grid_runs_each_program_once(grid, count):
    k, programs = _counting()
    r = nki.run(k, np.ones((4, 4), np.float32), grid=grid)
    assert r.completed and len(programs) == count and len(set(programs)) == count
    k2, programs2 = _counting()
    if not (grid is None or isinstance(grid, tuple) and not grid):
        nki.run(nki.jit(k2)[tuple(grid) if isinstance(grid, list) else grid], np.ones((4, 4), np.float32))
        assert sorted(programs2) == sorted(programs)


def test_max_programs_is_named():
    assert numeq.nki._run.MAX_PROGRAMS == 65536


# --- 3. kernels that never run ----------------------------------------------------------------------

def test_a_generator_kernel_is_refused():
    def gen_kernel(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        yield out

    async def async_kernel(a):
        return a

    for k in (gen_kernel, nki.jit(gen_kernel), async_kernel):
        with pytest.raises(TypeError, match=r"^kernel: .*(generator|coroutine) function"):
            nki.run(k, np.ones((4, 4), np.float32))


# --- 5. traces reproducible in one process -----------------------------------------------------------

@pytest.mark.parametrize("name", ["matmul_mnk", "matmul_psum_groups", "legacy_matmul"])
def test_the_same_kernel_run_twice_traces_the_same(name):
    m = example(name)
    a, b = m.inputs()
    kernel = getattr(m, name)
    runs = [nki.run(kernel, np.ascontiguousarray(a.T), b) for _ in range(2)]
    assert all(r.completed and not r.errors for r in runs)
    first, second = ([ins.to_dict() for ins in r.trace] for r in runs)
    assert first and first == second
    assert [f.to_dict() for f in runs[0].findings] == [f.to_dict() for f in runs[1].findings]


def test_unnamed_tiles_are_numbered_per_run():
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf), src=a)
        nisa.memset(dst=out, value=0.0)
        return out

    names = [[op[0] for ins in nki.run(k, np.ones((4, 4), np.float32)).trace for op in ins.dst] for _ in range(3)]
    assert names[0] == names[1] == names[2]
    assert names[0][0] == "sbuf_3"  # the input a is 1, out 2, the unnamed tile 3


# --- 6. memory after a run is released --------------------------------------------------------------

def _big_kernel():
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            t = nl.ndarray((128, 8192), nl.float32, buffer=nl.sbuf)  # 4 MiB tiles
            nisa.dma_copy(dst=t, src=a)
            u = nl.ndarray((128, 8192), nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=u, data1=t, data2=t, op=nl.add)
            nisa.dma_copy(dst=out, src=u)
        return out

    return k


def _held_after_each(call, runs: int = 30) -> list[int]:
    """Bytes traced after each of ``runs`` calls, the garbage collector off (what reference counting
    alone frees: a pytest suite runs long stretches between the collector's full passes)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    try:
        held = []
        for _ in range(runs):
            call()
            held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
        if enabled:
            gc.enable()
    return held


def test_a_run_dropped_frees_its_memory():
    k, a = _big_kernel(), np.ones((128, 8192), np.float32)

    def once():
        r = nki.run(k, a)
        assert r.completed and r.outputs.shape == a.shape
        del r

    held = _held_after_each(once)
    assert max(held[5:]) - held[4] < 2 * MiB, [h // MiB for h in held]  # each run makes ~28 MiB of arrays


def test_a_session_long_installed_block_holds_one_whole_run():
    k, a = nki.jit(_big_kernel()), np.ones((128, 8192), np.float32)
    with nki.installed() as runs:
        held = _held_after_each(lambda: k(a))
        assert len(runs) == 30 and all(r.completed and not r.errors for r in runs)
        assert runs[-1].trace and not runs[-1].released and all(r.released and not r.trace for r in runs[:-1])
        with pytest.raises(ValueError, match="released"):
            runs[0].precision_flow()
    assert max(held[5:]) - held[4] < 2 * MiB, [h // MiB for h in held]
