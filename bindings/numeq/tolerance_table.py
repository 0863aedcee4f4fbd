"""The tolerance table a rubric cites: ``numeq tolerances`` over the operation catalogue.

One task per catalogue problem (op, input format, K): every platform's output judged against the
exact result, and every (GPU, Trainium-or-numpy) pair's difference, each as one row:

- the tolerance (``numeq.tolerances``: ulps, per-element rtol/atol, Neuron's max-normalised rtol),
  calibrated on seeds ``0 .. trials-1`` of the input family;
- on held-out seeds ``trials .. 2*trials-1`` of the family: the worst error a correct output shows
  (its ratio to the tolerance), the false alarms of numeq's check (the tolerance, and every value
  a value of the output format), of torch's dtype defaults and of rtol=2e-2 (must be 0 for
  numeq's), and the detection rate of the planted bugs (``numeq.bugs``) under each of the three;
- the worst error / tolerance under each of the 8 generators (where the tolerance transfers to
  other input families and where it does not);
- the assumptions in force with their evidence tags, and a sentence a reviewer can paste.

Rows come out in the order of the problems whatever ran them (one process, a process pool or a
dask cluster): every draw is seeded by its (generator, seed) alone, so the table is the same.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from . import ops
from ._arrays import format_info, formats
from ._casts import round as numeq_round
from .catalogue import OPS, Problem, build, formats_for, out_for, refusal
from .machines import platform_assumptions, platform_evidence, platforms
from .tolerances import Requirement, fit_tolerance, requirement, tier_of, ulp_of

__all__ = ["SweepConfig", "TORCH_DEFAULTS", "problems", "run_problem", "sweep"]

# torch.testing.assert_close's defaults per dtype (PyTorch documentation, torch.testing): the
# tolerances reviewers fall back on. Formats without a torch default compare exactly (0, 0).
TORCH_DEFAULTS: dict[str, tuple[float, float]] = {
    "fp64": (1e-7, 1e-7), "fp32": (1.3e-6, 1e-5), "tf32": (1.3e-6, 1e-5), "fp16": (1e-3, 1e-5),
    "bf16": (1.6e-2, 1e-5), "int32": (0.0, 0.0),
}
# The hand-picked tolerance of NKI integration tests (nki-library: rtol=2e-2), with torch's atol.
HAND_PICKED = (2e-2, 1e-5)
SCHEMES = ("numeq", "torch", "rtol_2e-2")

GPU_PLATFORMS = ("cuda_core.fp32", "nvidia.v100", "nvidia.a100", "nvidia.ada", "nvidia.h100", "nvidia.b200")
OTHER_PLATFORMS = ("trainium.trn1", "trainium.trn2", "numpy")
# The table's sizes (small enough that K = 8192 over the catalogue fits the machine's minutes) and
# the ops whose K is a row width, swept at one K: the op registry's catalogue rows say both.
TABLE_SHAPES: dict[str, tuple[int, ...]] = {s.name: s.catalogue.table_shape for s in ops.specs()
                                            if s.catalogue is not None}
ELEMENTWISE = tuple(s.name for s in ops.specs() if s.catalogue is not None and not s.catalogue.reduces)
# The table's ops by default: the kernels ports are reviewed for (every catalogue op has a
# tolerance, numeq.tolerance(...) or --ops, but a table of every elementwise function is no review's).
TABLE_OPS: tuple[str, ...] = ("matmul", "scaled_fp8_matmul", "int8_matmul", "sum", "mean", "sum_of_squares",
                              "softmax", "layernorm", "rmsnorm", "attention", "gelu", "silu")
HIST_EDGES = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, 1024.0, 1e300)


@dataclass(frozen=True)
class SweepConfig:
    """What ``numeq tolerances`` sweeps: catalogue ``ops`` x input ``formats`` (those each op takes)
    x ``ks``; ``gpus`` judged alone and against each of ``others``; the input family
    ``inputs`` (generators) with ``trials`` calibration and ``trials`` held-out seeds from
    ``seed``; ``kind`` and ``failure_probability`` of the bound."""

    ops: tuple[str, ...] = TABLE_OPS
    formats: tuple[str, ...] = ("fp32", "bf16", "fp16", "e4m3fn", "e5m2", "int8")
    ks: tuple[int, ...] = (128, 1024, 8192)
    gpus: tuple[str, ...] = GPU_PLATFORMS
    others: tuple[str, ...] = OTHER_PLATFORMS
    inputs: tuple[str, ...] = ("normal",)
    trials: int = 2
    margin: float = 2.0
    seed: int = 0
    kind: str = "probabilistic"
    failure_probability: float = 1e-6
    shapes: dict[str, tuple[int, ...]] = field(default_factory=lambda: dict(TABLE_SHAPES))
    bugs: bool = True

    def validate(self) -> SweepConfig:
        for o in self.ops:
            if o not in OPS:
                raise ValueError(f"ops: unknown catalogue op {o!r}; valid: {', '.join(OPS)}")
        known = set(platforms())
        for p in (*self.gpus, *self.others):
            if p not in known:
                raise ValueError(f"platforms: unknown platform {p!r}; valid: {', '.join(sorted(known))}")
        gens = ops.generators()
        for g in self.inputs:
            if g not in gens:
                raise ValueError(f"inputs: unknown generator {g!r}; valid: {', '.join(gens)}")
        for k in self.ks:
            if not 1 <= k <= 1 << 20:
                raise ValueError(f"ks: {k} is outside 1 .. 2^20")
        if not 1 <= self.trials <= 1000:
            raise ValueError(f"trials: {self.trials} is outside 1 .. 1000")
        if self.kind not in ops.KINDS:
            raise ValueError(f"kind: unknown bound kind {self.kind!r}; valid: {', '.join(ops.KINDS)}")
        known_formats = set(formats())
        for f in self.formats:
            if f not in known_formats:
                raise ValueError(f"formats: unknown format {f!r}; valid: {', '.join(sorted(known_formats))}")
        fp = self.failure_probability
        if isinstance(fp, bool) or not isinstance(fp, (int, float)) or not 0 < fp < 1:
            raise ValueError(f"failure_probability: {fp!r} is not a probability in (0, 1) (the chance the "
                             "probabilistic bound fails for a whole check)")
        if not (isinstance(self.margin, (int, float)) and self.margin >= 1 and self.margin < float("inf")):
            raise ValueError(f"margin: {self.margin!r} must be a finite factor >= 1")
        return self


def problems(config: SweepConfig) -> list[Problem]:
    """The catalogue problems the sweep covers, in table order. Elementwise ops (gelu, silu) reduce
    nothing, so K, their row width, changes no bound: they get the smallest K only."""
    out = []
    for op in config.ops:
        for fmt in formats_for(op):
            if fmt not in config.formats:
                continue
            for k in (config.ks if op not in ELEMENTWISE else (min(config.ks),)):
                out.append(Problem(op, fmt, out_for(op, fmt), k, config.shapes.get(op, ())))
    return out


def _histogram(ulps: np.ndarray) -> dict[str, list[float]]:
    counts, _ = np.histogram(np.clip(ulps, 0, 1e299), bins=np.asarray(HIST_EDGES))
    return {"edges": list(HIST_EDGES), "counts": [int(c) for c in counts]}


def _outside_format(x: np.ndarray, out: str) -> bool:
    """Whether some value is not a value of the output format (an fp32 result where the op says
    bf16: a missing output cast). numeq's check asks it; torch's and rtol=2e-2 do not."""
    finite = x[np.isfinite(x)]
    if format_info(out)["kind"] == "integer":
        return not bool(np.all(finite == np.rint(finite)))
    with np.errstate(over="ignore"):
        return not np.array_equal(np.asarray(numeq_round(finite, out), dtype=np.float64), finite)


def _fails(x: np.ndarray, y: np.ndarray, rtol: float, atol: float) -> bool:
    # numpy.isclose's rule, |x - y| <= atol + rtol * |y|, with NaNs alike.
    with np.errstate(invalid="ignore"):
        ok = (np.abs(x - y) <= atol + rtol * np.abs(y)) | (np.isnan(x) & np.isnan(y)) | (x == y)
    return not bool(ok.all())


# Which lines of a platform's evidence (numeq.platform_evidence: "TAG  what  source") bear on an
# op: its own plan's lines (matmul, sum) and, for the function-based ops, the function models.
_EVIDENCE_TOPIC = {"matmul": "matmul", "scaled_fp8_matmul": "matmul", "int8_matmul": "matmul", "sum": "sum",
                   "attention": "matmul"}


def _bears_on(what: str, topic: str, in_fmt: str, out: str) -> bool:
    if topic == "matmul":
        return what.startswith(("matmul:", f"matmul {in_fmt} -> {out}"))
    if topic == "sum":
        return what.startswith("sum")
    return what.startswith(("function", "output casts"))


def _assumptions(names: Iterable[str], op: str = "matmul", in_fmt: str = "", out: str = "") -> list[dict[str, str]]:
    """The named, switchable assumptions of each platform (evidence "assumed"), then the measured
    and documented parameters of the op's model (for its formats) with their tag."""
    rows = []
    topic = _EVIDENCE_TOPIC.get(op, "function")
    for p in names:
        if p == "exact":
            continue
        for a in platform_assumptions(p):
            rows.append({"platform": p, "name": a["name"], "value": a["value"], "evidence": "assumed"})
        for line in platform_evidence(p).splitlines():
            tag, _, rest = line.partition("  ")
            what = rest.split("  ")[0].strip()
            if tag in ("measured", "documented") and _bears_on(what, topic, in_fmt, out):
                rows.append({"platform": p, "name": what.split(":")[0], "value": what, "evidence": tag})
    return rows


