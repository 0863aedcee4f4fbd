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
2. Planted bugs. Wrong outputs built from the correct inputs (a bf16 accumulator inside an fp8 or
   a bf16 GEMM, a dropped K tile, a transposed operand, a wrong fp8 scale, softmax without max
   subtraction, one-pass variance layernorm, flash attention without rescaling, a missing output
   cast), each on every platform it applies to, over several seeds: the fraction of checks that
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
from numeq.compare import TIERS

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
# Part 2: planted bugs. Each bug builds (op, wrong output) for a platform from correct inputs, or
# raises one of numeq's refusals where the platform lacks what the bug needs.
# ---------------------------------------------------------------------------------------------
def bf16_accumulator(plan: dict) -> dict:
    """A GEMM plan whose accumulator is bf16: every accumulator cast in fp32 (a sequential
    reduction's accumulate format, a fused node's c format) becomes bf16, and a fused node's
    result (the accumulator it writes back: fp32, or e8m13 on Hopper's fp8 path) is cast into
    bf16. The plan's final output cast is kept."""
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


def _gemm_format(platform: str, formats: tuple[str, ...] = ("bf16", "fp16", "e4m3fn", "fp32")) -> str:
    """The first of ``formats`` the platform has a matmul -> fp32 plan for."""
    for fmt in formats:
        try:
            numeq.plan(platform, op="matmul", in_fmt=fmt, out="fp32")
            return fmt
        except ValueError:
            continue
    raise ValueError(f"platform {platform} has no matmul -> fp32 for any of {', '.join(formats)}")


def _accumulator_bug(fmt: str, k: int) -> Callable[[str, int, int], tuple[Op, np.ndarray]]:
    def bug(platform: str, rows: int, seed: int) -> tuple[Op, np.ndarray]:
        a = _gen("normal", (rows, k), fmt, seed)
        b = _gen("normal", (k, 64), fmt, seed + 1)
        plan = bf16_accumulator(numeq.plan(platform, op="matmul", in_fmt=fmt, out="fp32").to_dict())
        return numeq.ops.matmul(a, b, in_fmt=fmt, out="fp32"), numeq.matmul(a, b, plan=plan, in_fmt=fmt)
    return bug


def dropped_k_tile(platform: str, rows: int, seed: int) -> tuple[Op, np.ndarray]:
    """The last 128 of K never accumulated: the platform's own GEMM of the first K - 128."""
    fmt, k = _gemm_format(platform), 512
    a = _gen("normal", (rows, k), fmt, seed)
    b = _gen("normal", (k, 64), fmt, seed + 1)
    wrong = numeq.matmul(a[:, :k - 128], b[:k - 128], platform=platform, in_fmt=fmt)
    return numeq.ops.matmul(a, b, in_fmt=fmt, out="fp32"), wrong


def transposed_operand(platform: str, rows: int, seed: int) -> tuple[Op, np.ndarray]:
    """A square b read transposed: the platform's own GEMM of a @ b.T."""
    fmt, k = _gemm_format(platform), 256
    a = _gen("normal", (rows, k), fmt, seed)
    b = _gen("normal", (k, k), fmt, seed + 1)
    wrong = numeq.matmul(a, np.ascontiguousarray(b.T), platform=platform, in_fmt=fmt)
    return numeq.ops.matmul(a, b, in_fmt=fmt, out="fp32"), wrong


def wrong_fp8_scale(platform: str, rows: int, seed: int) -> tuple[Op, np.ndarray]:
    """scale_a off by 2x: the platform's own scaled fp8 GEMM with the doubled scale."""
    a = _gen("normal", (rows, 256), "e4m3fn", seed)
    b = _gen("normal", (256, 64), "e4m3fn", seed + 1)
    op = numeq.ops.scaled_fp8_matmul(a, b, 0.5, 0.125, in_fmt="e4m3fn", out="fp32")
    return op, numeq.ops.scaled_fp8_matmul(a, b, 1.0, 0.125, in_fmt="e4m3fn", out="fp32").emulate(platform)


def _bf16_values(x: np.ndarray) -> np.ndarray:
    return numeq.round(np.asarray(x, dtype=np.float64), "bf16")


