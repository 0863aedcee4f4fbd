"""Settling a platform's unknowns from hardware evidence: candidate models, probe inputs that tell
them apart, and fitting measured outputs bit for bit.

    cands = numeq.assumption_candidates("trainium.trn1", in_fmt="bf16")   # every combination
    probe = numeq.probes("trainium.trn1", in_fmt="bf16")                  # inputs + NKI kernel
    probe.write("probe-trn1")         # a.npy, b_t.npy, probe_kernel.py, expected/<candidate>.npy
    ... run probe_kernel.py on the device; it writes d.npy ...
    result = numeq.fit_platform(cands, (probe.a, probe.b), "probe-trn1/d.npy", in_fmt="bf16", write="fitted.json")

A candidate is a platform name (variants "name[assumption=value,...]" included) or a Plan;
``fit`` evaluates each on the inputs with numeq's emulation and keeps those that reproduce every
output bit for bit (NaN == NaN, zeros told apart by sign).
"""

from __future__ import annotations

import itertools
import warnings
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

import numpy as np

from . import _core
from ._arrays import SIZE, UINT64, _array, _check_format, _check_int, _check_str, _renamed
from .machines import Plan, dot, matmul, plan, platform_assumptions, platform_json
from .machines import platforms as platform_names
from .machines import sum as sum_

Candidate = Union[str, Plan]


# ---------------------------------------------------------------------------------------------
# candidates

def assumption_candidates(platform: str, *, op: str = "matmul", in_fmt: str = "bf16", out: str = "fp32",
                          names: Sequence[str] | None = None) -> dict[str, str]:
    """Every combination of the platform's assumptions that changes its ``op`` plan for
    ``in_fmt -> out`` (or of the assumptions ``names``), as {label: platform variant name}.
    Combinations the platform refuses (e.g. pe_order=fused with products=bf16) are left out.

    ``platform``: a name of ``numeq.platforms()`` with assumptions (see
    ``numeq.platform_assumptions``); ``op``: "sum", "dot" or "matmul"; ``in_fmt``, ``out``: names of
    ``numeq.formats()``.

    Example::

        >>> c = numeq.assumption_candidates("trainium.trn2", names=["pe_order"])
        >>> c
        {'pe_order=sequential': 'trainium.trn2[pe_order=sequential]', 'pe_order=pairwise': 'trainium.trn2[pe_order=pairwise]', 'pe_order=fused': 'trainium.trn2[pe_order=fused]'}
    """
    for value, parameter in ((platform, "platform"), (op, "op"), (in_fmt, "in_fmt"), (out, "out")):
        _check_str(value, parameter)
    if names is not None:
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise TypeError(f"names: expected a sequence of assumption names, got {type(names).__name__}")
        names = [_check_str(n, "names") for n in names]
    # C++'s core::assumption_candidates (platform.hpp): the combinations, their labels, the
    # refusals left out.
    return dict(_core.core_assumption_candidates(platform, op, in_fmt, out, names))


# How an instruction's products and its accumulator c meet (tensor_core_candidates ``structure``):
# C++'s names (core/tensor_core.hpp says what each is and which measurements it matches).
_STRUCTURES = tuple(_core.core_tensor_core_structures())


