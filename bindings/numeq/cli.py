"""The numeq command line.

    numeq formats [--as markdown|csv|json]   every format's parameters, extremes and encodings
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys

from . import _core


def _hex(value: int | None, storage_bits: int) -> str:
    if value is None:
        return "-"
    return f"0x{value:0{storage_bits // 4}X}"


def format_rows() -> list[dict[str, object]]:
    """One row per format: parameters, extreme values, special encodings."""
    rows = []
    for name in _core.formats():
        info = dict(_core.format_info(name))
        sb = info["storage_bits"]
        if info["kind"] == "integer":
            rows.append({"format": name, "kind": "integer", "bits": info["bits"], "signed": info["signed"],
                         "min": info["min"], "max": info["max"]})
            continue
        rows.append({
            "format": name,
            "kind": "floating",
            "bits": info["bits"],
            "storage_bits": sb,
            "exponent_bits": info["exponent_bits"],
            "mantissa_bits": info["mantissa_bits"],
            "bias": info["bias"],
            "specials": info["specials"],
            "max": info["max"],
            "min_normal": info["min_normal"],
            "min_subnormal": info["min_subnormal"] if info["has_subnormals"] else None,
            "epsilon": info["epsilon"],
            "unit_roundoff": info["unit_roundoff"],
            "max_bits": _hex(info["max_bits"], sb),
            "inf_bits": _hex(info["inf_bits"], sb),
            "nan_bits": _hex(info["nan_bits"], sb),
            "negative_zero": info["has_negative_zero"],
        })
    return rows


_COLUMNS = ["format", "bits", "exponent_bits", "mantissa_bits", "bias", "specials", "max", "min_normal",
            "min_subnormal", "epsilon", "max_bits", "inf_bits", "nan_bits", "negative_zero"]
_HEADERS = ["format", "bits", "e", "m", "bias", "specials", "max finite", "min normal", "min subnormal",
            "epsilon", "max enc.", "+Inf enc.", "NaN enc.", "-0"]


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.8g}"
    return str(value)


def render_markdown(rows: list[dict[str, object]]) -> str:
    floating = [r for r in rows if r["kind"] == "floating"]
    integers = [r for r in rows if r["kind"] == "integer"]
    lines = ["| " + " | ".join(_HEADERS) + " |", "|" + "---|" * len(_HEADERS)]
    for r in floating:
        lines.append("| " + " | ".join(_cell(r.get(c)) for c in _COLUMNS) + " |")
    lines += ["", "| format | bits | signed | min | max |", "|---|---|---|---|---|"]
    for r in integers:
        lines.append(f"| {r['format']} | {r['bits']} | {_cell(r['signed'])} | {r['min']} | {r['max']} |")
    lines += ["", "specials: ieee = IEEE 754 Inf/NaN; fn = no Inf, all-ones NaN (OFP8 E4M3); "
              "fnuz = no Inf, no -0, NaN at 0x80; finite = no Inf, no NaN (OCP MX FP6/FP4). "
              "tf32 patterns are fp32 patterns whose 13 low bits are zero."]
    return "\n".join(lines) + "\n"


def render_csv(rows: list[dict[str, object]]) -> str:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in keys})
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="numeq", description="numeq: numerical equivalence harness")
    sub = parser.add_subparsers(dest="command", metavar="command")
    fmt = sub.add_parser("formats", help="table of every format's parameters, extreme values and encodings")
    fmt.add_argument("--as", dest="style", choices=["markdown", "csv", "json"], default="markdown")
    plat = sub.add_parser("platforms", help="the platforms; with a name, every parameter's evidence and every "
                                            "assumption in force")
    plat.add_argument("name", nargs="?", help='a platform, e.g. nvidia.h100 or "trainium.trn1[products=bf16]"')
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "formats":
        rows = format_rows()
        if args.style == "json":
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        elif args.style == "csv":
            sys.stdout.write(render_csv(rows))
        else:
            sys.stdout.write(render_markdown(rows))
    if args.command == "platforms":
        from .platforms import platform_evidence, platform_json, platforms

        if args.name is None:
            for name in platforms():
                info = json.loads(platform_json(name))
                assumed = len(info.get("assumptions", []))
                note = f" ({assumed} assumptions)" if assumed else ""
                sys.stdout.write(f"{name:28} {info.get('description', '')}{note}\n")
            return 0
        try:
            report = platform_evidence(args.name)
        except ValueError as e:
            sys.stderr.write(f"numeq platforms: {e}\n")
            return 2
        sys.stdout.write(f"{json.loads(platform_json(args.name))['name']}\n{report}")
    return 0
