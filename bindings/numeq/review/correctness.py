"""Correctness of a port: each output through the verdict ladder on the plan derived from the
kernel's own tiling, the port check between the GPU and the Trainium outputs, and, where an output
is not explained, where its failures lie and which kernel mistake reproduces them.

The Trainium platform a review judges against is the manifest's (with its assumption overrides)
plus the kernel's tiling as platform options: ``k_tile`` (the rows of K each nc_matmul contracts,
as the kernel cuts them), ``psum_group`` (K tiles per PSUM group, groups added in SBUF) and
``fp8_double_row``. So "bit-exact with trainium.trn2[k_tile=64]" means bit-exact with the
documented structure of the NeuronCore computing exactly the kernel's tiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .. import bugs
from ..verdicts import PortVerdict, Verdict, compare, compare_port
from ..machines import matmul as _matmul
from ..machines import plan as _plan
from ..machines import platform_assumptions
from .findings import ReviewFinding
from .manifest import Manifest

__all__ = ["Correctness", "check", "kernel_platform"]

_FP8 = ("e4m3", "e5m2")
_OUTPUT_NAMES = {"gpu": "GPU output", "nki": "NKI output", "simulator": "NKI simulator output"}


def _split_name(platform: str) -> tuple[str, list[str]]:
    base, _, rest = platform.partition("[")
    return base, [i.strip() for i in rest.rstrip("]").split(",") if i.strip()]


def kernel_platform(trainium: str, manifest: Manifest) -> tuple[str, list[str]]:
    """The Trainium platform of the kernel: ``trainium`` with the kernel's tiling as options, and
    notes on what of the tiling the plan takes. K tiles equal to the instruction's most (128, or
    256 in double_row mode) are the platform's default and add nothing."""
    base, items = _split_name(trainium)
    keys = {i.split("=", 1)[0] for i in items}
    notes: list[str] = []
    t = manifest.tiling
    if t is None:
        return trainium, ["no [tiling] in the manifest: the platform's default tiles of K (128 rows per nc_matmul, "
                          "every tile into one PSUM tile in program order)"]
    double_row = (t.double_row or any(m.double_row for m in t.matmuls)) and manifest.in_fmt in _FP8
    if double_row and "fp8_double_row" not in keys:
        items.append("fp8_double_row=on")
        notes.append("fp8 double_row matmuls: 256 rows of K per instruction")
    most = 256 if double_row else 128
    # K per nc_matmul: the manifest's k_tile, else what the matmuls' stationary tiles contract
    # (their partition dimension, which holds K; numeq.review.tiling checks it against the limits).
    contracted = set()
    for mm in t.matmuls:
        try:
            b = t.buffer(mm.stationary)
            contracted.add(b.partitions)
        except (KeyError, IndexError):
            continue
    k_tile = t.k_tile
    if k_tile is None and len(contracted) == 1:
        k_tile = contracted.pop()
        notes.append(f"K tile {k_tile} taken from the matmuls' stationary tiles (the manifest gives no k_tile)")
    elif k_tile is not None and contracted and contracted != {k_tile}:
        notes.append(f"tiling.k_tile = {k_tile} but the matmuls' stationary tiles contract "
                     f"{', '.join(map(str, sorted(contracted)))} rows: the plan follows k_tile")
    if k_tile is not None and k_tile != most and "k_tile" not in keys:
        items.append(f"k_tile={k_tile}")
    if t.psum_group is not None and "psum_group" not in keys:
        items.append(f"psum_group={t.psum_group}")
    k = k_tile or most
    notes.append(f"K cut into tiles of {k} rows, each one nc_matmul" +
                 (f"; {t.psum_group} tiles per PSUM group, the groups added in fp32 in SBUF" if t.psum_group
                  else "; every K tile of an output tile accumulated into one PSUM tile in program order"))
    return (base + "[" + ",".join(items) + "]") if items else base, notes


@dataclass
class Correctness:
    """What the correctness part found: ``platforms`` (output name -> the platform it was judged
    against), ``plan`` (the kernel's Trainium plan, in words), ``verdicts`` (output name ->
    ``Verdict``), ``port`` (the ``PortVerdict`` of GPU against NKI output), ``findings``, and per
    output the ``errors`` (|output - exact| / its probabilistic bound, for plots)."""

    platforms: dict[str, str]
    plan: str
    notes: list[str]
    verdicts: dict[str, Verdict]
    port: PortVerdict | None
    findings: list[ReviewFinding] = field(default_factory=list)
    errors: Mapping[str, np.ndarray] = field(default_factory=dict)
    tolerance: dict[str, Any] = field(default_factory=dict)
    signature: str = ""


