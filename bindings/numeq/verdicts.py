"""Verdicts: a device's output judged against an operation's exact result and a platform's
bit-exact emulation and bound (numeq.ops)."""

from __future__ import annotations

from dataclasses import dataclass, field
from dataclasses import fields as _fields
from typing import Any

import numpy as np

from . import _core, _dlpack
from ._arrays import _FORMAT_OF_DTYPE, _INTAKE, _array, _check_bool, _check_int, _check_real, _check_str
from ._op import _tolerance_of_bound
from .ops import Op, Tolerance

__all__ = ["TIERS", "Diagnosis", "PortElement", "PortVerdict", "Verdict", "WorstElement", "compare", "compare_port"]


class _Judgement:
    """What a Verdict and a PortVerdict share: true when it passed (``assert verdict``), and its
    report as str()."""

    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class WorstElement:
    """One element of the output: where it is, what the device gave, what the platform's
    emulation and the exact reference say, the bound, the error |got - exact| and the
    difference from the reference in ulps of the output format.

    Fields: ``index``, ``got``, ``emulated``, ``reference``, ``exact``, ``bound``, ``error``,
    ``ulps``, ``violation`` (this element alone puts the output in the ``violation`` tier).

    Example::

        >>> rng = np.random.default_rng(0)
        >>> a = numeq.round(rng.standard_normal((8, 64)), "bf16")
        >>> b = numeq.round(rng.standard_normal((64, 4)), "bf16")
        >>> op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
        >>> device = numeq.matmul(a, b, platform="nvidia.h100", in_fmt="bf16")
        >>> w = numeq.compare(device + 2**-10, op, "nvidia.h100").worst[0]
        >>> len(w.index), w.error > 0, w.violation
        (2, True, True)
    """

    index: tuple[int, ...]
    got: float
    emulated: float
    reference: float
    exact: float
    bound: float
    error: float
    ulps: float
    violation: bool


@dataclass(frozen=True)
class Diagnosis:
    """A hypothesis about the mistake behind a failing output, tested on the data
    (``Verdict.diagnoses``): ``kind`` (narrow_accumulator, missing_k_tile, extra_k_tile,
    transposed_tile, shifted_tile, wrong_output_format, wrong_scale (with its factor), row_scale,
    column_scale, integer_wrap, input_range, special_values, missing_max_subtraction,
    narrow_intermediate, wrong_eps, unbiased_variance; and where
    the output is a ``numeq.nki.Run``, from reruns of the kernel itself: narrow_tile and
    narrow_running_sum (the tile, with its lines, whose widening to fp32 removes the failure),
    narrow_tiles (all of them together), kernel_arithmetic (the failure stays with every narrow tile
    widened: an algorithm mistake, not precision)), ``explains`` (the fraction of the failing
    elements it reproduces: bit for bit where the mistake is modelled, within the bound or as a
    measured pattern otherwise; for a rerun, the share of failing elements it makes pass),
    ``detail`` (a sentence) and ``evidence`` (how it was tested).

    Example::

        >>> rng = np.random.default_rng(0)
        >>> a = numeq.round(rng.standard_normal((16, 256)), "bf16")
        >>> b = numeq.round(rng.standard_normal((256, 8)), "bf16")
        >>> op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
        >>> short = a.copy(); short[:, 128:] = 0     # a kernel whose K loop stops one tile short
        >>> out = numeq.matmul(short, b, platform="nvidia.h100", in_fmt="bf16", out="fp32")
        >>> first = numeq.compare(out, op, "nvidia.h100").diagnoses[0]
        >>> first.kind, first.explains
        ('missing_k_tile', 1.0)
    """

    kind: str
    explains: float
    detail: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.kind} (explains {self.explains:.0%}): {self.detail}"


TIERS = ("bit_exact", "variant", "probabilistic", "deterministic", "violation")


