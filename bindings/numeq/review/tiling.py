"""The hardware rules a NKI kernel's tiling must follow on a NeuronCore target: instruction limits
(partitions, nc_matmul's K/M/N, the PSUM output tile, partial-partition starts, Vector/Scalar/GpSimd
free sizes) and the memory hierarchy (SBUF and PSUM capacity, PSUM banks, DMA sizes and strides,
engines sharing SBUF/PSUM ports).

``check(tiling, target)`` returns findings: "fail" for each offender of a hard limit, "warn" for
each performance-only rule missed, and one "pass" per rule that holds for every item it applies to.
Each finding names the buffer, matmul, stage or DMA (with its manifest line) and cites the target
value's source; the limits are read from ``numeq.review.targets`` only.

``memory_use(tiling, target)`` gives the per-partition SBUF/PSUM use per buffer for the report's
table and plot.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..nki.machine import targets as _targets
from ..nki.machine.rules import review_status
from .findings import ReviewFinding
from .model import FORMAT_BYTES, MANIFEST_ENGINES, MANIFEST_MEMORIES, Buffer, Dma, Matmul, Stage, Tiling

__all__ = ["check", "memory_use"]

_LIMITS = "tiling_limits"
_MEMORY = "memory_hierarchy"
# nc_matmul's fp8 inputs for double_row (trn2 architecture guide; nc_matmul docstring).
_FP8 = ("e4m3", "e5m2", "e4m3fn")
# What the double_row packing rests on (see _packed).
_PACKING = "assumed: two fp8 rows of K per partition in double_row (the SBUF layout is not documented)"
# Engines whose instructions take the Vector/Scalar/GpSimd free-size limits.
_VECTOR_ENGINES = ("vector", "scalar", "gpsimd")


def _broken(criterion: str, rule: str, subject: str, message: str, evidence: str) -> ReviewFinding:
    """A finding of a broken rule: "fail" or "warn" as the rule book's severity says."""
    return ReviewFinding(criterion, review_status(rule), rule, subject, message, evidence)


# ---------------------------------------------------------------------------------------------
# Wording
# ---------------------------------------------------------------------------------------------
def _subject(kind: str, item) -> str:
    line = getattr(item, "line", 0)
    return f"{kind} {item.name} (line {line})" if line else f"{kind} {item.name}"


def _size(n: float) -> str:
    """Bytes for a reviewer: "512 B", "8 KiB", "20.5 KiB"."""
    n = int(n)
    if abs(n) < 1024:
        return f"{n} B"
    if n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n / 1024:.1f} KiB"


def _names(items: Iterable) -> str:
    names = [i.name for i in items]
    return ", ".join(names) if names else "(none)"


def _shape(b: Buffer) -> str:
    return "[" + ", ".join(str(d) for d in b.shape) + "]"


def _copies(b: Buffer, packed: dict[str, int] | None = None) -> str:
    """"acc: 4 copies x 2048 B = 8 KiB" (or "acc: 2048 B" for one copy)."""
    one = b.bytes_per_partition * (packed or {}).get(b.name, 1)
    if b.bufs == 1:
        return f"{b.name}: {_size(one)}"
    return f"{b.name}: {b.bufs} copies x {one} B = {_size(one * b.bufs)}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _int(t: _targets.Target, key: str) -> int:
    return int(t[key])


# ---------------------------------------------------------------------------------------------
# Buffers that the other rules can read
# ---------------------------------------------------------------------------------------------
def _buffer_problem(b: Buffer) -> str | None:
    """Why ``b`` cannot be measured (None: it can)."""
    if b.memory not in MANIFEST_MEMORIES:
        return f"memory {b.memory!r} is not one of {', '.join(MANIFEST_MEMORIES)}"
    if b.dtype not in FORMAT_BYTES:
        return f"dtype {b.dtype!r} is not one of {', '.join(FORMAT_BYTES)}"
    shape = b.shape
    if not isinstance(shape, tuple) or not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        return f"shape {shape!r} must be a non-empty tuple of positive integers"
    if not isinstance(b.partition_dim, int) or not 0 <= b.partition_dim < len(shape):
        return f"partition_dim {b.partition_dim!r} is not an axis of shape {_shape(b)}"
    if not isinstance(b.bufs, int) or b.bufs < 1:
        return f"bufs {b.bufs!r} must be a positive integer"
    if not isinstance(b.start_partition, int):
        return f"start_partition {b.start_partition!r} must be an integer"
    return None


