"""The review of an NKI kernel itself, not of a description of it (issue 31, section 3): numeq runs
the kernel on its NeuronCore model (``numeq.nki.run``) and reviews what the run gave.

- Correctness: the NKI output is the run's (or a given one, hardware or AWS's simulator), the GPU
  output the GPU platform's emulation of the op (or a given one); each is judged against its
  platform's model as a manifest's outputs are, the Trainium platform being the one the run's
  trace amounts to (its K tile, PSUM groups, accumulator: ``Run.platform``).
- Tiling and memory: the run's findings (the limits it broke as it ran), by rule.
- The report adds the trace summary (per engine work, estimated busy time, roofline) and the
  precision flow (where the kernel loses precision, ranked by measured share).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import nki as _nki
from .correctness import _split_name
from .findings import ReviewFinding
from .manifest import OPERATIONS, Manifest, ManifestError, _OPERATIONS
from .model import KernelSpec
from ..nki._run import check_kernel as _check_kernel
from ..nki.machine.targets import target as _target

__all__ = ["review_kernel", "reviewed", "run_manifest_kernel"]

# Run rules about capacities and efficiency (the memory hierarchy); the rest are instruction limits.
_MEMORY_RULES = frozenset({"sbuf_capacity", "sbuf_spill", "psum_capacity", "dma_small", "partial_partitions", "psum_gpsimd",
                           "matmul_psum_bank", "engine_access", "matmul_output_memory"})


def _format(a: np.ndarray, what: str) -> str:
    """The numeq format of an array's elements, by numeq.nki's one dtype table."""
    from ..nki.machine.dtypes import dtype_of

    return dtype_of(np.asarray(a).dtype, what).format


def review_kernel(kernel: Callable, inputs: dict[str, np.ndarray], op: str, *, kernel_args: dict | None = None,
                  gpu: str = "nvidia.h100", target: str = "trn2", in_fmt: str | None = None, out: str | None = None,
                  outputs: dict[str, np.ndarray] | None = None, tolerance: dict[str, float] | None = None,
                  params: dict[str, Any] | None = None, assume: dict | None = None, name: str = "",
                  precision: bool = True, reference: Callable | None = None, reference_name: str = "") -> Any:
    """Review ``kernel`` (an ``@nki.jit`` function) computing operation ``op`` (one of
    ``numeq.review.manifest.OPERATIONS``) on ``inputs`` (the op's inputs by role: a, b for
    matmul, x for softmax ...). The kernel gets ``kernel_args`` (its parameters by name; default:
    the inputs its parameters name). ``outputs`` may give "nki" (hardware or AWS's simulator: then
    compared bit for bit with the run) and "gpu" arrays; the rest are emulated. ``params``: the
    op's parameters (``eps``, ``causal``, ``scale`` ...: numeq.ops' keywords). ``reference``: the
    author's own function of what the kernel should compute, called with the op's inputs by role as
    float64 keywords and the op's parameters it names (``review.own_reference``); the review then
    judges numeq's op and the kernel's own math against it (named ``reference_name``). Returns a
    ``numeq.review.Review`` whose ``run`` is the kernel's run."""
    if op not in OPERATIONS:
        raise ValueError(f"op: unknown operation {op!r}; valid: {', '.join(OPERATIONS)}")
    required, optional, _ = _OPERATIONS[op]
    missing = [r for r in required if r not in inputs]
    if missing:
        raise ValueError(f"inputs: {op} needs {', '.join(required)}; missing {', '.join(missing)}")
    fn = getattr(kernel, "func", kernel)
    parameters = list(inspect.signature(fn).parameters)
    args = dict(kernel_args) if kernel_args is not None else {k: v for k, v in inputs.items() if k in parameters}
    run = _nki.run(kernel, target=target, assume=assume, **args)
    if run.completed and not isinstance(run.outputs, np.ndarray):
        raise ValueError("kernel: returns several outputs; review_kernel reviews a kernel with one output")
    first = inputs[required[0]]
    fmt_in = in_fmt or _format(first, required[0])
    fmt_out = out or (_format(run.outputs, "the kernel's output") if run.completed else "fp32")
    given = {k: np.asarray(v) for k, v in (outputs or {}).items()}
    m = Manifest(Path(inspect.getsourcefile(fn) or "<kernel>"), name or f"NKI kernel {fn.__name__}",
                 f"numeq ran {fn.__name__} on its NeuronCore model ({target})", op, fmt_in, fmt_out, dict(params or {}),
                 {k: v for k, v in inputs.items() if k in required + optional}, given, gpu, run.platform,
                 stated_tolerance=tolerance, target=target,
                 kernel=KernelSpec(Path(inspect.getsourcefile(fn) or "<kernel>"), fn.__name__, (), args))
    given_names = sorted(given)  # before the review adds the run's own output
    theirs = None
    if reference is not None:  # called before the review: a reference that cannot run stops it
        from .own_reference import call_reference

        theirs = call_reference(reference, {k: np.asarray(v) for k, v in m.inputs.items()}, m.params,
                                tuple(m.op()._op.result_shape()))
    r = reviewed(m, run, precision)
    if theirs is not None:
        from .own_reference import reference_findings

        found, notes = reference_findings(reference_name or getattr(reference, "__name__", "reference"), theirs,
                                          m.op(), m.out, run)
        r.correctness.findings.extend(found)
        r.findings[:0] = found
        r.correctness.notes.extend(notes)
    # Which arrays each side read: an input the op reads but the kernel does not is a difference to see.
    r.correctness.notes.append(
        f"inputs: {op} read {', '.join(sorted(m.inputs)) or 'none'}; the kernel took "
        f"{', '.join(sorted(args)) or 'none'}"
        + (f"; params {', '.join(f'{k}={v!r}' for k, v in m.params.items())}" if m.params else "")
        + (f"; given outputs: {', '.join(given_names)}" if given_names else "")
        + "".join(f"; {k} of shape {old} read as {new}, the op's shape" for k, (old, new) in m.reshaped.items()))
    return r