@dataclass(frozen=True)
class Verdict(_Judgement):
    """The outcome of ``numeq.compare``: the first tier of the ladder that explains the output
    (``tier``, strongest first):

    - ``bit_exact``: equal to the platform's emulation, every element (NaNs alike, zero signs);
    - ``variant``: equal, bit for bit, to a named variant of the platform, which ``explained_by``
      names in the platform string syntax (``"trainium.trn2[pe_order=pairwise]"``,
      ``"nvidia.h100[split_k=4]"``): the check doubles as a measurement of the hardware;
    - ``probabilistic``: within the probabilistic bound, which fails with probability at most
      ``failure_probability`` for the whole check;
    - ``deterministic``: within the worst-case bound only (suspicious: passes only when accepted);
    - ``violation``: beyond the worst-case bound, a special value (NaN, +-Inf) that is not the
      platform's own, or a value the output format does not hold.

    ``passed`` when the tier is ``accept`` or stronger; ``bool(verdict)`` is ``passed``. Counts
    (``bit_exact``, ``within_bound`` (probabilistic), ``deterministic_only``, ``violations`` with
    ``special_mismatches`` (``nan_mismatches``, ``inf_mismatches``) and ``not_in_format``;
    ``failures``: the elements that keep the check from passing; ``unwalked``: elements within the
    worst-case bound whose probabilistic bound was not walked, a violation being certain already);
    ``concentration``: where the
    failures lie; ``bound_source``: which step of the platform's model the first worst element's
    bound comes from (shares of the worst-case bound); ``tolerance``: the bound as rtol / atol / ulps over every
    element, of the bound ``tolerance_bound`` names (``"probabilistic"`` where that bound was
    walked over the whole op, else ``"deterministic"``); ``nearest_variant``: when no variant is exact, the one equal on most elements;
    ``worst``: failing elements first, then by error / bound; ``str(verdict)``: the full message.

    Also: ``signature`` (the op's), ``worst_error_over_bound`` and ``max_ulps`` (over every
    element), ``diagnosis`` (one line: why this tier), ``nearest_variant_matches`` and
    ``variants_searched`` (the variant search), ``also_explained_by`` (other variants with the same
    bits on this data, beside ``explained_by``), ``diagnoses`` (a failing check: ``Diagnosis``
    hypotheses about the mistake, each tested on the data, strongest first), ``integer_output``
    (errors are integers, not ulps), ``message`` (``str(verdict)``).

    Example::

        >>> rng = np.random.default_rng(0)
        >>> a = numeq.round(rng.standard_normal((8, 64)), "bf16")
        >>> b = numeq.round(rng.standard_normal((64, 4)), "bf16")
        >>> op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
        >>> verdict = numeq.compare(numeq.matmul(a, b, platform="nvidia.h100", in_fmt="bf16"), op, "nvidia.h100")
        >>> verdict.tier, verdict.passed, verdict.elements, verdict.failures
        ('bit_exact', True, 32, 0)
        >>> buggy = numeq.round(a @ b, "bf16")       # a kernel that rounds its output to bf16
        >>> verdict = numeq.compare(buggy, op, "nvidia.h100")
        >>> verdict.tier, bool(verdict), verdict.violations > 0
        ('violation', False, True)
    """

    passed: bool
    tier: str
    explained_by: str | None
    accept: str
    platform: str
    signature: str
    elements: int
    bit_exact: int
    within_bound: int
    deterministic_only: int
    violations: int
    failures: int
    worst_error_over_bound: float
    max_ulps: float
    failure_probability: float
    diagnosis: str
    tolerance: Tolerance
    worst: list[WorstElement] = field(default_factory=list)
    special_mismatches: int = 0
    nan_mismatches: int = 0
    inf_mismatches: int = 0
    not_in_format: int = 0
    nearest_variant: str | None = None
    nearest_variant_matches: int = 0
    variants_searched: int = 0
    concentration: str = ""
    bound_source: str = ""
    tolerance_bound: str = "deterministic"
    also_explained_by: tuple = ()
    diagnoses: tuple = ()
    integer_output: bool = False
    unwalked: int = 0
    message: str = field(default="", repr=False)

    def __repr__(self) -> str:
        parts = [f"passed={self.passed}", f"tier={self.tier!r}"]
        if self.explained_by:
            parts.append(f"explained_by={self.explained_by!r}")
        parts += [f"platform={self.platform!r}", f"elements={self.elements}", f"bit_exact={self.bit_exact}",
                  f"failures={self.failures}", f"violations={self.violations}"]
        if self.nearest_variant:
            parts.append(f"nearest_variant={self.nearest_variant!r} ({self.nearest_variant_matches})")
        return f"Verdict({', '.join(parts)})"