def tensor_core_candidates(in_fmt: str, out: str = "fp32", *, n: Sequence[int] = (4, 8, 16, 32),
                           fraction_bits: Sequence[int] = tuple(range(12, 33)),
                           step_output: Sequence[str] = ("fp32 toward_zero", "fp32 nearest_even",
                                                         "e8m13 toward_zero"),
                           structure: Sequence[str] = _STRUCTURES) -> dict[str, Plan]:
    """A generic NVIDIA-style tensor core with unknown products per fused step ``n``, alignment
    fraction bits ``fraction_bits``, step output rounding and ``structure`` (FACTS.md s2: exact
    products aligned to the largest exponent, truncated to F fraction bits, summed exactly,
    normalised and rounded once; a GEMM chains steps along K). For fp16 outputs the step output
    is fp16 (the choices "fp16 nearest_even", "fp16 toward_zero" apply).

    ``structure``: "chain" (steps of n chained along K from c), "c_last" (an instruction of n
    products is one step from zero, c added after it by one nearest-even addition in the output
    format), "halves" (an instruction of 2n products as two steps of n, products k mod 4 in
    {0, 1} first, then {2, 3} fed with the first's result, c added last: mma.sync k32 with fp8
    operands). The default grid (F from 12 to 32) holds every measured NVIDIA set's model.
    Returns {label: Plan}; labels read "n=16,F=25,step=fp32 toward_zero,structure=halves".

    ``in_fmt``: the operands' format (e.g. "fp16", "bf16", "e4m3fn"); ``out``: the output format
    ("fp32" or "fp16"); ``step_output``: each step's output format and rounding, "<format>
    <rounding>" strings.

    Example::

        >>> plans = numeq.tensor_core_candidates("fp16", n=[16], fraction_bits=[24, 25], step_output=["fp32 toward_zero"],
        ...                                  structure=["chain"])
        >>> list(plans)
        ['n=16,F=24,step=fp32 toward_zero,structure=chain', 'n=16,F=25,step=fp32 toward_zero,structure=chain']
    """
    _check_format(in_fmt, "in_fmt")
    _check_format(out, "out")
    n = _int_list(n, "n", 1)
    fraction_bits = _int_list(fraction_bits, "fraction_bits", 0)
    if isinstance(step_output, str) or not isinstance(step_output, (list, tuple)) or not step_output:
        raise TypeError(f"step_output: expected a non-empty sequence of 'format rounding' strings, got {step_output!r}")
    for so in step_output:
        if len(_check_str(so, "step_output").split()) != 2:
            raise ValueError(f"step_output: expected 'format rounding' (e.g. 'fp32 toward_zero'), got {so!r}")
    if isinstance(structure, str):
        structure = (structure,)
    if not isinstance(structure, (list, tuple)) or not structure:
        raise TypeError(f"structure: expected one of {', '.join(_STRUCTURES)} or a non-empty sequence of them, "
                        f"got {structure!r}")
    for st in structure:
        if st not in _STRUCTURES:
            raise ValueError(f"structure: unknown {st!r}; valid: {', '.join(_STRUCTURES)}")
    if out == "fp16" and tuple(step_output) == ("fp32 toward_zero", "fp32 nearest_even", "e8m13 toward_zero"):
        step_output = ("fp16 nearest_even", "fp16 toward_zero")
    # The plans are C++'s (core/tensor_core.hpp: the one builder, shared with the built-in NVIDIA
    # platforms); each is read back through Plan, whose checks name the field.
    built = _core.core_tensor_core_candidates(in_fmt, out, [int(x) for x in n], [int(x) for x in fraction_bits],
                                              [tuple(so.split()) for so in step_output], list(structure))
    plans: dict[str, Plan] = {}
    for label, text in built:
        chain = "structure=chain" in label
        fused = "plan.reduction.fused." if chain else "plan.reduction.children[0]."
        with _renamed({fused + "n": "n", fused + "fraction_bits": "fraction_bits",
                       fused + "output.format": "step_output", fused + "output.rounding": "step_output"}):
            plans[label] = Plan(text)
    return plans


# ---------------------------------------------------------------------------------------------
# fitting

