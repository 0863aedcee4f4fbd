"""The review manifest: one TOML file describing one CUDA-to-NKI port, validated with errors that
name the key and its line.

The schema, every table and key with its meaning, is ``SCHEMA`` (``numeq review --schema`` prints
it); ``?`` marks the optional keys. Paths are relative to the manifest's folder. Only [port],
[operation], [inputs], [outputs] and [platforms] are required: a review without [tiling] or
[performance] says "not assessed" for what they would have shown.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import _core, ops
from .._arrays import formats as _formats
from ..verdicts import TIERS
from .model import (FORMAT_BYTES, MANIFEST_ENGINES, MANIFEST_MEMORIES, Buffer, Dma, KernelSpec, Matmul, Performance, Profile, Stage,
                    Tiling, Timings)
from ..nki.machine.targets import target_names

try:  # the standard library's TOML reader from Python 3.11; tomli (the same parser) before
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python < 3.11
    import tomli as tomllib

__all__ = ["OPERATIONS", "SCHEMA", "Manifest", "ManifestError", "load", "parse"]

# Every table and key of a manifest with its meaning (`numeq review --schema` prints it).
SCHEMA = """\
[port]
name = "out-proj GEMM"            # what is reviewed
description? = "..."

[operation]                       # the operation both kernels compute
op = "matmul"                     # one of OPERATIONS (below)
in_fmt = "bf16"                   # the inputs' format (numeq.formats())
out = "fp32"                      # the output format
params? = { eps = 1e-5 }          # further keywords of numeq.ops.<op> (variant, eps, scales, ...)
tolerance? = { rtol = 2e-2, atol = 1e-5 }   # the standard the port's author states, if any

[inputs]                          # the op's inputs by name: "file.npy" or "file.npz:key"
a = "inputs.npz:a"                # matmul: a, b (c?); softmax, ...: x; attention: q, k, v (mask?)
b? = { array = "inputs.npz:b", dtype = "bfloat16" }   # bf16 / fp8 arrays (raw bytes in .npz) by dtype

[outputs]                         # optional with [kernel] (then each output is emulated where missing)
gpu = "outputs.npz:gpu"           # the CUDA kernel's output
nki = "outputs.npz:nki"           # the NKI kernel's output on the device
simulator? = "outputs.npz:sim"    # the NKI simulator's output

[kernel]                          # optional: the NKI kernel itself, which numeq runs (numeq.nki)
file = "port.py"                  # the kernel file
function = "matmul_port"          # the @nki.jit kernel in it
grid? = [2]                       # its SPMD grid
args? = { a_t = "inputs.npz:a_t", group = 2 }   # its parameters: arrays ("file.npz:key") or values

[platforms]
gpu = "nvidia.h100"               # numeq platform names, [assumption=value] overrides allowed
trainium = "trainium.trn2"        # with [kernel]: optional, its assumptions apply to the run
accept? = "probabilistic"         # the weakest verdict tier that passes
failure_probability? = 1e-6

[tiling]                          # the NKI kernel's tiling
target? = "trn2"                  # trn1, inf2 or trn2 (default: the trainium platform's)
m_tile? = 128                     # loop tiles over M, N and K
n_tile? = 512
k_tile? = 128                     # rows of K per nc_matmul (the plan's tile)
psum_group? = 4                   # K tiles per PSUM group, groups added in SBUF (default: all in PSUM)
fp8_double_row? = false           # trn2 fp8 double_row matmuls
[[tiling.buffers]]                # every buffer: name, memory (sbuf/psum/hbm), dtype, shape,
name = "a_t"                      # partition_dim? (0), start_partition? (0), bufs? (1)
memory = "sbuf"
dtype = "bf16"
shape = [128, 128]
[[tiling.matmuls]]                # name, stationary, moving, psum (buffer names), double_row? (false)
[[tiling.dmas]]                   # name, buffer, direction (load/store), bytes_per_partition,
                                  # partitions, stride_bytes? (0), transfers? (1)
