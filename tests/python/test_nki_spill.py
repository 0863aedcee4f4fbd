"""The compiler's spills: where a run's live tiles take more SBUF than the target holds, the tiles
leave SBUF (saved to device memory) and come back (reloaded) before their next use
(nki_perf_guide.rst, Opt #2), and the schedule counts those transfers.

Oracle: the spill sequence of a small kernel worked out by hand from the documented model
(Belady's rule: the tile used furthest ahead leaves first; a tile is saved when device memory
lacks its bytes), and the kernel's values against numpy (spills move bytes, never change them).
"""

from __future__ import annotations

import numpy as np
import pytest

from numeq import nki

nl, nisa = nki.language, nki.isa

# trn2: 224 KiB of SBUF per partition: four tiles of 56 KiB (14336 fp32 per partition).
_FREE = 14336
_TILE = _FREE * 4


@nki.jit
def five_live(x):
    out = nl.ndarray((128, _FREE), nl.float32, buffer=nl.shared_hbm)
    a, b, c, d, e, f, g, h = (nl.ndarray((128, _FREE), nl.float32, buffer=nl.sbuf) for _ in range(8))
    for t in (a, b, c, d):  # 0-3: a b c d: 224 KiB, full
        nisa.dma_copy(dst=t, src=x)
    # 4: e is a fifth: of b, c, d (next used at 6, 5, 7), d leaves: used furthest ahead
    nisa.tensor_tensor(dst=e, data1=a, data2=a, op=nl.add)
    nisa.tensor_tensor(dst=f, data1=e, data2=c, op=nl.add)  # 5: a is dead: b c e f
    nisa.tensor_tensor(dst=g, data1=f, data2=b, op=nl.add)  # 6: b f g
    nisa.tensor_tensor(dst=h, data1=g, data2=d, op=nl.add)  # 7: d comes back: g d h
    nisa.dma_copy(dst=out, src=h)
    return out


def _x() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((128, _FREE)).astype(np.float32)


def test_tiles_that_do_not_fit_are_spilled_and_the_values_are_the_same():
    x = _x()
    run = nki.run(five_live, x, target="trn2")
    assert (run.outputs == (((x + x) + x) + x) + x).all()  # fp32 in numpy's order, as the kernel adds
    (f,) = [f for f in run.findings if f.rule in ("sbuf_spill", "sbuf_capacity")]
    assert f.rule == "sbuf_spill" and f.severity == "warning"
    assert f"{5 * _TILE} B per partition" in f.message and "nki_perf_guide" in f.source
    s = run.schedule()
    names = {life.id: life.name for life in run.lives}
    d = [life.name for life in run.lives if life.memory.name == "sbuf"][3]
    # By hand: d leaves at 4 (saved after its load, 3) and comes back for 7, from its save.
    got = [(t.kind, names[t.buffer], t.at, t.issued, t.after, t.after_transfers) for t in s.spills]
    assert got == [("save", d, 4, 4, (3,), ()), ("reload", d, 7, 4, (), (0,))]
    assert all(t.bytes == _TILE * 128 and t.partitions == 128 for t in s.spills)
    assert s.spill_bytes == 2 * _TILE * 128
    # Every spill keeps its dependencies in the timeline, and each instruction starts after its reloads.
    n = len(run.trace)
    for k, t in enumerate(s.spills):
        node = n + k
        assert all(s.finish[j] <= s.start[node] for j in t.after)
        assert all(s.finish[n + j] <= s.start[node] for j in t.after_transfers)
        if t.kind == "reload":
            assert s.finish[node] <= s.start[t.at]
    assert "1 saves, 1 reloads" in str(s)


def test_copies_of_inputs_are_reloaded_unsaved_under_reload_inputs():
    run = nki.run(five_live, _x(), target="trn2", assume={"sbuf_overflow": "reload_inputs"})
    s = run.schedule()
    assert [(t.kind, t.at) for t in s.spills] == [("reload", 7)]


def test_overflow_taken_as_an_error_spills_nothing():
    run = nki.run(five_live, _x(), target="trn2", assume={"sbuf_overflow": "error"})
    (f,) = [f for f in run.errors if f.rule == "sbuf_capacity"]
    assert f"{5 * _TILE} B per partition" in f.message
    assert run.schedule().spills == []


def test_a_kernel_that_fits_spills_nothing():
    @nki.jit
    def fits(x):
        out = nl.ndarray((128, _FREE), nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, _FREE), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        b = nl.ndarray((128, _FREE), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=b, data1=a, data2=a, op=nl.add)
        nisa.dma_copy(dst=out, src=b)
        return out

    run = nki.run(fits, _x(), target="trn2")
    assert not [f for f in run.findings if f.rule in ("sbuf_spill", "sbuf_capacity")]
    assert run.schedule().spills == []


def test_one_instruction_whose_own_tiles_exceed_sbuf_is_an_error_no_spill_helps():
    # Three 96 KiB tiles read and written by one instruction: 288 KiB of 224 at once.
    free = 96 * 1024 // 4

    @nki.jit
    def too_wide(x):
        out = nl.ndarray((128, free), nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, free), nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, free), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        nisa.dma_copy(dst=b, src=x)
        c = nl.ndarray((128, free), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)
        nisa.dma_copy(dst=out, src=c)
        return out

    x = np.ones((128, free), np.float32)
    run = nki.run(too_wide, x, target="trn2")
    (f,) = [f for f in run.findings if f.rule in ("sbuf_spill", "sbuf_capacity")]
    assert f.rule == "sbuf_capacity" and f.severity == "error"
    assert "tensor_tensor" in f.message and f"{3 * 96 * 1024} B per partition" in f.message


@pytest.mark.parametrize("liveness", ["first_access", "allocation"])
def test_spills_cost_time_and_the_timeline_shows_them(liveness):
    run = nki.run(five_live, _x(), target="trn2", assume={"tile_liveness": liveness}, values=False)
    spilled = run.schedule()
    assert spilled.spills and spilled.active["dma"] > 0
    assert any("(save of" in where or "(reload of" in where for where, _ in spilled.by_line) or \
        all(i < len(run.trace) for i in spilled.critical_path)
    # The same trace with no spill (overflow taken as an error) is no slower.
    strict = nki.run(five_live, _x(), target="trn2", assume={"tile_liveness": liveness, "sbuf_overflow": "error"},
                     values=False)
    assert strict.schedule().time_s <= spilled.time_s