@dataclass
class FitResult:
    """What ``fit`` found. ``explaining``: the candidates that reproduce every output;
    ``matches``: per candidate, how many outputs it reproduces; ``unexplained``: flat indices of
    the outputs that no candidate reproduces; ``best``: a candidate with the most matches.

    ``total``: how many outputs were compared; ``candidates``: the candidates as ``fit`` read them.
    ``summary()``: one line per candidate.

    Example::

        >>> rng = np.random.default_rng(0)
        >>> a = numeq.round(rng.standard_normal((64, 256)), "fp16")
        >>> b = numeq.round(rng.standard_normal((64, 256)), "fp16")
        >>> measured = numeq.dot(a, b, platform="nvidia.h100", in_fmt="fp16")
        >>> result = numeq.fit_platform(["nvidia.h100", "nvidia.v100"], (a, b), measured, in_fmt="fp16")
        >>> result.explaining, result.total, result.unexplained.size
        (['nvidia.h100'], 64, 0)
    """
    explaining: list[str]
    matches: dict[str, int]
    total: int
    unexplained: np.ndarray
    best: str
    candidates: dict[str, Candidate] = field(repr=False)

    def summary(self) -> str:
        """The fit as text: how many candidates reproduce every output, then each candidate's
        matches, most first, and the first outputs no candidate explains.

        Example::

            >>> a = numeq.round(np.random.default_rng(0).standard_normal((64, 256)), "fp16")
            >>> measured = numeq.dot(a, a, platform="nvidia.h100", in_fmt="fp16")
            >>> print(numeq.fit_platform(["nvidia.h100", "nvidia.v100"], (a, a), measured, in_fmt="fp16").summary())
            1 of 2 candidates reproduce all 64 outputs
                    64/64  nvidia.h100
                     0/64  nvidia.v100
        """
        lines = [f"{len(self.explaining)} of {len(self.matches)} candidates reproduce all {self.total} outputs"]
        for label, m in sorted(self.matches.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {m:>8}/{self.total}  {label}")
        if self.unexplained.size:
            lines.append(f"{self.unexplained.size} outputs explained by no candidate (first: "
                         f"{', '.join(str(i) for i in self.unexplained[:10])})")
        return "\n".join(lines)


def _int_list(values: Any, parameter: str, lo: int) -> list[int]:
    if isinstance(values, (int, np.integer, bool, np.bool_)):
        values = (values,)
    if not isinstance(values, (list, tuple, range)) or not len(values):
        raise TypeError(f"{parameter}: expected a non-empty sequence of integers, got {values!r}")
    return [_check_int(v, parameter, lo, 2**31 - 1) for v in values]


def _load(x: Any, parameter: str) -> tuple[np.ndarray, str]:
    """An array, or a .npy file (the error then names the file)."""
    if isinstance(x, (str, Path)):
        path = Path(x)
        try:
            return np.load(path, allow_pickle=False), str(path)
        except (OSError, ValueError) as e:
            raise ValueError(f"{parameter}: cannot read {path} as a .npy array: {e}") from None
    return _array(x, parameter), parameter


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a == b) | (np.isnan(a) & np.isnan(b))


def _as_candidates(candidates: Any) -> dict[str, Candidate]:
    if isinstance(candidates, Mapping):
        out = dict(candidates)
    elif isinstance(candidates, (list, tuple)):
        for i, c in enumerate(candidates):
            if not isinstance(c, (str, Plan)):
                raise TypeError(f"candidates[{i}]: expected a platform name or a Plan, got {type(c).__name__}")
        out = {(c if isinstance(c, str) else c.name): c for c in candidates}
    else:
        raise TypeError("candidates: expected a dict {label: platform name or Plan} or a list of them")
    if not out:
        raise ValueError("candidates: empty; give at least one platform name or Plan")
    for label, c in out.items():
        if not isinstance(c, (str, Plan)):
            raise TypeError(f"candidates[{label!r}]: expected a platform name or a Plan, got {type(c).__name__}")
    return out