[[tiling.stages]]                 # name, engine (tensor/vector/scalar/gpsimd/sync), instruction,
                                  # operands? ([]), free_size?

[performance]
claimed_speedup? = 2.5            # baseline time / candidate time, as the author claims it
confidence? = 0.95                # the bootstrap interval's level
[performance.timings]             # repeated timings
unit? = "ms"                      # s, ms, us or ns
baseline = [1.02, 0.99, ...]
candidate = [0.51, 0.50, ...]
baseline_label? = "CUDA kernel, H100"
candidate_label? = "NKI kernel, trn2"
[[performance.profiles]]          # neuron-profile view --output-format summary-json
label = "candidate"
file = "profile.json"
"""


class ManifestError(ValueError):
    """A manifest that cannot be reviewed: the message names the file, the line and the key."""


# Each operation: its required inputs, its optional inputs, and how numeq.ops builds it; every
# registered op (the op registry, numeq.ops.specs()) is one.
_OPERATIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...], Callable[..., Any]]] = {
    s.name: (s.required(), s.optional(), getattr(ops, s.name)) for s in ops.specs()}
OPERATIONS: tuple[str, ...] = tuple(_OPERATIONS)
SCHEMA += "\nOPERATIONS: " + ", ".join(OPERATIONS) + "\n"
_NO_FORMAT_KEYWORDS = tuple(s.name for s in ops.specs() if not s.format_keywords)


@dataclass
class Manifest:
    """A validated manifest: ``path`` and ``base`` (its folder), ``name`` and ``description``;
    ``op_name``, ``in_fmt``, ``out``, ``params``, ``stated_tolerance`` ({"rtol", "atol"} or None);
    ``inputs`` and ``outputs`` (arrays by name: "gpu", "nki", "simulator"); ``gpu_platform``,
    ``trainium_platform``, ``accept``, ``failure_probability``; ``tiling`` (``model.Tiling`` or
    None) and ``performance`` (``model.Performance`` or None). ``op()`` builds the numeq op."""

    path: Path
    name: str
    description: str
    op_name: str
    in_fmt: str
    out: str
    params: dict[str, Any]
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    gpu_platform: str
    trainium_platform: str
    accept: str = "probabilistic"
    failure_probability: float = 1e-6
    stated_tolerance: dict[str, float] | None = None
    tiling: Tiling | None = None
    performance: Performance | None = None
    target: str = "trn2"
    lines: dict[tuple, int] = field(default_factory=dict, repr=False)
    kernel: KernelSpec | None = None
    nki_from_numeq: bool = False  # outputs["nki"] is numeq's own run of the kernel (no measurement)
    nki_run: Any = field(default=None, repr=False, compare=False)  # the numeq.nki.Run outputs["nki"] is, if any
    reshaped: dict = field(default_factory=dict, repr=False, compare=False)  # input -> (given shape, the op's)
    _op: Any = field(default=None, repr=False, compare=False)  # op(), built once: its exact result kept

    @property
    def base(self) -> Path:
        return self.path.parent

    def line(self, *key: Any) -> int:
        """The manifest line of ``key`` (a table path such as ("tiling", "k_tile")), or of its
        nearest enclosing table; 0 when unknown."""
        return _line_of(self.lines, key)

    def op(self) -> Any:
        """The numeq op both kernels compute, on the manifest's inputs (built once: every part of
        the review shares its exact result)."""
        if self._op is not None:
            return self._op
        required, optional, build = _OPERATIONS[self.op_name]
        self._vectors_as_the_op_takes_them()
        args = [self.inputs[n] for n in required]
        kw = {n: self.inputs[n] for n in optional if n in self.inputs}
        if self.op_name not in _NO_FORMAT_KEYWORDS:
            kw.update(in_fmt=self.in_fmt, out=self.out)
        kw.update(self.params)
        try:
            self._op = build(*args, **kw)
            return self._op
        except (ValueError, TypeError) as e:
            raise ManifestError(f"{self.path}:{self.line('operation')}: operation: numeq.ops.{self.op_name} "
                                f"refuses the manifest's inputs or params: {e}") from None


    def _vectors_as_the_op_takes_them(self) -> None:
        """A per-feature vector the op takes as [n] (gamma, beta) given as a kernel holds it, [1, n] or
        [n, 1]: read as [n], and said so (``reshaped``). Only where every other axis has length 1."""
        try:
            shapes = {i.name: i.shape for i in ops.spec(self.op_name).inputs}
        except ValueError:
            return
        for name, array in list(self.inputs.items()):
            text = shapes.get(name, "")
            if not (text.startswith("[") and text.endswith("]") and "," not in text and "..." not in text):
                continue
            a = np.asarray(array)
            if a.ndim > 1 and sum(d != 1 for d in a.shape) <= 1:
                self.reshaped[name] = (tuple(a.shape), (a.size,))
                self.inputs[name] = a.reshape(a.size)


# --- where each key is ----------------------------------------------------------------------------

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r'^\s*([A-Za-z0-9_\-]+(?:\s*\.\s*[A-Za-z0-9_\-]+)*|"[^"]*")\s*=')


def _dotted(text: str) -> tuple[str, ...]:
    return tuple(part.strip().strip('"') for part in text.split("."))


def _key_lines(text: str) -> dict[tuple, int]:
    """Key path -> line for every table header and key=value line (arrays of tables indexed by
    their position: ("tiling", "buffers", 2, "shape")). A line-level scan, enough to point at a key:
    tomllib has already accepted the text."""
    lines: dict[tuple, int] = {}
    counts: dict[tuple, int] = {}
    current: tuple = ()
    for no, raw in enumerate(text.splitlines(), 1):
        m = _HEADER.match(raw)
        if m and not raw.lstrip().startswith("#"):
            path = _dotted(m.group(2))
            resolved: tuple = ()
            for part in path:
                resolved += (part,)
                if resolved in counts and resolved != path:
                    resolved += (counts[resolved],)
            if m.group(1) == "[[":
                counts[resolved] = counts.get(resolved, -1) + 1
                resolved += (counts[resolved],)
            current = resolved
            lines.setdefault(current, no)
            continue
        k = _KEY.match(raw)
        if k:
            lines.setdefault(current + _dotted(k.group(1)), no)
    return lines


def _line_of(lines: dict[tuple, int], key: tuple) -> int:
    """The line of ``key``, else of its nearest enclosing table, else of the first key inside
    that table (a table written only through its sub-tables, [[performance.profiles]])."""
    for n in range(len(key), 0, -1):
        if tuple(key[:n]) in lines:
            return lines[tuple(key[:n])]
        inside = [line for k, line in lines.items() if k[:n] == tuple(key[:n])]
        if inside:
            return min(inside)
    return 0


# --- typed access with errors that name the key ----------------------------------------------------

class _Table:
    """One TOML table being read: every read names its key path and line in an error, and
    ``done()`` refuses keys nobody read (a misspelt key is an error, not silently ignored)."""

    def __init__(self, data: Any, path: tuple, ctx: _Context) -> None:
        self.path, self.ctx = path, ctx
        if not isinstance(data, dict):
            ctx.fail(path, f"must be a table, got {_kind(data)}")
        self.data = data
        self.read: set[str] = set()

    def _name(self, key: str) -> str:
        return ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in self.path + (key,)).replace(".[", "[")

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, kinds: tuple[type, ...], what: str, required: bool, default: Any = None) -> Any:
        self.read.add(key)
        if key not in self.data:
            if required:
                self.ctx.fail(self.path, f"{self._name(key)}: missing; {what}")
            return default
        value = self.data[key]
        # TOML booleans are not integers here, and integers are accepted where reals are asked.
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            self.ctx.fail(self.path + (key,), f"{self._name(key)}: expected {what}, got {_kind(value)}")
        return value

    def text(self, key: str, required: bool = True, choices: tuple[str, ...] | None = None,
             default: str | None = None) -> Any:
        v = self.get(key, (str,), "a string" + (f", one of {', '.join(choices)}" if choices else ""), required, default)
        if v is not None and choices is not None and v not in choices:
            self.ctx.fail(self.path + (key,), f"{self._name(key)}: {v!r} is not valid; valid: {', '.join(choices)}")
        return v

    def integer(self, key: str, lo: int, hi: int, required: bool = True, default: int | None = None) -> Any:
        v = self.get(key, (int,), f"an integer in {lo} .. {hi}", required, default)
        if v is not None and not lo <= v <= hi:
            self.ctx.fail(self.path + (key,), f"{self._name(key)}: {v} is not an integer in {lo} .. {hi}")
        return v

    def real(self, key: str, lo: float, hi: float, required: bool = True, default: float | None = None,
             open_low: bool = False) -> Any:
        v = self.get(key, (int, float), f"a number in {'(' if open_low else '['}{lo:g}, {hi:g}]", required, default)
        if v is None:
            return None
        v = float(v)
        if not math.isfinite(v) or v < lo or v > hi or (open_low and v == lo):
            self.ctx.fail(self.path + (key,), f"{self._name(key)}: {v!r} is not a number in "
                                              f"{'(' if open_low else '['}{lo:g}, {hi:g}]")
        return v

    def boolean(self, key: str, default: bool = False) -> bool:
        return bool(self.get(key, (bool,), "true or false", False, default))

    def numbers(self, key: str, required: bool = True, positive: bool = True) -> Any:
        v = self.get(key, (list,), "an array of numbers", required)
        if v is None:
            return None
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)) or (
                    positive and float(x) <= 0):
                self.ctx.fail(self.path + (key,), f"{self._name(key)}[{i}]: expected a "
                                                  f"{'positive ' if positive else ''}finite number, got {x!r}")
        return tuple(float(x) for x in v)

    def shape(self, key: str) -> tuple[int, ...]:
        v = self.get(key, (list,), "an array of positive integers (the buffer's shape)", True)
        if not v or len(v) > 8:
            self.ctx.fail(self.path + (key,), f"{self._name(key)}: expected 1 to 8 dimensions, got {len(v)}")
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= 1 << 31:
                self.ctx.fail(self.path + (key,), f"{self._name(key)}[{i}]: expected an integer in 1 .. 2^31, got {x!r}")
        return tuple(v)

    def names(self, key: str) -> tuple[str, ...]:
        v = self.get(key, (list,), "an array of buffer names", False, [])
        for i, x in enumerate(v):
            if not isinstance(x, str):
                self.ctx.fail(self.path + (key,), f"{self._name(key)}[{i}]: expected a string, got {_kind(x)}")
        return tuple(v)

    def table(self, key: str, required: bool = False) -> _Table | None:
        v = self.get(key, (dict,), "a table", required)
        return None if v is None else _Table(v, self.path + (key,), self.ctx)

    def tables(self, key: str) -> list[_Table]:
        v = self.get(key, (list,), "an array of tables ([[...]])", False, [])
        return [_Table(x, self.path + (key, i), self.ctx) for i, x in enumerate(v)]

    def done(self, optional_note: str = "") -> None:
        extra = sorted(set(self.data) - self.read)
        if extra:
            self.ctx.fail(self.path + (extra[0],), f"{self._name(extra[0])}: unknown key; valid keys here: "
                                                   f"{', '.join(sorted(self.read))}{optional_note}")


@dataclass
class _Context:
    source: str
    lines: dict[tuple, int]
    root: Path | None = None  # every file the manifest names lies under it (None: anywhere)

    def file(self, base: Path, file: str, key: tuple) -> Path:
        """The file ``file`` names, relative to the manifest's folder ``base``; one outside
        ``root`` (an absolute path, a climb with ..) is refused: a manifest comes from a port's
        author, and the reviewer's run reads only what lies beside it unless allowed."""
        path = (base / file).resolve()
        if self.root is not None and not path.is_relative_to(self.root):
            name = ".".join(map(str, key))
            self.fail(key, f"{name}: {file!r} lies outside the manifest's folder {str(self.root)!r}; numeq reads only "
                           "files in it (or below it) unless the reviewer allows more (numeq review --allow-outside, "
                           "numeq.review.review(..., allow_outside=True))")
        return path

    def fail(self, key: tuple, message: str) -> None:
        line = _line_of(self.lines, key)
        raise ManifestError(f"{self.source}:{line}: {message}" if line else f"{self.source}: {message}")

    def line(self, key: tuple) -> int:
        return _line_of(self.lines, key)