def run_manifest_kernel(m: Manifest) -> Any:
    """Run the manifest's [kernel] on its arguments (the Trainium platform's assumption overrides
    apply to the run)."""
    from ..nki import _cli

    spec = m.kernel
    # The platform's assumption overrides apply to the run; its tiling options (k_tile,
    # psum_group, ...) are the kernel's own to decide: the run reads them from the trace.
    known = _nki.assumptions_of(m.target)
    assume = {k: v for k, v in (item.split("=", 1) for item in _split_name(m.trainium_platform)[1] if "=" in item)
              if k in known}
    where = f"{m.path}:{spec.line}"
    try:
        with _nki.installed(target=m.target):
            kernel = _cli._kernel(_cli._import(str(spec.file)), str(spec.file), spec.function)
            fn = getattr(kernel, "func", kernel)
            try:
                _check_kernel(fn, spec.function)
            except TypeError as e:
                raise ManifestError(f"{where}: kernel.function: {e}") from None
            _check_args(fn, spec, where)
            try:
                return _nki.run(kernel, target=m.target, assume=assume or None, grid=spec.grid or None, **spec.args)
            except (SystemExit, KeyboardInterrupt) as e:
                # A kernel returns its outputs; one that exits (or is interrupted) left nothing to review.
                raise ManifestError(f"{where}: kernel: {spec.function} raised {type(e).__name__}"
                                    f"({', '.join(map(repr, e.args))}) while it ran; numeq cannot review it") from None
            except MemoryError as e:
                raise ManifestError(f"{where}: kernel: {spec.function}: {e}") from None
    except _cli.UsageFault as e:
        raise ManifestError(f"{where}: kernel: {e}") from None


def _check_args(fn: Callable, spec: Any, where: str) -> None:
    """A manifest's ``[kernel] args`` name the kernel's parameters, and give every parameter
    without a default (unless the kernel takes ``**kwargs`` / ``*args``)."""
    params = list(inspect.signature(fn).parameters.values())
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    names = [p.name for p in named if p.kind != p.POSITIONAL_ONLY]
    signature = f"{spec.function} takes ({', '.join(p.name for p in named)})"
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        unknown = [k for k in spec.args if k not in names]
        if unknown:
            raise ManifestError(f"{where}: kernel.args.{unknown[0]}: {signature}: no parameter "
                                f"{', '.join(unknown)}; valid: {', '.join(names) or '(none)'}")
    run_keywords = [k for k in spec.args if k in ("target", "assume", "grid")]
    if run_keywords:
        raise ManifestError(f"{where}: kernel.args.{run_keywords[0]}: a parameter named as numeq.nki.run's own "
                            "keyword (target, assume, grid) cannot be passed; rename it in the kernel")
    missing = [p.name for p in named if p.default is p.empty and p.name not in spec.args]
    if missing:
        raise ManifestError(f"{where}: kernel.args: {signature}: no value for {', '.join(missing)} (give each "
                            "parameter without a default in [kernel] args)")