def fit_platform(candidates: Any, inputs: Any, outputs: Any, *, op: str = "dot", in_fmt: str | None = None,
        out: str = "fp32", write: str | Path | None = None) -> FitResult:
    """Which candidates reproduce measured ``outputs`` bit for bit on ``inputs``.

    ``inputs``: (a, b) or (a, b, c), arrays or .npy paths; ``op`` "dot" (a . b along the last axis,
    one output per row) or "matmul" (a @ b); for ``op="sum"``, (x,) summed along its last axis in
    ``in_fmt``. ``outputs``: an array or a .npy path, shaped as the
    operation's result (else an error naming it). ``write``: a path for the fitted profile (JSON,
    loadable with numeq.load_platform): the winning platform, or a platform holding the winning
    plan, with the fit recorded as measured evidence.

    ``candidates``: platform names (``numeq.platforms()``, with ``[...]`` variants), ``Plan``s, or a
    dict {label: name or Plan} (``numeq.assumption_candidates`` and ``numeq.tensor_core_candidates``
    make such dicts); ``in_fmt``: the inputs' format (default: their dtype's); ``out``: the outputs'
    format.

    Example::

        >>> rng = np.random.default_rng(0)
        >>> a = numeq.round(rng.standard_normal((64, 256)), "fp16")
        >>> b = numeq.round(rng.standard_normal((64, 256)), "fp16")
        >>> measured = numeq.dot(a, b, platform="nvidia.h100", in_fmt="fp16")   # stands for a GPU's outputs
        >>> result = numeq.fit_platform(["nvidia.h100", "nvidia.v100", "nvidia.a100"], (a, b), measured, in_fmt="fp16")
        >>> result.best, result.explaining
        ('nvidia.h100', ['nvidia.h100'])
    """
    _check_str(op, "op")
    if op not in ("sum", "dot", "matmul"):
        raise ValueError(f"op: unknown operation {op!r}; valid: sum, dot, matmul")
    _check_format(out, "out")
    if in_fmt is not None:
        _check_format(in_fmt, "in_fmt")
    cands = _as_candidates(candidates)
    arity = (1,) if op == "sum" else (2, 3)
    if not isinstance(inputs, (tuple, list)) or len(inputs) not in arity:
        raise ValueError("inputs: expected " + ("(x,): an array or .npy path, summed along its last axis"
                                                if op == "sum" else "(a, b) or (a, b, c): arrays or .npy paths"))
    d, d_name = _load(outputs, "outputs")
    if op == "sum":
        x, x_name = _load(inputs[0], "inputs[0]")
        want_shape, given = x.shape[:-1], f"{x_name} {x.shape}"
    else:
        (a, a_name), (b, b_name) = _load(inputs[0], "inputs[0]"), _load(inputs[1], "inputs[1]")
        c = _load(inputs[2], "inputs[2]")[0] if len(inputs) == 3 and inputs[2] is not None else None
        want_shape = (np.broadcast_shapes(a.shape[:-1], b.shape[:-1]) if op == "dot"
                      else np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]))
        if op == "matmul" and a.shape[-1] != b.shape[-2]:
            raise ValueError(f"inputs: {a_name} has K = {a.shape[-1]} columns but {b_name} has {b.shape[-2]} rows")
        given = f"{a_name} {a.shape}, {b_name} {b.shape}"
    if d.shape != tuple(want_shape):
        raise ValueError(f"outputs: {d_name} holds shape {d.shape}, but the probe inputs ({given}) give {op} "
                         f"results of shape {tuple(want_shape)}")
    d = d.astype(np.float64)
    matches: dict[str, int] = {}
    explained = np.zeros(d.shape, dtype=bool)
    for label, cand in cands.items():
        kw = {"platform": cand} if isinstance(cand, str) else {"plan": cand}
        if op == "sum":
            got = sum_(x, axis=-1, fmt=in_fmt, **kw)
        else:
            got = (dot if op == "dot" else matmul)(a, b, c=c, in_fmt=in_fmt, out=out, **kw)
        same = _same_bits(got, d) & (np.signbit(got) == np.signbit(d))
        matches[label] = int(np.count_nonzero(same))
        explained |= same
    total = int(d.size)
    explaining = [label for label, m in matches.items() if m == total]
    best = max(matches, key=lambda k: matches[k])
    result = FitResult(explaining, matches, total, np.flatnonzero(~explained), best, cands)
    if write is not None:
        _write_profile(result, Path(write), op, in_fmt, out, d_name)
    return result


