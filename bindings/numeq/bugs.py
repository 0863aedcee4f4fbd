"""Planted kernel bugs: the output a wrong kernel gives on the inputs of a catalogue problem.

Each ``Bug`` is one mistake a real kernel makes (a bf16 accumulator, a dropped K tile, a transposed
operand, a wrong fp8 scale, softmax without max subtraction, a one-pass variance, flash attention
without rescaling, a missing output cast, a sum accumulated in bf16). ``Bug.output`` computes what
the buggy kernel returns on ``numeq.catalogue.build``'s inputs, as the platform would compute it:
where the mistake is a change of the platform's own arithmetic (its plan, its inputs, its output
format, an op variant) numeq's emulation computes it; where it is an algorithm numeq does not model
(one-pass variance, flash attention without rescaling) numpy computes it in the platform's compute
format (fp32) and ``numeq.round`` rounds it into the output format. The detection rate of these
outputs (``numeq.compare``, or a fixed tolerance) is what the tolerance tables and
benchmarks/bench_verdict.py report.

Example::

    >>> p = numeq.catalogue.Problem("matmul", "bf16", "fp32", k=256)
    >>> built = numeq.catalogue.build(p, "normal", seed=0)
    >>> [b.name for b in numeq.bugs.for_problem(p, "nvidia.h100")]
    ['bf16_accumulator', 'dropped_k_tile']
    >>> wrong = numeq.bugs.by_name("bf16_accumulator").output(built, p, "nvidia.h100")
    >>> numeq.compare(wrong, built.op, "nvidia.h100").passed
    False
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import _registry, catalogue, ops
from ._arrays import _check_str, format_info
from ._casts import round as _round
from .catalogue import Built, Problem
from .machines import matmul as _matmul
from .machines import plan as _plan
from .machines import platforms as _platforms
from .machines import sum as _sum

__all__ = ["BUGS", "Bug", "bf16_accumulator_plan", "by_name", "for_problem"]

# The K tile a GEMM kernel loads per main-loop step (128 along K: CUTLASS's and NKI's usual tile).
TILE = 128
# numeq's documented refusals (no plan for a format, no model of an op): the bug does not apply.
_REFUSALS = (ValueError, NotImplementedError)


def bf16_accumulator_plan(plan: dict) -> dict:
    """``plan`` (a plan's dict, ``numeq.plan(...).to_dict()``) with its accumulator in bf16: every
    accumulator cast in fp32 (a sequential reduction's accumulate format, a fused node's c format)
    becomes bf16, and a fused node's result (the accumulator it writes back: fp32, or e8m13 on
    Hopper's fp8 path) is cast into bf16. The plan's final output cast is kept.

    Example::

        >>> p = numeq.plan("nvidia.h100", "matmul", "e4m3fn", "fp32").to_dict()
        >>> bug = numeq.bugs.bf16_accumulator_plan(p)
        >>> bug["reduction"]["fused"]["c_format"], bug["output"] == p["output"]
        ('bf16', True)
    """
    if not isinstance(plan, dict) or "reduction" not in plan:
        raise TypeError(f"plan: expected a plan's dict (numeq.plan(...).to_dict()), got {type(plan).__name__}")

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        out = {key: walk(value) for key, value in node.items()}
        if out.get("c_format") == "fp32":
            out["c_format"] = "bf16"
            out["output"] = dict(out["output"], format="bf16")
        accumulate = out.get("accumulate")
        if isinstance(accumulate, dict) and accumulate.get("format") == "fp32":
            out["accumulate"] = dict(accumulate, format="bf16")
        return out

    return dict(plan, reduction=walk(plan["reduction"]))


def _plan_dict(platform: str, op: str, in_fmt: str, out: str) -> tuple[dict | None, str | None]:
    try:
        return _plan(platform, op=op, in_fmt=in_fmt, out=out).to_dict(), None
    except _REFUSALS as exc:
        return None, str(exc)


# ---------------------------------------------------------------------------------------------
# The bugs: each a reason it does not apply (None: it applies) and its output.
# ---------------------------------------------------------------------------------------------
def _why_accumulator(problem: Problem, platform: str) -> str | None:
    plan, refusal = _plan_dict(platform, "matmul", problem.in_fmt, problem.out)
    if plan is None:
        return refusal
    if bf16_accumulator_plan(plan) == plan:
        return f"the {platform} plan for {problem.in_fmt} -> {problem.out} accumulates in no format wider than bf16"
    return None


def _accumulator(built: Built, problem: Problem, platform: str) -> np.ndarray:
    plan = bf16_accumulator_plan(_plan(platform, op="matmul", in_fmt=problem.in_fmt, out=problem.out).to_dict())
    return _matmul(built.inputs["a"], built.inputs["b"], plan=plan, in_fmt=problem.in_fmt, out=problem.out)


# The catalogue's sum computes in fp32 (numeq.ops.sum's compute) with the platform's fp32 sum plan.
_SUM_COMPUTE = "fp32"


def _why_sum_accumulator(problem: Problem, platform: str) -> str | None:
    if platform.split("[", 1)[0] == "numpy":
        return "numpy's summation order is not a platform plan to edit"
    plan, refusal = _plan_dict(platform, "sum", _SUM_COMPUTE, _SUM_COMPUTE)
    if plan is None:
        return refusal
    if bf16_accumulator_plan(plan) == plan:
        return f"the {platform} sum plan accumulates in no format wider than bf16"
    return catalogue.refusal(problem, platform)


def _sum_accumulator(built: Built, problem: Problem, platform: str) -> np.ndarray:
    plan = bf16_accumulator_plan(_plan(platform, op="sum", in_fmt=_SUM_COMPUTE, out=_SUM_COMPUTE).to_dict())
    return _round(_sum(built.inputs["x"], axis=-1, plan=plan, fmt=_SUM_COMPUTE), problem.out)


def _last_tile(k: int) -> int:
    """Where the last K tile starts: the last full tile of TILE, or the partial tail."""
    return ((k - 1) // TILE) * TILE


def _why_dropped(problem: Problem, platform: str) -> str | None:
    if problem.k <= TILE:
        return f"K = {problem.k} <= {TILE}: one K tile, none to drop"
    return catalogue.refusal(problem, platform)


def _dropped(built: Built, problem: Problem, platform: str) -> np.ndarray:
    # Every input's K axis (the registry's catalogue_shape says where it is) zeroed from the last
    # tile on: both GEMM operands, so an Inf or NaN in the dropped tile of one never meets the other.
    start = _last_tile(problem.k)
    inputs = {name: np.array(value, copy=True) for name, value in built.inputs.items()}
    for spec in _registry.spec(problem.op).inputs:
        if spec.name in inputs and -1 in spec.catalogue_shape:
            index = [slice(None)] * inputs[spec.name].ndim
            index[spec.catalogue_shape.index(-1)] = slice(start, None)
            inputs[spec.name][tuple(index)] = 0
    return catalogue.op_for(problem, inputs, built.params).emulate(platform)


def _why_transposed(problem: Problem, platform: str) -> str | None:
    if problem.k != problem.shape[1]:
        return f"b is [K, N] = [{problem.k}, {problem.shape[1]}]: read transposed only when K == N"
    return catalogue.refusal(problem, platform)


def _transposed(built: Built, problem: Problem, platform: str) -> np.ndarray:
    inputs = dict(built.inputs, b=np.ascontiguousarray(np.swapaxes(built.inputs["b"], -1, -2)))
    return catalogue.op_for(problem, inputs, built.params).emulate(platform)


def _wrong_scale(built: Built, problem: Problem, platform: str) -> np.ndarray:
    params = dict(built.params, scale_a=2.0 * built.params["scale_a"])
    return catalogue.op_for(problem, built.inputs, params).emulate(platform)


def _plain_softmax(built: Built, problem: Problem, platform: str) -> np.ndarray:
    # numeq's own plain variant computes exp(x) / sum(exp(x)) in fp32 on the platform: an exp past
    # the fp32 range is +Inf and its row NaN, the bug this plants.
    return catalogue.op_for(problem, built.inputs, dict(built.params, variant="plain")).emulate(platform)


def _one_pass_variance(built: Built, problem: Problem, platform: str) -> np.ndarray:
    eps = np.float32(built.params.get("eps", 1e-5))
    x = built.inputs["x"].astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
        var = (x * x).mean(axis=-1, keepdims=True, dtype=np.float32) - mean * mean  # the bug: E[x^2] - E[x]^2
        y = (x - mean) / np.sqrt(var + eps)
    return _round(y.astype(np.float64), problem.out)


# The catalogue's attention is FlashAttention-2 with numeq.ops.attention's default blocks.
_BLOCK = 64


def _why_flash(problem: Problem, platform: str) -> str | None:
    if problem.k <= _BLOCK:
        return f"K = {problem.k} <= {_BLOCK}: one key block, no running maximum to rescale by"
    return catalogue.refusal(problem, platform)


def _flash_without_rescale(built: Built, problem: Problem, platform: str) -> np.ndarray:
    q, k, v = (built.inputs[n].astype(np.float32) for n in ("q", "k", "v"))
    d = q.shape[-1]
    scale = np.float32(1.0 / np.sqrt(d))
    m = np.full(q.shape[:-1] + (1,), -np.inf, dtype=np.float32)
    total = np.zeros(q.shape[:-1] + (1,), dtype=np.float32)
    acc = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for j in range(0, k.shape[-2], _BLOCK):
            s = (q @ np.swapaxes(k[..., j:j + _BLOCK, :], -1, -2)) * scale
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
            p = np.exp(s - m_new)
            # P cast to the input format before P V, as the op's flash variant (cast_p)
            p_in = _round(p.astype(np.float64), problem.in_fmt).astype(np.float32)
            acc = acc * np.exp(m - m_new) + p_in @ v[..., j:j + _BLOCK, :]
            total = total + p.sum(axis=-1, keepdims=True, dtype=np.float32)  # the bug: no * exp(m - m_new)
            m = m_new
        y = acc / total
    return _round(y.astype(np.float64), problem.out)


def _why_missing_cast(problem: Problem, platform: str) -> str | None:
    info = format_info(problem.out)
    if info["kind"] != "floating" or info["bits"] >= 32:
        return f"out = {problem.out}: no output narrower than fp32 to cast into"
    return catalogue.refusal(problem, platform) or catalogue.refusal(problem, platform, "fp32")


def _missing_cast(built: Built, problem: Problem, platform: str) -> np.ndarray:
    return catalogue.op_for(problem, built.inputs, built.params, out="fp32").emulate(platform)


_IMPL: dict[str, tuple[Callable[[Problem, str], str | None], Callable[[Built, Problem, str], np.ndarray]]] = {
    "bf16_accumulator": (_why_accumulator, _accumulator),
    "bf16_sum_accumulator": (_why_sum_accumulator, _sum_accumulator),
    "dropped_k_tile": (_why_dropped, _dropped),
    "transposed_operand": (_why_transposed, _transposed),
    "wrong_fp8_scale": (catalogue.refusal, _wrong_scale),
    "softmax_without_max": (catalogue.refusal, _plain_softmax),
    "one_pass_variance": (catalogue.refusal, _one_pass_variance),
    "flash_without_rescale": (_why_flash, _flash_without_rescale),
    "missing_output_cast": (_why_missing_cast, _missing_cast),
}


def _check_platform(platform: Any) -> str:
    _check_str(platform, "platform")
    names = _platforms()
    if platform.split("[", 1)[0] not in names:
        raise ValueError(f"platform: unknown platform {platform!r}; valid: {', '.join(names)}")
    return platform


def _check_problem(problem: Any) -> Problem:
    if not isinstance(problem, Problem):
        raise TypeError(f"problem: expected a numeq.catalogue.Problem, got {type(problem).__name__}")
    return problem


@dataclass(frozen=True)
class Bug:
    """A planted kernel bug: ``name`` (one of the names of ``BUGS``), ``description`` (what the
    buggy kernel does, in one sentence) and ``ops`` (the catalogue ops it applies to: the op
    registry's rows that list it).

    Example::

        >>> bug = numeq.bugs.by_name("dropped_k_tile")
        >>> bug.ops[:3]
        ('matmul', 'scaled_fp8_matmul', 'int8_matmul')
        >>> bug.applies(numeq.catalogue.Problem("matmul", "bf16", "fp32", k=128), "nvidia.h100")
        False
    """

    name: str
    description: str
    ops: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        _check_str(self.name, "name", tuple(_IMPL))
        # The ops it applies to: the registry's rows that name it (cases/registry.hpp, OpSpec::bugs).
        object.__setattr__(self, "ops", tuple(s.name for s in _registry.specs()
                                               if s.catalogue is not None and self.name in s.bugs))

    def why_not(self, problem: Problem, platform: str) -> str | None:
        """Why the bug does not apply to ``problem`` (a ``numeq.catalogue.Problem``) on
        ``platform`` (a name of ``numeq.platforms()``), in words; None when it applies.

        Example::

            >>> p = numeq.catalogue.Problem("softmax", "bf16", "fp32", k=256)
            >>> numeq.bugs.by_name("missing_output_cast").why_not(p, "nvidia.h100")
            'out = fp32: no output narrower than fp32 to cast into'
        """
        _check_problem(problem)
        _check_platform(platform)
        if problem.op not in self.ops:
            return f"{self.name} applies to {', '.join(self.ops)}, not {problem.op}"
        return _IMPL[self.name][0](problem, platform)

    def applies(self, problem: Problem, platform: str) -> bool:
        """Whether the bug can be planted in ``problem`` (a ``numeq.catalogue.Problem``) on
        ``platform`` (a name of ``numeq.platforms()``): its op is one of ``ops``, the shapes and
        formats allow it, and the platform emulates the op (``why_not`` says why not).

        Example::

            >>> bug = numeq.bugs.by_name("transposed_operand")
            >>> bug.applies(numeq.catalogue.Problem("matmul", "bf16", "fp32", k=64), "nvidia.h100")
            True
            >>> bug.applies(numeq.catalogue.Problem("matmul", "bf16", "fp32", k=256), "nvidia.h100")
            False
        """
        return self.why_not(problem, platform) is None

    def output(self, built: Built, problem: Problem, platform: str) -> np.ndarray:
        """The buggy kernel's output on ``built.inputs`` (``built``: ``numeq.catalogue.build`` of
        ``problem``, or a ``numeq.catalogue.Built`` of the same op on other inputs), as
        ``platform`` would compute it: float64 values of the problem's output format (fp32 values
        for ``missing_output_cast``, whose point is values outside it), of the shape of
        ``built.op.emulate(platform)``. A problem the bug does not apply to is a ValueError
        saying why and naming the bugs that apply.

        Example::

            >>> p = numeq.catalogue.Problem("matmul", "bf16", "fp32", k=256)
            >>> built = numeq.catalogue.build(p, "normal", seed=0)
            >>> wrong = numeq.bugs.by_name("dropped_k_tile").output(built, p, "nvidia.h100")
            >>> wrong.shape, numeq.compare(wrong, built.op, "nvidia.h100").passed
            ((64, 64), False)
        """
        if not isinstance(built, Built):
            raise TypeError(f"built: expected a numeq.catalogue.Built (numeq.catalogue.build(problem, ...)), "
                            f"got {type(built).__name__}")
        reason = self.why_not(problem, platform)
        if reason is not None:
            valid = [b.name for b in for_problem(problem, platform)]
            raise ValueError(f"problem: {self.name} does not apply to {problem.text()} on {platform}: {reason}; "
                             f"the bugs that apply: {', '.join(valid) or 'none'}")
        _check_built(built, problem)
        return np.asarray(_IMPL[self.name][1](built, problem, platform), dtype=np.float64)


def _check_built(built: Built, problem: Problem) -> None:
    """``built`` holds the inputs of ``problem``'s op (names, and K where the op reduces over it)."""
    drawn = [i for i in _registry.spec(problem.op).inputs if i.catalogue_shape]
    want = tuple(sorted(i.name for i in drawn))
    if tuple(sorted(built.inputs)) != want:
        raise ValueError(f"built: inputs {sorted(built.inputs)} are not those of {problem.op} ({', '.join(want)}); "
                         "pass numeq.catalogue.build(problem, ...)")
    # The first input with a K axis (the registry's catalogue_shape marks it -1).
    with_k = next(i for i in drawn if -1 in i.catalogue_shape)
    first = built.inputs[with_k.name]
    k_axis = with_k.catalogue_shape.index(-1) - len(with_k.catalogue_shape)
    if first.shape[k_axis] != problem.k:
        raise ValueError(f"built: K = {first.shape[k_axis]} in its inputs, the problem's is {problem.k}; "
                         "pass numeq.catalogue.build(problem, ...)")


