"""Run.graph() and Run.schedule(): the dependency graph of a run and its predicted timeline.

Oracles: the graph against dependencies computed element by element from the slices the test
kernels used (numpy index sets, not numeq's placements); the timeline against the documented model
composed by hand for a small kernel, and, on every example kernel, against what any schedule of
its graph must satisfy (every dependency respected, each engine's instructions in program order
without overlap, no faster than its busiest engine, no slower than running everything in turn).
"""

from __future__ import annotations

import numpy as np
import pytest

import numeq.nki
from nki_support import example
from numeq import nki
from numeq.nki.machine.targets import target

nl, nisa = nki.language, nki.isa

# Partition ranges a compute engine may start at (the partial-partition rule) and column blocks.
_PARTS = [(0, 128), (0, 64), (64, 128), (0, 32), (32, 64), (64, 96), (96, 128)]
_COLS = [(0, 64), (0, 32), (32, 64), (16, 48), (8, 24), (40, 56)]


def _program(seed: int, steps: int = 14) -> list[tuple]:
    """Random copies and adds between blocks of three [128, 64] tiles: (op, dst, srcs), each
    operand (tile, (p0, p1), (c0, c1)); a step's operands share their partition and column counts."""
    rng = np.random.default_rng(seed)
    program = []
    for _ in range(steps):
        parts = [p for p in _PARTS]
        p = parts[rng.integers(len(parts))]
        width = [c for c in _COLS][rng.integers(len(_COLS))]
        w = width[1] - width[0]
        same_p = [q for q in _PARTS if q[1] - q[0] == p[1] - p[0]]

        def operand() -> tuple:
            q = same_p[rng.integers(len(same_p))]
            c0 = int(rng.integers(0, 64 - w + 1))
            return int(rng.integers(3)), q, (c0, c0 + w)

        op = "add" if rng.random() < 0.5 else "copy"
        dst = (int(rng.integers(3)), p, width)
        program.append((op, dst, [operand() for _ in range(2 if op == "add" else 1)]))
    return program


def _kernel(program: list[tuple]):
    @nki.jit
    def kernel(x):
        tiles = [nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf) for _ in range(3)]
        for t in tiles:
            nisa.dma_copy(dst=t, src=x)

        def view(o):
            t, (p0, p1), (c0, c1) = o
            return tiles[t][p0:p1, c0:c1]

        for op, dst, srcs in program:
            if op == "copy":
                nisa.tensor_copy(dst=view(dst), src=view(srcs[0]))
            else:
                nisa.tensor_tensor(dst=view(dst), data1=view(srcs[0]), data2=view(srcs[1]), op=nl.add)
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tiles[0])
        return out

    return kernel


def _elements(o: tuple) -> set:
    t, (p0, p1), (c0, c1) = o
    return {(t, p, c) for p in range(p0, p1) for c in range(c0, c1)}


def _exact_edges(program: list[tuple]) -> set:
    """Every ordering the program needs, element by element: (before, after, kind) by trace index
    (three loads first, the final store last)."""
    whole = lambda t: (t, (0, 128), (0, 64))  # noqa: E731
    steps = [([whole(t)], []) for t in range(3)]  # the loads: (writes, reads of tiles)
    steps += [([dst], srcs) for _, dst, srcs in program]
    steps.append(([], [whole(0)]))
    last_writer: dict = {}
    readers: dict = {}
    edges = set()
    for i, (writes, reads) in enumerate(steps):
        for o in reads:
            for e in _elements(o):
                if e in last_writer:
                    edges.add((last_writer[e], i, "raw"))
        for o in writes:
            for e in _elements(o):
                if e in last_writer:
                    edges.add((last_writer[e], i, "waw"))
                for j in readers.get(e, ()):
                    if j != i:
                        edges.add((j, i, "war"))
        for o in reads:
            for e in _elements(o):
                readers.setdefault(e, set()).add(i)
        for o in writes:
            for e in _elements(o):
                last_writer[e] = i
                readers[e] = set()
    return edges