def _write_profile(result: FitResult, path: Path, op: str, in_fmt: str | None, out: str, source: str) -> None:
    winner = result.explaining[0] if result.explaining else result.best
    cand = result.candidates[winner]
    evidence = {"parameter": f"{op} {in_fmt} -> {out}: {winner}", "kind": "measured",
                "source": f"numeq.fit_platform: reproduces {result.matches[winner]}/{result.total} outputs of {source}"
                          + (f"; equally explained by: {', '.join(x for x in result.explaining if x != winner)}"
                             if len(result.explaining) > 1 else "")}
    if isinstance(cand, str):
        # Under a name of its own: "<base>.fitted" (a name with [choices] would be rebuilt from the
        # built-in, not read from this file); the assumptions keep the fitted values.
        profile = json.loads(platform_json(cand))
        profile["description"] = f"{profile['name']}, fitted to {source}: " + profile.get("description", "")
        profile["name"] = profile["name"].split("[", 1)[0] + ".fitted"
        profile["aliases"] = []
        profile.setdefault("evidence", []).append(evidence)
    else:
        entries = [{"op": o, "in_fmt": in_fmt or cand.to_dict()["reduction"].get("fused", {}).get("a_format", "fp32"),
                    "out": out, "plan": cand.to_dict()} for o in (("sum",) if op == "sum" else ("dot", "matmul"))]
        profile = {"name": f"fitted.{winner}".replace(" ", "_"), "description": f"fitted to {source}",
                   "plans": entries, "evidence": [evidence]}
    path.write_text(json.dumps(profile, indent=2))


# ---------------------------------------------------------------------------------------------
# probes

_NKI_KERNEL = '''"""numeq probe kernel for {platform}: D = A @ B through nc_matmul into one PSUM tile.

Reads a_t.npy (A transposed: [K, M], the stationary operand) and b.npy ([K, N], the moving
operand), both {in_fmt} values stored as float32; writes d.npy ([M, N], float32) from the PSUM
accumulation, without any other arithmetic. K is contracted in tiles of {tile} rows, one nc_matmul
each, accumulated into the same PSUM tile in program order (sequential_range keeps that order).
Written for the neuronxcc.nki API of Neuron SDK 2.2x (nki.isa.nc_matmul(stationary, moving)
returning a PSUM tile); newer SDKs take nc_matmul(dst, stationary, moving, accumulate=True).
Then, on the host: numeq.fit_platform(numeq.assumption_candidates("{platform}", in_fmt="{in_fmt}"),
(A, B), "d.npy", op="matmul", in_fmt="{in_fmt}").
"""
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TILE = {tile}


@nki.jit
def probe_matmul(a_t, b):
    K, M = a_t.shape
    _, N = b.shape
    d = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    psum = nl.zeros((M, N), dtype=nl.float32, buffer=nl.psum)
    for t in nl.sequential_range(K // TILE):
        stationary = nl.load(a_t[t * TILE:(t + 1) * TILE, :], dtype=nl.{nki_dtype})
        moving = nl.load(b[t * TILE:(t + 1) * TILE, :], dtype=nl.{nki_dtype})
        psum += nisa.nc_matmul(stationary, moving)
    nl.store(d, value=nl.copy(psum, dtype=nl.float32))
    return d


if __name__ == "__main__":
    a_t = np.load("a_t.npy")
    b = np.load("b.npy")
    np.save("d.npy", np.asarray(probe_matmul(a_t, b), dtype=np.float32))
'''