def _as_numpy(x: Any, parameter: str) -> Any:
    """x as something ``_actual_values`` reads: numpy arrays (ml_dtypes included), numpy scalars,
    Python scalars and lists pass unchanged; another framework's array comes through the DLPack
    protocol (``np.from_dlpack``: no copy for host memory; for bfloat16 and the fp8 / fp6 / fp4
    formats numpy lacks, ``_dlpack.read``: one copy, by their bits, into an ml_dtypes array) or,
    failing that, its ``__array__``. Errors name ``parameter``. The one conversion numeq.compare,
    compare_port and numeq.testing share."""
    if isinstance(x, (np.ndarray, np.generic)) or not (hasattr(x, "__dlpack__") or hasattr(x, "__array__")):
        return x  # numpy itself, or a scalar / list: _actual_values validates them
    dlpack_error: Exception | None = None
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            # numpy's DLPack import holds host memory only and numpy's own dtypes (no bfloat16 or
            # fp8): read those dtypes by their bits, then fall back to __array__, which frameworks
            # implement with their own conversions.
            dlpack_error = exc
        try:
            return _dlpack.read(x, parameter)
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            dlpack_error = exc
    if hasattr(x, "__array__"):
        try:
            return np.asarray(x)
        except Exception as exc:  # noqa: BLE001 - a framework's own conversion error, reported with the parameter
            detail = f"{exc}" if dlpack_error is None else f"DLPack: {dlpack_error}; __array__: {exc}"
            raise TypeError(f"{parameter}: cannot read {type(x).__name__} as a numpy array ({detail}); move it "
                            "to host memory and, for bfloat16, convert it to float32 (which holds every bfloat16 "
                            "value exactly) or view it as an ml_dtypes array") from None
    if dlpack_error is not None and str(dlpack_error).startswith(f"{parameter}: "):
        raise dlpack_error from None  # _dlpack's own refusal: it names the dtype, device or version and the choices
    raise TypeError(f"{parameter}: cannot read {type(x).__name__} through DLPack ({dlpack_error}); move it to host "
                    "memory and, for bfloat16, convert it to float32 (which holds every bfloat16 value exactly)")


def _in_op_shape(outputs: Any, op: Op) -> Any:
    """A run's output in the op's shape where the two differ only by axes of length 1 (an NKI tile
    is at least 2-D: a row reduction's [128, 1] is the op's (128,)); anything else as it is."""
    if isinstance(outputs, np.ndarray):
        return _in_shape(outputs, tuple(op._op.result_shape()))
    return outputs


def _in_shape(a: np.ndarray, want: tuple) -> np.ndarray:
    """``a`` reshaped to ``want`` where the two differ only by axes of length 1; else as it is."""
    if a.shape != want and [d for d in a.shape if d != 1] == [d for d in want if d != 1]:
        return a.reshape(want)
    return a