@dataclass
class _Judged:
    """One (platform, against) pair's data over the draws of a problem."""

    platform: str
    against: str
    calibration: list[Requirement] = field(default_factory=list)
    held_out: list[Requirement] = field(default_factory=list)
    # The built draws of the held-out seeds, for the planted bugs.
    held_built: list[Any] = field(default_factory=list)
    by_generator: dict[str, list[Requirement]] = field(default_factory=dict)


def _bug_outputs(problem: Problem, judged_platform: str, built: Any) -> list[tuple[str, np.ndarray]]:
    try:
        from . import bugs  # the planted bugs (numeq.bugs)
    except ImportError:  # pragma: no cover - bugs ship with numeq; kept for a partial install
        return []
    out = []
    for bug in bugs.for_problem(problem, judged_platform):
        out.append((bug.name, np.asarray(bug.output(built, problem, judged_platform), dtype=np.float64).ravel()))
    return out


def run_problem(problem: Problem, config: SweepConfig) -> list[dict[str, Any]]:
    """Every row of one problem (the unit of work a process or a dask worker runs)."""
    t0 = time.perf_counter()
    seeds_cal = [config.seed + i for i in range(config.trials)]
    seeds_held = [config.seed + config.trials + i for i in range(config.trials)]
    # The generators that draw a meaningful problem of the op (its registry row's).
    allowed = ops.spec(problem.op).catalogue.generators
    inputs = [g for g in config.inputs if g in allowed]
    if not inputs:
        return []
    cal = [(g, s, build(problem, g, s)) for g in inputs for s in seeds_cal]
    held = [(g, s, build(problem, g, s)) for g in inputs for s in seeds_held]
    others_gen = [(g, build(problem, g, seeds_held[0])) for g in allowed]
    # Which platforms model the op: a one-row trial per platform (catalogue.refusal), not a
    # whole emulation of the first draw.
    gpus = [p for p in config.gpus if refusal(problem, p) is None]
    others = [p for p in config.others if refusal(problem, p) is None]
    pairs = [(p, "exact") for p in (*gpus, *others)] + [(g, o) for g in gpus for o in others]
    rows = []
    for platform, against in pairs:
        kw = {"kind": config.kind, "failure_probability": config.failure_probability}
        # The platforms that cannot model the op were left out above (refusal): an error here is a
        # row that cannot be computed, said as such, never a row silently missing from the table.
        try:
            calib = [requirement(b, platform, against, **kw) for _, _, b in cal]
            heldr = [requirement(b, platform, against, **kw) for _, _, b in held]
        except (ValueError, NotImplementedError) as e:
            raise ValueError(f"{problem.op} {problem.in_fmt} -> {problem.out} (K={problem.k}) on {platform} against "
                             f"{against}: the row cannot be computed: {e}") from None
        # The other generators' draws, observed against the row's tolerance. Support can depend on
        # the values (a platform that computes e4m3fn with its e4m3 plan does so up to 240): a
        # generator whose draw the platform refuses is recorded with the refusal, not left out.
        per_gen: dict[str, Requirement] = {}
        refused: dict[str, str] = {}
        for g, b in others_gen:
            try:
                per_gen[g] = requirement(b, platform, against, **kw)
            except (ValueError, NotImplementedError) as e:
                refused[g] = str(e)
        row = _row(problem, platform, against, calib, heldr, [b for _, _, b in held], per_gen, config)
        if refused:
            row["refused_by_generator"] = refused
        rows.append(row)
    elapsed = time.perf_counter() - t0
    for r in rows:
        r["elapsed_s"] = elapsed / max(1, len(rows))
    return rows


