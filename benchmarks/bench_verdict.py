#!/usr/bin/env python3
"""Acceptance of the verdict ladder (numeq.compare): false alarms on correct outputs and detection
of planted bugs, in one script.

    python benchmarks/bench_verdict.py [--elements 10000000] [--quick] [--seed 0]

1. False alarms. For every platform, every catalogue op it supports, every input generator, and
   for Trainium every assumption variant: the platform's emulation (the output a correct device
   gives) judged by numeq.compare against that platform. A variant's output is judged against the
   variant itself and, separately, against the default platform (tier ``variant`` or
   ``bit_exact``, never a failure). A false alarm is any verdict that does not pass; there must be
   none. Combinations numeq refuses with its documented errors (no plan for a format, ...) are
   counted as skipped. Sizes grow until about --elements output elements are checked in all.
2. Planted bugs. The wrong outputs of numeq.bugs on the inputs of catalogue problems
   (numeq.catalogue.build: a bf16 accumulator inside an fp8 or a bf16 GEMM and inside a sum, a
   dropped K tile, a transposed operand, a wrong fp8 scale, softmax without max subtraction,
   one-pass variance layernorm, flash attention without rescaling, a missing output cast), each on
   every platform it applies to, over several seeds: the fraction of checks that
   fail at accept="probabilistic" (the default; every bug must be caught) and at
   accept="deterministic", and the tiers the verdicts report. Any bug not caught prints a FAIL line.

Tables are Markdown. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import numeq
from numeq.verdicts import TIERS

Op = numeq.ops.Op


def _gen(generator: str, shape: tuple[int, ...], fmt: str, seed: int, scale: float = 1.0) -> np.ndarray:
    return numeq.ops.generate(generator, shape, fmt, seed=seed, scale=scale)


def _refused(exc: Exception) -> bool:
    """numeq's documented refusals: a ValueError or NotImplementedError naming what the platform
    lacks (no plan for a format, no model of an op). Anything else is a bug of the harness."""
    return isinstance(exc, (ValueError, NotImplementedError))


# ---------------------------------------------------------------------------------------------
# The catalogue: each entry builds an Op of about `n` output elements from one generator.
# ---------------------------------------------------------------------------------------------
def _matmul(fmt: str, k: int = 256, cols: int = 64) -> Callable[[str, int, int], Op]:
    def build(generator: str, n: int, seed: int) -> Op:
        a = _gen(generator, (max(1, n // cols), k), fmt, seed)
        b = _gen(generator, (k, cols), fmt, seed + 1)
        return numeq.ops.matmul(a, b, in_fmt=fmt, out="fp32")
    return build


def _scaled_fp8(generator: str, n: int, seed: int) -> Op:
    k, cols = 256, 64
    a = _gen(generator, (max(1, n // cols), k), "e4m3fn", seed)
    b = _gen(generator, (k, cols), "e4m3fn", seed + 1)
    return numeq.ops.scaled_fp8_matmul(a, b, 0.5, 0.125, in_fmt="e4m3fn", out="fp32")


def _int8_codes(generator: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    # int8 codes: the generator's values (scaled by 16) rounded to integers and clamped into int8.
    x = np.nan_to_num(_gen(generator, shape, "fp32", seed, 16.0), nan=0.0, posinf=127, neginf=-128)
    return np.clip(np.rint(x), -128, 127).astype(np.int8)


def _int8(generator: str, n: int, seed: int) -> Op:
    k, cols = 256, 64
    return numeq.ops.int8_matmul(_int8_codes(generator, (max(1, n // cols), k), seed),
                                 _int8_codes(generator, (k, cols), seed + 1))


def _reduction(make: Callable[..., Op], width: int = 256) -> Callable[[str, int, int], Op]:
    def build(generator: str, n: int, seed: int) -> Op:
        return make(_gen(generator, (max(1, n), width), "bf16", seed), in_fmt="bf16", out="fp32")
    return build


def _rowwise(make: Callable[..., Op], width: int) -> Callable[[str, int, int], Op]:
    def build(generator: str, n: int, seed: int) -> Op:
        return make(_gen(generator, (max(1, n // width), width), "bf16", seed), in_fmt="bf16")
    return build


def _elementwise(name: str) -> Callable[[str, int, int], Op]:
    def build(generator: str, n: int, seed: int) -> Op:
        return numeq.ops.function(name, _gen(generator, (max(1, n),), "bf16", seed), in_fmt="bf16")
    return build


def _attention(generator: str, n: int, seed: int) -> Op:
    length, d = 128, 64
    shape = (max(1, n // (length * d)), length, d)
    q, k, v = (_gen(generator, shape, "bf16", seed + i) for i in range(3))
    return numeq.ops.attention(q, k, v, in_fmt="bf16", variant="flash")


CATALOGUE: dict[str, Callable[[str, int, int], Op]] = {
    "matmul bf16": _matmul("bf16"),
    "matmul fp16": _matmul("fp16"),
    "matmul fp32": _matmul("fp32"),
    "matmul e4m3fn": _matmul("e4m3fn"),
    "scaled_fp8_matmul": _scaled_fp8,
    "int8_matmul": _int8,
    "sum": _reduction(numeq.ops.sum),
    "mean": _reduction(numeq.ops.mean),
    "softmax": _rowwise(numeq.ops.softmax, 256),
    "log_softmax": _rowwise(numeq.ops.log_softmax, 256),
    "layernorm": _rowwise(numeq.ops.layernorm, 512),
    "rmsnorm": _rowwise(numeq.ops.rmsnorm, 512),
    "gelu": _elementwise("gelu"),
    "silu": _elementwise("silu"),
    "exp": _elementwise("exp"),
    "attention": _attention,
}


def assumption_variants(platform: str) -> list[str]:
    """Every single-assumption variant of a platform: each non-default alternative of each
    assumption, in the platform string syntax ("trainium.trn2[pe_order=pairwise]")."""
    return [f"{platform}[{a['name']}={alt}]" for a in numeq.platform_assumptions(platform)
            for alt in a["alternatives"] if alt != a["value"]]


# ---------------------------------------------------------------------------------------------
# Part 1: false alarms
# ---------------------------------------------------------------------------------------------
class Tally:
    """Per platform: elements and checks judged, false alarms (with their messages), tiers,
    skipped combinations."""

    def __init__(self) -> None:
        self.elements = self.checks = self.skipped = 0
        self.tiers: Counter[str] = Counter()
        self.alarms: list[str] = []
        self.variant_checks = 0

    def add(self, verdict: numeq.Verdict, what: str, *, expect: tuple[str, ...] = ()) -> None:
        self.checks += 1
        self.elements += verdict.elements
        self.tiers[verdict.tier] += 1
        if not verdict.passed or (expect and verdict.tier not in expect):
            self.alarms.append(f"FALSE ALARM {what}: tier {verdict.tier}, passed {verdict.passed}\n{verdict}")

    def merge(self, other: Tally) -> None:
        self.elements += other.elements
        self.checks += other.checks
        self.variant_checks += other.variant_checks
        self.skipped += other.skipped
        self.tiers.update(other.tiers)
        self.alarms += other.alarms


def false_alarms(elements: int, seed: int, generators: list[str], platforms: list[str],
                 log: Callable[[str], None]) -> dict[str, Tally]:
    tallies = {p: Tally() for p in platforms}
    variants = {p: assumption_variants(p) for p in platforms if p.startswith("trainium.")}
    n = max(64, elements // (len(platforms) * len(CATALOGUE) * len(generators)))
    for op_name, build in CATALOGUE.items():
        for g, generator in enumerate(generators):
            op = build(generator, n, seed + 1000 * g)
            for platform in platforms:
                tally = tallies[platform]
                where = f"{op_name} / {generator} on {platform}"
                try:
                    output = op.emulate(platform)
                except Exception as exc:  # noqa: BLE001 - only numeq's refusals are skipped
                    if not _refused(exc):
                        raise
                    tally.skipped += 1
                    continue
                tally.add(numeq.compare(output, op, platform), where, expect=("bit_exact",))
                for variant in variants.get(platform, []):
                    try:
                        v_out = op.emulate(variant)
                    except Exception as exc:  # noqa: BLE001
                        if not _refused(exc):
                            raise
                        tally.skipped += 1
                        continue
                    tally.variant_checks += 2
                    tally.add(numeq.compare(v_out, op, variant), f"{where}: {variant} against itself",
                              expect=("bit_exact",))
                    tally.add(numeq.compare(v_out, op, platform), f"{where}: {variant} against {platform}",
                              expect=("bit_exact", "variant"))
            log(f"  {op_name} / {generator}: done")
    return tallies


FULL_ALARMS = 3


def print_false_alarms(tallies: dict[str, Tally]) -> int:
    tiers = TIERS
    print("\n## False alarms: correct outputs (each platform's emulation) judged by numeq.compare\n")
    print("| platform | elements | checks | variant checks | skipped | false alarms | "
          + " | ".join(tiers) + " |")
    print("|---|---:|---:|---:|---:|---:|" + "---:|" * len(tiers))
    total = Tally()
    for platform, t in tallies.items():
        print(f"| {platform} | {t.elements} | {t.checks} | {t.variant_checks} | {t.skipped} | {len(t.alarms)} | "
              + " | ".join(str(t.tiers[x]) for x in tiers) + " |")
        total.merge(t)
    print(f"| **total** | {total.elements} | {total.checks} | {total.variant_checks} | {total.skipped} | "
          f"{len(total.alarms)} | " + " | ".join(str(total.tiers[x]) for x in tiers) + " |")
    # Every alarm in two lines (where, and the verdict's first line); the full verdict of the first few.
    for i, alarm in enumerate(total.alarms):
        print("\n" + ("\n".join(alarm.splitlines()[:2]) if i >= FULL_ALARMS else alarm))
    print(f"\nfalse alarms: {len(total.alarms)} in {total.checks} checks of {total.elements} elements")
    return len(total.alarms)


# ---------------------------------------------------------------------------------------------
# Part 2: planted bugs: numeq.bugs on catalogue problems (numeq.catalogue.build's inputs). A bug
# that does not apply on a platform (no plan for its format, no model of the op) is skipped there.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Planted:
    """One row group of the table: ``bug`` (a numeq.bugs name) planted in the catalogue ``op`` of
    reduction length ``k``, on the first of ``formats`` it applies to on the platform (output
    ``out``, default the catalogue's), with inputs of ``generators`` (cycled over the seeds);
    ``offset`` is added to the inputs (a layernorm's large mean); ``shape(rows, k)`` the other
    dimensions."""

    bug: str
    op: str
    formats: tuple[str, ...]
    k: int
    shape: Callable[[int, int], tuple[int, ...]]
    generators: tuple[str, ...] = ("normal",)
    out: str | None = None
    offset: float = 0.0

    def problems(self, rows: int, k: int | None = None) -> list[numeq.catalogue.Problem]:
        k = self.k if k is None else k
        return [numeq.catalogue.Problem(self.op, f, self.out or numeq.catalogue.out_for(self.op, f), k,
                                        self.shape(rows, k)) for f in self.formats]


_GEMM_FORMATS = ("bf16", "fp16", "e4m3fn", "fp32")  # the first a platform has a matmul -> fp32 for


def _gemm(rows: int, k: int) -> tuple[int, int]:
    return (rows, 64)


# label -> (what is planted, rows per check (times the scale); every platform it applies to is checked)
BUGS: dict[str, tuple[Planted, int]] = {
    "bf16 accumulator in fp8 GEMM (K=1024)": (Planted("bf16_accumulator", "matmul", ("e4m3fn",), 1024, _gemm), 64),
    "bf16 accumulator in bf16 GEMM (K=1024)": (Planted("bf16_accumulator", "matmul", ("bf16",), 1024, _gemm), 64),
    "bf16 accumulator in sum (K=1024)": (Planted("bf16_sum_accumulator", "sum", ("bf16",), 1024,
                                                 lambda rows, k: (rows,)), 64),
    "dropped K tile (last 128 of 512)": (Planted("dropped_k_tile", "matmul", _GEMM_FORMATS, 512, _gemm), 64),
    "transposed operand (square b)": (Planted("transposed_operand", "matmul", _GEMM_FORMATS, 256,
                                              lambda rows, k: (rows, k)), 64),
    "wrong fp8 scale (scale_a x2)": (Planted("wrong_fp8_scale", "scaled_fp8_matmul", ("e4m3fn",), 256, _gemm), 64),
    # lognormal rows hold a few values whose exp overflows fp32 (e^{1.5 z} > 88.7 for z > 3), near_overflow all
    "softmax without max subtraction": (Planted("softmax_without_max", "softmax", ("bf16",), 256, lambda rows, k: (rows,),
                                                ("lognormal", "near_overflow")), 64),
    # mean 1000 against a spread of 1: E[x^2] - E[x]^2 cancels in fp32 (no catalogue generator draws this)
    "one-pass variance layernorm": (Planted("one_pass_variance", "layernorm", ("fp32",), 512, lambda rows, k: (rows,),
                                            offset=1000.0), 16),
    "flash attention without rescale": (Planted("flash_without_rescale", "attention", ("bf16",), 256,
                                                lambda rows, k: (max(1, rows // k), k, 64)), 256),
    "missing output cast (fp32 for bf16)": (Planted("missing_output_cast", "softmax", ("bf16",), 256,
                                                    lambda rows, k: (rows,)), 64),
}


def _offset(built: numeq.catalogue.Built, problem: numeq.catalogue.Problem, offset: float) -> numeq.catalogue.Built:
    """``built`` with ``offset`` added to its (layernorm) input, rounded into the input format."""
    x = numeq.round(built.inputs["x"] + offset, problem.in_fmt)
    op = numeq.ops.layernorm(x, in_fmt=problem.in_fmt, out=problem.out, eps=built.params["eps"])
    return numeq.catalogue.Built(op, {"x": x}, built.params)


def planted(label: str, platform: str, rows: int, seed: int, k: int | None = None) -> tuple[Op, np.ndarray]:
    """(the correct op, the buggy output) of the table's row ``label`` on ``platform``: ``rows`` rows,
    catalogue inputs of ``seed`` (the generator cycled by seed), K = ``k`` (default the row's). A
    ValueError where the bug does not apply on the platform."""
    spec, _ = BUGS[label]
    bug = numeq.bugs.by_name(spec.bug)
    problems = spec.problems(rows, k)
    problem = next((p for p in problems if bug.applies(p, platform)), None)
    if problem is None:
        raise ValueError(f"{spec.bug} on {platform}: {bug.why_not(problems[0], platform)}")
    built = numeq.catalogue.build(problem, spec.generators[seed % len(spec.generators)], seed)
    if spec.offset:
        built = _offset(built, problem, spec.offset)
    return built.op, bug.output(built, problem, platform)


NOT_IN_FORMAT = "not values of the output format"


@dataclass
class BugRow:
    bug: str
    platform: str
    elements: int = 0
    checks: int = 0
    failed: int = 0
    failed_deterministic: int = 0
    tiers: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)


def planted_bugs(seeds: int, scale: int, seed: int, platforms: list[str],
                 log: Callable[[str], None]) -> tuple[list[BugRow], dict[str, list[str]]]:
    rows: list[BugRow] = []
    skipped: dict[str, list[str]] = defaultdict(list)
    for name, (_, base_rows) in BUGS.items():
        for platform in platforms:
            row = BugRow(name, platform)
            for s in range(seeds):
                try:
                    op, wrong = planted(name, platform, base_rows * scale, seed + 7 * s)
                except Exception as exc:  # noqa: BLE001 - only numeq's refusals are skipped
                    if not _refused(exc):
                        raise
                    skipped[name].append(platform)
                    break
                v = numeq.compare(wrong, op, platform)
                # The tier does not depend on accept (passed is tier >= accept): at accept="deterministic"
                # a check fails exactly when the tier is a violation; one search of the variants serves both.
                row.checks += 1
                row.elements += v.elements
                row.failed += not v.passed
                row.failed_deterministic += v.tier == "violation"
                row.tiers[v.tier] += 1
                if name.startswith("missing output cast") and NOT_IN_FORMAT not in v.diagnosis:
                    row.notes.append(f"diagnosis does not say the values are not in the output format: {v.diagnosis}")
                if v.passed:
                    row.notes.append(f"not caught (seed {seed + 7 * s}):\n{v}")
            if row.checks:
                rows.append(row)
                log(f"    {platform}: {row.failed} of {row.checks} fail, tiers {dict(row.tiers)}")
        log(f"  {name}: done")
    return rows, skipped


def print_planted_bugs(rows: list[BugRow], skipped: dict[str, list[str]]) -> int:
    print("\n## Planted bugs: wrong outputs from the correct inputs\n")
    print("| bug | platform | elements | checks | fail rate (probabilistic) | fail rate (deterministic) | tiers |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        tiers = ", ".join(f"{t} {c}" for t, c in sorted(r.tiers.items(), key=lambda kv: TIERS.index(kv[0])))
        print(f"| {r.bug} | {r.platform} | {r.elements} | {r.checks} | {r.failed / r.checks:.2f} | "
              f"{r.failed_deterministic / r.checks:.2f} | {tiers} |")
    for name, platforms in skipped.items():
        print(f"\n{name}: not applicable on {', '.join(platforms)}")
    uncaught = 0
    for r in rows:
        if r.failed < r.checks or r.notes:
            uncaught += 1
            print(f"\nFAIL: {r.bug} on {r.platform}: caught in {r.failed} of {r.checks} checks at "
                  f"accept='probabilistic'")
            for note in r.notes[:1]:
                print(note)
    print(f"\nplanted bugs not caught: {uncaught} of {len(rows)} (bug, platform) pairs")
    return uncaught


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=10**7,
                        help="target total output elements of the false-alarm sweep (default 10^7)")
    parser.add_argument("--quick", action="store_true",
                        help="a small run: 2 generators, 1e5 elements, 2 seeds per bug")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="progress lines on stderr")
    args = parser.parse_args(argv)
    generators = numeq.ops.generators()
    elements, seeds, scale = args.elements, 4, 4
    if args.quick:
        generators, elements, seeds, scale = ["normal", "near_overflow"], min(elements, 10**5), 2, 1
    platforms = numeq.platforms()

    def log(text: str) -> None:
        if args.verbose:
            print(text, file=sys.stderr, flush=True)

    print(f"numeq {numeq.__version__}, numpy {np.__version__}; seed {args.seed}; platforms {len(platforms)}, "
          f"ops {len(CATALOGUE)}, generators {len(generators)} ({', '.join(generators)}); target elements {elements}")
    alarms = print_false_alarms(false_alarms(elements, args.seed, generators, platforms, log))
    uncaught = print_planted_bugs(*planted_bugs(seeds, scale, args.seed, platforms, log))
    print(f"\nsummary: false alarms {alarms}, planted bugs not caught {uncaught}")
    return 1 if alarms or uncaught else 0


if __name__ == "__main__":
    sys.exit(main())