BUGS: tuple[Bug, ...] = (
    Bug("bf16_accumulator", "A GEMM that keeps its running sum in bf16 instead of the platform's fp32 accumulator."),
    Bug("bf16_sum_accumulator", "A sum reduction that keeps its running sum in bf16 instead of fp32."),
    Bug("dropped_k_tile", f"A kernel whose main loop stops one K tile early: the last tile of {TILE} "
        "(or the partial tail) is never accumulated."),
    Bug("transposed_operand", "A GEMM that reads the square operand b transposed: a @ b.T."),
    Bug("wrong_fp8_scale", "A scaled fp8 GEMM that applies twice the scale of a."),
    Bug("softmax_without_max", "Softmax as exp(x) / sum(exp(x)) with no max subtracted: an exp past the fp32 "
        "range makes its row Inf / Inf."),
    Bug("one_pass_variance", "Layernorm whose variance is E[x^2] - E[x]^2 in fp32, cancelling where the mean "
        "is large against the spread."),
    Bug("flash_without_rescale", "Flash attention whose running softmax denominator is not rescaled when the "
        "running maximum grows."),
    Bug("missing_output_cast", "A kernel that stores its fp32 result without the cast into the narrower output "
        "format."),
)


def by_name(name: str) -> Bug:
    """The planted bug called ``name`` (one of the names of ``BUGS``).

    Example::

        >>> numeq.bugs.by_name("wrong_fp8_scale").ops
        ('scaled_fp8_matmul',)
    """
    _check_str(name, "name", [b.name for b in BUGS])
    return next(b for b in BUGS if b.name == name)


def for_problem(problem: Problem, platform: str) -> list[Bug]:
    """The bugs of ``BUGS`` that apply to ``problem`` (a ``numeq.catalogue.Problem``) on
    ``platform`` (a name of ``numeq.platforms()``).

    Example::

        >>> p = numeq.catalogue.Problem("softmax", "bf16", "bf16", k=256)
        >>> [b.name for b in numeq.bugs.for_problem(p, "trainium.trn2")]
        ['softmax_without_max', 'missing_output_cast']
    """
    _check_problem(problem)
    _check_platform(platform)
    return [b for b in BUGS if b.applies(problem, platform)]