def _valid_buffers(tiling: Tiling, t: _targets.Target, out: list[ReviewFinding] | None) -> dict[str, Buffer]:
    """The buffers by name that the rules can measure; malformed or repeated ones are reported
    into ``out`` (when given) and left out."""
    good: dict[str, Buffer] = {}
    seen: set[str] = set()
    for b in tiling.buffers:
        problem = _buffer_problem(b)
        if problem is None and b.name in seen:
            problem = "the name is used by an earlier buffer; every buffer needs its own name"
        seen.add(b.name)
        if problem is not None:
            if out is not None:
                out.append(_broken(_LIMITS, "buffer_valid", _subject("buffer", b), f"{b.name}: {problem}",
                                   "manifest"))
            continue
        good[b.name] = b
    return good


def _on_chip(buffers: dict[str, Buffer], memory: str | None = None) -> list[Buffer]:
    return [b for b in buffers.values() if b.memory in ("sbuf", "psum") and (memory is None or b.memory == memory)]


def _packed(tiling: Tiling, buffers: dict[str, Buffer], t: _targets.Target) -> dict[str, int]:
    """Rows of K per partition of each buffer a double_row matmul reads: trn2's fp8 double_row
    mode packs two fp8 rows of K into one PE row (architecture guide, nki.isa.matmul_perf_mode), so
    an input of up to 256 rows of K spans 128 partitions with twice the bytes per partition. The
    manifest states K on the partition axis; how the packed rows lie in SBUF is not documented,
    so numeq assumes two rows per partition only where K exceeds the partitions."""
    if "matmul_contraction_double_row" not in t:
        return {}
    parts, out = _int(t, "partitions"), {}
    for m in tiling.matmuls:
        if m.double_row or tiling.double_row:
            for name in (m.stationary, m.moving):
                b = buffers.get(name)
                if b is not None and b.memory == "sbuf" and b.dtype in _FP8 and b.partitions > parts:
                    out[name] = 2
    return out