def _check_shape(actual: Any, op: Op, parameter: str) -> None:
    """A numpy array of another shape than the op's result is refused before it is converted to
    float64 (a wrongly shaped large output would cost a float64 copy first)."""
    if isinstance(actual, np.ndarray):
        want = tuple(op._op.result_shape())
        if actual.shape != want:
            raise ValueError(f"{parameter}: shape {actual.shape} differs from the result of {op.signature}, "
                             f"{want}")  # Python's tuple text: the C++ check's (shape_text) too


def _actual_values(actual: Any, parameter: str = "actual") -> np.ndarray:
    """C-order float64 values of a device's output, or TypeError / ValueError naming ``parameter``.

    Accepted: real float arrays (float16/32/64, and wider floats whose values float64 holds),
    ml_dtypes arrays (bfloat16, float8_*, ...), integer arrays (their values, when float64 holds
    them exactly: an integer output is judged as the number it is, and it passes only where the
    op's output format holds that number), Python scalars and (nested) lists of reals, and arrays
    of other frameworks (``__dlpack__`` or ``__array__``: torch, jax, cupy, ... on the host; see
    ``_as_numpy``). Refused: complex values (the imaginary part would be dropped), booleans,
    strings, bytes, datetimes and timedeltas, objects, structured arrays and masked arrays (the
    mask would be dropped)."""
    accepted = ("accepted: real float or integer numpy arrays, ml_dtypes arrays, Python scalars or lists of "
                "real numbers")
    if isinstance(actual, np.ma.MaskedArray):
        raise TypeError(f"{parameter}: masked arrays are not accepted (the mask would be dropped); pass the data "
                        f"with masked elements filled or compare the unmasked part; {accepted}")
    if isinstance(actual, (str, bytes, complex, bool, np.bool_)):
        raise TypeError(f"{parameter}: expected real values, got {type(actual).__name__}; {accepted}")
    actual = _as_numpy(actual, parameter)
    try:
        a = np.asarray(actual)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{parameter}: cannot be read as an array of reals ({exc}); {accepted}") from None
    dt = a.dtype
    if dt.names is not None or dt.kind not in "fiuV" or (dt.kind == "V" and dt not in _FORMAT_OF_DTYPE):
        what = {"c": "complex", "b": "boolean", "U": "string", "S": "bytes", "M": "datetime", "m": "timedelta",
                "O": "object", "V": "structured or void"}.get(dt.kind, str(dt))
        raise TypeError(f"{parameter}: expected real values, got {what} dtype {dt}; {accepted}")
    if (type(a) is np.ndarray and a.flags.c_contiguous and a.flags.aligned and dt.isnative and dt in _INTAKE
            and not (dt.kind in "iu" and dt.itemsize == 8)):
        return a  # read in place and widened in C++ in one pass (float16 and ml_dtypes by their bits)
    if dt.kind in "iu":
        values = a.astype(np.float64)
        with np.errstate(invalid="ignore"):
            if dt.itemsize >= 8 and not np.array_equal(values.astype(dt), a):
                raise ValueError(f"{parameter}: {dt} values beyond 2^53 are not exact in float64; {accepted}")
        return np.asarray(values, order="C")
    values = np.asarray(a.astype(np.float64), order="C")  # keeps a 0-d result 0-d
    if dt.kind == "f" and dt.itemsize > 8 and not np.array_equal(values, a, equal_nan=True):
        raise ValueError(f"{parameter}: {dt} values are not exact in float64; {accepted}")
    return values


def _check_options(accept: Any, failure_probability: Any, variants: Any, worst: Any) -> tuple[str, float, bool, int]:
    _check_str(accept, "accept")
    if accept not in TIERS[:-1]:
        raise ValueError(f"accept: unknown tier {accept!r}; valid: {', '.join(TIERS[:-1])} (the weakest tier that passes)")
    failure_probability = _check_real(failure_probability, "failure_probability", finite=True)
    if not 0 < failure_probability < 1:
        raise ValueError(f"failure_probability: {failure_probability!r} is not in (0, 1); the probabilistic bound "
                         "fails with at most this probability per check")
    variants = _check_bool(variants, "variants")
    worst = _check_int(worst, "worst", 0, 2**31 - 1)
    return accept, failure_probability, bool(variants), int(worst)