def _exact(op: Any) -> np.ndarray:
    hi, lo = op.exact()
    return np.asarray(hi, dtype=np.float64), np.asarray(lo, dtype=np.float64)


def _error_over_bound(actual: np.ndarray, op: Any, platform: str, fp: float) -> np.ndarray:
    """|actual - exact| / the platform's probabilistic bound, per element (inf where the bound is
    0 and the output differs; 0 where they agree)."""
    hi, lo = _exact(op)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs((np.asarray(actual, dtype=np.float64) - hi) - lo)
        bound = op.bound(platform, kind="probabilistic", failure_probability=fp / max(1, actual.size))
        ratio = np.where(err == 0, 0.0, np.where(bound > 0, err / np.where(bound > 0, bound, 1), np.inf))
    return np.where(np.isnan(ratio), np.inf, ratio)


class _ErrorsOverBound(Mapping):
    """Output name -> |output - exact| / its platform's probabilistic bound, computed when first
    read: the data-driven bound of a long matmul costs many times its emulation, and only a
    failing verdict's tiles and the HTML page's plot read it."""

    def __init__(self) -> None:
        self._inputs: dict[str, tuple] = {}
        self._done: dict[str, np.ndarray] = {}

    def add(self, name: str, *inputs: Any) -> None:
        self._inputs[name] = inputs

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._done:
            self._done[name] = _error_over_bound(*self._inputs[name])
        return self._done[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._inputs)

    def __len__(self) -> int:
        return len(self._inputs)


def _tier_words(v: Verdict) -> str:
    if v.tier == "bit_exact":
        return f"bit-exact with {v.platform}"
    if v.tier == "variant":
        return f"bit-exact with the named variant {v.explained_by}"
    if v.tier == "probabilistic":
        return (f"within {v.platform}'s probabilistic bound (failure probability {v.failure_probability:g}), "
                f"not bit-exact with it or any modelled variant ({v.bit_exact} of {v.elements} elements equal)")
    if v.tier == "deterministic":
        return (f"beyond the probabilistic bound of {v.platform} on {v.deterministic_only} elements, within the "
                "worst-case bound: an order less accurate than the model's")
    return f"not explained by {v.platform} or any modelled variant: {v.failures} of {v.elements} elements fail"