def _kind(x: Any) -> str:
    return {dict: "a table", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(x), type(x).__name__)


# --- arrays --------------------------------------------------------------------------------------

def _array_ref(value: Any, base: Path, ctx: _Context, key: tuple, cache: dict) -> np.ndarray:
    """The array a manifest names: "file.npy" / "file.npz:name", or a table { array = ..., dtype? =
    "bfloat16", transpose? = false }. ``dtype``: numpy keeps bf16 and fp8 arrays in .npz as raw
    bytes, which are read as that dtype; real values must already be values of it (no rounding)."""
    if not isinstance(value, dict):
        return _array(value, base, ctx, key, cache)
    a = _Table(value, key, ctx)
    dtype = a.text("dtype", False)
    arr = _array(a.text("array"), base, ctx, key + ("array",), cache, raw=dtype is not None)
    if a.boolean("transpose"):
        arr = np.ascontiguousarray(arr.T)
    a.done(" (array, dtype, transpose)")
    return _as_dtype(arr, dtype, ctx, key + ("dtype",)) if dtype is not None else arr


def _array(ref: str, base: Path, ctx: _Context, key: tuple, cache: dict, raw: bool = False) -> np.ndarray:
    """The array ``ref`` names: "file.npy" or "file.npz:name", relative to the manifest (``raw``:
    raw bytes, as numpy stores ml_dtypes arrays, are taken: a dtype will read them)."""
    file, _, member = ref.partition(":")
    name = ".".join(map(str, key))
    if not file:
        ctx.fail(key, f"{name}: {ref!r} names no file; write \"file.npy\" or \"file.npz:name\"")
    path = ctx.file(base, file, key)
    if not path.is_file():
        ctx.fail(key, f"{name}: no file {file!r} next to the manifest")
    try:
        if path not in cache:
            loaded = np.load(path, allow_pickle=False)
            if isinstance(loaded, np.lib.npyio.NpzFile):
                with loaded:  # only the member names now: a member is read when named (an archive's
                    loaded = list(loaded.files)  # other arrays are never loaded)
            cache[path] = loaded
        data = cache[path]
        if isinstance(data, list):
            if not member:
                ctx.fail(key, f"{name}: {file!r} is an .npz archive; name the array: "
                              f"\"{file}:NAME\" with NAME one of {', '.join(data)}")
            if member not in data:
                ctx.fail(key, f"{name}: {file!r} has no array {member!r}; "
                              f"it has: {', '.join(data)}")
            if (path, member) not in cache:
                with np.load(path, allow_pickle=False) as archive:
                    cache[(path, member)] = archive[member]
            arr = cache[(path, member)]
        else:
            if member:
                ctx.fail(key, f"{name}: {file!r} is one array (.npy); drop \":{member}\"")
            arr = data
    except ManifestError:
        raise
    except Exception as e:  # a corrupt or truncated .npy/.npz, a pickled object array
        ctx.fail(key, f"{name}: cannot read {ref!r} as a numpy array: {e}")
    if arr.dtype.kind == "V" and not raw:
        ctx.fail(key, f"{name}: {file!r} holds raw {arr.dtype.itemsize}-byte elements (numpy keeps bfloat16 and fp8 "
                      f"arrays so in .npz); say which dtype: {{ array = {ref!r}, dtype = \"bfloat16\" }}")
    if arr.dtype.kind not in "fiubV" and arr.dtype.name not in ("bfloat16",) and "float8" not in arr.dtype.name:
        ctx.fail(key, f"{name}: {file!r} holds {arr.dtype} values; expected real numbers")
    return np.asarray(arr)


