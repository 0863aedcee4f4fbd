"""Helpers shared by the numeq.nki tests (test_nki_*.py): where a kernel's line is, the examples
of examples/nki as modules, fp32 rounding for the oracles, and the small kernel helpers the tests'
kernels call (as NKI kernels call helpers of their own).

Nothing here is an oracle of what numeq.nki computes: the tests hold those. These are the
plumbing around them, written once.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable

import numpy as np

from numeq import nki

nl, nisa = nki.language, nki.isa
F32_MIN = float(np.finfo(np.float32).min)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nki"


# --- kernel lines (numeq.nki reports a finding's place as "file.py:LINE") ----------------------------

def source_line(fn: Callable, text: str, unique: bool = False) -> str:
    """"file.py:LINE" of the first line of ``fn``'s source (a kernel function, or an ``@nki.jit``
    kernel: its ``.func``) holding ``text``; ``unique``: it must be the only such line."""
    fn = getattr(fn, "func", fn)
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, line in enumerate(lines) if text in line]
    assert hits, f"{text!r} not in {fn.__name__}"
    assert not unique or len(hits) == 1, f"{fn.__name__}: expected one line holding {text!r}, got {hits}"
    return f"{os.path.basename(inspect.getsourcefile(fn))}:{hits[0]}"


def line_finder(path: str) -> Callable[[str], str]:
    """For the test file at ``path``: a function from a marker (a comment on an instruction call,
    found once in the whole file outside ``line_of(...)`` calls) to "file.py:LINE"."""
    with open(path) as source:
        lines = source.read().splitlines()
    name = os.path.basename(path)

    def line_of(marker: str) -> str:
        hits = [i + 1 for i, text in enumerate(lines) if marker in text and "line_of(" not in text]
        assert len(hits) == 1, marker
        return f"{name}:{hits[0]}"

    return line_of


def errors(r: nki.Run, rule: str) -> list:
    """The findings of run ``r`` under ``rule``."""
    return [f for f in r.findings if f.rule == rule]


# --- oracles' arithmetic ---------------------------------------------------------------------------

def f32(x: Any) -> np.ndarray:
    """x rounded to fp32 once (via float64, exact for fp32 inputs)."""
    return np.asarray(x, dtype=np.float64).astype(np.float32)


# --- helpers that kernels call ----------------------------------------------------------------------

def sbuf(a: Any, dtype: Any = None) -> Any:
    """An SBUF tile holding HBM tensor ``a`` (a helper as kernels write them)."""
    t = nl.ndarray(a.shape, dtype or a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    return t


def hbm(t: Any) -> Any:
    """A shared-HBM tensor holding SBUF tile ``t`` (the kernel's output)."""
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def store_each(tiles: Iterable[Any], names: Iterable[str] | None = None) -> list:
    """Older interface: each tile stored (nl.store) into a shared-HBM tensor of its shape and
    dtype (named after ``names`` where given); the tensors, in order: a kernel's outputs."""
    tiles = list(tiles)
    names = list(names) if names is not None else [None] * len(tiles)
    outs = []
    for tile, name in zip(tiles, names):
        o = nl.ndarray(tile.shape, tile.dtype, buffer=nl.shared_hbm, **({"name": name} if name else {}))
        nl.store(o, tile)
        outs.append(o)
    return outs


def run_named(build: Callable, *arrays: Any, **kwargs: Any) -> dict[str, np.ndarray]:
    """Run a kernel (older interface) whose body is ``build``: it returns a dict of two or more
    tiles by name, each stored to HBM (store_each). The run must complete without errors; the
    outputs by name."""
    names: list[str] = []

    @functools.wraps(build)  # the kernel's parameters are build's (numeq.nki names inputs by them)
    def kernel(*args: Any) -> list:
        tiles = build(*args)
        names.extend(tiles)
        return store_each(tiles.values(), tiles)

    r = nki.run(kernel, *arrays, **kwargs)
    assert r.completed and not r.errors, "\n".join(map(str, r.findings))
    return dict(zip(names, r.outputs))


# --- the examples ------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def example(name: str) -> ModuleType:
    """examples/nki/NAME.py as a module (its kernel, inputs() and constants), loaded once. Its folder
    is on sys.path while it loads, as when it runs as a script (the examples import ``_common``)."""
    spec = importlib.util.spec_from_file_location(f"nki_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLES))
    return module


# --- a kernel several files judge -----------------------------------------------------------------

def matmul_summing_k_tiles(acc_dtype: Any, k_tiles: Callable[[int], int] = lambda n: n) -> Callable:
    """An ``@nki.jit`` kernel ``(a_t [K, M], b [K, N]) -> out [M, N]`` fp32 that adds each K tile's
    PSUM result into an SBUF tile of ``acc_dtype`` (the running sum porters write: bf16 is the
    mistake); its loop reads ``k_tiles(K // 128)`` of the K tiles (one short: another mistake)."""
    nl, nisa = nki.language, nki.isa

    @nki.jit
    def matmul_summing_k_tiles(a_t, b):
        K, M = a_t.shape
        N = b.shape[1]
        out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((M, N), acc_dtype, buffer=nl.sbuf)
        nisa.memset(acc, value=0.0)
        for k in nl.sequential_range(k_tiles(K // 128)):
            at = nl.ndarray((128, M), a_t.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, N), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[k * 128:(k + 1) * 128, :])
            nisa.dma_copy(dst=bt, src=b[k * 128:(k + 1) * 128, :])
            part = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(part, at, bt)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=part, op=nl.add)  # RUNNING-SUM
        res = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    return matmul_summing_k_tiles


# A kernel file of the older interface whose affine_range loop carries a value (acc) from one
# iteration to the next: what Run.hazards() finds (in the current interface affine_range is
# range: no hazard); the CLI and the pytest option tests write it out as the user's file.
CARRIED_KERNEL = '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def decay(x):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        xi = nl.load(x[i])
        t = nisa.tensor_scalar(data=acc, op0=nl.multiply, operand0=0.5)  # reads acc
        acc[...] = nisa.tensor_tensor(t, xi, op=nl.add)  # writes acc
    nl.store(out, value=acc)
    return out
'''


def kernel_module(path: Path, text: str) -> ModuleType:
    """The module of kernel file ``path`` holding ``text``, imported under numeq.nki.installed()
    (its ``import nki`` / ``neuronxcc.nki`` resolve to numeq), as a user's test imports it."""
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    with nki.installed():
        spec.loader.exec_module(module)
    return module