# How a field of a result dataclass is read from the extension's dict, by the field's declared type.
_READ = {"bool": bool, "int": int, "float": float, "str": str, "str | None": lambda v: str(v) or None}


def _from_core(cls: type, d: dict, **given: Any) -> Any:
    """A Verdict / PortVerdict from the extension's dict: every field read by its declared type,
    those in ``given`` (the nested ones) as given."""
    return cls(**{f.name: given[f.name] if f.name in given else _READ[f.type](d[f.name]) for f in _fields(cls)})


def _verdict(d: dict) -> Verdict:
    tolerance = _tolerance_of_bound(d["tolerance"], problem=d["signature"], platform=d["platform"],
                                    tier=d["tolerance_bound"],
                                    failure_probability=d["failure_probability"] if d["tolerance_bound"] == "probabilistic"
                                    else 0.0)
    return _from_core(Verdict, d, tolerance=tolerance, worst=[WorstElement(**w) for w in d["worst"]],
                      also_explained_by=tuple(d["also_explained_by"]),
                      diagnoses=tuple(Diagnosis(**x) for x in d["diagnoses"]))


def compare(actual: Any, op: Op, platform: str, *, accept: str = "probabilistic",
            failure_probability: float = 1e-6, variants: bool = True, worst: int = 5) -> Verdict:
    """Judge ``actual`` (a device's output, of the op's result shape) against ``op`` on ``platform``
    and say which tier of the ladder explains it (``Verdict.tier``, see ``Verdict``).

    ``accept``: the weakest tier that passes, one of ``"bit_exact"``, ``"variant"``,
    ``"probabilistic"`` (default), ``"deterministic"``. ``failure_probability``: the probabilistic
    bound may fail with at most this probability for the whole check (default 1e-6).
    ``variants``: search the platform's named variants (assumption alternatives, sibling
    instruction paths, split-K) when the output is not bit-exact. ``worst``: how many elements to
    list. Where the emulation is NaN or +-Inf, or its bound is infinite, only the platform's own
    special value passes (NaN matches any NaN); a value the op's output format does not hold (fp32
    results against a bf16 op) never passes, and the diagnosis says so. ``actual``: real arrays,
    ml_dtypes arrays, integers (judged as their values), scalars, lists, or another framework's
    host array (``__dlpack__`` or ``__array__``: torch, jax, cupy, ...), or a ``numeq.nki.Run``:
    its outputs are judged (in the op's shape where they differ only by axes of length 1, as a row
    reduction's [P, 1] tile does; the variant tier then names only the hardware's variants: the run's
    tiling and sums are read from its trace, so a split-K or tiling that reproduces the output is
    the kernel's own choice), and a failure is also diagnosed on the kernel itself (it runs again
    with each narrow tile in fp32: the tile and line whose widening removes the failure, or
    ``kernel_arithmetic`` when widening every one leaves it).

    Example::

        import numpy as np, numeq
        a = numeq.round(np.random.default_rng(0).standard_normal((16, 64)), "bf16")
        b = numeq.round(np.random.default_rng(1).standard_normal((64, 8)), "bf16")
        op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
        device = numeq.matmul(a, b, platform="nvidia.h100", in_fmt="bf16")
        assert numeq.compare(device, op, "nvidia.h100").tier == "bit_exact"
    """
    if not isinstance(op, Op):
        raise TypeError(f"op: expected a numeq.ops.Op (numeq.ops.matmul(...), ...), got {type(op).__name__}")
    _check_str(platform, "platform")
    accept, failure_probability, variants, worst = _check_options(accept, failure_probability, variants, worst)
    run = _run_of(actual)
    if run is not None:
        actual = _in_op_shape(run.outputs, op)
    _check_shape(actual, op, "actual")
    values = _actual_values(actual)
    # A run's dataflow is its trace: a tiling or split-K that reproduces its output is the kernel's own
    # choice (a finding the run reports), so its variant search names only the hardware's.
    d = _core.cases_compare(values, op._op, platform, accept, failure_probability, bool(variants), int(worst),
                            hardware_variants=run is not None)
    verdict = _verdict(d)
    if run is not None and not verdict.passed:
        verdict = _with_run_diagnoses(verdict, run, op, platform, accept, failure_probability)
    return verdict