# --- the sections ----------------------------------------------------------------------------------

def _target_of(platform: str) -> str:
    base = platform.split("[", 1)[0]
    return {"trainium.trn1": "trn1", "trainium.inf2": "inf2", "neuron.v2": "trn1", "trainium.trn2": "trn2",
            "neuron.v3": "trn2"}.get(base, "trn2")


def _tiling(t: _Table, default_target: str) -> Tiling:
    target = t.text("target", False, tuple(target_names()), default_target)
    tiles = {k: t.integer(k, 1, 1 << 24, False) for k in ("m_tile", "n_tile", "k_tile")}
    group = t.integer("psum_group", 1, 65536, False)
    double_row = t.boolean("fp8_double_row")
    dtypes = tuple(FORMAT_BYTES)
    buffers, matmuls, dmas, stages = [], [], [], []
    for b in t.tables("buffers"):
        name = b.text("name")
        shape = b.shape("shape")
        pd = b.integer("partition_dim", 0, len(shape) - 1, False, 0)
        buffers.append(Buffer(name, b.text("memory", choices=MANIFEST_MEMORIES), b.text("dtype", choices=dtypes), shape, pd,
                              b.integer("start_partition", 0, 127, False, 0), b.integer("bufs", 1, 64, False, 1),
                              t.ctx.line(b.path)))
        b.done()
    seen: set[str] = set()
    for b in buffers:
        if b.name in seen:
            t.ctx.fail(("tiling", "buffers"), f"tiling.buffers: the name {b.name!r} is used twice (line {b.line})")
        seen.add(b.name)
    for m in t.tables("matmuls"):
        matmuls.append(Matmul(m.text("name"), m.text("stationary"), m.text("moving"), m.text("psum"),
                              m.boolean("double_row"), t.ctx.line(m.path)))
        m.done()
    for d in t.tables("dmas"):
        dmas.append(Dma(d.text("name"), d.text("buffer"), d.text("direction", choices=("load", "store")),
                        d.integer("bytes_per_partition", 1, 1 << 31), d.integer("partitions", 1, 1 << 16),
                        d.integer("stride_bytes", 0, 1 << 31, False, 0), d.integer("transfers", 1, 1 << 40, False, 1),
                        t.ctx.line(d.path)))
        d.done()
    for s in t.tables("stages"):
        stages.append(Stage(s.text("name"), s.text("engine", choices=MANIFEST_ENGINES), s.text("instruction"), s.names("operands"),
                            s.integer("free_size", 1, 1 << 31, False), t.ctx.line(s.path)))
        s.done()
    t.done()
    return Tiling(target, tiles["m_tile"], tiles["n_tile"], tiles["k_tile"], group, double_row, tuple(buffers),
                  tuple(matmuls), tuple(dmas), tuple(stages), t.ctx.line(t.path))


