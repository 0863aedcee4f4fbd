"""The numeq command line.

    numeq tolerances [options]               the tolerance table over the catalogue (reports/)
    numeq formats [--as markdown|csv|json]   every format's parameters, extremes and encodings
    numeq platforms [NAME]                   the platforms, or one platform's evidence
    numeq review MANIFEST.toml               the rubric review of one CUDA-to-NKI port
    numeq nki run FILE.py::KERNEL [options]  one NKI kernel file run on numeq.nki (numeq.nki._cli)
"""

from __future__ import annotations

import argparse
import csv
import io
import importlib
import json
import sys
from typing import Any

from . import _core
from .nki.machine.targets import DEFAULT_TARGET


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


def _refuse(command: str, message: str) -> int:
    """The one way a subcommand refuses its arguments: ``numeq <command>: <message>`` on stderr, exit
    status 2."""
    sys.stderr.write(f"numeq {command}: {message}\n")
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="numeq", description="numeq: numerical equivalence harness")
    sub = parser.add_subparsers(dest="command", metavar="command")
    fmt = sub.add_parser("formats", help="table of every format's parameters, extreme values and encodings")
    fmt.add_argument("--as", dest="style", choices=["markdown", "csv", "json"], default="markdown")
    plat = sub.add_parser("platforms", help="the platforms; with a name, every parameter's evidence and every "
                                            "assumption in force")
    plat.add_argument("name", nargs="?", help='a platform, e.g. nvidia.h100 or "trainium.trn1[products=bf16]"')
    tol = sub.add_parser("tolerances", help="the tolerance table of the operation catalogue: bounds, observed errors, "
                                            "false alarms and planted-bug detection against torch's defaults and "
                                            "rtol=2e-2 (writes reports/ and prints Markdown)")
    _tolerance_arguments(tol)
    rev = sub.add_parser("review", help="a rubric review of one CUDA-to-NKI port from its TOML manifest: "
                                        "correctness on the kernel's own plan, tiling and memory against the "
                                        "NeuronCore's limits, the performance claim against the evidence "
                                        "(writes review.md and review.html, prints the Markdown)")
    rev.add_argument("manifest", nargs="?", help="the review manifest (TOML; --schema prints its schema), or an NKI "
                                                 "kernel FILE.py::KERNEL to run and review (with --inputs and --op)")
    rev.add_argument("--inputs", default=None, metavar="IN.npz",
                     help="FILE.py::KERNEL: the arrays, by name: the op's inputs (a, b for matmul; x ...) and the "
                          "kernel's parameters")
    rev.add_argument("--op", default=None, help="FILE.py::KERNEL: the operation the kernel computes (matmul, softmax, ...)")
    rev.add_argument("--gpu", default="nvidia.h100", help="FILE.py::KERNEL: the GPU platform whose emulation is the "
                                                          "GPU output (default nvidia.h100)")
    rev.add_argument("--target", default=DEFAULT_TARGET, help="FILE.py::KERNEL: the NeuronCore target (trn2, trn1, inf2)")
    rev.add_argument("--dtype", metavar="NAME=DTYPE", action="append", default=[],
                     help="FILE.py::KERNEL: the input array NAME as DTYPE (bfloat16, float8_e4m3, ...): raw bytes (as "
                          "numpy stores ml_dtypes arrays in .npz) are reinterpreted; repeat for each array")
    rev.add_argument("--param", metavar="NAME=VALUE", action="append", default=[],
                     help="FILE.py::KERNEL: a parameter of the op (eps=1e-5, causal=true, scale=0.125, "
                          "variant=bn_stats: numeq.ops' keywords); repeat for each")
    rev.add_argument("--gpu-output", metavar="NAME", default=None,
                     help="FILE.py::KERNEL: the array in --inputs that is the CUDA kernel's real output (default: "
                          "the GPU platform's emulation)")
    rev.add_argument("--nki-output", metavar="NAME", default=None,
                     help="FILE.py::KERNEL: the array in --inputs that is the kernel's output from the device or "
                          "another simulator (compared bit for bit with numeq's run; it assesses the assumptions)")
    rev.add_argument("--reference", metavar="REF.py::FUNC", default=None,
                     help="FILE.py::KERNEL: your own function of what the kernel should compute (numpy, torch, ...), "
                          "called with the op's inputs by role as float64 keywords and the op's parameters it "
                          "names; the review judges numeq's op and the kernel's own math against it")
    rev.add_argument("--schema", action="store_true", help="print the manifest's schema (every table and key) and exit")
    rev.add_argument("--out", default=None, help="folder for review.md and review.html (default: review-<manifest "
                                                 "folder name> in the current folder)")
    rev.add_argument("--quiet", action="store_true", help="do not print the Markdown")
    rev.add_argument("--allow-outside", action="store_true",
                     help="let the manifest name files outside its folder (refused by default: a manifest comes "
                          "from the port's author)")
    nki = sub.add_parser("nki", help="NKI kernels on numeq.nki, the CPU model of the NeuronCore")
    nki_sub = nki.add_subparsers(dest="nki_command", metavar="command")
    from .nki import _cli as nki_cli

    nki_run = nki_sub.add_parser(
        "run", help="run one kernel of an NKI kernel file on the arrays of an .npz: findings, per-engine work, "
                    "platform and assumptions printed; outputs and trace written",
        description="Import FILE.py inside numeq.nki.installed(target=TARGET) (its `import nki` and "
                    "`import neuronxcc.nki` resolve to numeq) and run KERNEL on the arrays of --inputs, each "
                    "passed as the kernel parameter of its name. Prints every finding (where, severity, rule, "
                    "message, source), each engine's instructions, FLOPs, bytes and estimated cycles, the "
                    "op-level platform and every assumption. Exit status: 0 without error findings, 1 with "
                    "one (or when the kernel raises), 2 when numeq cannot run it (bad arguments, a missing "
                    "file or kernel, an NKI name numeq does not implement).")
    nki_cli.add_arguments(nki_run)
    args = parser.parse_args(argv)
    if args.command == "nki":
        if args.nki_command is None:
            nki.print_help()
            return 0
        return nki_cli.main(args)
    if args.command == "tolerances":
        return _tolerances(args, list(sys.argv[1:] if argv is None else argv))
    if args.command == "review":
        return _review(args)
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
        from .machines import platform_evidence, platform_json, platforms

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
            return _refuse("platforms", str(e))
        sys.stdout.write(f"{json.loads(platform_json(args.name))['name']}\n{report}")
    return 0


