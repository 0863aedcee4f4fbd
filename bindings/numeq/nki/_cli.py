"""``numeq nki run FILE.py::KERNEL``: one NKI kernel file run on numeq from the command line.

The kernel file is imported inside ``numeq.nki.installed(target=...)``, so its ``import nki`` /
``import neuronxcc.nki`` lines resolve to numeq's modules; the kernel runs on the arrays of an
``.npz`` file, each passed as the kernel parameter of the same name. The command prints the
findings, the work of each engine, the op-level platform and every assumption in force, and can
write the outputs (``--out``) and the instruction trace (``--trace``).

Exit status: 0 when the run has no error finding, 1 when it has one (or the kernel raised), 2 when
numeq cannot run it (bad arguments, a missing file or kernel, an NKI name numeq does not implement).
``numeq.cli`` only dispatches here.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import json
import math
import os
import sys
import traceback
import zipfile
from typing import Any, Callable

import numpy as np

from .machine.targets import DEFAULT_TARGET

__all__ = ["add_arguments", "main", "UsageFault"]

# The targets in the order the help lists them: the current generation first.

_RUN_KEYWORDS = ("target", "assume", "grid")  # numeq.nki.run's own keywords


class UsageFault(Exception):
    """Arguments numeq cannot run: the message names the parameter and the valid choices."""


def _targets() -> list[str]:
    from .machine.targets import target_names

    return target_names()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``numeq nki run``."""
    targets = _targets()
    parser.add_argument("kernel", metavar="FILE.py::KERNEL",
                        help="the kernel file and the kernel's name in it (an @nki.jit kernel or a function)")
    parser.add_argument("--inputs", metavar="IN.npz", default=None,
                        help="the input arrays (numpy .npz); each is passed as the kernel parameter of its name, "
                             "in the order the kernel's signature names them")
    parser.add_argument("--out", metavar="OUT.npz", default=None,
                        help="write the outputs: output_0, output_1, ... (the names, when the kernel returns a dict); "
                             "bfloat16 and fp8 outputs are stored as numpy stores ml_dtypes arrays (raw bytes: read "
                             "them back with .view(ml_dtypes.bfloat16) ...)")
    parser.add_argument("--target", default=DEFAULT_TARGET, choices=targets,
                        help=f"the NeuronCore target: {', '.join(targets)} (default: %(default)s)")
    parser.add_argument("--assume", metavar="NAME=VALUE", action="append", default=[],
                        help="set an assumption (repeatable); numeq.nki.assumptions_of(TARGET) lists each with its "
                             "alternatives")
    parser.add_argument("--grid", metavar="G0[,G1...]", default=None,
                        help="the SPMD grid: the kernel runs once per program id (nl.program_id)")
    parser.add_argument("--trace", metavar="TRACE.json", default=None,
                        help="write every instruction (engine, name, line, operands, bytes, FLOPs, cycles) and the "
                             "findings as JSON")
    parser.add_argument("--kwarg", metavar="NAME=VALUE", action="append", default=[],
                        help="a non-array kernel argument (repeatable); VALUE is read as a Python literal (3, 0.5, "
                             "(128, 512), True), else as a string")
    parser.add_argument("--no-values", dest="values", action="store_false", default=True,
                        help="trace, check and schedule the kernel without computing a value (production shapes; "
                             "no outputs are written)")
    parser.add_argument("--hazards", action="store_true", default=False,
                        help="add the run's hazards (Run.hazards(): a value carried between affine_range "
                             "iterations, confirmed by a backwards rerun) to its findings")
    parser.add_argument("--dtype", metavar="NAME=DTYPE", action="append", default=[],
                        help="the input array NAME as DTYPE (an NKI dtype: bfloat16, float8_e4m3, ...): raw bytes "
                             "(as numpy stores ml_dtypes arrays in .npz) are reinterpreted, numbers are rounded to "
                             "nearest even")


# --- arguments -------------------------------------------------------------------------------------