def _performance(p: _Table, base: Path) -> Performance:
    claim = p.real("claimed_speedup", 0.0, 1e6, False, open_low=True)
    confidence = p.real("confidence", 0.5, 0.999, False, 0.95)
    timings = None
    tt = p.table("timings")
    if tt is not None:
        timings = Timings(tt.numbers("baseline"), tt.numbers("candidate"),
                          tt.text("unit", False, ("s", "ms", "us", "ns"), "ms"),
                          tt.text("baseline_label", False, default="baseline"),
                          tt.text("candidate_label", False, default="candidate"), p.ctx.line(tt.path))
        tt.done()
    profiles = []
    for q in p.tables("profiles"):
        profiles.append(Profile(q.text("label", choices=("baseline", "candidate")), q.text("file"), p.ctx.line(q.path)))
        if not p.ctx.file(base, profiles[-1].path, q.path + ("file",)).is_file():
            p.ctx.fail(q.path + ("file",), f"{q._name('file')}: no file {profiles[-1].path!r} next to the manifest")
        q.done()
    p.done()
    return Performance(claim, timings, tuple(profiles), confidence, p.ctx.line(p.path))


def parse(text: str, path: str | os.PathLike = "manifest.toml", *, allow_outside: bool = False) -> Manifest:
    """The manifest in ``text``; ``path`` places it (relative file names resolve next to it) and
    names it in errors. Every file it names must lie in its folder (or below) unless
    ``allow_outside``."""
    path = Path(path)
    source = str(path)
    if not isinstance(text, str):
        raise ManifestError(f"{source}: expected TOML text, got {type(text).__name__}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{source}: not valid TOML: {e}") from None
    ctx = _Context(source, _key_lines(text), None if allow_outside else path.parent.resolve())
    top = _Table(data, (), ctx)
    top.integer("schema", 1, 1, False)

    port = top.table("port", True)
    name = port.text("name")
    description = port.text("description", False, default="")
    port.done()

    o = top.table("operation", True)
    op_name = o.text("op", choices=OPERATIONS)
    fmts = tuple(_formats())
    in_fmt = o.text("in_fmt", choices=fmts)
    out = o.text("out", choices=fmts)
    params = o.get("params", (dict,), "a table of numeq.ops keywords", False, {})
    stated = None
    st = o.table("tolerance")
    if st is not None:
        stated = {"rtol": st.real("rtol", 0.0, 1.0, False, 0.0), "atol": st.real("atol", 0.0, 1e308, False, 0.0)}
        st.done()
    o.done()

    cache: dict = {}
    base = path.parent
    required, optional, _ = _OPERATIONS[op_name]
    it = top.table("inputs", True)
    inputs = {}
    for n in required + optional:
        ref = it.get(n, (str, dict), "an array: \"file.npz:key\" or { array = ..., dtype = ... }", n in required)
        if ref is not None:
            inputs[n] = _array_ref(ref, base, ctx, ("inputs", n), cache)
    it.done(f" (the inputs of {op_name}: {', '.join(required)}"
            f"{'; optional ' + ', '.join(optional) if optional else ''})")

    kt = top.table("kernel")
    kernel = _kernel(kt, base, cache) if kt is not None else None
    ot = top.table("outputs", kernel is None)
    outputs = {}
    for n, req in (("gpu", kernel is None), ("nki", kernel is None), ("simulator", False)):
        ref = ot.get(n, (str, dict), "an array: \"file.npz:key\" or { array = ..., dtype = ... }",
                     req) if ot is not None else None
        if ref is not None:
            outputs[n] = _array_ref(ref, base, ctx, ("outputs", n), cache)
            if outputs[n].dtype.kind == "b":
                ctx.fail(("outputs", n), f"outputs.{n}: {ref!r} holds boolean values; expected the kernel's numeric "
                                         "output (real numbers)")
    if ot is not None:
        ot.done()

    pt = top.table("platforms", True)
    gpu = pt.text("gpu")
    trn = pt.text("trainium", kernel is None, default="trainium.trn2")
    for key, platform in (("gpu", gpu), ("trainium", trn)):  # misspelt: a bad manifest, not a failing port
        try:
            _core.core_platform_json(platform)
        except ValueError as e:
            ctx.fail(("platforms", key), f"platforms.{key}: {e}")
    accept = pt.text("accept", False, TIERS[:-1], "probabilistic")
    fp = pt.real("failure_probability", 0.0, 0.5, False, 1e-6, open_low=True)
    pt.done()

    tt = top.table("tiling")
    tiling = _tiling(tt, _target_of(trn)) if tt is not None else None
    pf = top.table("performance")
    performance = _performance(pf, base) if pf is not None else None
    top.done()
    return Manifest(path, name, description, op_name, in_fmt, out, params, inputs, outputs, gpu, trn, accept, fp,
                    stated, tiling, performance, tiling.target if tiling else _target_of(trn), ctx.lines, kernel)