_NKI_SUM_KERNEL = '''"""numeq probe kernel for {platform}: row sums through the Vector engine.

Reads x.npy ([P, F] with P <= 128 rows on the partitions; {in_fmt} values stored as float32) and
writes d.npy ([P], float32): each row summed along the free axis by one nisa.tensor_reduce in
fp32, the order numeq's vector_reduce_order assumption leaves open. Written for the
neuronxcc.nki API of Neuron SDK 2.2x. Then: numeq.fit_platform(numeq.assumption_candidates("{platform}",
op="sum", in_fmt="{in_fmt}", out="{in_fmt}"), ("x.npy",), "d.npy", op="sum", in_fmt="{in_fmt}").
"""
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def probe_sum(x):
    P, F = x.shape
    d = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    tile = nl.load(x, dtype=nl.{nki_dtype})
    total = nisa.tensor_reduce(np.add, tile, axis=(1,), dtype=nl.float32)
    nl.store(d, value=total)
    return d


if __name__ == "__main__":
    x = np.load("x.npy")
    np.save("d.npy", np.asarray(probe_sum(x), dtype=np.float32).reshape(-1))
'''

_NKI_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "tfloat32",
               "e4m3": "float8_e4m3", "e5m2": "float8_e5m2"}


@dataclass
class Probes:
    """Inputs that tell a platform's candidate models apart. ``a`` [M, K] and ``b`` [K, N] (float64
    values of ``in_fmt``); ``expected``: each candidate's emulated ``a @ b``; ``indistinct``: pairs
    of candidates these inputs cannot tell apart (empty when every candidate is distinguished);
    ``kernel_source``: a ready-to-run NKI kernel (Trainium platforms) or None.

    ``platform``, ``in_fmt``, ``out``: as given to ``probes``; ``candidates``: {label: platform
    variant name}. ``write(directory)`` saves them for a run on the device.

    Example::

        >>> orders = numeq.assumption_candidates("trainium.trn2", names=["pe_order"])
        >>> p = numeq.probes("trainium.trn2", m=16, n=16, k=512, candidates=orders)
        >>> p.a.shape, p.b.shape, p.indistinct
        ((16, 512), (512, 16), [])
        >>> sorted(p.expected) == sorted(orders)
        True
        >>> p.kernel_source is not None
        True
    """
    platform: str
    in_fmt: str
    out: str
    a: np.ndarray
    b: np.ndarray | None
    candidates: dict[str, str]
    expected: dict[str, np.ndarray]
    indistinct: list[tuple[str, str]]
    kernel_source: str | None

    def write(self, directory: str | Path) -> Path:
        """a_t.npy, b.npy, a.npy (float32 containers of the in_fmt values; x.npy for a sum probe),
        probe_kernel.py (when there is one), expected/<n>.npy per candidate with candidates.json
        naming them.

        ``directory``: a path (created when missing); returns it as a ``Path``.

        Example::

            >>> import tempfile
            >>> orders = numeq.assumption_candidates("trainium.trn2", names=["pe_order"])
            >>> p = numeq.probes("trainium.trn2", m=16, n=16, k=512, candidates=orders)
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     d = p.write(tmp)
            ...     sorted(f.name for f in d.iterdir())
            ['a.npy', 'a_t.npy', 'b.npy', 'candidates.json', 'expected', 'probe_kernel.py']
        """
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"directory: expected a path (str or os.PathLike), got {type(directory).__name__}")
        if isinstance(directory, str):
            _check_str(directory, "directory")
        d = Path(directory)
        (d / "expected").mkdir(parents=True, exist_ok=True)
        if self.b is None:  # a sum probe: x
            np.save(d / "x.npy", self.a.astype(np.float32))
        else:
            np.save(d / "a_t.npy", np.ascontiguousarray(self.a.T.astype(np.float32)))
            np.save(d / "b.npy", self.b.astype(np.float32))
            np.save(d / "a.npy", self.a.astype(np.float32))
        if self.kernel_source is not None:
            (d / "probe_kernel.py").write_text(self.kernel_source)
        names = {}
        for i, (label, values) in enumerate(self.expected.items()):
            np.save(d / "expected" / f"{i}.npy", values.astype(np.float32) if self.out == "fp32" else values)
            names[str(i)] = {"label": label, "platform": self.candidates[label]}
        (d / "candidates.json").write_text(json.dumps(names, indent=2))
        return d