def _pairs(items: list[str], parameter: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageFault(f"{parameter}: expected NAME=VALUE, got {item!r}")
        if name in out:
            raise UsageFault(f"{parameter}: {name} is given twice")
        out[name] = value.strip()
    return out


def _assumptions(target: str, items: list[str]) -> dict[str, str]:
    from ._run import assumptions_of

    assume = _pairs(items, "--assume")
    table = assumptions_of(target)
    for name, value in assume.items():
        if name not in table:
            raise UsageFault(f"--assume: {target} has no assumption {name!r}; valid: {', '.join(table)}")
        if value not in table[name]["alternatives"]:
            raise UsageFault(f"--assume: {name} cannot be {value!r}; valid: {', '.join(table[name]['alternatives'])}")
    return assume


def _grid(text: str | None) -> tuple[int, ...]:
    from ._launch import MAX_PROGRAMS, check_grid

    if text is None:
        return ()
    valid = f"expected positive integers separated by commas (e.g. 4 or 2,2), at most {MAX_PROGRAMS} programs in all"
    try:
        grid = tuple(int(g) for g in text.split(","))
    except ValueError:
        raise UsageFault(f"--grid: {valid}, got {text!r}") from None
    if not grid or any(g < 1 for g in grid):
        raise UsageFault(f"--grid: {valid}, got {text!r}")
    try:
        return check_grid(grid)
    except ValueError as e:
        raise UsageFault(f"--{e}") from None


def _writable(option: str, path: str | None) -> str | None:
    """``path`` if numeq can write it, checked before the kernel runs (a run can take minutes):
    its folder exists, it is not a folder, and a file there can be opened for writing. An existing
    file is opened for update (not truncated); a new one is made and removed again."""
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageFault(f"{option}: no such folder {folder!r} for {path!r}")
    if os.path.isdir(path):
        raise UsageFault(f"{option}: {path!r} is a folder; give a file path")
    try:
        if os.path.exists(path):
            with open(path, "r+b"):
                pass
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            os.close(fd)
            os.remove(path)
    except OSError as e:
        raise UsageFault(f"{option}: cannot write {path!r} ({e.strerror or e}); give a path in a folder you can "
                         "write") from None
    return path


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _split_kernel(spec: str) -> tuple[str, str]:
    path, sep, name = spec.rpartition("::")
    if not sep or not path or not name:
        raise UsageFault(f"FILE.py::KERNEL: expected a kernel file and a kernel name joined by '::' "
                         f"(kernels.py::matmul_kernel), got {spec!r}")
    if not os.path.isfile(path):
        raise UsageFault(f"FILE.py::KERNEL: no such file {path!r}")
    return path, name


# --- the kernel file -------------------------------------------------------------------------------

def _import(path: str) -> Any:
    """Import the kernel file as a module of its own (its folder first on sys.path, for the
    helpers it imports beside it). The caller has installed numeq's NKI modules."""
    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = f"numeq_nki_run_{stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageFault(f"FILE.py::KERNEL: {path!r} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    sys.modules[module_name] = module  # dataclasses and pickling look their module up here
    try:
        spec.loader.exec_module(module)
    except (SystemExit, KeyboardInterrupt) as e:
        raise UsageFault(f"FILE.py::KERNEL: importing {path} raised {type(e).__name__}({_args(e)}) (the file exits "
                         "or is interrupted as it loads); numeq cannot run it") from None
    except Exception as e:
        from .machine.context import Unsupported

        if isinstance(e, Unsupported):
            raise
        raise UsageFault(f"FILE.py::KERNEL: importing {path} raised {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(folder)
        sys.modules.pop(module_name, None)
    return module


def _args(e: BaseException) -> str:
    return ", ".join(repr(a) for a in e.args)


def _kernels_in(module: Any) -> list[str]:
    """The names the file defines that could be kernels: @nki.jit kernels and its own functions."""
    from ._run import Kernel

    names = []
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        if isinstance(value, Kernel) or (inspect.isfunction(value) and value.__module__ == module.__name__):
            names.append(name)
    return names


def _kernel(module: Any, path: str, name: str) -> Any:
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            found = _kernels_in(module)
            raise UsageFault(f"FILE.py::KERNEL: {path} has no kernel {name!r}; valid: "
                             f"{', '.join(found) if found else '(the file defines no function)'}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageFault(f"FILE.py::KERNEL: {path}::{name} is a {type(obj).__name__}, not a kernel")
    return obj


# --- inputs ----------------------------------------------------------------------------------------

def _raw(d: Any) -> bool:
    """Whether numpy stores dtype ``d``'s arrays in .npz as raw bytes (the ml_dtypes types)."""
    return np.dtype(d.storage).kind == "V"


_NPY_MAGIC = b"\x93NUMPY"


class _Inputs:
    """An .npz file's members as its zip directory lists them (name -> ZipInfo): nothing is
    decompressed until ``read``, so unknown or malformed members are refused first."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as f:
            head = f.read(len(_NPY_MAGIC))
        if head == _NPY_MAGIC:
            raise UsageFault(f"--inputs: {path} holds one array (.npy); give an .npz of named arrays (numpy.savez)")
        try:
            self.zip = zipfile.ZipFile(path)
            infos = self.zip.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as e:
            raise UsageFault(f"--inputs: {path} is not a numpy .npz file ({e})") from None
        self.members: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            if not info.filename.endswith(".npy") or info.is_dir():
                self.close()
                raise UsageFault(f"--inputs: {path} holds {info.filename!r}, which is not an array; an .npz holds "
                                 "arrays only, NAME.npy each (numpy.savez)")
            name = info.filename[:-4]
            if name in self.members:
                self.close()
                raise UsageFault(f"--inputs: {path} holds two members named {name!r}; the file is corrupt")
            if info.flag_bits & 0x1:
                self.close()
                raise UsageFault(f"--inputs: {path}: member {name!r} is encrypted; numpy's .npz members are not")
            self.members[name] = info

    @property
    def names(self) -> list[str]:
        return list(self.members)

    def close(self) -> None:
        self.zip.close()

    def read(self, name: str) -> np.ndarray:
        """One member: its header checked (no pickled objects; the bytes it declares are the bytes it
        holds) before the array is made, then its data read and checked (the zip's CRC)."""
        info, path = self.members[name], self.path
        fmt = np.lib.format
        shape: Any = "?"
        dtype: Any = "?"
        try:
            with self.zip.open(info) as f:
                version = fmt.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = fmt.read_array_header_1_0(f)
                elif version in ((2, 0), (3, 0)):
                    shape, fortran, dtype = fmt.read_array_header_2_0(f)
                else:
                    raise ValueError(f"unknown .npy format version {version}")
                if dtype.hasobject:
                    raise UsageFault(f"--inputs: array {name} of {path} holds Python objects (a pickled {dtype} "
                                     "array); numeq never unpickles (allow_pickle=False): save numeric arrays of an "
                                     "NKI dtype")
                nbytes = math.prod(shape) * dtype.itemsize
                held = info.file_size - f.tell()
                if held != nbytes:
                    raise UsageFault(f"--inputs: array {name} of {path} declares shape {shape} of {dtype} "
                                     f"({nbytes} B) but holds {held} B: the file is corrupt")
                raw = np.empty(nbytes, dtype=np.uint8)
                view, at = memoryview(raw), 0
                while at < nbytes:
                    n = f.readinto(view[at:at + (1 << 24)])
                    if not n:
                        raise EOFError(f"the data ends after {at} of {nbytes} B")
                    at += n
                if f.read(1):
                    raise ValueError("data past the array's end")
        except UsageFault:
            raise
        except MemoryError:
            raise UsageFault(f"--inputs: array {name} of {path} ({dtype}, shape {shape}) does not fit in this host's "
                             "memory") from None
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise UsageFault(f"--inputs: array {name} of {path} cannot be read: {e} (the file is corrupt)") from None
        except Exception as e:  # zlib.error, lzma / bz2 errors of a damaged member
            raise UsageFault(f"--inputs: array {name} of {path} cannot be read: {type(e).__name__}: {e} (the file "
                             "is corrupt)") from None
        a = raw.view(dtype) if nbytes else np.empty(0, dtype=dtype)
        a = a.reshape(shape, order="F" if fortran else "C")
        if dtype.byteorder not in ("=", "|") and dtype.byteorder != ("<" if sys.byteorder == "little" else ">"):
            a = a.astype(dtype.newbyteorder("="))  # the same values in this machine's byte order
        return a


def _load_inputs(path: str | None, dtypes: dict[str, str],
                 accept: Callable[[list[str]], None] | None = None) -> dict[str, np.ndarray]:
    """The arrays of .npz ``path`` by name, ``--dtype`` applied. ``accept(names)`` sees the member
    names from the zip directory before any member is decompressed (and may refuse them)."""
    from .machine.dtypes import DTYPES, dtype_of

    if path is None:
        if dtypes:
            raise UsageFault(f"--dtype: names input arrays ({', '.join(dtypes)}), but --inputs gives none")
        if accept is not None:
            accept([])
        return {}
    if not os.path.isfile(path):
        raise UsageFault(f"--inputs: no such file {path!r}")
    inputs = _Inputs(path)
    try:
        unknown = sorted(set(dtypes) - set(inputs.names))
        if unknown:
            raise UsageFault(f"--dtype: {path} has no array {', '.join(unknown)}; its arrays: "
                             f"{', '.join(inputs.names)}")
        if accept is not None:
            accept(inputs.names)
        arrays = {name: inputs.read(name) for name in inputs.names}
    finally:
        inputs.close()
    for name, spelling in dtypes.items():
        try:
            d = dtype_of(spelling, f"--dtype {name}")
        except (TypeError, ValueError) as e:
            raise UsageFault(str(e)) from None
        a = arrays[name]
        storage = np.dtype(d.storage)
        if a.dtype.type is np.void:  # raw bytes: reinterpreted
            if a.dtype.itemsize != storage.itemsize:
                raise UsageFault(f"--dtype: {name} holds {a.dtype.itemsize}-byte elements; {d} takes "
                                 f"{storage.itemsize}")
            arrays[name] = a.view(storage)
        elif a.dtype.kind not in "biuf":
            raise UsageFault(f"--dtype: {name} holds {a.dtype} values, which are not numbers to round to {d}")
        elif d.kind == "float" and a.dtype.kind in "biu":
            # Integers for a float dtype are ambiguous: a uint8 or uint16 array is as often the bit
            # patterns of fp8 or bf16 values (a.view(np.uint8)) as values; rounding them as values
            # would run the kernel on other numbers without a word.
            raise UsageFault(f"--dtype: {name} holds {a.dtype} integers, and {d} is a float dtype: for its bit "
                             f"patterns save the array as raw bytes (np.savez(..., {name}=x.view('V{storage.itemsize}'))"
                             f" or the ml_dtypes array itself); for values, save them as floats (float32)")
        elif d.kind == "int" and a.dtype.kind == "f":
            info = np.iinfo(storage)
            if not np.all((a == np.round(a)) & (a >= info.min) & (a <= info.max)):
                raise UsageFault(f"--dtype: {name} holds values that are not {d} integers")
            arrays[name] = a.astype(storage)
        else:  # floats into a float dtype round to nearest even (numpy's and ml_dtypes' astype)
            arrays[name] = a.astype(storage)
    for name, a in arrays.items():
        if a.dtype.type is np.void:
            valid = [n for n, t in DTYPES.items() if _raw(t) and t.itemsize == a.dtype.itemsize]
            raise UsageFault(f"--inputs: array {name} holds raw {a.dtype.itemsize}-byte elements (numpy stores "
                             f"bfloat16 and fp8 arrays so in .npz); say which dtype with --dtype {name}=DTYPE "
                             f"(valid: {', '.join(valid)})")
    return arrays


def _nki_dtypes(arrays: dict[str, np.ndarray], inputs: str | None) -> None:
    """Every array a kernel gets is of an NKI dtype. NKI has no float64 (nki.language's dtypes:
    float32, bfloat16, float16, tfloat32, fp8, ints, bool), and AWS's simulator takes numpy arrays
    of NKI dtypes; numeq does not round a float64 array silently: --dtype NAME=float32 says to."""
    from .machine.dtypes import DTYPES, dtype_of

    for name, a in arrays.items():
        try:
            dtype_of(a.dtype, name)
        except (TypeError, ValueError):
            fix = {"f": "float32", "i": "int32", "u": "uint32"}.get(a.dtype.kind)
            how = (f"; save it as one, or give --dtype {name}={fix} (values rounded to nearest even)"
                   if fix == "float32" else f"; save it as one, or give --dtype {name}={fix}" if fix else "")
            raise UsageFault(f"--inputs: array {name} of {inputs} is {a.dtype}, not an NKI dtype (NKI kernels, and "
                             f"AWS's simulator, take arrays of {', '.join(DTYPES)}){how}") from None


def _known_names(fn: Callable, kernel_name: str, names: list[str], kwargs: dict[str, Any],
                 inputs: str | None) -> None:
    """The .npz's member names (from its zip directory, before any is decompressed) are kernel
    parameters, unless the kernel takes **kwargs."""
    params = list(inspect.signature(fn).parameters.values())
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return
    accepted = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    extra = [n for n in names if n not in accepted]
    if extra:
        raise UsageFault(f"--inputs: {inputs} holds arrays [{', '.join(names)}]; {kernel_name} takes "
                         f"({', '.join(accepted)}): no parameter {', '.join(extra)}")


def _arguments(fn: Callable, kernel_name: str, arrays: dict[str, np.ndarray], kwargs: dict[str, Any],
               inputs: str | None) -> tuple[list, dict]:
    """The kernel's positional and keyword arguments: every array and --kwarg matched to the
    parameter of its name, passed positionally in the signature's order (a skipped parameter's
    default fills its place) where the signature allows."""
    params = list(inspect.signature(fn).parameters.values())
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    names = [p.name for p in named]
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params)
    both = sorted(set(arrays) & set(kwargs))
    if both:
        raise UsageFault(f"--kwarg: {', '.join(both)} is also an array of {inputs}; give it once")
    source = f"{inputs} holds arrays [{', '.join(arrays)}]" if inputs else "no --inputs"
    signature = f"{kernel_name} takes ({', '.join(names)})"
    extra = [n for n in arrays if n not in names]
    if extra and not takes_any:
        raise UsageFault(f"--inputs: {source}; {signature}: no parameter {', '.join(extra)}")
    extra_kw = [n for n in kwargs if n not in names]
    if extra_kw and not takes_any:
        raise UsageFault(f"--kwarg: {signature}: no parameter {', '.join(extra_kw)}")
    given = {**arrays, **kwargs}
    missing = [p.name for p in named if p.default is p.empty and p.name not in given]
    if missing:
        raise UsageFault(f"--inputs: {source}; {signature}: {', '.join(missing)} missing (an array of that name, "
                         "or --kwarg NAME=VALUE)")
    positional: list = []
    keywords: dict[str, Any] = {}
    positional_params = [p for p in named if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    last = max((i for i, p in enumerate(positional_params) if p.name in given), default=-1)
    for p in positional_params[:last + 1]:
        positional.append(given[p.name] if p.name in given else p.default)
    for name, value in given.items():
        if name not in [p.name for p in positional_params[:last + 1]]:
            keywords[name] = value
    clash = sorted(set(keywords) & set(_RUN_KEYWORDS))
    if clash:
        raise UsageFault(f"{kernel_name}: its keyword-only parameter {', '.join(clash)} has the name of "
                         "numeq.nki.run's own keyword; numeq nki run cannot pass it")
    return positional, keywords


# --- outputs ---------------------------------------------------------------------------------------

def _named_outputs(outputs: Any) -> dict[str, np.ndarray]:
    if outputs is None:
        return {}
    if isinstance(outputs, dict):
        return {str(k): np.asarray(v) for k, v in outputs.items()}
    if isinstance(outputs, (tuple, list)):
        return {f"output_{i}": np.asarray(v) for i, v in enumerate(outputs)}
    return {"output_0": np.asarray(outputs)}


def _json_value(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def _trace_document(spec: str, run: Any) -> dict:
    s = run.summary()
    summary = {"engines": {name: vars(e) for name, e in s.engines.items()},
               "dma_sizes": {q: {str(b): n for b, n in sorted(sizes.items())} for q, sizes in s.dma_sizes.items()},
               "flops": s.flops, "hbm_bytes": s.hbm_bytes,
               "intensity": None if s.intensity == float("inf") else s.intensity, "ridge": s.ridge,
               "regime": s.regime, "peak_flops": s.peak_flops, "peak_source": s.peak_source,
               "hbm_bytes_per_s": s.hbm_bytes_per_s, "hbm_source": s.hbm_source, "bound_by": s.bound_by,
               "lower_bound_s": s.lower_bound_s, "estimate": "from the documented per-instruction costs (_summary)"}
    return {"kernel": spec, "target": run.target, "platform": run.platform, "language": run.language,
            "completed": run.completed,
            "assumptions": run.assumptions, "findings": [f.to_dict() for f in run.findings],
            "engines": run.engines(), "summary": summary, "schedule": _schedule_document(run) if run.trace else None,
            "instructions": [ins.to_dict() for ins in run.trace]}


def _schedule_document(run: Any) -> dict:
    sc = run.schedule()
    return {"time_s": sc.time_s, "active": sc.active, "bound_by": sc.bound_by, "critical_path": sc.critical_path,
            "by_line": [[where, t] for where, t in sc.by_line], "spills": len(sc.spills), "spill_bytes": sc.spill_bytes,
            "parameters": {k: {"value": v.value, "unit": v.unit, "evidence": v.evidence, "source": v.source}
                           for k, v in sc.parameters.items()}}


def _report(spec: str, run: Any, assumed: dict[str, str], outputs: dict[str, np.ndarray], out: Any) -> None:
    w = out.write
    language = {"current": "; the current interface (nki.*)", "older": "; the older interface (neuronxcc.nki.*)"}
    w(f"kernel {spec} on {run.target}; platform {run.platform}{language.get(run.language, '')}\n")
    if not run.completed:
        w("the kernel stopped at its first error finding (the hardware cannot compute past it)\n")
    def count(n: int, word: str) -> str:
        return f"{n} {word}" + ("" if n == 1 else "s")

    w(f"findings: {count(len(run.errors), 'error')}, {count(len(run.warnings), 'warning')}\n")
    for f in run.findings:
        times = f" (x{f.count})" if f.count > 1 else ""
        w(f"  {f.where}: {f.severity}: [{f.rule}] {f.message}{times} -- {f.source}\n")
    w("engines:\n")
    w(f"  {'engine':8s} {'instructions':>12s} {'FLOPs':>15s} {'bytes':>13s} {'est. cycles':>12s}\n")
    if not run.trace:
        w("  (no instruction ran)\n")
    s = run.summary()
    for name, e in s.engines.items():
        w(f"  {name:8s} {e.instructions:12d} {e.flops:15d} {e.bytes:13d} {e.cycles:12d}  busy {e.busy_s * 1e6:.2f} us\n")
    if run.trace:
        w(f"estimate: bound by the {s.bound_by} engine, at least {s.lower_bound_s * 1e6:.2f} us; {s.regime} "
          f"(intensity {s.intensity:.1f} FLOP/B, ridge {s.ridge:.1f})\n")
        w("schedule (Run.schedule(): the dependency graph over the engines; DMA fixed cost, HBM share and "
          "semaphores assumed):\n")
        w("".join(f"  {line}\n" for line in str(run.schedule()).splitlines()))
    w("assumptions:\n")
    for name, value in run.assumptions.items():
        w(f"  {name} = {value}{'  (--assume)' if name in assumed else ''}\n")
    if outputs:
        w("outputs:\n")
        for name, a in outputs.items():
            w(f"  {name}: {a.dtype.name if a.dtype.kind != 'V' else a.dtype} {tuple(a.shape)}\n")


# --- the command -----------------------------------------------------------------------------------

def _refuse(message: str) -> int:
    sys.stderr.write(f"numeq nki run: {message}\n")
    return 2


def main(args: argparse.Namespace) -> int:
    """``numeq nki run``; the exit status (see the module doc)."""
    from . import installed, run as nki_run
    from ._run import check_kernel
    from .machine.context import TooLarge, Unsupported

    try:
        path, name = _split_kernel(args.kernel)
        assume = _assumptions(args.target, args.assume)
        grid = _grid(args.grid)
        # Where the results go is checked before the kernel runs (a run can take minutes).
        out = None if args.out is None else args.out if args.out.endswith(".npz") else args.out + ".npz"
        _writable("--out", out)  # numpy.savez's own rule: .npz added
        _writable("--trace", args.trace)
        kwargs = {k: _literal(v) for k, v in _pairs(args.kwarg, "--kwarg").items()}
        dtypes = _pairs(args.dtype, "--dtype")
        with installed(target=args.target, assume=assume):
            module = _import(path)
            kernel = _kernel(module, path, name)
            fn = getattr(kernel, "func", kernel)
            try:
                check_kernel(fn, name)
            except TypeError as e:
                raise UsageFault(str(e)) from None
            arrays = _load_inputs(args.inputs, dtypes,
                                  accept=lambda names: _known_names(fn, name, names, kwargs, args.inputs))
            _nki_dtypes(arrays, args.inputs)
            positional, keywords = _arguments(fn, name, arrays, kwargs, args.inputs)
            try:
                r = nki_run(kernel, *positional, target=args.target, assume=assume, grid=grid or None,
                            values=args.values, **keywords)
                if args.hazards and r.completed:
                    r.findings.extend(r.hazards())
            except (Unsupported, UsageFault):
                raise
            except (SystemExit, KeyboardInterrupt) as e:
                # A kernel returns its outputs; one that exits (or is interrupted) gave none to judge.
                return _refuse(f"the kernel {name} raised {type(e).__name__}({_args(e)}) while it ran: no outputs, "
                               "no findings; numeq cannot run it")
            except MemoryError as e:
                return _refuse(f"the kernel {name}: {e}; numeq cannot run it")
            except TooLarge as e:
                sys.stderr.write(f"numeq nki run: the kernel {name} asks for more than the target holds: {e}\n")
                return 1
            except Exception:
                sys.stderr.write(f"numeq nki run: the kernel {name} raised:\n{traceback.format_exc()}")
                return 1
    except UsageFault as e:
        return _refuse(str(e))
    except Unsupported as e:
        return _refuse(f"{e} (numeq cannot run this kernel)")
    outputs = _named_outputs(r.outputs) if r.completed and r.values else {}
    _report(args.kernel, r, assume, outputs, sys.stdout)
    try:
        if out is not None:
            if outputs:
                np.savez(out, **outputs)
                sys.stdout.write(f"wrote {out}\n")
            else:
                sys.stdout.write(f"no outputs to write to {out}\n")
        if args.trace is not None:
            with open(args.trace, "w", encoding="utf-8") as f:
                json.dump(_trace_document(args.kernel, r), f, indent=1, default=_json_value)
                f.write("\n")
            sys.stdout.write(f"wrote {args.trace}\n")
    except OSError as e:
        return _refuse(f"cannot write {e.filename or 'the results'!r}: {e.strerror or e}")
    return 1 if r.errors else 0
