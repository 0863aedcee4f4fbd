"""The engine sequencers' registers (nisa.register_alloc / register_move / register_load /
register_store, nisa.VirtualRegister) and the loops they drive (nl.fori_loop, nl.while_loop,
nl.dynamic_range with register bounds, ``while reg:``, ``t.ap(scalar_offset=reg)``), each kernel
checked against a numpy oracle of what its docstring says it computes; the undocumented choices
(assumptions register_overflow, register_unwritten, register_float, register_loop_bound) both ways."""

from __future__ import annotations

import numpy as np
import pytest

from numeq import nki

nl, nisa = nki.language, nki.isa
RNG = np.random.default_rng(47)


def _int_tile(src):
    """An SBUF (1, 1) int32 tile holding the HBM (1, 1) tensor src."""
    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    return t


def _stored(reg, dtype=None):
    """An HBM (1, 1) tensor holding register reg's value (register_store, then a DMA out)."""
    t = nl.ndarray((1, 1), dtype=dtype or nl.int32, buffer=nl.sbuf)
    nisa.register_store(t, reg)
    out = nl.ndarray((1, 1), dtype=dtype or nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


# --- fori_loop ------------------------------------------------------------------------------------

@nki.jit
def gather_rows(data, count):
    """Rows 0 .. count-1 of data into the output, one per iteration of a fori_loop whose upper bound
    is a register loaded from count, each addressed by the loop register as a scalar_offset."""
    R, F = data.shape
    reg = nisa.register_alloc()
    nisa.register_load(reg, _int_tile(count))
    out = nl.ndarray((R, F), dtype=data.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=nl.zeros((R, F), dtype=data.dtype, buffer=nl.sbuf))
    row = nl.ndarray((1, F), dtype=data.dtype, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=row, src=data.ap([[F, 1], [1, F]], offset=0, scalar_offset=i, indirect_dim=0))
        nisa.dma_copy(dst=out.ap([[F, 1], [1, F]], offset=0, scalar_offset=i, indirect_dim=0), src=row)

    nl.fori_loop(0, reg, body)
    return out


@pytest.mark.parametrize("n", [0, 1, 5, 16])
def test_fori_loop_with_a_register_bound_gathers_rows_by_scalar_offset(n):
    data = RNG.standard_normal((16, 32)).astype(np.float32)
    r = nki.run(gather_rows, data, np.array([[n]], np.int32))
    expected = np.zeros_like(data)
    expected[:n] = data[:n]
    assert not r.errors and np.array_equal(r.outputs, expected)
    # Each iteration's two DMAs are recorded with the loop index, as nl.*_range loops' are.
    iterations = [i.iteration for i in r.trace if i.name == "dma_copy" and i.detail.get("indirect")]
    assert iterations == [(k,) for k in range(n) for _ in range(2)]


def test_fori_loop_runs_range_lower_upper_step_and_passes_the_index_by_value():
    @nki.jit
    def k(lo):
        lower = nisa.register_alloc()
        nisa.register_load(lower, _int_tile(lo))
        seen = nl.ndarray((1, 16), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(seen, -1)
        out = nl.ndarray((1, 16), dtype=nl.int32, buffer=nl.shared_hbm)

        def body(i):
            cell = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.register_store(cell, i)
            nisa.dma_copy(dst=out.ap([[16, 1], [1, 1]], offset=0, scalar_offset=i, indirect_dim=1), src=cell)
            nisa.register_move(i, 100)  # writing i has no effect on the loop (fori_loop docs)

        nisa.dma_copy(dst=out, src=seen)
        nl.fori_loop(lower, 14, body, step=3)
        return out

    r = nki.run(k, np.array([[2]], np.int32))
    expected = np.full((1, 16), -1, np.int32)
    for i in range(2, 14, 3):
        expected[0, i] = i
    assert not r.errors and np.array_equal(r.outputs, expected)


def test_fori_loop_refuses_a_register_step_and_a_non_register_bound():
    @nki.jit
    def k(x):
        reg = nisa.register_alloc(4)
        nl.fori_loop(0, 4, lambda i: None, step=reg)
        return x

    with pytest.raises(ValueError, match="step"):
        nki.run(k, np.zeros((1, 1), np.float32))

    @nki.jit
    def k2(x):
        nl.fori_loop(0, 4.0, lambda i: None)
        return x

    with pytest.raises(TypeError, match="upper"):
        nki.run(k2, np.zeros((1, 1), np.float32))


# --- while_loop -----------------------------------------------------------------------------------

@nki.jit
def count_down(data, count):
    """The while_loop docs' example: acc += val while a counter loaded into the condition register
    counts down to zero (the body decrements it in SBUF and reloads the register it returns)."""
    val = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=val, src=data)
    acc = nl.zeros((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    count_sb = _int_tile(count)
    one = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=one, value=1)
    reg = nisa.register_alloc()
    nisa.register_load(reg, count_sb)

    def body(r):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=val, op=nl.add)
        nisa.tensor_tensor(dst=count_sb, data1=count_sb, data2=one, op=nl.subtract)
        nisa.register_load(r, count_sb)
        return r

    nl.while_loop(reg, body)
    out = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:1], src=acc)
    init_now = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.register_store(init_now, reg)  # the body received a copy: init keeps its value
    nisa.dma_copy(dst=out[:, 1:2], src=init_now)
    return out