def reviewed(m: Manifest, run: Any, precision: bool = True) -> Any:
    """The review of manifest ``m`` whose NKI kernel ``run`` numeq ran: the NKI output is the run's
    unless ``m`` gives one (then compared with it bit for bit), the GPU output the GPU platform's
    emulation unless given; the Trainium platform is the one the trace amounts to."""
    from .correctness import check
    from .run import Review, described_parts

    findings: list[ReviewFinding] = []
    judged = run
    if not run.completed:
        findings.append(ReviewFinding("tiling_limits", "fail", "kernel_stopped", "the kernel",
                                "the kernel stopped at an error the hardware cannot compute past: "
                                + "; ".join(f"{f.where}: [{f.rule}] {f.message}" for f in run.errors[:3])))
    elif "nki" in m.outputs:
        finding, matched = _given_against_runs(np.asarray(m.outputs["nki"]), run)
        findings.append(finding)
        judged = matched  # the given output is judged on the platform of the run that reproduces it
    else:
        # In the op's shape where the two differ only by axes of length 1 (a row reduction's
        # [P, 1] tile for the op's (P,)), as numeq.compare reads a run; the notes say so.
        from ..verdicts import _in_op_shape

        outputs = _in_op_shape(run.outputs, m.op())
        if isinstance(run.outputs, np.ndarray) and outputs.shape != run.outputs.shape:
            m.reshaped["the kernel's output"] = (tuple(run.outputs.shape), tuple(outputs.shape))
        m.outputs["nki"] = np.asarray(outputs, dtype=np.float64)
        m.nki_run = run  # a failure is then diagnosed on the kernel itself (its exact math, its tiles)
        m.nki_from_numeq = True  # numeq's model run on itself confirms none of its assumptions
    # The standard is the computation the port owes: the kernel's own tiling with an fp32
    # accumulator. A narrower one read from the trace is the kernel's mistake, never its standard
    # (judged against itself, a bf16 accumulator would loosen its own tolerance a thousandfold).
    traced = judged.kernel_platform or judged.platform
    platform, narrow = _intended(traced)
    if narrow:
        line = next((f.where for f in judged.findings if f.rule == "narrow_accumulator"), "the kernel's trace")
        findings.append(ReviewFinding("numerical_standard", "fail", "narrow_accumulator", line,
                                f"the kernel sums its PSUM results in {narrow} (its trace amounts to "
                                f"{traced}): "
                                f"its outputs are judged against the same tiling with fp32 accumulation, {platform}, "
                                "the computation a port of an fp32-accumulating kernel owes; the precision flow names "
                                "the line", "measured: numeq.nki.run's trace (each nc_matmul's PSUM chain and the "
                                "tile its result is added into)"))
    m.trainium_platform = platform
    if "gpu" not in m.outputs:
        m.outputs["gpu"] = np.asarray(m.op().emulate(m.gpu_platform), dtype=np.float64)
    c = check(m)
    c.notes[:] = [n for n in c.notes if not n.startswith("no [tiling]")] + [
        f"the Trainium platform read from the kernel's trace: {platform} (its K tile per nc_matmul, PSUM groups "
        "and their accumulator, as the run executed them)"]
    t = _target(m.target)
    described, memory, performance = described_parts(m, t)
    findings = list(c.findings) + findings + _run_findings(run) + described
    beside: list[list] = []
    if m.performance is not None and run.completed:
        found, beside = _against_the_trace(m.performance, run.summary(), m.base, run.schedule())
        findings += found
    return Review(m, t, c, memory, performance, findings, run=run,
                  precision=_precision_flow(m, run) if precision and run.completed else [], beside_trace=beside)


def _intended(platform: str) -> tuple[str, str]:
    """``platform`` (a run's) with its group accumulator back at fp32, and the narrower format the
    trace used ("" where it used fp32)."""
    base, items = _split_name(platform)
    narrow = next((i.split("=", 1)[1] for i in items if i.startswith("group_accumulator=")), "")
    if not narrow or narrow == "fp32":
        return platform, ""
    kept = [i for i in items if not i.startswith("group_accumulator=")]
    return (f"{base}[{','.join(kept)}]" if kept else base), narrow


