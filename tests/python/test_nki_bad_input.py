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


# --- 4. numeq nki run: input errors exit 2 naming the parameter ---------------------------------------

KERNELS = '''
import sys
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    nisa.tensor_tensor(dst=ta, data1=ta, data2=tb, op=nl.add)
    nisa.dma_copy(dst=out, src=ta)
    return out


@nki.jit
def exits(a, b):
    sys.exit(0)


@nki.jit
def interrupted(a, b):
    raise KeyboardInterrupt


@nki.jit
def generator(a, b):
    yield a


@nki.jit
def huge_output(a, b):
    return nl.ndarray((2 ** 20, 2 ** 30), nl.float32, buffer=nl.shared_hbm)
'''


@pytest.fixture
def work(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    np.savez(tmp_path / "ab.npz", a=a, b=b)
    return tmp_path, a, b


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = main([*map(str, args)])
    except SystemExit as e:  # argparse's own refusals (a kernel's must not get here)
        rc = ("SystemExit", e.code)
    out, err = capsys.readouterr()
    return rc, out, err


def _run(capsys, d, kernel, *args):
    return _cli(capsys, "nki", "run", f"{d}/kernels.py::{kernel}", *args)


def test_the_good_case_runs(work, capsys):
    d, a, b = work
    rc, out, err = _run(capsys, d, "add", "--inputs", d / "ab.npz", "--out", d / "o.npz")
    assert rc == 0, err
    with np.load(d / "o.npz") as z:
        np.testing.assert_array_equal(z["output_0"], (a.astype(np.float64) + b).astype(np.float32))


@pytest.mark.parametrize("kernel,message", [
    ("exits", "the kernel exits raised SystemExit(0) while it ran"),
    ("interrupted", "the kernel interrupted raised KeyboardInterrupt() while it ran"),
    ("generator", "kernel: generator is a generator function"),
])
def test_a_kernel_that_exits_or_never_runs_is_exit_2(work, capsys, kernel, message):
    d, _, _ = work
    rc, out, err = _run(capsys, d, kernel, "--inputs", d / "ab.npz", "--out", d / "o.npz", "--trace", d / "t.json")
    assert rc == 2 and message in err and "numeq nki run: " in err and "Traceback" not in err, (rc, err)
    assert out == "" and not (d / "o.npz").exists() and not (d / "t.json").exists()


def test_a_kernel_file_that_exits_as_it_loads_is_exit_2(work, capsys):
    d, _, _ = work
    (d / "leaves.py").write_text("import sys\nsys.exit(0)\n")
    rc, out, err = _cli(capsys, "nki", "run", f"{d}/leaves.py::k", "--inputs", d / "ab.npz")
    assert rc == 2 and "importing" in err and "SystemExit(0)" in err


def test_an_hbm_output_beyond_the_chip_is_exit_1_without_traceback(work, capsys):
    d, _, _ = work
    rc, out, err = _run(capsys, d, "huge_output", "--inputs", d / "ab.npz")
    assert rc == 1 and "shape: " in err and "96 GiB" in err and "Traceback" not in err


def test_a_pickled_member_is_refused(work, capsys):
    d, a, _ = work
    np.savez(d / "pickled.npz", a=a, b=np.array([{"x": 1}, None], dtype=object))  # numpy pickles it
    rc, out, err = _run(capsys, d, "add", "--inputs", d / "pickled.npz")
    assert rc == 2 and "--inputs: array b of" in err and "never unpickles" in err, err


def _npz(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


def _npy(a: np.ndarray) -> bytes:
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def test_a_member_whose_header_lies_is_refused_before_its_array_is_made(work, capsys):
    d, a, b = work
    lying = _npy(b).replace(b"(128, 64)", b"(1099511627776, 64)")  # 2**40 rows declared, 128 held
    _npz(d / "lies.npz", {"a.npy": _npy(a), "b.npy": lying})
    (rc, _, err), peak = _peak_during(lambda: _run(capsys, d, "add", "--inputs", d / "lies.npz"))
    assert rc == 2 and "--inputs: array b of" in err and "declares shape (1099511627776, 64)" in err, err
    assert peak < 64 * MiB


@pytest.mark.parametrize("damage", ["truncated", "crc", "not_a_zip", "npy", "other_member"])
def test_a_corrupt_npz_is_refused(work, capsys, damage):
    d, a, b = work
    path = d / "bad.npz"
    if damage == "truncated":
        data = (d / "ab.npz").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif damage == "crc":
        _npz(path, {"a.npy": _npy(a), "b.npy": _npy(b)})
        data = bytearray(path.read_bytes())
        at = data.index(b.tobytes()[:32])
        data[at + 100] ^= 0xFF  # one byte of b's data flipped: its CRC no longer matches
        path.write_bytes(bytes(data))
    elif damage == "not_a_zip":
        path.write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    elif damage == "npy":
        np.save(path.with_suffix(".npy"), a)
        path.with_suffix(".npy").rename(path)
    else:
        _npz(path, {"a.npy": _npy(a), "b.npy": _npy(b), "notes.txt": b"hello"})
    rc, out, err = _run(capsys, d, "add", "--inputs", path)
    assert rc == 2 and err.startswith("numeq nki run: --inputs: ") and "Traceback" not in err, (rc, err)
    assert out == ""


def test_unknown_members_are_refused_before_any_member_is_read(work, capsys):
    d, a, b = work
    # c is a damaged member: reading it would fail; its name alone is refused first.
    broken = _npy(b).replace(b"(128, 64)", b"(999999999999, 9)")
    _npz(d / "abc.npz", {"a.npy": _npy(a), "b.npy": _npy(b), "c.npy": broken})
    rc, _, err = _run(capsys, d, "add", "--inputs", d / "abc.npz")
    assert rc == 2 and "add takes (a, b): no parameter c" in err and "declares" not in err, err


def test_float64_arrays_are_not_an_nki_dtype(work, capsys):
    d, a, b = work
    np.savez(d / "f64.npz", a=a.astype(np.float64), b=b.astype(np.float64))
    rc, out, err = _run(capsys, d, "add", "--inputs", d / "f64.npz")
    assert rc == 2 and "--inputs: array a of" in err and "float64, not an NKI dtype" in err, err
    assert "--dtype a=float32" in err and "float32, " in err and "bfloat16" in err
    # Saying so rounds them: the same result as the float32 arrays (they are float32 values).
    rc, out, err = _run(capsys, d, "add", "--inputs", d / "f64.npz", "--dtype", "a=float32", "--dtype", "b=float32",
                        "--out", d / "o.npz")
    assert rc == 0, err
    with np.load(d / "o.npz") as z:
        np.testing.assert_array_equal(z["output_0"], (a.astype(np.float64) + b).astype(np.float32))


def _read_only_folder(tmp: Path) -> Path | None:
    """A folder this process cannot write into (root writes anywhere a plain file system allows)."""
    if os.geteuid() != 0:
        folder = tmp / "read-only"
        folder.mkdir()
        folder.chmod(0o500)
        return folder
    sysfs = Path("/sys")
    try:
        os.close(os.open(sysfs / "numeq-probe", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except OSError:
        return sysfs
    os.remove(sysfs / "numeq-probe")
    return None


@pytest.mark.parametrize("option", ["--out", "--trace"])
@pytest.mark.parametrize("where", ["folder", "under_a_file", "read_only"])
def test_an_unwritable_result_path_is_refused_before_the_run(work, capsys, option, where):
    d, _, _ = work
    if where == "folder":
        (d / "a_folder.npz").mkdir()
        path, message = d / "a_folder.npz", "is a folder"
    elif where == "under_a_file":
        path, message = d / "kernels.py" / "o.npz", "no such folder"
    else:
        folder = _read_only_folder(d)
        if folder is None:
            pytest.skip("no read-only folder here")
        path, message = folder / "o.npz", "cannot write"
    rc, out, err = _run(capsys, d, "add", "--inputs", d / "ab.npz", option, path)
    assert rc == 2 and err.startswith(f"numeq nki run: {option}: ") and message in err, err
    assert out == ""  # refused before the kernel ran (the report is printed after a run)


@pytest.mark.parametrize("grid", ["1000000", "65536,2", "0", "-1", "2.5"])
def test_a_bad_grid_option_is_exit_2(work, capsys, grid):
    d, _, _ = work
    rc, out, err = _run(capsys, d, "add", "--inputs", d / "ab.npz", "--grid", grid)
    assert rc == 2 and err.startswith("numeq nki run: --grid: ") and "65536" in err, err


# --- numeq review: a kernel that exits, a manifest naming unknown args -----------------------------------

def test_review_of_a_kernel_that_exits_is_exit_2(work, capsys):
    d, a, b = work
    rc, out, err = _cli(capsys, "review", f"{d}/kernels.py::exits", "--inputs", d / "ab.npz", "--op", "matmul",
                        "--out", d / "rev")
    assert rc == 2 and "SystemExit(0)" in err and "Traceback" not in err, (rc, err)
    assert not (d / "rev").exists()


REVIEWS = Path(__file__).resolve().parents[2] / "examples" / "reviews" / "kernel-ports"


@pytest.mark.parametrize("change,message", [
    (', bogus = 3 }', "kernel.args.bogus: matmul_port takes (a_t, b, k_tile): no parameter bogus; valid: a_t, b, "
                      "k_tile"),
    (' }', None),  # the manifest as it is: reviewed
])
def test_a_manifest_with_unknown_kernel_args_is_refused(tmp_path, capsys, change, message):
    for name in ("inputs.npz", "kernels.py"):
        (tmp_path / name).write_bytes((REVIEWS / name).read_bytes())
    text = (REVIEWS / "correct.toml").read_text()
    old = 'b = { array = "inputs.npz:b", dtype = "bfloat16" } }'
    assert old in text
    (tmp_path / "m.toml").write_text(text.replace(old, old[:-2] + change))
    rc, out, err = _cli(capsys, "review", tmp_path / "m.toml", "--out", tmp_path / "rev", "--quiet")
    if message is None:
        assert rc in (0, 1), err
    else:
        assert rc == 2 and message in err and "Traceback" not in err, err


def test_a_manifest_kernel_that_exits_is_refused(tmp_path, capsys):
    for name in ("inputs.npz",):
        (tmp_path / name).write_bytes((REVIEWS / name).read_bytes())
    (tmp_path / "kernels.py").write_text("import sys\n\ndef matmul_port(a_t, b, k_tile=128):\n    sys.exit(0)\n")
    (tmp_path / "m.toml").write_text((REVIEWS / "correct.toml").read_text())
    rc, out, err = _cli(capsys, "review", tmp_path / "m.toml", "--out", tmp_path / "rev", "--quiet")
    assert rc == 2 and "SystemExit(0)" in err, (rc, err)


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