def _run_of(actual: Any) -> Any:
    """``actual`` when it is a ``numeq.nki.Run`` (its outputs are judged, its trace explains a
    failure), else None; a run that stopped or was released is refused."""
    if type(actual).__module__ != "numeq.nki._run" or type(actual).__name__ != "Run":
        return None
    if actual.released:
        raise ValueError("actual: this run was released (installed() keeps the latest kernel call's run whole); "
                         "run the kernel with numeq.nki.run for a run of your own")
    if not actual.values:
        raise ValueError("actual: this run computed no values (numeq.nki.run(values=False)); run the kernel with "
                         "values=True to judge its outputs")
    if not actual.completed:
        raise ValueError("actual: the run did not complete (it stopped at " +
                         "; ".join(f"{f.where}: [{f.rule}]" for f in actual.errors[:3]) + "): there is no output to judge")
    return actual


# Op-level diagnoses that say precision was lost (the kernel's exact math is the op's): a kernel
# whose exact math fails the check contradicts them. Those that say the kernel computes something
# else (its exact math differs) are contradicted by an exact math that passes. Each contradicted
# kind ranks after the run's own diagnoses.
_PRECISION_KINDS = frozenset({"narrow_accumulator", "narrow_intermediate", "wrong_output_format",
                              "missing_max_subtraction"})
_NARROW_KINDS = frozenset({"narrow_accumulator", "narrow_intermediate"})
_ALGORITHM_KINDS = frozenset({"column_scale", "row_scale", "wrong_scale", "extra_k_tile", "missing_k_tile",
                              "shifted_tile", "transposed_tile", "unbiased_variance", "wrong_eps"})


def _reproduces(d: Diagnosis) -> bool:
    """Whether an op-level diagnosis reproduces the output (its evidence: bit for bit, or measured),
    as cases::rank reads it, rather than only fitting within a bound."""
    return d.evidence.startswith(("bit for bit", "measured"))


def _with_run_diagnoses(verdict: Verdict, run: Any, op: Op, platform: str, accept: str,
                        failure_probability: float) -> Verdict:
    """``verdict`` with the diagnoses the kernel's own run gives (``numeq.nki._diagnoses``) ranked in.
    The kernel's exact math decides which op-level models stay in front: where it fails the check
    (an algorithm mistake), the op-level models of one (a scale, a shifted tile, eps) lead and the
    run's ``kernel_arithmetic`` follows them, precision models last; where it passes (precision
    lost), the run's narrow tile (measured on the kernel itself) leads, the op-level precision
    models follow, and models of an algorithm mistake, which the exact math rules out, come last."""
    from dataclasses import replace

    from .nki._diagnoses import from_run

    def judge(outputs: Any, worst: int = 0) -> dict:
        return _core.cases_compare(_actual_values(_in_op_shape(outputs, op)), op._op, platform, accept, failure_probability, False,
                                   worst)

    result = from_run(run, judge, Diagnosis)
    found, own = result.found, list(verdict.diagnoses)
    if not found and result.exact_fails is None:
        return verdict
    if result.exact_fails is not None and result.exact_fails / max(result.failing, 1) >= 0.5:
        ranked = ([d for d in own if d.kind not in _PRECISION_KINDS] + found
                  + [d for d in own if d.kind in _PRECISION_KINDS])
    elif result.exact_fails is not None:
        # precision lost: the tile measured on the kernel, then an op-level precision model that
        # reproduces the output (bit for bit, or measured), then the run's cancellation / overflow
        # finding, the other models, and those of an algorithm mistake the exact math rules out
        # (a model of a narrow tile is ruled out too when the run has none).
        narrow = [d for d in found if d.kind.startswith("narrow_")]
        general = [d for d in found if not d.kind.startswith("narrow_")]
        ruled_out = _ALGORITHM_KINDS | (set() if result.narrow_tiles else _NARROW_KINDS)
        reproduced = [d for d in own if d.kind in _PRECISION_KINDS - ruled_out and _reproduces(d)]
        ranked = (narrow + reproduced + general
                  + [d for d in own if d.kind not in ruled_out and d not in reproduced]
                  + [d for d in own if d.kind in ruled_out])
    else:
        arithmetic = [d for d in found if d.kind == "kernel_arithmetic"]
        narrow = [d for d in found if d.kind != "kernel_arithmetic"]
        ranked = (narrow + [d for d in own if d.kind not in _PRECISION_KINDS] + arithmetic
                  + [d for d in own if d.kind in _PRECISION_KINDS]) if arithmetic else narrow + own
    return replace(verdict, diagnoses=tuple(ranked), message=_diagnoses_text(verdict.message, ranked))