def _review(args: argparse.Namespace) -> int:
    """Exit status 0 when every assessed criterion passes, 1 when one fails, 2 on a manifest
    numeq cannot review."""
    from pathlib import Path

    from .review import review
    from .review.manifest import SCHEMA, ManifestError

    if args.schema:
        sys.stdout.write(SCHEMA)
        return 0
    if args.manifest is None:
        return _refuse("review", "give a manifest (TOML), or --schema for its schema")
    if "::" in args.manifest:
        return _review_kernel(args)
    if args.manifest.endswith(".py"):
        return _refuse("review", f"{args.manifest}: a kernel file: name the kernel as {args.manifest}::KERNEL "
                                 "(with --inputs IN.npz and --op OP), or give a review manifest (TOML)")
    if args.inputs is not None or args.op is not None or args.dtype or args.param or args.gpu_output or args.nki_output \
            or args.reference:
        return _refuse("review", "--inputs, --op, --dtype, --param, --gpu-output, --nki-output and --reference go with "
                                 "a kernel FILE.py::KERNEL; a manifest names its inputs, params and outputs itself")
    try:
        r = review(args.manifest, allow_outside=args.allow_outside)
    except ManifestError as e:
        return _refuse("review", str(e))
    where = Path(args.manifest).resolve()  # review-<folder> for a folder's manifest.toml, else review-<file>
    out = Path(args.out) if args.out else Path(f"review-{where.parent.name if where.stem == 'manifest' else where.stem}")
    return _written(r, out, args.quiet)


def _written(r: Any, out: Any, quiet: bool) -> int:
    """Write review ``r`` into folder ``out``, print its Markdown (unless ``quiet``): the exit status."""
    try:
        paths = r.write(out)
    except OSError as e:
        return _refuse("review", f"--out: cannot write the review into {str(out)!r}: {e.strerror or e}")
    if not quiet:
        sys.stdout.write(paths["md"].read_text(encoding="utf-8"))
    if paths["html"] is None:
        sys.stderr.write(f"numeq review: wrote {paths['md']}; the HTML page needs matplotlib: "
                         "pip install 'numeq[reports]'\n")
    else:
        sys.stderr.write(f"numeq review: wrote {paths['md']} and {paths['html']}\n")
    return 0 if r.passed else 1