def _row(problem: Problem, platform: str, against: str, calib: list[Requirement], held: list[Requirement],
         held_built: list[Any], per_gen: dict[str, Requirement], config: SweepConfig) -> dict[str, Any]:
    out = problem.out
    tol = fit_tolerance(calib, out, config.margin)
    rtol, atol = tol["rtol"], tol["atol"]
    torch_tol = TORCH_DEFAULTS.get(out, (0.0, 0.0))
    schemes = {"numeq": (rtol, atol), "torch": torch_tol, "rtol_2e-2": HAND_PICKED}
    false_alarms = {s: 0 for s in SCHEMES}
    max_abs = max_ulps = max_over = 0.0
    ulps_all = []
    elements = 0
    for r in held:
        elements += r.judged.size + r.unbounded
        d = np.abs(r.judged - r.expected)
        if d.size:
            u = d / ulp_of(r.expected, out)
            ulps_all.append(u)
            max_abs = max(max_abs, float(d.max()))
            max_ulps = max(max_ulps, float(u.max()))
            allowance = atol + rtol * np.abs(r.expected)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(d > 0, d / allowance, 0.0)
            max_over = max(max_over, float(np.max(ratio)))
        for s, (rt, at) in schemes.items():
            failed = _fails(r.judged, r.expected, rt, at) or (s == "numeq" and _outside_format(r.judged, out))
            false_alarms[s] += int(failed)
    # Planted bugs: the judged side's output replaced by the buggy kernel's (the pair's second
    # platform, or the platform itself against the exact result).
    judged_platform = platform if against == "exact" else against
    detection = {s: [0, 0] for s in SCHEMES}
    per_bug: dict[str, list[int]] = {}
    if config.bugs:
        for r, b in zip(held, held_built):
            expected_full = _expected_full(b, platform, against)
            for name, bad in _bug_outputs(problem, judged_platform, b):
                caught_numeq = None
                for s, (rt, at) in schemes.items():
                    caught = _fails(bad, expected_full, rt, at) or (s == "numeq" and _outside_format(bad, out))
                    detection[s][0] += int(caught)
                    detection[s][1] += 1
                    if s == "numeq":
                        caught_numeq = caught
                tally = per_bug.setdefault(name, [0, 0])
                tally[0] += int(bool(caught_numeq))
                tally[1] += 1
    gen_over = {}
    for g, r in per_gen.items():
        d = np.abs(r.judged - r.expected)
        allowance = atol + rtol * np.abs(r.expected)
        with np.errstate(divide="ignore", invalid="ignore"):
            gen_over[g] = float(np.max(np.where(d > 0, d / allowance, 0.0))) if d.size else 0.0
    fp = max((r.failure_probability for r in calib), default=0.0)
    tier = tier_of(config.kind, fp)
    row = {
        "problem": problem.text(), "op": problem.op, "in_fmt": problem.in_fmt, "out": out, "k": problem.k,
        "shape": list(problem.shape), "platform": platform, "against": against,
        "tier": tier, "failure_probability": fp if tier == "probabilistic" else 0.0,
        "tolerance": tol,
        "observed": {"max_abs": max_abs, "max_ulps": max_ulps, "max_over_tolerance": max_over},
        "observed_by_generator": gen_over,
        "checks": len(held), "elements": elements,
        "false_alarms": false_alarms, "detection": detection, "bugs": per_bug,
        "assumptions": _assumptions((platform, against), problem.op, problem.in_fmt, out),
        "error_ulps_histogram": _histogram(np.concatenate(ulps_all) if ulps_all else np.zeros(0)),
        "inputs": list(config.inputs), "trials": config.trials,
    }
    row["rubric"] = _rubric(row)
    return row