@pytest.mark.parametrize("seed", range(12))
def test_the_graph_is_every_ordering_the_bytes_need(seed: int) -> None:
    program = _program(seed)
    r = numeq.nki.run(_kernel(program), np.ones((128, 64), np.float32))
    assert r.completed and not r.errors, [str(f) for f in r.errors]
    g = r.graph()
    tile_edges = {(e.before, e.after, e.kind) for e in g.edges if e.buffer not in ("x", "out")}
    # The input and output HBM tensors add the loads' and store's own orderings only.
    exact = _exact_edges(program)
    assert exact == tile_edges, (sorted(exact - tile_edges)[:5], sorted(tile_edges - exact)[:5])


def test_strided_views_never_lose_an_ordering() -> None:
    """Every other column: the graph compares hulls, so it may order two interleaved views that
    touch different columns (never the other way round)."""

    @nki.jit
    def kernel(x):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        u = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=u, src=x)
        nisa.tensor_copy(dst=t[:, 0:64:2], src=u[:, 0:32])   # 2: even columns of t
        nisa.tensor_copy(dst=u[:, 32:64], src=t[:, 1:64:2])  # 3: odd columns: no value from 2
        nisa.tensor_copy(dst=u[:, 0:32], src=t[:, 0:64:2])   # 4: reads 2's columns
        return u

    r = numeq.nki.run(kernel, np.ones((128, 64), np.float32))
    edges = {(e.before, e.after, e.kind) for e in r.graph().edges}
    assert {(2, 4, "raw"), (0, 2, "waw"), (1, 3, "waw"), (2, 4, "war")} <= edges  # 4 overwrites what 2 read
    assert (0, 3, "raw") in edges  # t's odd columns hold the load's values


def _small_kernel():
    @nki.jit
    def add(a, b):
        ta = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        tb = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a)
        nisa.dma_copy(dst=tb, src=b)
        s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=s, data1=ta, data2=tb, op=nl.add)
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=s)
        return out

    return add


def test_a_small_kernel_is_timed_as_the_documented_model_says() -> None:
    """Two loads, an add, a store, composed by hand from the target table: each 256 KiB transfer
    spans 128 partitions, so all 16 DMA engines, and moves at the smaller of 16 engines' bandwidth
    and the core's HBM share after its fixed cost; the second load waits for the engines, the add
    for both loads (on the Vector engine's clock), the store for the add."""
    x = np.ones((128, 512), np.float32)
    r = numeq.nki.run(_small_kernel(), x, x)
    s = r.schedule()
    t = target("trn2")
    rate = min(16 * t["dma_engine_bytes_per_s"], t["hbm_bytes_per_s"])
    dma = t["dma_fixed_s"] + 128 * 512 * 4 / rate
    add = r.trace[2].cycles / t["vector_clock_hz"]
    assert r.trace[2].cycles == 512  # max(64, N) for N = 512 elements per partition (SDK 2.26 docstring)
    assert s.time_s == pytest.approx(3 * dma + add, rel=1e-12)
    assert s.start[2] == pytest.approx(2 * dma, rel=1e-12)
    assert s.critical_path == [0, 1, 2, 3]
    assert s.bound_by == "dma"
    assert s.active["vector"] == pytest.approx(add / s.time_s, rel=1e-12)
    # A parameter changed by name changes the prediction by exactly its part.
    slower = r.schedule(assume={"dma_fixed_s": 1e-6})
    assert slower.time_s == pytest.approx(s.time_s + 3 * (1e-6 - t["dma_fixed_s"]), rel=1e-12)
    assert slower.parameters["dma_fixed_s"].evidence == "assumed"


@pytest.mark.parametrize("bad, message", [({"dma_speed": 1}, "no parameter 'dma_speed'"),
                                          ({"dma_fixed_s": "fast"}, "must be a number"),
                                          ({"vector_clock_hz": 0}, "above 0"),
                                          ({"dma_fixed_s": float("nan")}, "above 0")])
def test_a_bad_parameter_is_named(bad: dict, message: str) -> None:
    x = np.ones((128, 512), np.float32)
    r = numeq.nki.run(_small_kernel(), x, x)
    with pytest.raises(ValueError, match=message):
        r.schedule(assume=bad)


@pytest.mark.parametrize("name", ["matmul_basic", "matmul_kouter", "matmul_mnk", "matmul_psum_groups", "softmax",
                                  "layernorm", "rmsnorm", "flash_attention", "transpose", "cumsum"])