def _as_dtype(arr: np.ndarray, dtype: str, ctx: _Context, key: tuple) -> np.ndarray:
    """``arr`` cast to the NKI dtype ``dtype`` (its values must be values of it: no rounding)."""
    from ..nki.machine.dtypes import dtype_of

    name = ".".join(map(str, key))
    try:
        d = dtype_of(dtype, name)
    except (TypeError, ValueError) as e:
        ctx.fail(key, str(e))
    if arr.dtype.kind == "V":  # raw bytes: read as the dtype's storage
        storage = np.dtype(d.storage)
        if arr.dtype.itemsize != storage.itemsize:
            ctx.fail(key, f"{name}: the array holds {arr.dtype.itemsize}-byte elements; {dtype} takes "
                          f"{storage.itemsize}")
        return arr.view(storage)
    if d.kind == "float" and arr.dtype.kind in "biu":
        # As numeq nki run's --dtype: integers for a float dtype are as often bit patterns
        # (x.view(np.uint8)) as values, so neither reading is taken silently.
        ctx.fail(key, f"{name}: the array holds {arr.dtype} integers, and {dtype} is a float dtype: for its bit "
                      f"patterns save it as raw bytes (x.view('V{np.dtype(d.storage).itemsize}')) or as the ml_dtypes "
                      "array itself; for values, save them as floats (float32)")
    cast = arr.astype(d.storage)
    if not np.array_equal(cast.astype(np.float64), arr.astype(np.float64), equal_nan=True):
        ctx.fail(key, f"{name}: the array's values are not all values of {dtype}; the manifest casts without rounding")
    return cast