@pytest.mark.parametrize("n", [0, 1, 7])
def test_while_loop_counts_down(n):
    val = np.array([[1.25]], np.float32)
    r = nki.run(count_down, val, np.array([[n]], np.int32))
    assert not r.errors
    assert r.outputs[0, 0] == np.float32(1.25 * n)  # exact: a multiple of 1/4 below 2^24
    assert r.outputs[0, 1] == n  # init is passed by value (while_loop docs)
    # Each iteration's two tensor_tensor instructions are recorded with the iteration's number.
    assert [i.iteration for i in r.trace if i.name == "tensor_tensor"] == [(k,) for k in range(n) for _ in range(2)]


def test_while_loop_takes_a_register_and_a_body_returning_one():
    @nki.jit
    def k(x):
        nl.while_loop(1, lambda r: r)
        return x

    with pytest.raises(TypeError, match="init"):
        nki.run(k, np.zeros((1, 1), np.float32))

    @nki.jit
    def k2(x):
        nl.while_loop(nisa.register_alloc(3), lambda r: None)
        return x

    with pytest.raises(TypeError, match="returns the next condition register"):
        nki.run(k2, np.zeros((1, 1), np.float32))


def test_bare_while_on_a_register():
    """The VirtualRegister docs' dynamic while loop: ``while reg:``, the body reloading reg from a
    flag it rewrites (here: flags[i] of a vector, read by a scalar_offset in a tile)."""
    @nki.jit
    def k(flags):
        n = flags.shape[1]
        cond = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=cond, src=flags[:, 0:1])
        position = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        reg = nisa.register_alloc()
        nisa.register_load(reg, cond)
        while reg:
            nisa.tensor_scalar(dst=position, data=position, op0=nl.add, operand0=1)
            nisa.dma_copy(dst=cond, src=flags.ap([[n, 1], [1, 1]], offset=0, scalar_offset=position, indirect_dim=1))
            nisa.register_load(reg, cond)
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=position)
        return out

    flags = np.array([[1, 1, 1, 1, 0, 1, 0, 1]], np.int32)
    r = nki.run(k, flags)
    assert not r.errors and r.outputs[0, 0] == int(np.argmin(flags[0] != 0))


# --- dynamic_range --------------------------------------------------------------------------------

def test_dynamic_range_over_a_register():
    """The VirtualRegister docs' dynamic for loop: ``for _ in nl.dynamic_range(reg)``, here each
    iteration squaring a tile in place (the oracle: x ** (2 ** n) on exact powers of two)."""
    @nki.jit
    def k(x, count):
        reg = nisa.register_alloc()
        nisa.register_load(reg, _int_tile(count))
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        for _ in nl.dynamic_range(reg):
            nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.multiply)
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.exp2(RNG.integers(-3, 4, (128, 8))).astype(np.float32)
    for n in (0, 1, 3):
        r = nki.run(k, x, np.array([[n]], np.int32))
        assert not r.errors and np.array_equal(r.outputs, x.astype(np.float64) ** (2 ** n))


def test_dynamic_range_from_an_int_to_a_register_yields_ints_and_records_them():
    @nki.jit
    def k(count):
        reg = nisa.register_alloc()
        nisa.register_load(reg, _int_tile(count))
        acc = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        seen = []
        for i in nl.dynamic_range(3, reg, 2):
            seen.append(i)
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=i)
        assert all(type(i) is int for i in seen)
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out

    r = nki.run(k, np.array([[10]], np.int32))
    assert not r.errors and r.outputs[0, 0] == sum(range(3, 10, 2))
    assert [i.iteration for i in r.trace if i.name == "tensor_scalar"] == [(i,) for i in range(3, 10, 2)]


def test_dynamic_range_step_must_be_a_positive_int():
    @nki.jit
    def k(x):
        reg = nisa.register_alloc(2)
        for _ in nl.dynamic_range(0, 4, reg):
            pass
        return x

    with pytest.raises(ValueError, match="step"):
        nki.run(k, np.zeros((1, 1), np.float32))