def _diagnoses_text(message: str, diagnoses: list) -> str:
    """``message`` with its diagnoses block (the C++ verdict's wording) holding ``diagnoses``."""
    lines = message.split("\n")
    block = ["  diagnoses (each tested on the data, strongest first):"] + [
        f"    {d.kind} (explains {d.explains:.0%}): {d.detail} [{d.evidence}]" for d in diagnoses]
    start = next((i for i, line in enumerate(lines) if line.startswith("  diagnoses")), None)
    if start is None:  # no block yet: after the bound's source (before the tolerance line)
        at = next((i for i, line in enumerate(lines) if line.startswith("  worst-case bound as tolerance")),
                  len(lines))
        return "\n".join(lines[:at] + block + lines[at:])
    end = start + 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    return "\n".join(lines[:start] + block + lines[end:])


@dataclass(frozen=True)
class PortElement:
    """One element of a port check: where it is, both outputs, their difference and the bound.

    Fields: ``index``, ``gpu``, ``trainium``, ``difference``, ``bound``.

    Example::

        >>> a = numeq.round(np.random.default_rng(0).standard_normal((2, 32)), "bf16")
        >>> op = numeq.ops.matmul(a, a.T, in_fmt="bf16", out="fp32")   # the 2 x 2 Gram matrix
        >>> gpu, trn = (numeq.matmul(a, a.T, platform=p, in_fmt="bf16") for p in ("nvidia.h100", "trainium.trn2"))
        >>> e = numeq.compare_port(gpu, trn, op, "nvidia.h100", "trainium.trn2").worst[0]
        >>> e.index, (e.gpu, e.trainium) == (gpu[e.index], trn[e.index]), e.difference == abs(e.gpu - e.trainium)
        ((1, 1), True, True)
        >>> bool(0 < e.difference <= e.bound)      # the outputs differ, as far as the two platforms explain
        True
    """

    index: tuple[int, ...]
    gpu: float
    trainium: float
    difference: float
    bound: float