def _expected_full(built: Any, platform: str, against: str) -> np.ndarray:
    # What a bug's output is compared with: the reference (against the exact result) or the first
    # platform's output (the pair), over every element (the bug's output covers all of them).
    if against == "exact":
        return np.asarray(built.op.reference(), dtype=np.float64).ravel()
    return np.asarray(built.op.emulate(platform), dtype=np.float64).ravel()


def _fmt(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def _rubric(row: dict[str, Any]) -> str:
    t = row["tolerance"]
    who = (f"{row['platform']}'s output" if row["against"] == "exact"
           else f"the {row['against']} output against the {row['platform']} output")
    ref = "numeq's exact reference (correctly rounded)" if row["against"] == "exact" else "it"
    tier = (f"probabilistic bound, failure probability <= {row['failure_probability']:.0e} per check"
            if row["tier"] == "probabilistic" else "worst-case bound")
    caught, planted = row["detection"]["numeq"]
    bugs = f"; it catches {caught} of {planted} planted-bug outputs" if planted else ""
    return (f"For {row['problem']}, {who} must hold values of {row['out']} and satisfy "
            f"|x - y| <= {_fmt(t['atol'])} + {_fmt(t['rtol'])} |y| "
            f"against {ref} (numeq {tier}, calibrated on {', '.join(row['inputs'])} inputs; "
            f"{row['false_alarms']['numeq']} false alarms on held-out draws{bugs}).")


def sweep(config: SweepConfig, *, executor: str = "local", workers: int | None = None, scheduler: str | None = None,
          progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the sweep: ``executor`` ``"local"`` (``workers`` processes; 1: this process) or
    ``"dask"`` (dask.distributed at ``scheduler``, an address; None: a LocalCluster of ``workers``).
    Returns (rows, meta); rows in problem order whatever ran them."""
    config = config.validate()
    todo = problems(config)
    if not todo:
        offered = "; ".join(f"{op}: {', '.join(formats_for(op))}" for op in config.ops)
        raise ValueError(f"formats: no catalogue problem has ops {', '.join(config.ops)} with formats "
                         f"{', '.join(config.formats)}; the formats each op takes: {offered}")
    if executor == "dask":
        _dask_client_module()  # refused before any work when dask.distributed is missing
    t0 = time.perf_counter()
    results: list[list[dict[str, Any]] | None] = [None] * len(todo)
    bar = _progress(len(todo), progress)
    if executor == "local":
        n = workers or os.cpu_count() or 1
        if n <= 1:
            for i, p in enumerate(todo):
                results[i] = run_problem(p, config)
                bar(1)
        else:
            import concurrent.futures as cf
            import multiprocessing as mp
            with cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")) as pool:
                futures = {pool.submit(run_problem, p, config): i for i, p in enumerate(todo)}
                for f in cf.as_completed(futures):
                    results[futures[f]] = f.result()
                    bar(1)
    elif executor == "dask":
        results = _dask(todo, config, workers, scheduler, bar)
    else:
        raise ValueError(f"executor: unknown executor {executor!r}; valid: local, dask")
    bar(0, close=True)
    rows = [r for rs in results for r in (rs or [])]
    from . import __version__
    meta = {"title": "numeq tolerance table", "numeq_version": __version__, "problems": len(todo), "rows": len(rows),
            "seeds": list(range(config.seed, config.seed + 2 * config.trials)), "generators": list(ops.generators()),
            "inputs": list(config.inputs), "elapsed_s": time.perf_counter() - t0, "config": _config_dict(config)}
    return rows, meta


def _config_dict(config: SweepConfig) -> dict[str, Any]:
    d = asdict(config)
    d["shapes"] = {k: list(v) for k, v in config.shapes.items()}
    return d


def _dask_client_module() -> Any:
    try:
        import distributed
    except ImportError:
        raise ValueError("executor: dask needs dask.distributed, which is not installed (pip install 'numeq[dask]'); "
                         "valid without it: local") from None
    return distributed


def _dask(todo: list[Problem], config: SweepConfig, workers: int | None, scheduler: str | None,
          bar: Callable[..., None]) -> list[list[dict[str, Any]] | None]:
    distributed = _dask_client_module()
    Client, LocalCluster, as_completed = distributed.Client, distributed.LocalCluster, distributed.as_completed
    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=workers or 2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    else:
        try:  # a scheduler that does not answer is the argument's fault, said as such (no traceback)
            client = Client(scheduler, timeout=10)
        except (OSError, TimeoutError, ValueError) as e:
            raise ValueError(f"scheduler: cannot reach the dask scheduler {scheduler!r} within 10 s ({e}); give the "
                             "address a running scheduler listens on (tcp://HOST:8786), or leave --scheduler out "
                             "for a local cluster") from None
    try:
        futures = client.map(run_problem, todo, config=config, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[list[dict[str, Any]] | None] = [None] * len(todo)
        for f in as_completed(futures):
            results[index[f.key]] = f.result()
            bar(1)
        return results
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _progress(total: int, enabled: bool) -> Callable[..., None]:
    """A progress bar on stderr (tqdm), or nothing."""
    if not enabled:
        return lambda n, close=False: None
    try:
        from tqdm import tqdm
    except ImportError:
        return lambda n, close=False: None
    bar = tqdm(total=total, unit="problem", desc="numeq tolerances", leave=False)

    def step(n: int, close: bool = False) -> None:
        if n:
            bar.update(n)
        if close:
            bar.close()
    return step


def as_table_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flat rows (one level of keys) for CSV and Markdown."""
    flat = []
    for r in rows:
        t, o, fa, det = r["tolerance"], r["observed"], r["false_alarms"], r["detection"]
        flat.append({
            "problem": r["problem"], "platform": r["platform"], "against": r["against"], "k": r["k"],
            "tier": r["tier"], "failure_probability": r["failure_probability"],
            "calibrated_on": f"{', '.join(r.get('inputs', []))}, unit scale",
            "ulps": t["ulps"], "rtol": t["rtol"], "atol": t["atol"], "atol_rel": t.get("atol_rel", float("nan")),
            "max_rtol": t["max_rtol"],
            "observed_max_ulps": o["max_ulps"], "observed_over_tolerance": o["max_over_tolerance"],
            "false_alarms_numeq": fa["numeq"], "false_alarms_torch": fa["torch"], "false_alarms_rtol_2e-2": fa["rtol_2e-2"],
            "detected_numeq": f"{det['numeq'][0]}/{det['numeq'][1]}", "detected_torch": f"{det['torch'][0]}/{det['torch'][1]}",
            "detected_rtol_2e-2": f"{det['rtol_2e-2'][0]}/{det['rtol_2e-2'][1]}",
            "checks": r["checks"],
            "assumptions": "; ".join(f"{a['platform']}:{a['name']}={a['value']} ({a['evidence']})"
                                     for a in r["assumptions"] if a["evidence"] == "assumed"),
            "evidence": "; ".join(f"{a['platform']}: {a['value']} ({a['evidence']})"
                                  for a in r["assumptions"] if a["evidence"] != "assumed"),
            "rubric": r["rubric"],
        })
    return flat


_MD_COLUMNS = [("problem", "problem"), ("platform", "platform"), ("against", "against"), ("tier", "tier"),
               ("calibrated_on", "calibrated on"), ("ulps", "ulps"), ("rtol", "rtol"), ("atol", "atol"),
               ("atol_rel", "atol / max|ref|"), ("max_rtol", "max-norm rtol"),
               ("observed_over_tolerance", "worst / tol"), ("false_alarms_numeq", "FA numeq"),
               ("false_alarms_torch", "FA torch"), ("false_alarms_rtol_2e-2", "FA 2e-2"),
               ("detected_numeq", "bugs numeq"), ("detected_torch", "bugs torch"), ("detected_rtol_2e-2", "bugs 2e-2")]


# What every column of the table means (the Markdown's legend, the HTML's "how to read").
LEGEND = {
    "problem": "the operation, its input and output formats, K (the reduction length) and shape",
    "platform": "the platform whose output is judged (against the exact result, or the first of a pair)",
    "against": "exact (the correctly rounded exact result) or the second platform of a cross-platform pair",
    "tier": "probabilistic (the tolerance fails a correct output with at most the row's probability per "
            "check) or deterministic (a worst-case bound: never)",
    "calibrated_on": "the input family (numeq.ops.generators) and scale the tolerance's draws used: atol holds at "
                     "that scale only; rtol, ulps, atol / max|ref| and the max-normalised form hold at any scale",
    "ulps": "the bound in units in the last place of the output format at the expected value",
    "rtol": "the relative term of |x - ref| <= atol + rtol * |ref|, the pair with the least total allowance",
    "atol": "the absolute term of that pair, at the calibration scale (N(0,1)-like inputs)",
    "atol_rel": "the absolute term as a fraction of max|ref|: for the inputs at hand use atol = atol_rel * "
                "max|ref| (numeq.tolerance(...).assert_close_kwargs(reference=ref)), which holds at any input scale",
    "max_rtol": "the max-normalised form |x - ref| <= max_rtol * max|ref| (Neuron's), scale-free",
    "observed_over_tolerance": "the worst error on held-out draws over the tolerance (at most 1 when it holds)",
    "false_alarms_numeq": "held-out correct outputs numeq's tolerance rejected (must be 0)",
    "false_alarms_torch": "held-out correct outputs torch.testing's default tolerance rejected",
    "false_alarms_rtol_2e-2": "held-out correct outputs a flat rtol = 2e-2 rejected",
    "detected_numeq": "planted kernel bugs (numeq.bugs) numeq's tolerance caught, caught / planted",
    "detected_torch": "planted bugs torch.testing's defaults caught",
    "detected_rtol_2e-2": "planted bugs a flat rtol = 2e-2 caught",
}


def _cell(v: Any) -> str:
    if isinstance(v, float):
        if v == 0:
            return "0"
        if math.isnan(v):
            return "-"
        return f"{v:.3g}"
    return str(v).replace("|", "\\|")


def render_markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The table as Markdown: a header with what was run, one line per row, then the rubric
    sentences. FA: false alarms of correct outputs on held-out draws (numeq's must be 0); bugs:
    planted-bug outputs caught / planted."""
    flat = as_table_rows(rows)
    lines = [f"# {meta.get('title', 'numeq tolerance table')}", "",
             f"{meta.get('rows', len(flat))} rows from {meta.get('problems', '?')} problems; inputs "
             f"{', '.join(meta.get('inputs', []))}; seeds {meta.get('seeds')}; {meta.get('elapsed_s', 0):.0f} s.", "",
             "| " + " | ".join(h for _, h in _MD_COLUMNS) + " |", "|" + "---|" * len(_MD_COLUMNS)]
    for r in flat:
        lines.append("| " + " | ".join(_cell(r[k]) for k, _ in _MD_COLUMNS) + " |")
    alarms = sum(r["false_alarms_numeq"] for r in flat)
    lines += ["", f"numeq false alarms: {alarms} (must be 0).", "", "## Legend", ""]
    lines += [f"- **{head}**: {LEGEND[key]}" for key, head in _MD_COLUMNS]
    lines += ["", "## Rubric sentences", ""]
    lines += [f"- {r['rubric']}" for r in flat]
    return "\n".join(lines) + "\n"


def render_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The flat table as CSV (every column of ``as_table_rows``)."""
    import csv
    import io
    flat = as_table_rows(rows)
    buf = io.StringIO()
    if flat:
        w = csv.DictWriter(buf, fieldnames=list(flat[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(flat)
    return buf.getvalue()


def render_json(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """Rows and meta as JSON (every field; non-finite numbers as strings)."""
    import json

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return str(x)
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x
    # One row per line: compact, and a regenerated table diffs row by row.
    compact = {"sort_keys": True, "separators": (",", ":")}
    body = ",\n".join(json.dumps(r, **compact) for r in clean(list(rows)))
    return f'{{"meta":{json.dumps(clean(meta), **compact)},\n"rows":[\n{body}\n]}}\n'