def _probe_pool(rng: np.random.Generator, in_fmt: str, k: int, count: int) -> np.ndarray:
    """Rows of K values of in_fmt in several families: plain normal values, wide exponent spreads
    (alignment and accumulator width matter), cancelling halves (rounding direction and order
    matter) and values with long significands (product rounding matters)."""
    from ._arrays import format_info
    from ._casts import round as round_to  # numeq.round: the one rounding kernel

    # Exponents from the format's smallest subnormal (or 2^-12) to just below its largest binade
    # (or 2^12): every product and K-term sum stays finite in fp32, and the products of an fp8
    # format still spread over more than fp32's 24 bits.
    info = format_info(in_fmt)
    hi = int(min(12, info["emax"] - 1))
    lo = int(max(-12, np.log2(info["min_subnormal"]) if info["has_subnormals"] else info["emin"]))
    rows = []
    for i in range(count):
        family = i % 6
        if family == 0:
            x = rng.standard_normal(k)
        elif family == 1:
            x = rng.standard_normal(k) * np.exp2(rng.integers(lo, hi + 1, k))
        elif family == 2:
            half = rng.standard_normal(k // 2)
            x = np.concatenate([half, -half * (1 + rng.standard_normal(k // 2) * 2.0**-6)])
            x = x[rng.permutation(k)] if k % 2 == 0 else np.append(x, rng.standard_normal())[:k]
        elif family == 3:
            x = (1 + rng.random(k)) * rng.choice([-1.0, 1.0], k) * np.exp2(rng.integers(-3, 4, k))
        elif family == 4:
            # absorption: a few large terms among small ones; where they sit decides what is lost
            x = rng.standard_normal(k) * 2.0**(lo + 2)
            big = rng.choice(k, size=min(k, int(rng.integers(1, 4))), replace=False)
            x[big] = (1 + rng.random(big.size)) * rng.choice([-1.0, 1.0], big.size) * 2.0**hi
        else:
            # cancellation of a large pair (FPRev's probe): the small terms added before the pair
            # meets are lost, those after survive, so the order shows
            x = rng.standard_normal(k) * 2.0**(lo + 2)
            i0, j0 = rng.choice(k, size=2, replace=False) if k > 1 else (0, 0)
            big = (1 + rng.random()) * 2.0**hi
            x[i0], x[j0] = big, -big
        rows.append(round_to(x, in_fmt))
    return np.array(rows, dtype=np.float64)


def probes(platform: str, *, op: str = "matmul", in_fmt: str = "bf16", out: str = "fp32", m: int = 64, n: int = 64,
           k: int = 512, seed: int = 0, candidates: Mapping[str, str] | None = None) -> Probes:
    """Probe inputs for ``platform``'s matmul unknowns: A [m, k] and B [k, n] drawn from families
    that stress alignment, rounding direction, order and product rounding (k crosses several
    128-row tiles), with every candidate's expected result and a check that no two candidates
    give the same D on them (``indistinct`` lists any that do). For Trainium platforms the NKI
    kernel that runs them through nc_matmul into PSUM comes with it.

    ``op="sum"``: x [m, k] rows summed along k (``a`` holds x, ``b`` is None; ``out`` is in_fmt),
    for the order of Vector-engine reductions; its NKI kernel runs nisa.tensor_reduce.

    ``platform``: a name of ``numeq.platforms()`` with assumptions (or give ``candidates``,
    {label: platform variant name}; default: ``numeq.assumption_candidates(platform, ...)``); ``op``:
    "matmul" or "sum"; ``in_fmt``, ``out``: names of ``numeq.formats()``; ``m``, ``n``, ``k``: the
    shapes; ``seed``: the random generator's seed (the same seed gives the same probes).

    Example::

        >>> orders = numeq.assumption_candidates("trainium.trn2", names=["pe_order"])
        >>> p = numeq.probes("trainium.trn2", m=16, n=16, k=512, seed=1, candidates=orders)
        >>> p.a.shape, p.b.shape, list(p.candidates), p.indistinct
        ((16, 512), (512, 16), ['pe_order=sequential', 'pe_order=pairwise', 'pe_order=fused'], [])
    """
    for value, parameter in ((platform, "platform"), (op, "op"), (in_fmt, "in_fmt"), (out, "out")):
        _check_str(value, parameter)
    if op not in ("sum", "matmul"):
        raise ValueError(f"op: probes are built for sum and matmul; got {op!r}")
    _check_format(in_fmt, "in_fmt")
    _check_format(out, "out")
    base = platform.split("[", 1)[0].strip()
    if base not in platform_names():
        raise ValueError(f"platform: unknown platform {base!r}; valid: {', '.join(platform_names())}")
    if op == "sum":
        out = in_fmt
    m, n, k = (_check_int(value, parameter, 1, SIZE[1]) for value, parameter in ((m, "m"), (n, "n"), (k, "k")))
    seed = _check_int(seed, "seed", *UINT64)
    if m > 128 or n > 512:
        raise ValueError(f"m, n: one PSUM tile holds at most 128 x 512 results (nc_matmul limits); got {m} x {n}")
    cands = (dict(candidates) if candidates is not None
             else assumption_candidates(platform, op=op, in_fmt=in_fmt, out=out))
    if (m + n) * k > SIZE[1] // 8:
        raise MemoryError(f"m, n, k: probes of {m} x {k} and {k} x {n} hold more values than any memory")
    rng = np.random.default_rng(seed)
    try:
        a = _probe_pool(rng, in_fmt, k, m)
    except MemoryError:
        raise MemoryError(f"m, n, k: probes of {m} x {k} and {k} x {n} need more memory than this machine "
                          "has") from None
    if op == "sum":
        b = None
        expected = {label: sum_(a, axis=-1, platform=variant, fmt=in_fmt) for label, variant in cands.items()}
    else:
        b = _probe_pool(rng, in_fmt, k, n).T.copy()
        expected = {label: matmul(a, b, platform=variant, in_fmt=in_fmt, out=out) for label, variant in cands.items()}
    keys = {label: np.where(np.isnan(v), np.inf, v).tobytes() for label, v in expected.items()}
    labels = list(cands)
    indistinct = [(x, y) for i, x in enumerate(labels) for y in labels[i + 1:] if keys[x] == keys[y]]
    kernel = None
    base = platform.split("[", 1)[0].strip()
    if base.startswith("trainium.") or base.startswith("neuron."):
        if in_fmt not in _NKI_DTYPES:
            raise ValueError(f"in_fmt: nc_matmul takes {', '.join(_NKI_DTYPES)}; got {in_fmt!r}")
        if op == "sum":
            kernel = _NKI_SUM_KERNEL.format(platform=base, in_fmt=in_fmt, nki_dtype=_NKI_DTYPES[in_fmt])
        else:
            if k % 128:
                raise ValueError(f"k: the probe kernel contracts whole 128-row tiles; {k} is not a multiple of 128")
            kernel = _NKI_KERNEL.format(platform=base, in_fmt=in_fmt, tile=128, nki_dtype=_NKI_DTYPES[in_fmt])
    return Probes(platform, in_fmt, out, a, b, cands, expected, indistinct, kernel)


def fit(*args: Any, **kwargs: Any) -> FitResult:
    """Deprecated name of ``numeq.fit_platform`` (one release): "fit" also meant fitting a
    tolerance form (``numeq.tolerances.fit_tolerance``). Warns, then calls ``fit_platform``."""
    warnings.warn("numeq.fit is deprecated: use numeq.fit_platform (the same function)", DeprecationWarning,
                  stacklevel=2)
    return fit_platform(*args, **kwargs)


fit.__deprecated_name_of__ = "fit_platform"  # type: ignore[attr-defined]