@pytest.mark.parametrize("when, trips", [("entry", 4), ("each_iteration", 2)])
def test_a_bound_register_written_in_the_loop(when, trips):
    """Assumption register_loop_bound: the body lowers the upper-bound register by one each
    iteration; read once (entry) the loop runs 4 times, read before each test it runs 2 (i < 4 - i)."""
    @nki.jit
    def k(x):
        upper = nisa.register_alloc(4)
        acc = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        for i in nl.dynamic_range(upper):
            nisa.register_move(upper, 3 - i)
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1)
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out

    r = nki.run(k, np.zeros((1, 1), np.float32), assume={"register_loop_bound": when})
    assert not r.errors and r.outputs[0, 0] == trips


# --- the register instructions ----------------------------------------------------------------------

def test_three_ways_to_a_zero_register_and_moves():
    """register_alloc's docs: a register initialised to zero by an immediate, or by register_load
    of a zero tile; register_move's: a constant, then another register's value."""
    @nki.jit
    def k(x):
        reg1 = nisa.register_alloc(0)
        reg2 = nisa.register_alloc(None)
        nisa.register_load(reg2, nl.zeros([1, 1], dtype=nl.int32, buffer=nl.sbuf))
        loop_count = nisa.register_alloc()
        nisa.register_move(loop_count, 10)
        reg3 = nisa.register_alloc()
        nisa.register_move(reg3, loop_count)
        nisa.register_move(loop_count, -7)  # reg3 keeps its copy
        out = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
        for j, reg in enumerate((reg1, reg2, reg3, loop_count)):
            cell = nl.ndarray([1], dtype=nl.int32, buffer=nl.sbuf)
            nisa.register_store(cell, reg)
            nisa.dma_copy(dst=out[:, j:j + 1], src=cell.reshape((1, 1)))
        return out

    r = nki.run(k, np.zeros((1, 1), np.float32))
    assert not r.errors and r.outputs.tolist() == [[0, 0, 10, -7]]
    names = [i.name for i in r.trace if i.name.startswith("register_")]
    assert names[:4] == ["register_alloc", "register_alloc", "register_load", "register_alloc"]
    assert names.count("register_store") == 4


def test_register_load_and_store_through_hbm():
    @nki.jit
    def k(value):
        reg = nisa.register_alloc()
        nisa.register_load(reg, value)  # from HBM (register_load docs: HBM or SBUF)
        nisa.register_move(reg, reg)
        out = nl.ndarray((1,), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.register_store(out, reg)  # into HBM
        return out

    r = nki.run(k, np.array([123456789], np.int32))
    assert not r.errors and r.outputs.tolist() == [123456789]


def test_an_unwritten_register_is_an_error_or_zero():
    @nki.jit
    def k(x):
        reg = nisa.register_alloc()
        acc = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        for _ in nl.dynamic_range(reg):
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1)
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out

    with pytest.raises(nki.KernelFault, match=r"\[read_uninitialised\] .*register reg"):
        nki.simulate(k)(np.zeros((1, 1), np.float32))
    r = nki.run(k, np.zeros((1, 1), np.float32), assume={"register_unwritten": "zero"})
    assert not r.errors and r.outputs[0, 0] == 0


def test_register_width_wraps_or_is_an_error():
    """Assumption register_overflow: a register holds a signed 32-bit value; an immediate or a
    uint32 element beyond it keeps its low 32 bits, a value too wide for register_store's integer
    tile its low bits; or each is an error."""
    @nki.jit
    def wide(x):
        big = nisa.register_alloc(2 ** 32 - 1)
        t = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        loaded = nisa.register_alloc()
        nisa.register_load(loaded, t)
        out = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:1], src=_stored(big))
        nisa.dma_copy(dst=out[:, 1:2], src=_stored(loaded))
        return out

    r = nki.run(wide, np.array([[0xFFFFFFFE]], np.uint32))
    assert not r.errors and r.outputs.tolist() == [[-1, -2]]
    with pytest.raises(nki.KernelFault, match=r"\[instruction_constraint\] register_alloc"):
        nki.simulate(wide, assume={"register_overflow": "error"})(np.array([[1]], np.uint32))

    @nki.jit
    def narrow(x):
        reg = nisa.register_alloc(300)
        return _stored(reg, nl.uint8)

    assert nki.run(narrow, np.zeros((1, 1), np.float32)).outputs.tolist() == [[44]]
    with pytest.raises(nki.KernelFault, match=r"register_store"):
        nki.simulate(narrow, assume={"register_overflow": "error"})(np.zeros((1, 1), np.float32))


@pytest.mark.parametrize("mode", ["truncate", "bits"])
def test_a_float_tile_by_assumption(mode):
    """Assumption register_float: a float element's value truncated toward zero (stored back as a
    float), or its bits (stored back as the same bits)."""
    @nki.jit
    def k(x):
        t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        reg = nisa.register_alloc()
        nisa.register_load(reg, t)
        return _stored(reg, nl.float32)

    x = np.array([[-3.75]], np.float32)
    got = nki.run(k, x, assume={"register_float": mode}).outputs
    if mode == "truncate":
        assert got[0, 0] == -3.0
    else:
        assert got[0, 0].view(np.uint32) == x[0, 0].view(np.uint32)
    with pytest.raises(nki.KernelFault, match="nan"):
        nki.simulate(k)(np.array([[np.nan]], np.float32))