def _precision_flow(m: Manifest, run: Any) -> list:
    """The run's precision flow, its shares measured against the op's exact result (the review
    knows the op), so the output format's rounding and the fp32 arithmetic get theirs too."""
    exact = np.asarray(m.op().exact()[0], dtype=np.float64)
    mine = np.asarray(run.outputs)
    return run.precision_flow(reference=exact if exact.size == mine.size else None)


def _given_against_runs(given: np.ndarray, run: Any) -> tuple[ReviewFinding, Any]:
    """The given NKI output (hardware, AWS's simulator) against numeq's run, value for value; when
    they differ, against the run under each single change of an assumption: the one that
    reproduces it is a measurement of the hardware ("equals numeq's run under
    psum_rounding=toward_zero")."""
    from ..nki import assumptions_of

    def same(outputs: Any) -> bool:
        mine = np.asarray(outputs, dtype=np.float64)
        return given.shape == mine.shape and np.array_equal(given.astype(np.float64), mine, equal_nan=True)

    evidence = "measured: numeq.nki.run on the review's inputs"
    if same(run.outputs):
        return ReviewFinding("preserved_behaviour", "pass", "run_vs_given", "NKI output",
                       f"the given NKI output equals numeq's run of the kernel value for value (platform "
                       f"{run.platform}, every assumption at its default)", evidence), run
    table = assumptions_of(run.target)
    for name, entry in table.items():
        for value in entry["alternatives"]:
            if value == run.assumptions.get(name):
                continue
            other = run.rerun(assume={name: value})
            if other.completed and same(other.outputs):
                return ReviewFinding("preserved_behaviour", "pass", "run_vs_given", "NKI output",
                               f"the given NKI output equals numeq's run of the kernel under {name}={value} value for "
                               f"value (not under the default {name}={run.assumptions.get(name)}): a measurement of "
                               "the hardware's behaviour there", evidence), other
    return ReviewFinding("preserved_behaviour", "fail", "run_vs_given", "NKI output",
                   "the given NKI output differs from numeq's run of the kernel under the default assumptions and under "
                   "every single change of one: the kernel run is not the one that produced it, or the hardware "
                   "differs from numeq's model in a way no assumption names", evidence), run