def _review_kernel(args: argparse.Namespace) -> int:
    """``numeq review FILE.py::KERNEL --inputs IN.npz --op OP``: run the kernel and review it."""
    import inspect
    from pathlib import Path

    from . import nki
    from .nki import _cli as nki_cli
    from .review.kernel import review_kernel

    if args.op is None or args.inputs is None:
        return _refuse("review", "FILE.py::KERNEL: give --inputs IN.npz (the op's inputs and the kernel's parameters, "
                                 "by name) and --op (the operation the kernel computes)")
    try:
        path, name = nki_cli._split_kernel(args.manifest)
        arrays = nki_cli._load_inputs(args.inputs, nki_cli._pairs(args.dtype, "--dtype"))
        with nki.installed(target=args.target):
            kernel = nki_cli._kernel(nki_cli._import(path), path, name)
            signature = inspect.signature(getattr(kernel, "func", kernel))
            params = list(signature.parameters)
            kernel_args = {k: v for k, v in arrays.items() if k in params}
            outputs = {role: _named_array(arrays, given, flag) for role, given, flag in
                       (("gpu", args.gpu_output, "--gpu-output"), ("nki", args.nki_output, "--nki-output")) if given}
            op_params = _op_params(args.op, args.param)
            reference, reference_name = None, ""
            if args.reference is not None:
                ref_path, ref_name = nki_cli._split_kernel(args.reference)
                reference = _function(nki_cli._import(ref_path), ref_path, ref_name)
                reference_name = f"{Path(ref_path).name}::{ref_name}"
            _every_array_used(arrays, args.op, params, outputs, args.inputs, name)
            needed = [k for k, q in signature.parameters.items() if q.default is q.empty and k not in arrays
                      and q.kind in (q.POSITIONAL_OR_KEYWORD, q.POSITIONAL_ONLY, q.KEYWORD_ONLY)]
            if needed:
                raise nki_cli.UsageFault(f"--inputs: {args.inputs} holds arrays {', '.join(arrays) or 'none'}; "
                                         f"{name} takes ({', '.join(params)}): no array {', '.join(needed)} (the op's "
                                         "inputs and the kernel's parameters, by name, in one file)")
            try:
                r = review_kernel(kernel, {k: v for k, v in arrays.items() if k not in outputs.values()}, args.op,
                                  kernel_args=kernel_args, gpu=args.gpu, target=args.target, params=op_params,
                                  outputs={role: arrays[n] for role, n in outputs.items()},
                                  name=f"{Path(path).name}::{name}", reference=reference,
                                  reference_name=reference_name)
            except (SystemExit, KeyboardInterrupt) as e:
                # A kernel returns its outputs; one that exits (or is interrupted) left nothing to review.
                return _refuse("review", f"the kernel {name} raised {type(e).__name__}({', '.join(map(repr, e.args))}) "
                                         "while it ran; numeq cannot review it")
    except (nki_cli.UsageFault, ValueError, TypeError, MemoryError) as e:
        return _refuse("review", str(e))
    out = Path(args.out) if args.out else Path(f"review-{name}")
    return _written(r, out, args.quiet)