def test_every_example_schedule_keeps_its_graph(name: str) -> None:
    m = example(name)
    r = numeq.nki.run(getattr(m, name), *m.inputs())
    g, s = r.graph(), r.schedule()
    eps = 1e-15
    for e in g.edges:
        assert s.start[e.after] >= s.finish[e.before] - eps, e
    by_engine: dict[str, list[int]] = {}
    for i, ins in enumerate(r.trace):
        by_engine.setdefault(ins.engine, []).append(i)
    serial = sum(s.finish[i] - s.start[i] for i in range(len(r.trace)))
    for engine, idx in by_engine.items():
        busy = sum(s.finish[i] - s.start[i] for i in idx)
        if engine != "dma":  # one instruction stream per compute engine, in program order
            assert all(s.start[b] >= s.finish[a] - eps for a, b in zip(idx, idx[1:]))
            assert s.time_s >= busy - eps
    assert max(s.finish) == s.time_s <= serial + eps
    # The critical path is a chain from the start to the end: each link waits for the one before.
    path = s.critical_path
    assert s.finish[path[-1]] == s.time_s and s.start[path[0]] == 0
    assert all(s.start[b] >= s.finish[a] - eps for a, b in zip(path, path[1:]))
    assert sum(t for _, t in s.by_line) == pytest.approx(sum(s.finish[i] - s.start[i] for i in path))
    assert 0 < max(s.active.values()) <= 1 + eps


# --- hazards: loop-carried dependences in affine_range --------------------------------------------------------

from nki_support import line_finder  # noqa: E402

line_of = line_finder(__file__)


def _decay(loop):
    @nki.jit
    def decay(x):
        acc = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        for i in loop(4):
            xi = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=xi, src=x[i])
            nisa.tensor_scalar(dst=t, data=acc, op0=nl.multiply, operand0=0.5)  # reads last iteration's acc
            nisa.tensor_tensor(dst=acc, data1=t, data2=xi, op=nl.add)  # writes acc for the next
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out

    return decay


_X = np.random.default_rng(0).standard_normal((4, 128, 64)).astype(np.float32)


def test_a_value_carried_between_affine_iterations_is_an_error_naming_both_lines() -> None:
    r = numeq.nki.run(_decay(nl.affine_range), _X)
    assert r.completed and not r.errors
    (h,) = r.hazards()
    assert (h.rule, h.severity) == ("loop_carried_dependency", "error")
    assert h.where == line_of("# reads last iteration's acc")
    assert line_of("# writes acc for the next") in h.message
    assert "8192 of 8192 output elements change" in h.message and h.count == 3
    # numpy's fp32 recurrence run forwards is the output, and backwards is not.
    fwd, bwd = np.zeros((128, 64), np.float32), np.zeros((128, 64), np.float32)
    for i in range(4):
        fwd, bwd = fwd * np.float32(0.5) + _X[i], bwd * np.float32(0.5) + _X[3 - i]
    assert np.array_equal(r.outputs, fwd) and not np.array_equal(fwd, bwd)


@pytest.mark.parametrize("loop", ["sequential_range", "static_range"])
def test_the_same_recurrence_in_an_ordered_loop_is_no_hazard(loop: str) -> None:
    r = numeq.nki.run(_decay(getattr(nl, loop)), _X)
    assert r.completed and r.hazards() == []


def test_associative_reductions_are_no_hazard() -> None:
    """acc = acc + x in SBUF and matmuls accumulating into PSUM over affine iterations (the
    matrix-multiplication tutorial's pattern) are what the documents except."""

    @nki.jit
    def sums(x, a_t, b):
        acc = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for i in nl.affine_range(4):
            xi = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=xi, src=x[i])
            nisa.tensor_tensor(dst=acc, data1=acc, data2=xi, op=nl.add)
        ps = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            at = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
            bt = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[k * 128:(k + 1) * 128, :])
            nisa.dma_copy(dst=bt, src=b[k * 128:(k + 1) * 128, :])
            nisa.nc_matmul(ps, at, bt)
        res = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=ps)
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out, res

    import ml_dtypes
    rng = np.random.default_rng(1)
    a_t = rng.standard_normal((256, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 512)).astype(ml_dtypes.bfloat16)
    r = numeq.nki.run(sums, _X, a_t, b)
    assert r.completed and not r.errors
    assert r.hazards() == []