def _tiles_text(mask: np.ndarray, m_tile: int, n_tile: int) -> str:
    """Where the failing elements lie on the kernel's output tiles (the last two axes)."""
    if mask.ndim < 2:
        idx = np.flatnonzero(mask)
        return f"elements {idx.min()}..{idx.max()}" if idx.size else ""
    m2 = mask.reshape(-1, mask.shape[-2], mask.shape[-1]).any(axis=0)
    rows, cols = np.nonzero(m2)
    tiles = sorted({(r // m_tile, c // n_tile) for r, c in zip(rows.tolist(), cols.tolist())})
    tm = -(-mask.shape[-2] // m_tile)
    tn = -(-mask.shape[-1] // n_tile)
    parts = [f"rows {i * m_tile}..{min(mask.shape[-2], (i + 1) * m_tile) - 1} x cols "
             f"{j * n_tile}..{min(mask.shape[-1], (j + 1) * n_tile) - 1}" for i, j in tiles[:4]]
    more = f" and {len(tiles) - 4} more" if len(tiles) > 4 else ""
    return (f"{len(tiles)} of {tm * tn} output tiles of {m_tile} x {n_tile} hold failures: "
            + "; ".join(parts) + more)


def _faulty_term(st: dict, n: np.ndarray, g: np.ndarray, missed: np.ndarray, standard: dict) -> str:
    """Which term of a stated tolerance |nki - gpu| <= atol + rtol |gpu| misses the elements
    ``missed``: the atol (the misses lie near zero, where only atol counts: the atol they need,
    the rtol kept, is within numeq's), else the rtol (below the platforms' own difference: the
    rtol they need, the atol kept), with the value each needs."""
    d, mag = np.abs(n - g)[missed], np.abs(g)[missed]
    need_atol = float(np.max(d - st["rtol"] * mag))
    with np.errstate(divide="ignore", invalid="ignore"):
        need_rtol = float(np.max(np.where(mag > 0, (d - st["atol"]) / np.where(mag > 0, mag, 1), np.inf)))
    near = float(np.max(mag))
    # Near zero: every miss lies below the outputs' median magnitude, where atol dominates.
    near_zero = near < float(np.median(np.abs(g)))
    if near_zero and standard.get("atol") is not None and need_atol <= standard["atol"] * (1 + 1e-9):
        return (f"atol too small near zero: the {int(missed.sum())} missed elements have |gpu| <= {near:.3g}, and "
                f"atol={need_atol:.3g} (numeq's standard: {standard['atol']:.3g}) covers them with the stated rtol")
    if standard.get("rtol") is not None and need_rtol <= standard["rtol"] * (1 + 1e-9):
        return (f"rtol below the platforms' own difference: rtol={need_rtol:.3g} (numeq's standard: "
                f"{standard['rtol']:.3g}) covers the {int(missed.sum())} missed elements with the stated atol")
    short = []
    if standard.get("rtol") is not None and st["rtol"] < standard["rtol"]:
        short.append(f"rtol below the platforms' own difference ({st['rtol']:.3g} < numeq's {standard['rtol']:.3g})")
    if standard.get("atol") is not None and st["atol"] < standard["atol"]:
        short.append(f"atol too small near zero ({st['atol']:.3g} < numeq's {standard['atol']:.3g})")
    return ((" and ".join(short) + ": " if short else "") +
            f"the missed elements need atol={need_atol:.3g} (with the stated rtol) or rtol={need_rtol:.3g} (with the "
            "stated atol)")


def _relevant_assumptions(platform: str, manifest: Manifest) -> list[str]:
    """The assumptions in force that the op's model reads, as name=value: those one of whose
    alternatives changes what the op computes, judged by the op's plan for matmul and sum, and
    for any other op by its emulated output on the manifest's inputs (measured: a norm reads the
    Vector and Scalar engines' assumptions, never the PE array's)."""
    try:
        assumptions = platform_assumptions(platform)
    except ValueError:
        return []
    kind = {"matmul": "matmul", "sum": "sum"}.get(manifest.op_name)
    base, items = _split_name(platform)
    op = manifest.op() if kind is None else None

    def model(name: str) -> Any:
        """What of platform ``name`` the op reads: its plan's dict, or its output's bytes."""
        try:
            if op is not None:
                return np.asarray(op.emulate(name), dtype=np.float64).tobytes()
            d = _plan(name, kind, manifest.in_fmt, manifest.out).to_dict()
        except ValueError:
            return None
        d.pop("name", None)
        return d

    own = model(platform)
    relevant = []
    for a in assumptions:
        others = [i for i in items if i.split("=", 1)[0] != a["name"]]
        for alt in a["alternatives"]:
            if alt != a["value"] and model(base + "[" + ",".join(others + [f"{a['name']}={alt}"]) + "]") not in (
                    None, own):
                relevant.append(f"{a['name']}={a['value']}")
                break
    return relevant


def _assumptions_finding(platform: str, manifest: Manifest, verdicts: dict[str, Verdict]) -> ReviewFinding:
    """What the Trainium verdict rests on: the assumptions in force that change the op's model,
    confirmed (a bit-exact output measures them) or only assumed (a bound-based verdict)."""
    v = verdicts.get("nki")
    run = manifest.nki_run
    if manifest.nki_from_numeq and v is not None and run is not None:
        # The NKI output is numeq's run of its own model: agreeing with that model measures nothing.
        # The run knows which assumptions it read (the others cannot have shaped its output), so
        # the op's model is not swept for them.
        read = ", ".join(f"{n}={run.assumptions[n]}" for n in sorted(run.assumptions_read)) or "none"
        return ReviewFinding("assumptions", "info", "assumptions_unmeasured", f"numeq's run of the kernel",
                             f"the NKI output is numeq's own run of the kernel, which measures nothing about the "
                             f"hardware: the assumptions the run read ({read}) are neither confirmed nor refuted. "
                             "Give the kernel's output from the device or another simulator ([outputs] nki) to "
                             "assess them", "numeq.nki.run (a model, not a measurement)")
    assumed = _relevant_assumptions(platform, manifest)
    listed = ", ".join(assumed) if assumed else "none"
    if v is None:
        return ReviewFinding("assumptions", "info", "assumptions", platform, f"assumptions in force: {listed}")
    if manifest.nki_from_numeq:
        return ReviewFinding("assumptions", "info", "assumptions_unmeasured", f"numeq's run of the kernel",
                             f"the NKI output is numeq's own run of the kernel, which measures nothing about the "
                             f"hardware: the assumptions in force ({listed}) are neither confirmed nor refuted. Give "
                             "the kernel's output from the device or another simulator ([outputs] nki) to assess "
                             "them", "numeq.nki.run (a model, not a measurement)")
    if v.tier in ("bit_exact", "variant"):
        which = v.explained_by or v.platform
        return ReviewFinding("assumptions", "pass", "assumptions_measured", f"NKI output vs {which}",
                       f"the NKI output is bit-exact with {which}: the Trainium model it rests on (assumptions "
                       f"{listed}{'; the variant changes some' if v.tier == 'variant' else ''}) is confirmed by "
                       "this measurement, not only assumed", "measured: the NKI kernel's output")
    if not v.passed:
        return ReviewFinding("assumptions", "info", "assumptions_irrelevant", f"NKI output vs {platform}",
                       f"the NKI output fails ({v.tier}) under every modelled alternative of the assumptions in force "
                       f"({listed}): the failure does not rest on them", "numeq.compare's variant search")
    return ReviewFinding("assumptions", "warn", "assumptions_unconfirmed", f"NKI output vs {platform}",
                   f"the NKI verdict ({v.tier}) rests on a bound computed from assumed, unconfirmed parameters "
                   f"({listed}); no modelled variant reproduces the output bit for bit. Settle them with "
                   "numeq.probes and numeq.fit_platform on the device", "assumed: FACTS s3 (not documented by AWS)")


def check(manifest: Manifest) -> Correctness:
    """The correctness part of the review of ``manifest``."""
    op = manifest.op()
    trn, notes = kernel_platform(manifest.trainium_platform, manifest)
    findings: list[ReviewFinding] = []
    try:
        plan_text = str(_plan(trn, "matmul", manifest.in_fmt, manifest.out)) if manifest.op_name in (
            "matmul",) else trn
    except ValueError as e:
        findings.append(ReviewFinding("preserved_behaviour", "fail", "kernel_plan", "tiling",
                                f"the kernel's tiling cannot be modelled on {manifest.trainium_platform}: {e}; "
                                "judged against the platform's default tiles instead"))
        trn, plan_text = manifest.trainium_platform, manifest.trainium_platform
    platforms = {"gpu": manifest.gpu_platform, "nki": trn, "simulator": trn}
    verdicts: dict[str, Verdict] = {}
    errors = _ErrorsOverBound()
    fp, accept = manifest.failure_probability, manifest.accept
    for name in ("gpu", "nki", "simulator"):
        if name not in manifest.outputs:
            continue
        actual = manifest.outputs[name]
        # numeq's own run of the kernel is judged as a run: a failure is diagnosed on the kernel
        # (its exact math, its narrow tiles), not only against the op-level models.
        subject = manifest.nki_run if name == "nki" and manifest.nki_run is not None else actual
        try:
            v = compare(subject, op, platforms[name], accept=accept, failure_probability=fp)
        except ValueError as e:
            findings.append(ReviewFinding("preserved_behaviour", "fail", "verdict", _OUTPUT_NAMES[name],
                                    f"{_OUTPUT_NAMES[name]} cannot be judged against {platforms[name]}: {e}"))
            continue
        verdicts[name] = v
        values = np.asarray(actual, dtype=np.float64)
        # At half the review's failure probability, what each side of the port check below gets
        # (a union over two platforms): the same bound, computed once (the op keeps it).
        errors.add(name, values, op, platforms[name], fp / 2)
        subject = f"{_OUTPUT_NAMES[name]} vs {platforms[name]}"
        status = "pass" if v.passed else "fail"
        # The simulator "approximates hardware behavior but is not identical" (NKI docs, FACTS s3):
        # its verdict informs, it does not decide.
        if name == "simulator":
            status = "pass" if v.passed else "warn"
        message = f"{_OUTPUT_NAMES[name]}: {_tier_words(v)}"
        if not v.passed:
            failing = errors[name] > 1
            failing |= ~np.isfinite(values) & ~np.isnan(op.emulate(platforms[name]))
            t = manifest.tiling
            where = _tiles_text(failing.reshape(values.shape), (t.m_tile if t and t.m_tile else 128),
                                (t.n_tile if t and t.n_tile else 512)) if failing.any() else ""
            message += f". {v.concentration}" if v.concentration else ""
            message += f". {where}" if where else ""
            if v.diagnoses:  # the mistakes numeq tested on the data, strongest first
                message += ". Diagnosis: " + "; ".join(f"{d.kind}, explains {d.explains:.0%}: {d.detail} ({d.evidence})"
                                                      for d in v.diagnoses[:2])
            elif failing.any():
                message += ". No modelled kernel mistake reproduces it (numeq.compare's diagnoses)"
            if v.nearest_variant:
                message += f". Nearest variant: {v.nearest_variant} ({v.nearest_variant_matches} of {v.elements} equal)"
        findings.append(ReviewFinding("preserved_behaviour", status, f"verdict_{name}", subject, message,
                                f"numeq.compare, accept={accept}, failure probability {fp:g}"))
    port = None
    if "gpu" in verdicts and "nki" in verdicts:
        port = compare_port(manifest.outputs["gpu"], manifest.outputs["nki"], op, manifest.gpu_platform, trn,
                            accept=accept, failure_probability=fp)
        g, n = verdicts["gpu"], verdicts["nki"]
        if port.passed and g.tier in ("bit_exact", "variant") and n.tier in ("bit_exact", "variant"):
            text = (f"the difference between the outputs is explained by the accumulation order: bit-exact with "
                    f"{n.explained_by or n.platform} and {g.explained_by or g.platform} respectively; "
                    f"{port.equal} of {port.elements} elements equal, the rest within the cross-platform bound "
                    f"(largest difference / bound {port.max_difference_over_bound:.3g})")
        elif port.passed:
            text = (f"the outputs differ within the cross-platform bound (largest difference / bound "
                    f"{port.max_difference_over_bound:.3g}); {port.equal} of {port.elements} elements equal")
        else:
            text = f"port check fails: {port.diagnosis}"
        findings.append(ReviewFinding("preserved_behaviour", "pass" if port.passed else "fail", "port_check",
                                f"GPU output ({manifest.gpu_platform}) vs NKI output ({trn})", text,
                                "numeq.compare_port: each output's ladder and |gpu - nki| <= bound_gpu + bound_nki"))
    findings.append(_assumptions_finding(trn, manifest, verdicts))
    tolerance = _standard(manifest, op, trn, verdicts, port, findings)
    return Correctness(platforms={k: platforms[k] for k in verdicts}, plan=plan_text, notes=notes,
                       verdicts=verdicts, port=port, findings=findings, errors=errors, tolerance=tolerance,
                       signature=op.signature)


def _standard(manifest: Manifest, op: Any, trn: str, verdicts: dict[str, Verdict], port: PortVerdict | None,
              findings: list[ReviewFinding]) -> dict[str, Any]:
    """The numerical standard, stated as a tolerance and checked: numeq's cross-platform bound on
    these inputs (the NKI output against the GPU's, probabilistic, the manifest's failure
    probability) in the forms a test suite uses (rtol/atol, ulps, max-normalised), from the same
    fit as ``numeq.tolerance(..., data=op)`` with no margin. The author's stated tolerance, if
    any, is checked on the outputs and against what a bf16-accumulation kernel would give (a
    standard that lets that kernel through is too loose to defend)."""
    from ..catalogue import Built
    from ..tolerances import fit_tolerance, requirement, tier_of

    fp = manifest.failure_probability
    out: dict[str, Any] = {}
    have = "gpu" in verdicts and "nki" in verdicts  # both judged: shapes and values fit the op
    g = np.asarray(manifest.outputs.get("gpu"), dtype=np.float64) if have else None
    n = np.asarray(manifest.outputs.get("nki"), dtype=np.float64) if have else None
    if have:
        try:
            # Each platform's bound at half the manifest's failure probability (the port check's
            # split), so that the pair fails a correct port with at most the manifest's.
            req = requirement(Built(op, {}, {}), manifest.gpu_platform, trn, kind="probabilistic",
                              failure_probability=fp / 2)
            forms = fit_tolerance([req], manifest.out, 1.0)
        except ValueError as e:
            findings.append(ReviewFinding("numerical_standard", "info", "numeq_standard", "NKI output vs GPU output",
                                    f"numeq cannot state a cross-platform tolerance for this op: {e}"))
            forms = None
        if forms is not None:
            tier = tier_of("probabilistic", req.failure_probability)
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.abs(n - g)
                allowed = forms["atol"] + forms["rtol"] * np.abs(g)
                beyond = int(np.sum(~(diff <= allowed) & ~(np.isnan(n) & np.isnan(g))))
                worst = float(np.nanmax(np.where(allowed > 0, diff / np.where(allowed > 0, allowed, 1), 0)))
            met = beyond == 0 and (port is None or port.passed)
            out = {"rtol": forms["rtol"], "atol": forms["atol"], "ulps": forms["ulps"], "max_rtol": forms["max_rtol"],
                   "tier": tier, "failure_probability": req.failure_probability, "beyond": beyond, "worst": worst}
            findings.append(ReviewFinding(
                "numerical_standard", "pass" if met else "fail", "numeq_standard", "NKI output vs GPU output",
                f"standard: |nki - gpu| <= atol + rtol*|gpu| with rtol={forms['rtol']:.3g}, atol={forms['atol']:.3g} "
                f"({forms['ulps']:.3g} ulps of {manifest.out}; max-normalised {forms['max_rtol']:.3g}): numeq's "
                f"{tier} cross-platform bound of {manifest.gpu_platform} and {trn} on these inputs"
                + (f" (fails a correct port with probability at most {req.failure_probability:.2g})"
                   if tier == "probabilistic" else "")
                + (f"; met: worst difference {worst:.3g} of the tolerance" if met else
                   f"; not met: {beyond} elements beyond it (worst {worst:.3g}x)"),
                "derived: numeq's bounds of both platforms' models on the manifest's inputs"))
    st = manifest.stated_tolerance
    if st is not None and have:
        with np.errstate(invalid="ignore"):
            ok = np.abs(n - g) <= st["atol"] + st["rtol"] * np.abs(g)
        met = bool(np.all(ok))
        text = (f"the stated tolerance rtol={st['rtol']:g}, atol={st['atol']:g} (NKI against GPU) is "
                f"{'met' if met else f'not met on {int((~ok).sum())} elements'}")
        if out.get("rtol"):
            text += f"; it is {st['rtol'] / out['rtol']:.3g}x numeq's rtol"
        status = "pass" if met else "fail"
        explained = port is not None and port.passed and all(
            verdicts[k].tier in ("bit_exact", "variant") for k in ("gpu", "nki"))
        if not met:
            text += "; " + _faulty_term(st, n, g, ~ok, out)
            if explained:
                # Both outputs are what their platforms compute and the port check passes: the
                # stated tolerance, not the port, is at fault.
                status = "warn"
                text += ("; the stated tolerance, not the port, is at fault: both outputs are bit-exact with their "
                         "platforms and differ within the cross-platform bound")
        if manifest.op_name == "matmul" and "c" not in manifest.inputs:
            try:
                p = bugs.bf16_accumulator_plan(_plan(trn, "matmul", manifest.in_fmt, manifest.out).to_dict())
                wrong = _matmul(manifest.inputs["a"], manifest.inputs["b"], plan=p, in_fmt=manifest.in_fmt,
                                out=manifest.out)
                with np.errstate(invalid="ignore"):
                    passes = bool(np.all(np.abs(wrong - g) <= st["atol"] + st["rtol"] * np.abs(g)))
                if passes:
                    status = "fail" if not met else "warn"
                    text += ("; too loose to defend: the same kernel with a bf16 accumulator passes it on these "
                             "inputs (numeq's standard catches that kernel)")
                else:
                    text += "; it catches a bf16-accumulator kernel on these inputs"
            except ValueError:
                pass
        findings.append(ReviewFinding("numerical_standard", status, "stated_tolerance", "operation.tolerance", text,
                                f"stated by the port's author (manifest line {manifest.line('operation', 'tolerance')})"))
        out["stated"] = st
    return out
