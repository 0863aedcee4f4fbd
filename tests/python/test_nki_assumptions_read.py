"""A run records which assumptions it read (Run.assumptions_read), and the precision flow sweeps
only those: an assumption the run never read cannot have changed its outputs. Oracle: the kernel
run again under every alternative of every assumption it did not read, compared bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import numeq.nki
from nki_support import example
from numeq.nki.machine.assumptions import assumptions_of


def _bits(outputs) -> list:
    arrays = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return [np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}")) for a in arrays]


@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "matmul_basic", "transpose"])
def test_no_unread_assumption_changes_an_output(name: str) -> None:
    m = example(name)
    with numeq.nki.installed():
        run = numeq.nki.run(getattr(m, name), *m.inputs())
    table = assumptions_of(run.target)
    unread = [n for n in table if n not in run.assumptions_read]
    assert run.assumptions_read and unread  # each example reads some, and leaves some unread
    base = _bits(run.outputs)
    for n in unread:
        for value in table[n]["alternatives"]:
            if value == run.assumptions[n]:
                continue
            other = run.rerun(assume={n: value})
            assert other.completed and all(np.array_equal(a, b) for a, b in zip(base, _bits(other.outputs))), \
                f"{name}: {n}={value} was never read, yet it changes the output"


def test_a_matmul_reads_the_pe_array_and_a_softmax_does_not() -> None:
    with numeq.nki.installed():
        mm = numeq.nki.run(example("matmul_basic").matmul_basic, *example("matmul_basic").inputs())
        sm = numeq.nki.run(example("softmax").softmax, *example("softmax").inputs())
    assert {"pe_order", "accumulator_bits", "psum_rounding"} <= mm.assumptions_read
    assert "fp32_matmul" not in mm.assumptions_read  # bf16 operands: the fp32 matmul's split is not read
    assert not {"pe_order", "accumulator_bits", "fp32_matmul"} & sm.assumptions_read
    assert "vector_reduce_order" in sm.assumptions_read  # its row sums
    rows = sm.precision_flow()
    folded = [r for r in rows if r.kind == "assumption" and "never read" in r.detail]
    assert len(folded) == 1 and "pe_order" in folded[0].detail


def test_a_free_axis_sum_reads_the_reduction_order_and_it_changes_the_output() -> None:
    nl, nisa = numeq.nki.language, numeq.nki.isa

    @numeq.nki.jit
    def row_sums(x):
        out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_reduce(dst=s, op=nl.add, data=t, axis=1)
        nisa.dma_copy(dst=out, src=s)
        return out

    x = np.random.default_rng(3).standard_normal((128, 512)).astype(np.float32)
    run = numeq.nki.run(row_sums, x)
    assert "vector_reduce_order" in run.assumptions_read
    other = run.rerun(assume={"vector_reduce_order": "pairwise"})
    assert not np.array_equal(run.outputs, other.outputs)  # read, and it matters here
    assert not {"pe_order", "psum_rounding"} & run.assumptions_read
