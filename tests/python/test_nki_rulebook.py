"""One rule book for the NeuronCore's limits: a kernel's run and a manifest review of the same
tiling name a broken limit by the same id, with the same severity (a run's error is a review's
fail, a warning a warn), and every id either checker emits is in ``numeq.nki.RULES`` with that
checker named. The faults are written here as kernels and manifests, one per limit, from the
limits FACTS s3 states (128 partitions, K <= 128 rows, 512 fp32 per PSUM bank, double_row fp8 on
NeuronCore-v3 only, DMAs of 256 B per partition and up)."""

from __future__ import annotations

import numpy as np
import pytest

from numeq import nki
from numeq.review import model, targets, tiling

nl, nisa = nki.language, nki.isa
B, Mm, Dma, Tiling = model.Buffer, model.Matmul, model.Dma, model.Tiling
STATUS = {"error": "fail", "warning": "warn"}


def manifest_findings(target: str, k: int, n: int, dt: str, double_row: bool, out_memory: str = "psum",
                      dma_bytes: int = 4096, dma_partitions: int = 128) -> list:
    bufs = (B("stat", "sbuf", dt, (k, 128)), B("mov", "sbuf", dt, (k, n)), B("out", out_memory, "fp32", (128, n)))
    parts = {"buffers": bufs, "matmuls": (Mm("mm", "stat", "mov", "out", double_row=double_row),),
             "dmas": (Dma("ld", "mov", "load", dma_bytes, dma_partitions),)}
    return [f for f in tiling.check(Tiling(target, **parts), targets.target(target)) if f.status != "pass"]


def manifest_rules(*args, **kwargs) -> dict[str, str]:
    return {f.rule: f.status for f in manifest_findings(*args, **kwargs)}


def run_findings(target: str, k: int, n: int, dt, double_row: bool, out_memory=nl.psum) -> list:
    @nki.jit
    def kernel(a, b):
        shape_a = (k // 2, 2, 128) if double_row else (k, 128)
        shape_b = (k // 2, 2, n) if double_row else (k, n)
        at = nl.ndarray(shape_a, dt, buffer=nl.sbuf)
        bt = nl.ndarray(shape_b, dt, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a.reshape(shape_a) if double_row else a)
        nisa.dma_copy(dst=bt, src=b.reshape(shape_b) if double_row else b)
        acc = nl.ndarray((128, n), nl.float32, buffer=out_memory)
        mode = nisa.matmul_perf_mode.double_row if double_row else None
        nisa.nc_matmul(acc, at, bt, perf_mode=mode)
        return a

    rng = np.random.default_rng(0)
    numpy_dtype = np.dtype(nl.float32.storage) if dt is nl.float32 else dt.storage
    a = rng.standard_normal((k, 128)).astype(numpy_dtype)
    b = rng.standard_normal((k, n)).astype(numpy_dtype)
    return nki.run(kernel, a, b, target=target).findings


def run_rules(*args, **kwargs) -> dict[str, str]:
    return {f.rule: f.severity for f in run_findings(*args, **kwargs)}


CASES = [  # (what breaks, target, K, N, dtype, double_row, the shared rule)
    ("K beyond the partitions", "trn2", 256, 512, "bf16", False, "partition_dim"),
    ("double_row on NeuronCore-v2", "trn1", 128, 512, "e4m3", True, "matmul_perf_mode"),
    ("double_row on bf16", "trn2", 128, 512, "bf16", True, "matmul_perf_mode"),
    ("N beyond one PSUM bank", "trn2", 128, 1024, "bf16", False, "matmul_psum_bank"),
    ("fp32 inputs", "trn2", 128, 512, "fp32", False, "matmul_fp32"),
]
NL = {"bf16": nl.bfloat16, "e4m3": nl.float8_e4m3, "fp32": nl.float32}


@pytest.mark.parametrize("what, target, k, n, dt, double_row, shared", CASES, ids=[c[0] for c in CASES])
def test_a_run_and_a_manifest_name_the_same_limit_alike(what, target, k, n, dt, double_row, shared):
    rule = nki.RULES[shared]
    in_manifest = {f.rule: f for f in manifest_findings(target, k, n, dt, double_row)}
    in_run = {f.rule: f for f in run_findings(target, k, n, NL[dt], double_row)}
    assert shared in in_manifest and in_manifest[shared].status == STATUS[rule.severity], (what, in_manifest)
    assert shared in in_run and in_run[shared].severity == rule.severity, (what, in_run)
    # The same evidence: both cite the target value (or document) the limit comes from.
    assert in_run[shared].source == in_manifest[shared].evidence, (in_run[shared].source, in_manifest[shared].evidence)


def test_every_rule_either_checker_emits_is_in_the_book_with_its_severity():
    seen_manifest: dict[str, set] = {}
    seen_run: dict[str, set] = {}
    for _, target, k, n, dt, double_row, _ in CASES:
        for out_memory, (dma_bytes, parts) in (("psum", (4096, 128)), ("sbuf", (64, 64)), ("psum", (4096, 129))):
            for r, status in manifest_rules(target, k, n, dt, double_row, out_memory, dma_bytes, parts).items():
                seen_manifest.setdefault(r, set()).add(status)
        for out_memory in (nl.psum, nl.sbuf):
            for r, severity in run_rules(target, k, n, NL[dt], double_row, out_memory).items():
                seen_run.setdefault(r, set()).add(severity)
    assert {"matmul_output_memory", "dma_small", "partial_partitions", "dma_partitions"} <= set(seen_manifest)
    assert {"matmul_output_memory", "matmul_perf_mode"} <= set(seen_run)
    for r, statuses in seen_manifest.items():
        assert r in nki.RULES and "manifest" in nki.RULES[r].checked_by, r
        assert statuses == {STATUS[nki.RULES[r].severity]}, (r, statuses)
    for r, severities in seen_run.items():
        assert r in nki.RULES and "run" in nki.RULES[r].checked_by, r
        assert severities == {nki.RULES[r].severity}, (r, severities)


@pytest.mark.parametrize("both_in_psum", [False, True])
def test_two_operands_in_psum_break_engine_access(both_in_psum):
    """tensor_tensor reads two tiles; at most one may be in PSUM (nki.isa.tensor_tensor docstring)."""
    @nki.jit
    def add(a):
        x = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        y = nl.ndarray((128, 64), nl.float32, buffer=nl.psum if both_in_psum else nl.sbuf)
        nisa.memset(x, 1.0)
        nisa.memset(y, 2.0)
        z = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=z)
        return out

    r = nki.run(add, np.zeros((1,), np.float32))
    found = [f for f in r.findings if f.rule == "engine_access"]
    assert bool(found) == both_in_psum, r.findings
    assert np.all(r.outputs == 3.0)
    if found:
        assert "x and y" in found[0].message and found[0].severity == nki.RULES["engine_access"].severity