def _against_the_trace(perf: Any, s: Any, base: Path, schedule: Any = None) -> tuple[list[ReviewFinding], list[list]]:
    """The performance evidence beside the trace's estimate: the findings, and the table that puts
    them side by side (quantity, the trace's estimate, the evidence, evidence / estimate, where the
    evidence comes from). A kernel time (the claim's, baseline median / claimed speedup, or the
    measured candidate median) below the trace's lower bound is one the kernel cannot reach on the
    estimate; an engine a profile shows far busier (4x) than the trace's estimate of it is a finding
    too (the kernel profiled may not be this one, or the estimate misses a cost)."""
    from statistics import median

    from .performance import _UNIT_SECONDS, load_profile

    out: list[ReviewFinding] = []
    rows: list[list] = []
    # The floor on documented rates only: each compute engine's cycles at its clock, the DMAs'
    # bytes at the whole chip's HBM bandwidth (no NeuronCore moves more; the per-core share the
    # summary's estimate uses is an assumption, so it judges nothing here).
    floors = {e: u.busy_s for e, u in s.engines.items() if e != "dma"}
    if "dma" in s.engines:
        floors["dma"] = s.engines["dma"].bytes / s.hbm_chip_bytes_per_s
    engine = max(floors, key=floors.get) if floors else "none"
    bound = floors.get(engine, 0.0)
    evidence = (f"documented: the {engine} engine's {bound * 1e6:.3g} us from the trace, at the target's documented "
                f"rates (clocks; the chip's HBM bandwidth for DMA, {s.hbm_chip_source}); the per-instruction costs "
                "of the SDK 2.26 nki.isa docstrings (an estimate)")
    times = []
    tm = perf.timings
    if tm is not None:
        unit = _UNIT_SECONDS[tm.unit]
        if perf.claimed_speedup:
            times.append(("the claimed speedup", median(tm.baseline) * unit / perf.claimed_speedup,
                          f"{perf.claimed_speedup:g}x over the baseline's median"))
        times.append(("the measured candidate", median(tm.candidate) * unit, "its median"))
    for what, seconds, how in times:
        below = seconds < bound
        out.append(ReviewFinding("performance_claim", "fail" if below else "info", "trace_lower_bound", what,
                           f"{what} ({how}) puts the NKI kernel at {seconds * 1e6:.3g} us; its trace needs at least "
                           f"{bound * 1e6:.3g} us" + (": faster than the kernel can run on the estimate"
                                                       if below else ""), evidence))
        rows.append([f"kernel time: {what}", f"at least {bound * 1e6:.3g} us ({engine})", f"{seconds * 1e6:.3g} us",
                     _ratio(seconds, bound), f"timings ({how})"])
        if schedule is not None and schedule.time_s > 0:
            # The schedule rests on named assumptions (DMA fixed cost, HBM share, semaphores): it
            # informs, it does not decide.
            out.append(ReviewFinding("performance_claim", "info", "schedule_prediction", what,
                                     f"{what} ({how}) puts the NKI kernel at {seconds * 1e6:.3g} us; numeq's schedule "
                                     f"of its trace predicts {schedule.time_s * 1e6:.3g} us, bound by "
                                     f"{schedule.bound_by} ({_ratio(seconds, schedule.time_s)} of the prediction)",
                                     "assumed: Run.schedule() (the dependency graph list-scheduled at the target's "
                                     "documented rates; its DMA fixed cost, HBM share and semaphore latency are "
                                     "named assumptions)"))
            rows.append([f"kernel time: {what}, against the schedule", f"{schedule.time_s * 1e6:.3g} us predicted",
                         f"{seconds * 1e6:.3g} us", _ratio(seconds, schedule.time_s), f"timings ({how})"])
    profiled: dict[str, float] = {}
    for p in perf.profiles:
        if p.label != "candidate":  # the NKI kernel's profile (the baseline is the GPU's)
            continue
        summary = load_profile(base / p.path)
        total = summary.total_time
        if not total:
            continue
        if "kernel time: the profile" not in [r[0] for r in rows]:
            rows.append(["kernel time: the profile", f"at least {bound * 1e6:.3g} us ({engine})",
                         f"{total * 1e6:.3g} us", _ratio(total, bound), f"profile {p.path}"])
        for engine_name, use in s.engines.items():
            field = "dma_active_time_percent" if engine_name == "dma" else f"{engine_name}_engine_active_time_percent"
            percent = getattr(summary, field, None)
            if percent is None or use.busy_s <= 0:
                continue
            busy = profiled[engine_name] = percent / 100 * total
            if busy > 4 * use.busy_s:
                out.append(ReviewFinding("performance_claim", "warn", "profile_vs_trace", f"{p.label}: {engine_name}",
                                   f"the profile shows the {engine_name} engine busy {busy * 1e6:.3g} us, "
                                   f"{busy / use.busy_s:.1f}x the trace's estimate {use.busy_s * 1e6:.3g} us",
                                   f"measured: the profile ({p.label}); {evidence}"))
    for engine_name, use in s.engines.items():
        busy = profiled.get(engine_name)
        rows.append([f"{engine_name} engine busy", f"{use.busy_s * 1e6:.3g} us",
                     "-" if busy is None else f"{busy * 1e6:.3g} us",
                     "-" if busy is None else _ratio(busy, use.busy_s),
                     "the candidate's profile" if busy is not None else "no profile of the engine"])
    return out, rows


def _ratio(evidence: float, estimate: float) -> str:
    return f"{evidence / estimate:.3g}x" if estimate > 0 else "-"


def _run_findings(run: Any) -> list[ReviewFinding]:
    """The run's findings as review findings: errors fail, warnings warn; a clean run passes both
    criteria, measured on the instructions it checked."""
    out = []
    # The hazards (Run.hazards: orderings the documents forbid, both lines named) are findings of
    # the run like the limits it checked.
    for f in list(run.findings) + (run.hazards() if run.completed and run.values else []):
        if f.rule == "narrow_accumulator":  # a numerical_standard finding of its own (reviewed)
            continue
        criterion = "memory_hierarchy" if f.rule in _MEMORY_RULES else "tiling_limits"
        out.append(ReviewFinding(criterion, "fail" if f.severity == "error" else "warn", f.rule, f.where,
                           f"{f.where}: {f.message}" + (f" (x{f.count})" if f.count > 1 else ""), f.source))
    for criterion in ("tiling_limits", "memory_hierarchy") if run.completed else ():
        if not any(f.criterion == criterion for f in out):
            out.append(ReviewFinding(criterion, "pass", "kernel_run", "the kernel",
                               f"numeq ran the kernel's {len(run.trace)} instructions with no "
                               f"{'limit' if criterion == 'tiling_limits' else 'capacity or efficiency rule'} broken",
                               "measured: numeq.nki.run, the target's limits checked as it ran"))
    return out