@dataclass(frozen=True)
class PortVerdict(_Judgement):
    """The outcome of ``numeq.compare_port``: ``gpu`` and ``trainium``, each output's ``Verdict``
    against its own platform; ``beyond``: elements whose difference exceeds the cross-platform
    bound (the sum of the two platforms' bounds); ``passed`` when both verdicts pass and nothing
    lies beyond; ``str(port_verdict)``: both verdicts' messages and the worst differences.

    Also: ``equal`` (elements bit-identical on both), ``max_difference_over_bound``, ``diagnosis``
    (one line) and ``message`` (``str(port_verdict)``).

    Example::

        >>> rng = np.random.default_rng(0)
        >>> a = numeq.round(rng.standard_normal((8, 64)), "bf16")
        >>> b = numeq.round(rng.standard_normal((64, 4)), "bf16")
        >>> op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
        >>> platforms = ("nvidia.h100", "trainium.trn2")
        >>> gpu, trn = (numeq.matmul(a, b, platform=p, in_fmt="bf16") for p in platforms)
        >>> port = numeq.compare_port(gpu, trn, op, *platforms)
        >>> port.passed, port.gpu.tier, port.trainium.tier, port.equal, port.beyond
        (True, 'bit_exact', 'bit_exact', 22, 0)
        >>> port = numeq.compare_port(gpu, numeq.round(trn, "bf16"), op, *platforms)  # an NKI kernel that rounds to bf16
        >>> port.passed, port.trainium.tier, port.beyond
        (False, 'violation', 31)
    """

    passed: bool
    gpu: Verdict
    trainium: Verdict
    elements: int
    equal: int
    beyond: int
    max_difference_over_bound: float
    diagnosis: str
    worst: list[PortElement] = field(default_factory=list)
    message: str = field(default="", repr=False)

    def __repr__(self) -> str:
        return (f"PortVerdict(passed={self.passed}, gpu={self.gpu.tier!r}, trainium={self.trainium.tier!r}, "
                f"elements={self.elements}, equal={self.equal}, beyond={self.beyond})")


def compare_port(gpu_output: Any, trainium_output: Any, op: Op, gpu_platform: str, trainium_platform: str, *,
                 accept: str = "probabilistic", failure_probability: float = 1e-6, variants: bool = True,
                 worst: int = 5) -> PortVerdict:
    """The CUDA-to-NKI port check: ``gpu_output`` judged against ``gpu_platform`` and
    ``trainium_output`` against ``trainium_platform`` (each through the verdict ladder, as
    ``compare``), and their difference against the cross-platform bound. Keywords (``accept``:
    ``"bit_exact"``, ``"variant"``, ``"probabilistic"`` (default) or ``"deterministic"``;
    ``variants``, ``worst``) as ``compare``; the two platforms share ``failure_probability`` (half
    each).

    Example::

        import numeq
        a = numeq.ops.generate("outlier_channels", (8, 300), "bf16", seed=0)
        b = numeq.ops.generate("normal", (300, 4), "bf16", seed=1)
        op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
        gpu = numeq.matmul(a, b, platform="nvidia.h100", in_fmt="bf16")
        trn = numeq.matmul(a, b, platform="trainium.trn2", in_fmt="bf16")
        port = numeq.compare_port(gpu, trn, op, "nvidia.h100", "trainium.trn2", accept="bit_exact")
        # the two outputs differ, yet each is its own platform's result, bit for bit
        assert port.passed and port.equal < port.elements
    """
    if not isinstance(op, Op):
        raise TypeError(f"op: expected a numeq.ops.Op (numeq.ops.matmul(...), ...), got {type(op).__name__}")
    _check_str(gpu_platform, "gpu_platform")
    _check_str(trainium_platform, "trainium_platform")
    accept, failure_probability, variants, worst = _check_options(accept, failure_probability, variants, worst)
    _check_shape(gpu_output, op, "gpu_output")
    _check_shape(trainium_output, op, "trainium_output")
    g = _actual_values(gpu_output, "gpu_output")
    t = _actual_values(trainium_output, "trainium_output")
    d = _core.cases_compare_port(g, t, op._op, gpu_platform, trainium_platform, accept, failure_probability, variants,
                                 worst)
    return _from_core(PortVerdict, d, gpu=_verdict(d["gpu"]), trainium=_verdict(d["trainium"]),
                      worst=[PortElement(**w) for w in d["worst"]])