def _partitions(b: Buffer, packed: dict[str, int]) -> int:
    return -(-b.partitions // packed.get(b.name, 1))


def _bytes(b: Buffer, packed: dict[str, int]) -> int:
    """Bytes per partition of all copies of ``b``."""
    return b.bytes_per_partition * packed.get(b.name, 1) * b.bufs


def _psum_banks(b: Buffer, bank_bytes: int) -> int:
    """Banks a PSUM buffer holds: each copy rounds up to whole banks."""
    return b.bufs * max(1, math.ceil(b.bytes_per_partition / bank_bytes))


# ---------------------------------------------------------------------------------------------
# Rules on buffers: partitions, partial-partition starts, SBUF and PSUM capacity
# ---------------------------------------------------------------------------------------------
def _partition_rules(buffers: dict[str, Buffer], t: _targets.Target, packed: dict[str, int]) -> list[ReviewFinding]:
    out: list[ReviewFinding] = []
    chip = _on_chip(buffers)
    if not chip:
        return out
    spec = t.spec("partitions")
    parts = _int(t, "partitions")
    over = [b for b in chip if _partitions(b, packed) > parts]
    for b in over:
        out.append(_broken(_LIMITS, "partition_dim", _subject("buffer", b),
                           f"{b.name} ({b.memory.upper()}, shape {_shape(b)}, partition axis {b.partition_dim}) spans "
                           f"{b.partitions} partitions; a tile spans at most {parts}", spec.cite()))
    if not over:
        note = (f" ({', '.join(packed)}: fp8 double_row inputs, two rows of K per partition, assumed)"
                if packed else "")
        out.append(ReviewFinding(_LIMITS, "pass", "partition_dim", "SBUF/PSUM buffers",
                           f"all {_count(len(chip), 'SBUF/PSUM buffer')} span <= {parts} partitions{note}",
                           spec.cite() + (f"; {_PACKING}" if packed else "")))

    # Partial-partition access (architecture guide): where a tile of n partitions may start.
    fitting = [b for b in chip if _partitions(b, packed) <= parts]
    bad = []
    for b in fitting:
        n = _partitions(b, packed)
        allowed = _targets.start_partitions(n)
        s = b.start_partition
        if s not in allowed or s < 0 or s + n > parts:
            bad.append(b)
            starts = " or ".join(str(a) for a in allowed)
            why = (f"runs past partition {parts - 1} ({s} + {n} > {parts})" if s in allowed
                   else f"may start at partition {starts}, not {s}")
            out.append(_broken(_LIMITS, "partition_start", _subject("buffer", b),
                               f"{b.name}: a tile of {n} partitions {why}", spec.cite()))
    if fitting and not bad:
        partial = sum(1 for b in fitting if _partitions(b, packed) < parts)
        out.append(ReviewFinding(_LIMITS, "pass", "partition_start", "SBUF/PSUM buffers",
                           f"all {_count(len(fitting), 'SBUF/PSUM buffer')} start at an allowed partition "
                           f"({partial} of them partial: > 64 partitions start at 0, 33-64 at 0/64, <= 32 at "
                           "0/32/64/96)", spec.cite()))
    return out


def _capacity_rules(buffers: dict[str, Buffer], t: _targets.Target, packed: dict[str, int]) -> list[ReviewFinding]:
    out: list[ReviewFinding] = []
    psum = _on_chip(buffers, "psum")
    if psum:
        cap_spec, banks_spec = t.spec("psum_partition_bytes"), t.spec("psum_banks")
        cap, banks, bank_bytes = _int(t, "psum_partition_bytes"), _int(t, "psum_banks"), _int(t, "psum_bank_bytes")
        total = sum(b.bytes_per_partition * b.bufs for b in psum)
        used = sum(_psum_banks(b, bank_bytes) for b in psum)
        detail = "; ".join(f"{_copies(b)} ({_psum_banks(b, bank_bytes)} bank"
                           f"{'' if _psum_banks(b, bank_bytes) == 1 else 's'})" for b in psum)
        summary = f"PSUM buffers total {_size(total)} of {_size(cap)} per partition ({used} of {banks} banks)"
        evidence = f"{cap_spec.cite()}; banks: {banks_spec.cite()}"
        if total > cap or used > banks:
            out.append(ReviewFinding(_MEMORY, review_status("psum_capacity"), "psum_capacity",
                               "PSUM buffers " + ", ".join(_subject("", b).strip() for b in psum),
                               f"{detail}; {summary}: over-subscribed", evidence))
        else:
            out.append(ReviewFinding(_MEMORY, "pass", "psum_capacity", "PSUM buffers", f"{detail}; {summary}",
                                     evidence))

    sbuf = _on_chip(buffers, "sbuf")
    if sbuf:
        spec = t.spec("sbuf_partition_bytes")
        cap = _int(t, "sbuf_partition_bytes")
        total = sum(_bytes(b, packed) for b in sbuf)
        summary = f"SBUF buffers total {_size(total)} of {_size(cap)} per partition on {t.name}"
        if total > cap:
            largest = sorted(sbuf, key=lambda b: -_bytes(b, packed))[:3]
            rest = len(sbuf) - len(largest)
            more = f"; and {rest} smaller" if rest else ""
            out.append(ReviewFinding(_MEMORY, review_status("sbuf_capacity"), "sbuf_capacity",
                               "SBUF buffers " + ", ".join(_subject("", b).strip() for b in largest),
                               f"{summary}: over by {_size(total - cap)}; largest: "
                               f"{'; '.join(_copies(b, packed) for b in largest)}{more}", spec.cite()))
        else:
            out.append(ReviewFinding(_MEMORY, "pass", "sbuf_capacity", "SBUF buffers",
                               f"{summary} ({len(sbuf)} buffers)", spec.cite()))
    return out


# ---------------------------------------------------------------------------------------------
# nc_matmul
# ---------------------------------------------------------------------------------------------
def _matmul_rules(tiling: Tiling, buffers: dict[str, Buffer], t: _targets.Target) -> list[ReviewFinding]:
    out: list[ReviewFinding] = []
    k_spec = t.spec("matmul_contraction")
    k_max = _int(t, "matmul_contraction")
    bank_bytes = _int(t, "psum_bank_bytes")
    # How much PSUM one result may span: one bank, or (NeuronCore-v4) the whole PSUM.
    result_spec, result_bytes = t.spec("matmul_result_bytes"), _int(t, "matmul_result_bytes")
    result_where = "one PSUM bank" if result_bytes == bank_bytes else "the whole PSUM"
    has_double = "matmul_contraction_double_row" in t
    valid = ", ".join(buffers) if buffers else "(none)"
    bad: dict[str, int] = {}  # rule -> offenders
    checked: dict[str, int] = {}

    def fail(rule: str, m: Matmul, message: str, evidence: str) -> None:
        bad[rule] = bad.get(rule, 0) + 1
        out.append(_broken(_LIMITS, rule, _subject("matmul", m), f"{m.name}: {message}", evidence))

    def tick(rule: str) -> None:
        checked[rule] = checked.get(rule, 0) + 1

    # The free size of each input, within its limit: rule -> (the input's role, the size's name, why the limit).
    free_sizes = {"matmul_stationary_free": ("stationary", "M", ""),
                  "matmul_moving_free": ("moving", "N", " (one PSUM bank of fp32)")}
    free_max = {rule: _int(t, rule) for rule in free_sizes}
    free_seen = dict.fromkeys(free_sizes, 0)
    k_seen = 0
    fp32_inputs: list[Matmul] = []
    for m in tiling.matmuls:
        role = {"stationary": m.stationary, "moving": m.moving, "psum": m.psum}
        got: dict[str, Buffer | None] = {}
        tick("matmul_operands")
        for r, name in role.items():
            got[r] = buffers.get(name)
            if got[r] is None:
                fail("matmul_operands", m, f"{r} {name!r} is not a buffer; buffers: {valid}", "manifest")
        st, mv, ps = got["stationary"], got["moving"], got["psum"]
        for r, b in (("stationary", st), ("moving", mv)):
            if b is not None and b.memory != "sbuf":
                fail("matmul_operands", m, f"{r} {b.name} is in {b.memory.upper()}; nc_matmul reads its "
                     "stationary and moving tiles from SBUF", k_spec.cite())

        # double_row: the matmul's own flag, or the tiling's (every matmul of the kernel).
        double = m.double_row or tiling.double_row
        if double:
            tick("matmul_perf_mode")
        if double and not has_double:
            fail("matmul_perf_mode", m, f"double_row is requested but {t.name} ({t.core}) has no double_row mode "
                 "(fp8 on NeuronCore-v3 and later)", k_spec.cite())
        if st is not None and mv is not None:
            # Contraction: K is the partition axis of both inputs.
            tick("matmul_contraction")
            k_st, k_mv = st.partitions, mv.partitions
            k = max(k_st, k_mv)
            k_seen = max(k_seen, k)
            if k_st != k_mv:
                fail("matmul_contraction", m, f"stationary {st.name} has K = {k_st} partitions, moving {mv.name} "
                     f"K = {k_mv}; nc_matmul contracts the same K rows of both", k_spec.cite())
            if double and not has_double:
                if k > k_max:
                    fail("matmul_contraction", m, f"K = {k} exceeds the {k_max} rows one nc_matmul contracts",
                         k_spec.cite())
            elif double:
                d_spec = t.spec("matmul_contraction_double_row")
                d_max = _int(t, "matmul_contraction_double_row")
                not_fp8 = [f"{r} {b.name} is {b.dtype}" for r, b in (("stationary", st), ("moving", mv))
                           if b.dtype not in _FP8]
                if not_fp8:
                    fail("matmul_perf_mode", m, f"double_row takes fp8 inputs ({', '.join(_FP8)}); "
                         + ", ".join(not_fp8), d_spec.cite())
                if k > d_max:
                    fail("matmul_contraction", m, f"K = {k} exceeds the {d_max} rows one double_row nc_matmul "
                         "contracts", d_spec.cite())
            elif k > k_max:
                more = (f" ({_int(t, 'matmul_contraction_double_row')} only in fp8 double_row mode)"
                        if has_double else "")
                fail("matmul_contraction", m, f"K = {k} (partitions of {st.name} and {mv.name}) exceeds the "
                     f"{k_max} rows one nc_matmul contracts{more}; split K into tiles accumulating in PSUM",
                     k_spec.cite())

            # Input formats: the Tensor Engine's, fp32/tf32 only with each other.
            tick("matmul_dtype")
            for r, b in (("stationary", st), ("moving", mv)):
                try:
                    _targets.peak_flops(t, b.dtype)
                except ValueError as e:
                    fail("matmul_dtype", m, f"{r} {b.name}: {e}", k_spec.cite())
            if {st.dtype, mv.dtype} == {"e4m3", "e4m3fn"}:  # nc_matmul docstring, Data types
                fail("matmul_dtype", m, f"stationary {st.name} is {st.dtype} and moving {mv.name} is {mv.dtype}; "
                     "Trainium's e4m3 and OCP e4m3fn cannot be mixed in one matmul", k_spec.cite())
            wide = {"fp32", "tf32"}
            if (st.dtype in wide) != (mv.dtype in wide):
                fail("matmul_dtype", m, f"stationary {st.name} is {st.dtype} and moving {mv.name} is {mv.dtype}; "
                     "fp32/tf32 inputs pair only with each other", k_spec.cite())
            if "fp32" in (st.dtype, mv.dtype):
                fp32_inputs.append(m)

        for rule, (r, size, why) in free_sizes.items():
            b = got[r]
            if b is None:
                continue
            tick(rule)
            free_seen[rule] = max(free_seen[rule], b.free_elements)
            # NeuronCore-v4: a bf16 output takes twice the fp32 moving free size (the whole PSUM).
            key = "matmul_moving_free_bf16" if (rule == "matmul_moving_free" and ps is not None and
                                                ps.dtype == "bf16" and "matmul_moving_free_bf16" in t) else rule
            if b.free_elements > _int(t, key):
                fail(rule, m, f"{r} {b.name} {_shape(b)} has free size {size} = {b.free_elements}; at most "
                     f"{_int(t, key)}{why if key == rule and t.generation < 4 else ''}", t.spec(key).cite())

        if ps is not None:
            tick("matmul_output_memory")
            if ps.memory != "psum":
                fail("matmul_output_memory", m, f"output {ps.name} is in {ps.memory.upper()}; nc_matmul writes PSUM",
                     k_spec.cite())
            if ps.dtype != "fp32" and not (t.generation >= 4 and ps.dtype == "bf16"):
                fail("matmul_output_memory", m, f"output {ps.name} is {ps.dtype}; the Tensor Engine of {t.core} "
                     f"writes its PSUM output in {'fp32 or bf16' if t.generation >= 4 else 'fp32'} (cast when "
                     "copying out of PSUM)", k_spec.cite())
            if st is not None and mv is not None:
                want_m, want_n = st.free_elements, mv.free_elements
                if ps.partitions != want_m or ps.free_elements != want_n:
                    fail("matmul_output_memory", m, f"output {ps.name} {_shape(ps)} is {ps.partitions} partitions x "
                         f"{ps.free_elements}; stationary {st.name} x moving {mv.name} gives [M, N] = "
                         f"[{want_m}, {want_n}]", k_spec.cite())
            tick("matmul_psum_bank")
            if ps.bytes_per_partition > result_bytes:
                fail("matmul_psum_bank", m, f"output {ps.name} takes {ps.bytes_per_partition} B per partition "
                     f"({ps.free_elements} x {ps.dtype}); one matmul writes at most {result_where} of "
                     f"{result_bytes} B", result_spec.cite())

    n = len(tiling.matmuls)
    passes = {
        "matmul_operands": (f"all {_count(n, 'matmul')} name existing buffers, inputs in SBUF", "manifest"),
        "matmul_contraction": (f"K matches between stationary and moving and fits the contraction limit in all "
                               f"{_count(checked.get('matmul_contraction', 0), 'matmul')} checked "
                               f"(largest K = {k_seen})",
                               k_spec.cite()),
        "matmul_perf_mode": ("double_row matmuls have fp8 inputs on a target with the mode", k_spec.cite()),
        "matmul_dtype": ("matmul inputs are Tensor Engine formats", k_spec.cite()),
        **{rule: (f"{r} free size {size} <= {free_max[rule]} (largest {free_seen[rule]})", t.spec(rule).cite())
           for rule, (r, size, _) in free_sizes.items()},
        "matmul_output_memory": (f"outputs are {'fp32 or bf16' if t.generation >= 4 else 'fp32'} PSUM tiles of "
                                 "shape [M, N]", k_spec.cite()),
        "matmul_psum_bank": (f"each matmul output fits {result_where} of {result_bytes} B per partition",
                             result_spec.cite()),
    }
    for rule, (message, evidence) in passes.items():
        if checked.get(rule) and not bad.get(rule):
            out.append(ReviewFinding(_LIMITS, "pass", rule, "matmuls", message, evidence))

    rate = t.spec("fp32_matmul_rate")
    if fp32_inputs:
        for m in fp32_inputs:
            out.append(_broken(_LIMITS, "matmul_fp32", _subject("matmul", m),
                               f"{m.name}: fp32 inputs run at {t['fp32_matmul_rate']:g}x the bf16 rate "
                               f"({t['peak_flops_fp32'] / 1e12:g} vs {t['peak_flops_bf16'] / 1e12:g} TFLOPS on "
                               f"{t.name}); use bf16 (or tf32) inputs if the numerics allow", rate.cite()))
    elif checked.get("matmul_dtype"):
        out.append(ReviewFinding(_LIMITS, "pass", "matmul_fp32", "matmuls",
                           "no matmul takes fp32 inputs (which run at a quarter of the bf16 rate)", rate.cite()))
    return out


# ---------------------------------------------------------------------------------------------
# Vector / Scalar / GpSimd stages
# ---------------------------------------------------------------------------------------------
def _stage_rules(tiling: Tiling, buffers: dict[str, Buffer], t: _targets.Target) -> list[ReviewFinding]:
    out: list[ReviewFinding] = []
    valid = ", ".join(buffers) if buffers else "(none)"
    sbuf_spec, psum_spec, bn_spec = t.spec("vector_free_sbuf"), t.spec("vector_free_psum"), t.spec("bn_stats_free")
    sbuf_max, psum_max, bn_max = _int(t, "vector_free_sbuf"), _int(t, "vector_free_psum"), _int(t, "bn_stats_free")
    bad_ops = bad_free = bad_bn = 0
    free_checked = bn_checked = 0
    for s in tiling.stages:
        if s.engine not in MANIFEST_ENGINES:
            bad_ops += 1
            out.append(_broken(_LIMITS, "stage_operands", _subject("stage", s),
                               f"{s.name}: engine {s.engine!r} is not one of {', '.join(MANIFEST_ENGINES)}",
                               "manifest"))
        ops: list[Buffer] = []
        for name in s.operands:
            b = buffers.get(name)
            if b is None:
                bad_ops += 1
                out.append(_broken(_LIMITS, "stage_operands", _subject("stage", s),
                                   f"{s.name} ({s.instruction}): operand {name!r} is not a buffer; buffers: {valid}",
                                   "manifest"))
            else:
                ops.append(b)
        if s.engine not in _VECTOR_ENGINES:
            continue
        # The free size one instruction processes: stated, else the first operand's.
        if s.free_size is not None:
            free = s.free_size
        elif s.operands and s.operands[0] in buffers:
            free = buffers[s.operands[0]].free_elements
        else:
            continue
        in_psum = [b for b in ops if b.memory == "psum"]
        limit, spec, where = (psum_max, psum_spec, "PSUM") if in_psum else (sbuf_max, sbuf_spec, "SBUF")
        free_checked += 1
        if free > limit:
            bad_free += 1
            via = f" (operand {in_psum[0].name} is in PSUM)" if in_psum else ""
            out.append(_broken(_LIMITS, "stage_free_size", _subject("stage", s),
                               f"{s.name} ({s.engine} {s.instruction}): free size {free} elements exceeds the {limit} "
                               f"a {s.engine} instruction takes in {where}{via}; tile the free axis", spec.cite()))
        if s.instruction == "bn_stats":
            bn_checked += 1
            if free > bn_max:
                bad_bn += 1
                out.append(_broken(_LIMITS, "bn_stats_free", _subject("stage", s),
                                   f"{s.name}: bn_stats over {free} elements; one bn_stats takes at most {bn_max} "
                                   "(split the free axis and merge with bn_aggr)", bn_spec.cite()))
    if not bad_ops:
        out.append(ReviewFinding(_LIMITS, "pass", "stage_operands", "stages",
                           f"all {_count(len(tiling.stages), 'stage')} name existing buffers", "manifest"))
    if free_checked and not bad_free:
        out.append(ReviewFinding(_LIMITS, "pass", "stage_free_size", "stages",
                           f"all {_count(free_checked, 'Vector/Scalar/GpSimd stage')} within the free-size limits "
                           f"({sbuf_max} in SBUF, {psum_max} in PSUM)", f"{sbuf_spec.cite()}"))
    if bn_checked and not bad_bn:
        out.append(ReviewFinding(_LIMITS, "pass", "bn_stats_free", "stages",
                           f"all {_count(bn_checked, 'bn_stats stage')} within {bn_max} elements", bn_spec.cite()))

    # NeuronCore-v2: Vector and GpSimd share SBUF access, Vector and Scalar share PSUM access.
    if "shared_sbuf_vector_gpsimd" in t:
        spec = t.spec("shared_sbuf_vector_gpsimd")

        def touching(engine: str, memory: str) -> list[Stage]:
            return [s for s in tiling.stages if s.engine == engine
                    and any(buffers[o].memory == memory for o in s.operands if o in buffers)]

        clashes = 0
        for a, b, memory in (("vector", "gpsimd", "sbuf"), ("vector", "scalar", "psum")):
            sa, sb = touching(a, memory), touching(b, memory)
            if sa and sb:
                clashes += 1
                out.append(ReviewFinding(_MEMORY, review_status("engine_port_sharing"), "engine_port_sharing",
                                   ", ".join(_subject("stage", s) for s in sa + sb),
                                   f"{a} stages ({_names(sa)}) and {b} stages ({_names(sb)}) both access "
                                   f"{memory.upper()}; on {t.core} they cannot access it at once, so they serialise",
                                   spec.cite()))
        if not clashes:
            out.append(ReviewFinding(_MEMORY, "pass", "engine_port_sharing", "stages",
                               f"no Vector/GpSimd SBUF or Vector/Scalar PSUM sharing on {t.core}", spec.cite()))
    return out


# ---------------------------------------------------------------------------------------------
# DMA
# ---------------------------------------------------------------------------------------------
def _dma_rules(tiling: Tiling, buffers: dict[str, Buffer], t: _targets.Target) -> list[ReviewFinding]:
    out: list[ReviewFinding] = []
    valid = ", ".join(buffers) if buffers else "(none)"
    over_spec, rec_spec, tgt_spec = (t.spec("dma_overhead_bytes"), t.spec("dma_recommended_bytes"),
                                     t.spec("dma_target_bytes"))
    overhead, recommended = _int(t, "dma_overhead_bytes"), _int(t, "dma_recommended_bytes")
    aim = _int(t, "dma_target_bytes")
    parts_spec, parts = t.spec("partitions"), _int(t, "partitions")
    stride_spec, stride_max = t.spec("sbuf_stride_bytes"), _int(t, "sbuf_stride_bytes")
    flagged = {"dma_buffer": 0, "dma_small": 0, "dma_partitions": 0, "partial_partitions": 0, "dma_stride": 0}
    between: list[Dma] = []

    def add(rule: str, d: Dma, message: str, evidence: str) -> None:
        flagged[rule] += 1
        out.append(_broken(_MEMORY, rule, _subject("dma", d), f"{d.name} ({d.direction} {d.buffer}): "
                           + message, evidence))

    for d in tiling.dmas:
        if d.buffer not in buffers:
            add("dma_buffer", d, f"buffer {d.buffer!r} is not a buffer; buffers: {valid}", "manifest")
        b = d.bytes_per_partition
        if b < overhead:
            add("dma_small", d, f"{b} B per partition per transfer is overhead-bound (< {overhead} B); "
                f"aim for {_size(aim)}", over_spec.cite())
        elif b < recommended:
            add("dma_small", d, f"{b} B per partition per transfer is below the recommended minimum of "
                f"{_size(recommended)} (target {_size(aim)})", rec_spec.cite())
        elif b < aim:
            between.append(d)
        if d.partitions > parts:
            add("dma_partitions", d, f"spans {d.partitions} partitions; SBUF/PSUM have {parts}",
                parts_spec.cite())
        elif d.partitions < parts:
            add("partial_partitions", d, f"uses {d.partitions} of {parts} partitions; the DMA guide recommends "
                f"transfers spanning all {parts}", over_spec.cite())
        if d.stride_bytes > stride_max:
            add("dma_stride", d, f"innermost stride {d.stride_bytes} B exceeds {stride_max} B, which halves "
                "the access bandwidth; make the innermost axis contiguous", stride_spec.cite())
    n = len(tiling.dmas)
    if not flagged["dma_buffer"]:
        out.append(ReviewFinding(_MEMORY, "pass", "dma_buffer", "dmas", f"all {_count(n, 'DMA')} name existing buffers",
                           "manifest"))
    if not flagged["dma_small"]:
        note = (f" ({len(between)} of them below the {_size(aim)} target: {_names(between)})" if between
                else f" (all at or above the {_size(aim)} target)")
        out.append(ReviewFinding(_MEMORY, "pass", "dma_small", "dmas",
                           f"all {_count(n, 'DMA')} move >= {_size(recommended)} per partition per transfer{note}",
                           f"{rec_spec.cite()}; target: {tgt_spec.cite()}"))
    if not flagged["dma_partitions"]:
        out.append(ReviewFinding(_MEMORY, "pass", "dma_partitions", "dmas",
                           f"all {_count(n, 'DMA')} span at most the {parts} partitions", parts_spec.cite()))
    if not flagged["partial_partitions"]:
        out.append(ReviewFinding(_MEMORY, "pass", "partial_partitions", "dmas",
                           f"all {_count(n, 'DMA')} span all {parts} partitions", over_spec.cite()))
    if not flagged["dma_stride"]:
        out.append(ReviewFinding(_MEMORY, "pass", "dma_stride", "dmas",
                           f"all {_count(n, 'DMA')} have innermost strides <= {stride_max} B", stride_spec.cite()))
    return out


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------
def _resolve(target: _targets.Target | str) -> _targets.Target:
    if isinstance(target, _targets.Target):
        return target
    return _targets.target(target)


def check(tiling: Tiling, target: _targets.Target | str) -> list[ReviewFinding]:
    """Every hardware rule of ``target`` (a ``numeq.review.targets.Target`` or its name) on
    ``tiling``: the instruction limits under "tiling_limits", capacities and DMA efficiency under
    "memory_hierarchy". Hard limits broken are "fail" (one per offender), performance rules missed
    "warn", and each rule that holds everywhere gives one "pass"."""
    if not isinstance(tiling, Tiling):
        raise TypeError(f"tiling: expected a numeq.review.model.Tiling, got {type(tiling).__name__}")
    t = _resolve(target)
    out: list[ReviewFinding] = []
    buffers = _valid_buffers(tiling, t, out)
    packed = _packed(tiling, buffers, t)
    out += _partition_rules(buffers, t, packed)
    out += _capacity_rules(buffers, t, packed)
    # The instruction rules, each over its list of the tiling (none of a kind: nothing to judge).
    for items, rules in ((tiling.matmuls, _matmul_rules), (tiling.stages, _stage_rules), (tiling.dmas, _dma_rules)):
        if items:
            out += rules(tiling, buffers, t)
    return out


def memory_use(tiling: Tiling, target: _targets.Target | str) -> dict:
    """Per-partition on-chip memory of ``tiling`` on ``target``: {"sbuf": [(buffer, bytes incl.
    bufs)], "psum": [...], "sbuf_capacity", "psum_capacity" (bytes per partition), "psum_banks"
    (banks per partition), "psum_banks_used"}; malformed buffers (reported by ``check``) are left
    out."""
    t = _resolve(target)
    buffers = _valid_buffers(tiling, t, None)
    packed = _packed(tiling, buffers, t)
    bank_bytes = _int(t, "psum_bank_bytes")
    psum = _on_chip(buffers, "psum")
    return {
        "sbuf": [(b.name, _bytes(b, packed)) for b in _on_chip(buffers, "sbuf")],
        "psum": [(b.name, b.bytes_per_partition * b.bufs) for b in psum],
        "sbuf_capacity": _int(t, "sbuf_partition_bytes"),
        "psum_capacity": _int(t, "psum_partition_bytes"),
        "psum_banks": _int(t, "psum_banks"),
        "psum_banks_used": sum(_psum_banks(b, bank_bytes) for b in psum),
    }