def test_a_carried_value_that_changes_nothing_is_a_warning() -> None:
    @nki.jit
    def flag(x):
        one = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=one, value=1.0)
        out = nl.ndarray((4, 128, 64), nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            xi = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=xi, src=x[i])
            nisa.tensor_tensor(dst=xi, data1=xi, data2=one, op=nl.multiply)  # reads one
            nisa.memset(dst=one, value=1.0)  # rewrites one, the same value
            nisa.dma_copy(dst=out[i], src=xi)
        return out

    r = numeq.nki.run(flag, _X)
    (h,) = r.hazards()
    assert h.severity == "warning" and "do not change" in h.message
    assert h.where == line_of("# reads one") and line_of("# rewrites one") in h.message


@pytest.mark.parametrize("name", ["matmul_basic", "matmul_kouter", "matmul_mnk", "matmul_nmk", "matmul_psum_groups",
                                  "softmax", "layernorm", "rmsnorm", "flash_attention", "transpose", "cumsum",
                                  "legacy_matmul", "sum_of_squares"])
def test_no_example_has_a_hazard(name: str) -> None:
    m = example(name)
    r = numeq.nki.run(getattr(m, name), *m.inputs())
    assert r.hazards() == []


# --- values=False: the trace, findings and schedule without computing values -----------------------------------

@pytest.mark.parametrize("name", ["matmul_kouter", "matmul_psum_groups", "softmax", "layernorm", "flash_attention",
                                  "legacy_matmul", "cumsum"])
def test_a_run_without_values_traces_and_schedules_as_the_full_run(name: str) -> None:
    m = example(name)
    full = numeq.nki.run(getattr(m, name), *m.inputs())
    bare = numeq.nki.run(getattr(m, name), *m.inputs(), values=False)
    assert bare.completed and bare.outputs is None and not bare.values
    strip = lambda t: [(i.engine, i.name, i.where, i.dst, i.srcs, i.bytes, i.cycles, i.writes, i.reads)  # noqa: E731
                       for i in t]
    assert strip(bare.trace) == strip(full.trace)
    assert [str(f) for f in bare.findings] == [str(f) for f in full.findings]
    assert bare.schedule().time_s == full.schedule().time_s
    with pytest.raises(ValueError, match="computed no values"):
        bare.exact()
    with pytest.raises(ValueError, match="computed no values"):
        numeq.compare(bare, numeq.ops.sum(np.ones(4)), "trainium.trn2")


def test_control_flow_on_a_tile_value_is_refused_without_values() -> None:
    @nki.jit
    def reads_a_count(n, x):
        t = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=n)
        r = nisa.register_alloc()
        nisa.register_load(r, t)
        return x

    with pytest.raises(numeq.nki.Unsupported, match=r"values=False.*register_load of t"):
        numeq.nki.run(reads_a_count, np.array([[3]], np.int32), np.ones((128, 4), np.float32), values=False)


def test_a_kernel_parameter_named_values_is_the_kernels() -> None:
    @nki.jit
    def scale(values):
        t = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=values)
        out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(512, dtype=np.float32).reshape(128, 4)
    assert np.array_equal(numeq.nki.run(scale, values=x).outputs, x)
    with pytest.raises(TypeError, match="values: True or False"):
        numeq.nki.run(_small_kernel(), x, x, values=x)


# --- the review of a kernel shows its hazards and its timeline --------------------------------------------------