def _function(module: Any, path: str, name: str) -> Any:
    """--reference's function ``name`` of the file ``path`` (imported as ``module``)."""
    from .nki import _cli as nki_cli

    fn = getattr(module, name, None)
    if not callable(fn):
        found = [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
        raise nki_cli.UsageFault(f"--reference: {path} has no function {name!r}; valid: {', '.join(found) or 'none'}")
    return fn


def _named_array(arrays: dict, name: str, flag: str) -> str:
    from .nki import _cli as nki_cli

    if name not in arrays:
        raise nki_cli.UsageFault(f"{flag}: no array {name!r} in --inputs; it holds {', '.join(arrays) or 'none'}")
    return name


def _op_params(op: str, pairs: list[str]) -> dict:
    """``--param NAME=VALUE`` of kernel mode, typed by the op's parameter table (numeq.ops.specs())."""
    from . import ops
    from .nki import _cli as nki_cli

    spec = next((s for s in ops.specs() if s.name == op), None)
    if spec is None:
        raise nki_cli.UsageFault(f"--op: unknown operation {op!r}; valid: {', '.join(s.name for s in ops.specs())}")
    table = {p.name: p for p in spec.params}
    out: dict = {}
    for pair in pairs:
        name, eq, text = pair.partition("=")
        name, text = name.strip(), text.strip()
        if not eq or not name:
            raise nki_cli.UsageFault(f"--param: expected NAME=VALUE, got {pair!r}")
        if name not in table:
            raise nki_cli.UsageFault(f"--param: {op} has no parameter {name!r}; valid: "
                                     f"{', '.join(table) or 'none (it takes no parameters)'}")
        out[name] = _typed(table[name], text)
    return out


def _typed(p: Any, text: str) -> Any:
    from .nki import _cli as nki_cli

    def bad(what: str) -> Exception:
        return nki_cli.UsageFault(f"--param: {p.name}={text!r} is not {what}")

    if p.type == "boolean":
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise bad("a boolean (true or false)")
    if text.lower() == "none" and p.default is None:
        return None
    if p.type == "integer":
        try:
            return int(text)
        except ValueError:
            raise bad("an integer") from None
    if p.type == "real":
        try:
            value = float(text)
        except ValueError:
            raise bad("a real number") from None
        if value != value:
            raise bad("a real number (NaN)")
        return value
    if p.type == "axes":
        try:
            return None if text.lower() == "none" else [int(a) for a in text.split(",")] if "," in text else int(text)
        except ValueError:
            raise bad("an axis, a comma-separated list of axes, or none") from None
    if p.choices and text not in p.choices:
        raise bad(f"one of {', '.join(p.choices)}")
    return text


def _every_array_used(arrays: dict, op: str, params: list[str], outputs: dict, inputs: str, kernel: str) -> None:
    """An array in --inputs that is neither the op's input, the kernel's parameter nor a named
    output is refused: a stray array must not quietly become an op input or be ignored."""
    from .nki import _cli as nki_cli
    from .review.manifest import _OPERATIONS

    required, optional, _ = _OPERATIONS[op]
    unused = [k for k in arrays if k not in (*required, *optional, *params, *outputs.values())]
    if unused:
        raise nki_cli.UsageFault(f"--inputs: {inputs} holds {', '.join(unused)}, which is neither an input of {op} "
                                 f"({', '.join(required + optional)}), a parameter of {kernel} ({', '.join(params)}) "
                                 "nor an output named by --gpu-output / --nki-output")


def _csv_list(text: str, parameter: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise SystemExit(f"numeq tolerances: {parameter}: empty list")
    return items


def _tolerance_arguments(p: argparse.ArgumentParser) -> None:
    from .catalogue import OPS
    from .tolerance_table import GPU_PLATFORMS, OTHER_PLATFORMS, SweepConfig

    d = SweepConfig()
    p.add_argument("--ops", default=",".join(d.ops), help=f"catalogue ops (default: {','.join(d.ops)}; any of {','.join(OPS)})")
    p.add_argument("--formats", default=",".join(d.formats), help="input formats (default: %(default)s)")
    p.add_argument("--ks", default=",".join(str(k) for k in d.ks), help="reduction lengths K (default: %(default)s)")
    p.add_argument("--platforms", default=",".join(GPU_PLATFORMS),
                   help="GPU-side platforms, each judged alone and against every --against (default: %(default)s)")
    p.add_argument("--against", default=",".join(OTHER_PLATFORMS),
                   help="the platforms a GPU is compared with (default: %(default)s)")
    p.add_argument("--inputs", default=",".join(d.inputs),
                   help="the input family the tolerance is calibrated on: generators, or 'all' (default: %(default)s)")
    p.add_argument("--trials", type=int, default=d.trials, help="calibration seeds, and as many held-out seeds "
                                                                 "(default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="the first seed (default: %(default)s)")
    p.add_argument("--kind", default=d.kind, choices=["probabilistic", "deterministic"])
    p.add_argument("--failure-probability", type=float, default=d.failure_probability,
                   help="per check, of the probabilistic bound (default: %(default)s)")
    p.add_argument("--margin", type=float, default=d.margin,
                   help="the tolerance over the calibration draws' largest need (default: %(default)s)")
    p.add_argument("--no-bugs", action="store_true", help="skip the planted bugs (detection columns empty)")
    p.add_argument("--out", default="reports", help="output directory (default: %(default)s)")
    p.add_argument("--as", dest="styles", default="md,csv,json,html",
                   help="files to write: md, csv, json, html (default: %(default)s); Markdown is printed too")
    p.add_argument("--executor", default="local", choices=["local", "dask"],
                   help="local processes, or dask.distributed (--scheduler ADDRESS, else a LocalCluster)")
    p.add_argument("--workers", type=int, default=None, help="processes (local) or LocalCluster workers "
                                                              "(default: the CPU count)")
    p.add_argument("--scheduler", default=None, help="a dask scheduler address, e.g. tcp://10.0.0.5:8786")
    p.add_argument("--name", default="tolerances", help="the files' base name (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _tolerances(args: argparse.Namespace, argv: list[str]) -> int:
    import os

    from . import ops as ops_
    from .tolerance_table import SweepConfig, render_csv, render_json, render_markdown, sweep

    styles = _csv_list(args.styles, "--as")
    for s in styles:
        if s not in ("md", "csv", "json", "html"):
            return _refuse("tolerances", f"--as: unknown output {s!r}; valid: md, csv, json, html")
    if "html" in styles and not _importable("matplotlib"):
        # The HTML report draws its plots with matplotlib (the reports extra). Asked for by name, that
        # is refused before the sweep; by default, the other files are written and the note says how.
        if "--as" in argv or any(a.startswith("--as=") for a in argv):
            return _refuse("tolerances", "--as html: the HTML report draws its plots with matplotlib, which is not "
                           "installed: pip install 'numeq[reports]' (or leave html out of --as)")
        styles = [s for s in styles if s != "html"]
        sys.stderr.write("numeq tolerances: writing md, csv and json; the HTML report needs matplotlib: "
                         "pip install 'numeq[reports]'\n")
    inputs = tuple(ops_.generators()) if args.inputs == "all" else _csv_list(args.inputs, "--inputs")
    try:
        ks = tuple(int(k) for k in _csv_list(args.ks, "--ks"))
    except ValueError:
        return _refuse("tolerances", f"--ks: expected integers, got {args.ks!r}")
    config = SweepConfig(ops=_csv_list(args.ops, "--ops"), formats=_csv_list(args.formats, "--formats"), ks=ks,
                         gpus=_csv_list(args.platforms, "--platforms"), others=_csv_list(args.against, "--against"),
                         inputs=inputs, trials=args.trials, seed=args.seed, kind=args.kind,
                         failure_probability=args.failure_probability, bugs=not args.no_bugs,
                         margin=args.margin)
    try:  # the folder is made before the sweep: an --out that cannot be written is refused at once
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        return _refuse("tolerances", f"--out: cannot make the folder {args.out!r}: {e.strerror or e}")
    try:
        rows, meta = sweep(config, executor=args.executor, workers=args.workers, scheduler=args.scheduler,
                           progress=not args.no_progress)
    except ValueError as e:
        return _refuse("tolerances", str(e))
    meta["command"] = "numeq " + " ".join(argv)
    base = os.path.join(args.out, args.name)
    markdown = render_markdown(rows, meta)
    try:
        if "md" in styles:
            with open(base + ".md", "w") as f:
                f.write(markdown)
        if "csv" in styles:
            with open(base + ".csv", "w") as f:
                f.write(render_csv(rows))
        if "json" in styles:
            with open(base + ".json", "w") as f:
                f.write(render_json(rows, meta))
        if "html" in styles:
            try:
                from .report_html import write as write_html
            except ImportError as e:
                return _refuse("tolerances", f"html: {e} (pip install 'numeq[reports]')")
            write_html(rows, meta, base + ".html")
    except OSError as e:
        return _refuse("tolerances", f"--out: cannot write into {args.out!r}: {e.strerror or e}")
    sys.stdout.write(markdown)
    alarms = sum(r["false_alarms"]["numeq"] for r in rows)
    return 1 if alarms else 0

