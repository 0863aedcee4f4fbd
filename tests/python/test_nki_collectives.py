"""nki.collectives as ranks in one process: ``numeq.nki.run(kernel, ..., ranks=R)``.

Oracles: numpy's concatenation, splitting and exact float64 sums for what each collective moves
(the nki.collectives API reference's descriptions, quoted at each test, and the semantics
nki-library's collective tests check: all_reduce of equal inputs is R x the input, all_gather
concatenates the ranks' inputs, reduce_scatter gives rank r chunk r of the sum); for the reduction's
rounding, the consistency law with numeq.sum on the Trainium platform and a Fraction-exact bound.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import numeq
from numeq import nki
from nki_support import source_line
import numeq.nki.collectives as ncc

nl, nisa = nki.language, nki.isa
rng = np.random.default_rng(46)


def hbm_kernel(call):
    """A kernel copying its input to a shared_hbm src, running ``call(src, dst, replica_group)``, and
    returning dst (nki-library's collective test kernels' shape)."""
    @nki.jit
    def k(input, replica_group, out_shape):
        src = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm, name="src")
        dst = nl.ndarray(out_shape, dtype=input.dtype, buffer=nl.shared_hbm, name="dst")
        nisa.dma_copy(dst=src, src=input)
        call(src, dst, replica_group)
        return dst

    return k


def test_all_reduce_is_the_platforms_sum_over_ranks_and_within_its_bound():
    # "Perform an all-reduce on the given replica group": each rank gets the group's sum. With the
    # default assumptions (group order, fp32) it is numeq.sum over the ranks on the Trainium platform.
    x = (rng.standard_normal((4, 64, 32)) * np.exp2(rng.integers(-8, 8, (4, 64, 32)))).astype(np.float32)
    k = hbm_kernel(lambda s, d, g: ncc.all_reduce(srcs=[s], dsts=[d], replica_group=g, op=nl.add))
    run = nki.run(k, nki.per_rank(list(x)), ncc.ReplicaGroup([[0, 1, 2, 3]]), (64, 32), ranks=4, target="trn2")
    assert run.findings == [] and run.ranks == 4 and len(run.outputs) == 4
    law = numeq.sum(x, axis=0, platform="trainium.trn2")
    for out in run.outputs:
        np.testing.assert_array_equal(out, law)
    bound = numeq.ops.sum(np.moveaxis(x, 0, -1), in_fmt="fp32", out="fp32").bound("trainium.trn2")
    exact = np.vectorize(lambda *v: float(sum(Fraction(float(t)) for t in v)))(*x)
    assert np.all(np.abs(run.outputs[0] - exact) <= bound)


def test_the_reduction_order_and_precision_are_assumptions():
    # bf16 ranks: with collective_accumulator=dtype each partial sum is rounded to bf16; the values
    # below are exact in fp32 (so fp32 accumulation gives the exact sum rounded once) but not in bf16.
    x = np.array([[[1.0]], [[2.0 ** -8]], [[2.0 ** -8]]], dtype=ml_dtypes.bfloat16)
    k = hbm_kernel(lambda s, d, g: ncc.all_reduce(srcs=[s], dsts=[d], replica_group=g, op=nl.add))
    got = {}
    for acc in ("fp32", "dtype"):
        run = nki.run(k, nki.per_rank(list(x)), ncc.ReplicaGroup([[0, 1, 2]]), (1, 1), ranks=3, target="trn2",
                      assume={"collective_accumulator": acc})
        got[acc] = float(run.outputs[0][0, 0])
    # fp32: 1 + 2^-7 is a bf16 value; dtype: 1 + 2^-8 rounds to 1 (ties to even), twice.
    assert got == {"fp32": 1 + 2.0 ** -7, "dtype": 1.0}
    assert {"collective_order", "collective_accumulator"} <= set(run.assumptions)


def test_all_gather_reduce_scatter_and_all_to_all_move_what_the_reference_says():
    r, h = 4, 8
    x = rng.standard_normal((r, r * h, 16)).astype(np.float32)
    group = ncc.ReplicaGroup([list(range(r))])
    # all_gather: "Dimension along which output tensors are concatenated".
    k = hbm_kernel(lambda s, d, g: ncc.all_gather(srcs=[s], dsts=[d], replica_group=g, collective_dim=0))
    run = nki.run(k, nki.per_rank(list(x)), group, (r * r * h, 16), ranks=r, target="trn2")
    for out in run.outputs:
        np.testing.assert_array_equal(out, x.reshape(r * r * h, 16))
    # reduce_scatter: "Dimension along which input tensors are split": rank i gets chunk i of the sum.
    k = hbm_kernel(lambda s, d, g: ncc.reduce_scatter(srcs=[s], dsts=[d], replica_group=g, collective_dim=0,
                                                      op=nl.maximum))
    run = nki.run(k, nki.per_rank(list(x)), group, (h, 16), ranks=r, target="trn2")
    for i, out in enumerate(run.outputs):
        np.testing.assert_array_equal(out, x.max(axis=0)[i * h:(i + 1) * h])
    # all_to_all: rank j gets chunk j of every rank's input, in rank order.
    k = hbm_kernel(lambda s, d, g: ncc.all_to_all(srcs=[s], dsts=[d], replica_group=g, collective_dim=0))
    run = nki.run(k, nki.per_rank(list(x)), group, (r * h, 16), ranks=r, target="trn2")
    for j, out in enumerate(run.outputs):
        np.testing.assert_array_equal(out, np.concatenate([x[i, j * h:(j + 1) * h] for i in range(r)]))


def test_groups_are_independent_and_collective_permute_follows_its_pairs():
    x = rng.standard_normal((4, 8, 8)).astype(np.float32)
    k = hbm_kernel(lambda s, d, g: ncc.all_reduce(srcs=[s], dsts=[d], replica_group=g, op=nl.add))
    run = nki.run(k, nki.per_rank(list(x)), ncc.ReplicaGroup([[0, 2], [1, 3]]), (8, 8), ranks=4, target="trn2")
    for rank, out in enumerate(run.outputs):
        np.testing.assert_array_equal(out, x[rank % 2] + x[rank % 2 + 2])

    @nki.jit
    def permute(input):
        src = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm, name="src")
        dst = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm, name="dst")
        nisa.dma_copy(dst=src, src=input)
        nisa.dma_copy(dst=dst, src=input)  # a rank no pair targets keeps this
        ncc.collective_permute(srcs=[src], dsts=[dst], source_target_pairs=[(0, 1), (1, 2), (2, 0)])
        return dst

    run = nki.run(permute, nki.per_rank(list(x[:3])), ranks=3, target="trn2")
    np.testing.assert_array_equal(np.stack(run.outputs), x[[2, 0, 1]])


def test_rank_id_addresses_each_ranks_slice():
    @nki.jit
    def k(in_tensor):
        _, h, w = in_tensor.shape
        out = nl.ndarray((h, w), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=in_tensor.ap(pattern=[[w, h], [1, w]], scalar_offset=ncc.rank_id(), indirect_dim=0))
        return out

    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    run = nki.run(k, x, ranks=2, target="trn2")
    np.testing.assert_array_equal(np.stack(run.outputs), x)


def test_ranks_that_disagree_or_never_arrive_are_findings():
    x = rng.standard_normal((2, 8, 8)).astype(np.float32)

    # Ranks calling with different operators: a collective_mismatch naming both lines.
    @nki.jit
    def mismatched(input, which, replica_group):
        src = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm, name="src")
        dst = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm, name="dst")
        nisa.dma_copy(dst=src, src=input)
        op = nl.add if which == 0 else nl.maximum
        ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=replica_group, op=op)  # AR
        return dst

    run = nki.run(mismatched, nki.per_rank(list(x)), nki.per_rank([0, 1]), ncc.ReplicaGroup([[0, 1]]), ranks=2,
                  target="trn2")
    (f,) = run.errors
    assert f.rule == "collective_mismatch" and f.message.count(source_line(mismatched, "# AR")) == 2
    # A group naming a rank that was not launched: it never arrives.
    run = nki.run(mismatched, nki.per_rank(list(x)), nki.per_rank([0, 0]), ncc.ReplicaGroup([[0, 1, 2]]), ranks=2,
                  target="trn2")
    assert [f.rule for f in run.errors] == ["core_deadlock"]


def test_per_rank_arguments_are_checked():
    x = rng.standard_normal((8, 8)).astype(np.float32)
    k = hbm_kernel(lambda s, d, g: ncc.all_reduce(srcs=[s], dsts=[d], replica_group=g, op=nl.add))
    with pytest.raises(ValueError, match="per_rank holds 2 values for ranks=3"):
        nki.run(k, nki.per_rank([x, x]), ncc.ReplicaGroup([[0, 1, 2]]), (8, 8), ranks=3)
    with pytest.raises(ValueError, match="pass ranks=N"):
        nki.run(k, nki.per_rank([x, x]), ncc.ReplicaGroup([[0, 1]]), (8, 8))
    with pytest.raises(ValueError, match="ranks: 0"):
        nki.run(k, x, ncc.ReplicaGroup([[0]]), (8, 8), ranks=0)
    with pytest.raises(ValueError, match="do not overlap"):
        ncc.ReplicaGroup([[0, 1], [1, 2]])