def test_a_kernel_review_lists_hazards_and_the_timeline(tmp_path) -> None:
    import ml_dtypes

    from numeq.review.kernel import review_kernel

    @nki.jit
    def matmul(a_t, b):
        K, M = a_t.shape
        out = nl.ndarray((M, b.shape[1]), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((M, b.shape[1]), nl.float32, buffer=nl.psum)
        one = nl.ndarray((128, M), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=one, value=1.0)
        for k in nl.affine_range(K // 128):
            at = nl.ndarray((128, M), nl.float32, buffer=nl.sbuf)
            bt = nl.ndarray((128, b.shape[1]), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[k * 128:(k + 1) * 128, :])
            nisa.dma_copy(dst=bt, src=b[k * 128:(k + 1) * 128, :])
            nisa.tensor_tensor(dst=at, data1=at, data2=one, op=nl.multiply)  # review: reads one
            nisa.memset(dst=one, value=1.0)  # review: writes one again
            atb = nl.ndarray((128, M), b.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=atb, src=at)
            nisa.nc_matmul(acc, atb, bt)
        res = nl.ndarray((M, b.shape[1]), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    rng = np.random.default_rng(2)
    a = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 512)).astype(ml_dtypes.bfloat16)
    a_t = np.ascontiguousarray(a.T).astype(np.float32)
    review = review_kernel(matmul, {"a": a, "b": b}, "matmul", kernel_args={"a_t": a_t, "b": b}, precision=False)
    (h,) = [f for f in review.findings if f.rule == "loop_carried_dependency"]
    assert h.status == "warn" and h.criterion == "tiling_limits"
    assert line_of("# review: reads one") in h.message and line_of("# review: writes one again") in h.message
    review.write(tmp_path / "r")
    md = (tmp_path / "r" / "review.md").read_text()
    assert "## The kernel's timeline" in md and f"predicted time {review.run.schedule().time_s * 1e6:.2f} us" in md
    assert "predicted engine timeline" in (tmp_path / "r" / "review.html").read_text()


def test_a_value_carried_through_the_older_interfaces_assignment_is_found() -> None:
    """``t[...] = nl.exp(...)``: the older interface places an instruction's result in the view it
    is assigned to, and the graph reads that view as written (the carried update below is found;
    the same kernel in sequential_range is not flagged)."""

    def kernel_in(loop_name):
        with nki.installed():
            import neuronxcc.nki as onki
            import neuronxcc.nki.language as onl

            @onki.jit
            def decay(x):
                out = onl.ndarray((128, 64), dtype=onl.float32, buffer=onl.shared_hbm)
                acc = onl.zeros((128, 64), onl.float32, buffer=onl.sbuf)
                for i in getattr(onl, loop_name)(4):
                    xi = onl.load(x[i])
                    acc[...] = onl.add(onl.multiply(acc, 0.5), xi)  # older: carried
                onl.store(out, value=acc)
                return out

        return decay

    carried = numeq.nki.run(kernel_in("affine_range"), _X)
    (h,) = carried.hazards()
    assert h.severity == "error" and h.where == line_of("# older: carried")
    assert numeq.nki.run(kernel_in("sequential_range"), _X).hazards() == []


def test_an_nki_jit_call_passes_a_values_flag_to_the_kernel() -> None:
    """Under installed(), every keyword of a kernel call is the kernel's, a bool named values too."""

    @nki.jit
    def pick(x, values=False):
        t = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if values:
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.ones((128, 4), np.float32)
    with numeq.nki.installed():
        assert np.array_equal(pick(x, values=True), 2 * x) and np.array_equal(pick(x, values=False), x)


def test_two_identical_kernels_in_two_files_are_named_by_their_own_file(tmp_path) -> None:
    """Code objects compare equal across files (CPython leaves co_filename out of code equality):
    a finding's line names the file of the kernel that ran, not of its twin run before."""
    import importlib.util

    source = ("import nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n\n@nki.jit\n"
              "def copy(x):\n    out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)\n"
              "    nisa.dma_copy(dst=out, src=x)\n    return out\n")
    wheres = []
    for name in ("first_twin", "second_twin"):
        (tmp_path / f"{name}.py").write_text(source)
        spec = importlib.util.spec_from_file_location(name, tmp_path / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        with numeq.nki.installed():
            spec.loader.exec_module(module)
        r = numeq.nki.run(module.copy, np.ones((128, 4), np.float32))
        wheres.append(r.trace[0].where)
    assert wheres == ["first_twin.py:9", "second_twin.py:9"]


def test_a_strided_write_does_not_hide_the_writer_of_the_bytes_between() -> None:
    """t[:, 1:64:2] spans the even columns 2..62 too: a read of column 2 still waits, read after
    write, for the load that wrote it (the strided write holds none of it)."""

    @nki.jit
    def kernel(x):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        u = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)                           # 0: all of t
        nisa.dma_copy(dst=u, src=x)                           # 1
        nisa.tensor_copy(dst=t[:, 1:64:2], src=u[:, 0:32])    # 2: odd columns only
        nisa.tensor_copy(dst=u[:, 0:1], src=t[:, 2:3])        # 3: column 2, the load's
        return u

    r = numeq.nki.run(kernel, np.ones((128, 64), np.float32))
    edges = {(e.before, e.after, e.kind) for e in r.graph().edges}
    assert (0, 3, "raw") in edges
