"""numeq.nki's trace and its summary (issue 31, section 1): the counts of a run equal those worked out
by hand from the kernel's loop structure, each row carries its loop iteration and partitions, and
the summary's estimates follow from the documented per-instruction costs and the target table
(values read here from the table, the arithmetic done here)."""

from __future__ import annotations

import numpy as np
import pytest

import numeq.nki
from nki_support import example
from numeq.review.targets import peak_flops, target


def test_tiled_matmul_trace_counts_equal_the_loop_structure() -> None:
    m = example("matmul_mnk")
    a, b = m.inputs()
    K, M, N = a.shape[1], a.shape[0], b.shape[1]
    TK, TM, TN = 128, 128, 512
    r = numeq.nki.run(m.matmul_mnk, np.ascontiguousarray(a.T), b)
    tiles, ks = (M // TM) * (N // TN), K // TK
    per_engine = r.summary().engines
    assert {e: u.instructions for e, u in per_engine.items()} == {"dma": tiles * (2 * ks + 1), "tensor": tiles * ks,
                                                                   "vector": tiles}
    dma = [ins for ins in r.trace if ins.engine == "dma"]
    item = a.dtype.itemsize
    loads_a = [ins.bytes for ins in dma if ins.dst[0][0] == "a_tile"]
    loads_b = [ins.bytes for ins in dma if ins.dst[0][0] == "b_tile"]
    stores = [ins.bytes for ins in dma if ins.dst[0][0] == "out"]
    assert loads_a == [TK * TM * item] * tiles * ks and loads_b == [TK * TN * item] * tiles * ks
    assert stores == [TM * TN * 4] * tiles
    assert per_engine["tensor"].flops == 2 * M * N * K
    # Each nc_matmul row names its (m, n, k) iteration, in the kernel's order, on 128 partitions.
    matmuls = [ins for ins in r.trace if ins.name == "nc_matmul"]
    assert [ins.iteration for ins in matmuls] == [(i, j, k) for i in range(M // TM) for j in range(N // TN)
                                                   for k in range(ks)]
    assert {ins.partitions for ins in r.trace} == {128}
    assert [ins.instruction for ins in r.trace[:3]] == ["dma_copy", "dma_copy", "nc_matmul"]
    assert all(ins.where.startswith("matmul_mnk.py:") for ins in r.trace)


def test_summary_estimates_follow_the_documented_costs() -> None:
    m = example("matmul_mnk")
    a, b = m.inputs()
    r = numeq.nki.run(m.matmul_mnk, np.ascontiguousarray(a.T), b)
    s = r.summary()
    t = target(r.target)
    # Busy time: cycles at the engine's clock (max(min(64, M), N) per nc_matmul, max(64, N) per
    # Vector instruction: SDK 2.26 docstrings), bytes at the HBM bandwidth for DMA.
    tensor_cycles = sum(max(min(64, ins.detail["m"]), ins.detail["n"]) for ins in r.trace if ins.name == "nc_matmul")
    assert s.engines["tensor"].cycles == tensor_cycles
    assert s.engines["tensor"].busy_s == tensor_cycles / t["tensor_clock_hz"]
    assert s.engines["vector"].busy_s == s.engines["vector"].cycles / t["vector_clock_hz"]
    dma_bytes = sum(ins.bytes for ins in r.trace if ins.engine == "dma")
    assert s.engines["dma"].busy_s == dma_bytes / t["hbm_bytes_per_s"]
    assert s.lower_bound_s == max(e.busy_s for e in s.engines.values())
    assert s.bound_by == max(s.engines, key=lambda e: s.engines[e].busy_s)
    # Every DMA here moves HBM data: intensity is the matmul FLOPs over all DMA bytes.
    assert s.hbm_bytes == dma_bytes and s.intensity == 2 * a.shape[0] * a.shape[1] * b.shape[1] / dma_bytes
    assert s.peak_flops == peak_flops(t, "bf16").value
    assert s.regime == ("compute-bound" if s.intensity >= s.peak_flops / t["hbm_bytes_per_s"] else "memory-bound")
    # Transfer sizes by queue: powers of two holding each size.
    assert sum(s.dma_sizes["dma"].values()) == len([i for i in r.trace if i.engine == "dma"])
    assert all(b & (b - 1) == 0 for b in s.dma_sizes["dma"])
    text = str(s)
    assert "estimate" in text and t.spec("tensor_clock_hz").source in text and s.regime in text


def test_loop_iteration_is_recorded_through_nested_and_broken_loops() -> None:
    nl, nisa = numeq.nki.language, numeq.nki.isa

    @numeq.nki.jit
    def k(x):
        t = nl.ndarray((4, 8), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)  # outside every loop
        for _i in nl.affine_range(2):
            for j in nl.sequential_range(3):
                if j == 2:
                    break
                nisa.memset(dst=t, value=float(j))
            nisa.memset(dst=t, value=1.0)  # after the inner loop ended by break
        out = nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    r = numeq.nki.run(k, np.zeros((4, 8), np.float32))
    assert [ins.iteration for ins in r.trace] == [(), (0, 0), (0, 1), (0,), (1, 0), (1, 1), (1,), ()]
    assert [ins.partitions for ins in r.trace] == [4] * 8


def test_precision_flow_ranks_the_planted_bf16_accumulation_first() -> None:
    # The planted mistake: 8 matmul results summed in a bf16 SBUF tile (unit roundoff 2^-8, 7
    # additions); beside it a benign narrowing, the sum scaled by 1.1 and rounded once to fp16
    # (2^-11). Widening the
    # accumulator alone must remove most of the output's error, the fp16 tile little of it.
    nl, nisa = numeq.nki.language, numeq.nki.isa
    rng = np.random.default_rng(31)
    import ml_dtypes

    a = rng.standard_normal((1024, 128)).astype(ml_dtypes.bfloat16)  # a_t [K, M]
    b = rng.standard_normal((1024, 512)).astype(ml_dtypes.bfloat16)

    @numeq.nki.jit
    def summed(a_t, b):
        K, M = a_t.shape
        N = b.shape[1]
        total = nl.ndarray((M, N), nl.bfloat16, buffer=nl.sbuf)
        for g in nl.sequential_range(K // 128):
            part = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
            at = nl.ndarray((128, M), a_t.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, N), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[g * 128:(g + 1) * 128, :])
            nisa.dma_copy(dst=bt, src=b[g * 128:(g + 1) * 128, :])
            nisa.nc_matmul(part, at, bt)
            if g == 0:
                nisa.tensor_copy(dst=total, src=part)
            else:
                nisa.tensor_tensor(dst=total, data1=total, data2=part, op=nl.add)
        half = nl.ndarray((M, N), nl.float16, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=half, data=total, op0=nl.multiply, operand0=1.1)
        out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=half)
        return out

    r = numeq.nki.run(summed, a, b)
    rows = r.precision_flow(assumptions=["psum_rounding"])
    first, second = rows[0], rows[1]
    assert (first.kind, first.format, first.length) == ("accumulation", "bf16", 8), first
    assert first.where.endswith(":" + str(_line_of(summed, "op=nl.add")))
    assert (second.kind, second.format) == ("narrowing", "fp16"), second
    assert first.share > 0.8 and second.share < 0.3, (first, second)
    psum = [row for row in rows if row.format == "fp32 (PSUM)"]
    assert len(psum) == 1 and psum[0].length == 128 and psum[0].share is None
    (assumption,) = [row for row in rows if row.kind == "assumption"]
    # psum_rounding's alternative changes nothing here (the bf16 sum rounds it away): the one row of
    # alternatives that change no element names it.
    assert "psum_rounding=" in assumption.detail and "none of the 65536 output elements" in assumption.detail


def test_precision_flow_against_the_exact_result_measures_the_output_format_and_fp32_arithmetic() -> None:
    # A correct GEMM with a bf16 output: against the exact product (numpy in float64 on the bf16
    # inputs, exact here: 128 products of 8-bit significands summed in 53 bits), the output's own
    # bf16 rounding (2^-9 relative) dwarfs the fp32 PSUM chain's (K u_fp32 ~ 2^-17): widening the
    # HBM output must take nearly all the error away, and what remains is the PSUM chain's share.
    nl, nisa = numeq.nki.language, numeq.nki.isa
    import ml_dtypes

    rng = np.random.default_rng(5)
    a = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)  # a_t [K, M]
    b = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)

    @numeq.nki.jit
    def gemm(a_t, b):
        out = nl.ndarray((64, 256), nl.bfloat16, buffer=nl.shared_hbm)
        at = nl.ndarray((128, 64), a_t.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((128, 256), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a_t)
        nisa.dma_copy(dst=bt, src=b)
        acc = nl.ndarray((64, 256), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, at, bt)
        res = nl.ndarray((64, 256), nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    exact = a.astype(np.float64).T @ b.astype(np.float64)
    r = numeq.nki.run(gemm, a, b)
    rows = r.precision_flow(assumptions=[], reference=exact)
    psum = [row for row in rows if row.format == "fp32 (PSUM)"]
    assert len(psum) == 1 and psum[0].share is not None and psum[0].share < 0.05, psum
    # The SBUF tile rounds to bf16 and the HBM output rounds the same values again: widening the
    # tile alone removes nothing (share ~0), its rounding by itself is the whole error (alone ~1).
    # Rows rank by share (the PSUM chain's small one first), ties by alone.
    assert [row.share for row in rows if row.share is not None] == sorted(
        (row.share for row in rows if row.share is not None), reverse=True), rows
    (first,) = [row for row in rows if row.where == _where(gemm, "nisa.tensor_copy")]
    assert (first.kind, first.format) == ("narrowing", "bf16"), rows
    assert first.share < 0.05 and first.alone > 0.95, first
    # Every bf16 allocation widened (the switch reaches the kernel's HBM output: fp32 now), the
    # error left is the PSUM chain's: its measured share.
    lines = {_where(gemm, "res = nl.ndarray"), _where(gemm, "out = nl.ndarray")}
    widened = r.rerun(widen=frozenset(lines))
    assert widened.outputs.dtype == np.float32
    e, e_wide = (float(np.linalg.norm(np.asarray(x, np.float64) - exact)) for x in (r.outputs, widened.outputs))
    assert 0 < e_wide < e and psum[0].share == pytest.approx(e_wide / e, rel=1e-12)
    with pytest.raises(ValueError, match="reference"):
        r.precision_flow(assumptions=[], reference=exact[:10])


def _where(kernel, text: str) -> str:
    return f"test_nki_trace.py:{_line_of(kernel, text)}"


def _line_of(kernel, text: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(getattr(kernel, "func", kernel))
    return start + next(i for i, line in enumerate(lines) if text in line)


def _counts(name: str, *args, **kwargs):
    m = example(name)
    inputs = m.inputs()
    call = (np.ascontiguousarray(inputs[0].T), inputs[1]) if "matmul" in name else inputs
    r = numeq.nki.run(getattr(m, name), *call, *args, **kwargs)
    s = r.summary()
    return inputs, r, {e: u.instructions for e, u in s.engines.items()}, \
        sorted(ins.bytes for ins in r.trace if ins.engine == "dma"), s.flops


def test_matmul_examples_trace_counts() -> None:
    (a, b), r, per, dma, flops = _counts("matmul_basic")
    M, K, N = a.shape[0], a.shape[1], b.shape[1]
    assert per == {"dma": 3, "tensor": 1, "vector": 1}
    assert dma == sorted([K * M * 2, K * N * 2, M * N * 4]) and flops == 2 * M * N * K
    for name in ("matmul_nmk", "matmul_kouter"):
        (a, b), r, per, dma, flops = _counts(name)
        M, K, N = a.shape[0], a.shape[1], b.shape[1]
        tiles, ks = (M // 128) * (N // 512), K // 128
        if name == "matmul_nmk":  # a load and a b load per (n, m, k), a store per (n, m)
            loads = [128 * 128 * 2] * tiles * ks + [128 * 512 * 2] * tiles * ks
            assert per == {"dma": tiles * (2 * ks + 1), "tensor": tiles * ks, "vector": tiles}
        else:  # whole rows of a and b per k, a matmul per (k, m, n)
            loads = [128 * M * 2] * ks + [128 * N * 2] * ks
            assert per == {"dma": 2 * ks + tiles, "tensor": tiles * ks, "vector": tiles}
        assert dma == sorted(loads + [128 * 512 * 4] * tiles) and flops == 2 * M * N * K, name


def test_row_examples_trace_counts() -> None:
    (x,), r, per, dma, flops = _counts("softmax")
    tiles, C = x.shape[0] // 128, x.shape[1]
    # per row tile: a load, tensor_reduce, activation (exp with its row sum), reciprocal,
    # tensor_scalar, a store
    assert per == {"dma": 2 * tiles, "vector": 3 * tiles, "scalar": tiles} and flops == 0
    assert dma == sorted([128 * C * 2] * tiles + [128 * C * 4] * tiles)
    (x, g), r, per, dma, flops = _counts("rmsnorm")
    tiles, n = x.shape[0] // 128, x.shape[1]
    # gamma broadcast to 128 partitions once; per tile: a load, two activations (square with its
    # sum, rsqrt), tensor_scalar, tensor_tensor, a store
    assert per == {"dma": 1 + 2 * tiles, "scalar": 2 * tiles, "vector": 2 * tiles}
    assert dma == sorted([128 * n * 2] + [128 * n * 2] * tiles + [128 * n * 4] * tiles)


def test_live_memory_follows_the_allocations() -> None:
    # matmul_kouter keeps (M / 128) * (N / 512) fp32 PSUM accumulators of 128 x 512 (one 2 KiB bank
    # each) for the whole run; per k it holds a [128, M] and a [128, N] bf16 tile in SBUF.
    (a, b), r, per, dma, flops = _counts("matmul_kouter")
    M, N = a.shape[0], b.shape[1]
    s = r.summary()
    assert s.memory["psum"]["peak"] == (M // 128) * (N // 512) * 2048
    assert s.memory["psum"]["banks"] == (M // 128) * (N // 512) and s.memory["psum"]["bank_count"] == 8
    assert s.memory["sbuf"]["peak"] == M * 2 + N * 2
    assert s.memory["sbuf"]["curve"][-1][1] == 0 and s.memory["psum"]["curve"][-1][1] == 0


def test_tile_by_tile_examples_trace_counts() -> None:
    # transpose: per 128 x 128 tile a load, nc_transpose (Tensor Engine), tensor_copy, a store.
    (x,), r, per, dma, flops = _counts("transpose")
    tiles = (x.shape[0] // 128) * (x.shape[1] // 128)
    assert per == {"dma": 2 * tiles, "tensor": tiles, "vector": tiles}
    assert dma == [128 * 128 * 2] * 2 * tiles
    # cumsum: a memset of the ones, per row tile a load, the scan, a store.
    (x,), r, per, dma, flops = _counts("cumsum")
    tiles, C = x.shape[0] // 128, x.shape[1]
    assert per == {"vector": 1 + tiles, "dma": 2 * tiles} and dma == [128 * C * 4] * 2 * tiles
    # spmd_scale_shift: every program of the grid loads, scales and stores its own [128, 512] tile.
    m = example("spmd_scale_shift")
    (x,) = m.inputs()
    r = numeq.nki.run(m.scale_shift[m.GRID], x, m.ALPHA, m.BETA)
    programs = m.GRID[0] * m.GRID[1]
    per = {e: u.instructions for e, u in r.summary().engines.items()}
    assert per == {"dma": 2 * programs, "vector": programs}
    assert sorted(ins.bytes for ins in r.trace if ins.engine == "dma") == [128 * 512 * 4] * 2 * programs


def test_grouped_double_row_and_layernorm_examples_trace_counts() -> None:
    # psum_groups: per output tile, K / 128 loads of each operand and matmuls, a tensor_copy for
    # the first group and a tensor_tensor for each later one, a store.
    m = example("matmul_psum_groups")
    a, b = m.inputs()
    r = numeq.nki.run(m.matmul_psum_groups, np.ascontiguousarray(a.T), b, group=m.GROUP)
    M, K, N = a.shape[0], a.shape[1], b.shape[1]
    tiles, ks, groups = (M // 128) * (N // 512), K // 128, K // (128 * m.GROUP)
    per = {e: u.instructions for e, u in r.summary().engines.items()}
    assert per == {"dma": tiles * (2 * ks + 1), "tensor": tiles * ks, "vector": tiles * groups}
    # fp8 double_row: 256 rows of K per nc_matmul (two per partition), FLOPs 2 M N K.
    (a, b), r, per, dma, flops = _counts("matmul_fp8_double_row")
    M, K, N = a.shape[0], a.shape[1], b.shape[1]
    assert per == {"dma": 2 * (K // 256) + 1, "tensor": K // 256, "vector": 1} and flops == 2 * M * N * K
    assert [ins.detail["k"] for ins in r.trace if ins.name == "nc_matmul"] == [256] * (K // 256)
    assert dma == sorted([256 * M] * (K // 256) + [256 * N] * (K // 256) + [M * N * 4])
    # layernorm: gamma and beta broadcast once; per row tile a load, bn_stats per 512-column
    # chunk, bn_aggr, the rsqrt activation, tensor_scalar, two tensor_tensors, a store.
    (x, g, bt), r, per, dma, flops = _counts("layernorm")
    tiles, n = x.shape[0] // 128, x.shape[1]
    chunks = -(-n // 512)
    assert per == {"dma": 2 + 2 * tiles, "vector": tiles * (chunks + 4), "scalar": tiles}


def test_precision_flow_lists_sums_and_activation_budgets() -> None:
    (x,), r, per, dma, flops = _counts("softmax")
    rows = r.precision_flow(assumptions=[])
    kinds = {(row.kind, row.format): row for row in rows}
    total = kinds[("accumulation", "fp32 (free-axis sum)")]
    assert total.length == x.shape[1] and total.share is None
    exp = kinds[("activation", "fp32")]
    # The budget is the platform's own function model (numeq.platforms), not a number written here.
    import json

    from numeq import _core

    model = {f["function"]: f for f in json.loads(_core.core_platform_json("trainium.trn2"))["functions"]}["exp"]
    assert f"within {model['ulps']:g} ulps ({model['evidence']}" in exp.detail


def test_older_interface_matmul_trace_counts() -> None:
    # legacy_matmul (0.1.0 interface): per output tile an nl.zeros (memset), K / 128 nl.loads of
    # each operand and nl.matmuls (the += joins the PSUM chain: no instruction of its own), an
    # nl.copy and an nl.store.
    (a, b), r, per, dma, flops = _counts("legacy_matmul")
    M, K, N = a.shape[0], a.shape[1], b.shape[1]
    tiles, ks = (M // 128) * (N // 512), K // 128
    assert per == {"vector": 2 * tiles, "dma": tiles * (2 * ks + 1), "tensor": tiles * ks}
    assert dma == sorted([128 * 128 * 2] * tiles * ks + [128 * 512 * 2] * tiles * ks + [128 * 512 * 4] * tiles)
    assert flops == 2 * M * N * K


def test_flash_attention_trace_counts() -> None:
    # Per key block j of J: k and v loads, k's transpose (nc_transpose + tensor_copy back), the
    # scores matmul, their scaling, the causal affine_select (GpSimd), the row max (and its
    # maximum with the running one after the first block), -max, exp with its row sum
    # (activation), p to bf16, p's transpose, the p v matmul, then either two copies (j = 0) or the
    # rescale (an exp activation, three tensor_tensors, a tensor_scalar), and the max kept. Around
    # the loop: q's load and transpose, the final division and the store.
    m = example("flash_attention")
    q, k, v = m.inputs()
    r = numeq.nki.run(m.flash_attention, q, k, v, block=m.BLOCK)
    Lq, d = q.shape
    L, dv = v.shape
    J = L // m.BLOCK
    per = {e: u.instructions for e, u in r.summary().engines.items()}
    assert per == {"dma": 2 * J + 2, "tensor": 4 * J + 1, "vector": 12 * J - 1, "gpsimd": J, "scalar": 2 * J - 1}
    matmul_flops = sum(ins.flops for ins in r.trace if ins.name == "nc_matmul")
    assert matmul_flops == J * 2 * Lq * m.BLOCK * (d + dv)
    assert [ins.iteration for ins in r.trace if ins.name == "affine_select"] == [(j,) for j in range(J)]