def softmax_without_max(platform: str, rows: int, seed: int) -> tuple[Op, np.ndarray]:
    """exp(x) / sum(exp(x)) in float32 with no max subtracted, on inputs whose exp overflows
    float32 (normal values scaled by 40; every other seed the near-overflow generator)."""
    generator, scale = ("normal", 40.0) if seed % 2 == 0 else ("near_overflow", 1.0)
    x = _gen(generator, (rows, 256), "bf16", seed, scale)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x.astype(np.float32))
        wrong = e / e.sum(axis=-1, keepdims=True, dtype=np.float32)
    op = numeq.ops.softmax(x, in_fmt="bf16", out="bf16")
    op.emulate(platform)  # a platform without a softmax model refuses here
    return op, _bf16_values(wrong)


def one_pass_layernorm(platform: str, rows: int, seed: int) -> tuple[Op, np.ndarray]:
    """Variance as E[x^2] - E[x]^2 in float32 on data of mean 1000 and spread 1."""
    x = numeq.round(_gen("normal", (rows, 512), "fp32", seed) + 1000.0, "fp32")
    x32 = x.astype(np.float32)
    mean = x32.mean(axis=-1, keepdims=True, dtype=np.float32)
    var = (x32 * x32).mean(axis=-1, keepdims=True, dtype=np.float32) - mean * mean
    with np.errstate(invalid="ignore", divide="ignore"):
        wrong = (x32 - mean) / np.sqrt(var + np.float32(1e-5))
    op = numeq.ops.layernorm(x, in_fmt="fp32", out="fp32")
    op.emulate(platform)
    return op, wrong.astype(np.float64)


def flash_without_rescale(platform: str, rows: int, seed: int, block: int = 64,
                          length: int = 256) -> tuple[Op, np.ndarray]:
    """Blockwise attention in float32 whose running sum is never rescaled when the running max
    grows (the output accumulator is); P cast to bf16 before P V, as the op's flash variant."""
    d = 64
    q, k, v = (_gen("normal", (max(1, rows // length), length, d), "bf16", seed + i) for i in range(3))
    scale = np.float32(1.0 / np.sqrt(d))
    q32, k32, v32 = q.astype(np.float32), k.astype(np.float32), v.astype(np.float32)
    m = np.full(q.shape[:-1] + (1,), -np.inf, dtype=np.float32)
    total = np.zeros(q.shape[:-1] + (1,), dtype=np.float32)
    acc = np.zeros(q.shape[:-1] + (d,), dtype=np.float32)
    for j in range(0, length, block):
        s = (q32 @ np.swapaxes(k32[..., j:j + block, :], -1, -2)) * scale
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        p = np.exp(s - m_new)
        acc = acc * np.exp(m - m_new) + _bf16_values(p).astype(np.float32) @ v32[..., j:j + block, :]
        total = total + p.sum(axis=-1, keepdims=True, dtype=np.float32)  # the bug: no * exp(m - m_new)
        m = m_new
    op = numeq.ops.attention(q, k, v, in_fmt="bf16", out="bf16", variant="flash", block_rows=block, block_cols=block)
    op.emulate(platform)
    return op, _bf16_values(acc / total)


def missing_output_cast(platform: str, rows: int, seed: int) -> tuple[Op, np.ndarray]:
    """A bf16 -> bf16 softmax whose output is left in fp32: the platform's fp32-out result."""
    x = _gen("normal", (rows, 256), "bf16", seed)
    op = numeq.ops.softmax(x, in_fmt="bf16", out="bf16")
    op.emulate(platform)
    return op, numeq.ops.softmax(x, in_fmt="bf16", out="fp32").emulate(platform)


# name -> (builder, rows per check (times the scale); every platform that does not refuse the bug is checked)
BUGS: dict[str, tuple[Callable[[str, int, int], tuple[Op, np.ndarray]], int]] = {
    "bf16 accumulator in fp8 GEMM (K=1024)": (_accumulator_bug("e4m3fn", 1024), 64),
    "bf16 accumulator in bf16 GEMM (K=1024)": (_accumulator_bug("bf16", 1024), 64),
    "dropped K tile (last 128 of 512)": (dropped_k_tile, 64),
    "transposed operand (square b)": (transposed_operand, 64),
    "wrong fp8 scale (scale_a x2)": (wrong_fp8_scale, 64),
    "softmax without max subtraction": (softmax_without_max, 64),
    "one-pass variance layernorm": (one_pass_layernorm, 16),
    "flash attention without rescale": (flash_without_rescale, 256),
    "missing output cast (fp32 for bf16)": (missing_output_cast, 64),
}

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
    for name, (build, base_rows) in BUGS.items():
        for platform in platforms:
            row = BugRow(name, platform)
            for s in range(seeds):
                try:
                    op, wrong = build(platform, base_rows * scale, seed + 7 * s)
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