def test_register_load_takes_one_element():
    @nki.jit
    def k(x):
        t = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        reg = nisa.register_alloc()
        nisa.register_load(reg, t)
        return x

    with pytest.raises(nki.KernelFault, match=r"\[instruction_constraint\] register_load: src t has shape"):
        nki.simulate(k)(np.zeros((1, 2), np.int32))


def test_register_alloc_takes_an_int_none_or_a_one_element_tile():
    @nki.jit
    def k(x):
        nisa.register_alloc(1.5)
        return x

    @nki.jit
    def two(x):
        t = nl.zeros((1, 2), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_alloc(t)
        return x

    with pytest.raises(TypeError, match="register_load"):
        nki.run(k, np.zeros((1, 1), np.float32))
    assert nki.run(two, np.zeros((1, 1), np.float32)).errors  # a register holds one element


def test_a_register_is_not_a_python_int_and_belongs_to_its_run():
    kept = []

    @nki.jit
    def k(x):
        reg = nisa.register_alloc(3)
        with pytest.raises(TypeError, match="register_store"):
            range(reg)
        kept.append(reg)
        assert isinstance(reg, nisa.VirtualRegister)
        return x

    nki.run(k, np.zeros((1, 1), np.float32))

    @nki.jit
    def k2(x):
        nl.fori_loop(0, kept[0], lambda i: None)
        return x

    with pytest.raises(ValueError, match="another kernel run"):
        nki.run(k2, np.zeros((1, 1), np.float32))


def test_virtual_register_is_the_real_class():
    assert nisa.VirtualRegister.__name__ == "VirtualRegister"
    assert not getattr(nisa.VirtualRegister, "_numeq_placeholder", False)
    assert not getattr(nl.fori_loop, "_numeq_placeholder", False)
    assert not getattr(nl.while_loop, "_numeq_placeholder", False)


def test_a_register_as_scalar_offset_and_nested_loop_indices():
    """t.ap(scalar_offset=reg) (dma_copy docs: "either a 1x1 SBUF tensor or a VirtualRegister"): a
    register set by register_move picks the block; a fori_loop inside an affine_range records both
    indices, outermost first."""
    @nki.jit
    def k(data):
        R, F = data.shape
        out = nl.ndarray((2, 3, F), dtype=data.dtype, buffer=nl.shared_hbm)
        row = nl.ndarray((1, F), dtype=data.dtype, buffer=nl.sbuf)
        base = nisa.register_alloc()
        for j in nl.affine_range(2):
            nisa.register_move(base, 4 * j + 1)

            def body(i):
                nisa.dma_copy(dst=row, src=data.ap([[F, 1], [1, F]], offset=0, scalar_offset=base, indirect_dim=0))
                nisa.dma_copy(dst=out.ap([[F, 1], [1, F]], offset=j * 3 * F, scalar_offset=i, indirect_dim=1), src=row)

            nl.fori_loop(0, 3, body)
        return out

    data = RNG.standard_normal((8, 4)).astype(np.float32)
    r = nki.run(k, data)
    assert not r.errors
    assert np.array_equal(r.outputs, np.repeat(data[[1, 5]][:, None, :], 3, axis=1))
    copies = [i.iteration for i in r.trace if i.name == "dma_copy" and i.detail.get("indirect")]
    assert copies == [(j, i) for j in range(2) for i in range(3) for _ in range(2)]


def test_an_unwritten_register_as_scalar_offset_is_an_error():
    @nki.jit
    def k(data):
        reg = nisa.register_alloc()
        row = nl.ndarray((1, 4), dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=data.ap([[4, 1], [1, 4]], offset=0, scalar_offset=reg, indirect_dim=0))
        return data

    with pytest.raises(nki.KernelFault, match=r"\[read_uninitialised\] scalar_offset: register reg"):
        nki.simulate(k)(np.zeros((8, 4), np.float32))


def test_a_register_allocated_from_a_one_element_tile_holds_its_value():
    # AWS's nki-library writes nisa.register_alloc(tile[0, 0]) (moe_tkg): the register starts with it.
    @nki.jit
    def k(x):
        t = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        reg = nisa.register_alloc(t[0, 0])
        out_sb = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.register_store(out_sb, reg)
        out = nl.ndarray((1, 1), nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=out_sb)
        return out

    assert int(nki.run(k, np.array([[41]], np.int32)).outputs[0, 0]) == 41