def _kernel(k: _Table, base: Path, cache: dict) -> KernelSpec:
    file = k.text("file")
    path = k.ctx.file(base, file, ("kernel", "file"))
    if not path.is_file():
        k.ctx.fail(("kernel", "file"), f"kernel.file: no file {file!r} next to the manifest")
    function = k.text("function")
    grid = k.get("grid", (list,), "an array of positive integers", False, [])
    if not all(isinstance(g, int) and not isinstance(g, bool) and 0 < g <= 1 << 16 for g in grid):
        k.ctx.fail(("kernel", "grid"), f"kernel.grid: expected an array of positive integers, got {grid!r}")
    raw = k.get("args", (dict,), "a table of the kernel's parameters", False, {})
    args: dict = {}
    for name, value in raw.items():
        key = ("kernel", "args", name)
        if isinstance(value, dict):  # { array = "file.npz:key", dtype? = "bfloat16", transpose? = false }
            args[name] = _array_ref(value, base, k.ctx, key, cache)
        elif isinstance(value, str) and (".npy" in value or ".npz" in value):
            args[name] = _array(value, base, k.ctx, key, cache)
        elif isinstance(value, (bool, int, float, str)):
            args[name] = value
        else:
            k.ctx.fail(key, f"kernel.args.{name}: expected an array (\"file.npz:key\" or {{ array = ..., dtype = "
                            f"..., transpose = ... }}), a number, a boolean or a string, got {_kind(value)}")
    k.done()
    return KernelSpec(path, function, tuple(grid), args, k.ctx.line(("kernel",)))


def load(path: str | os.PathLike, *, allow_outside: bool = False) -> Manifest:
    """The manifest at ``path`` (a TOML file), validated; the files it names must lie in its folder
    (or below) unless ``allow_outside``."""
    p = Path(path)
    if not p.is_file():
        raise ManifestError(f"manifest: no file {str(path)!r}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(f"{path}: not UTF-8 text: {e}") from None
    return parse(text, p, allow_outside=allow_outside)
