"""Which NKI language a kernel is written in, read from the namespace its file imports.

AWS's compiler takes the language from the import: "To use the Beta 2 language and compiler,
import the new ``nki.*`` namespace ... To utilize the Beta 1 language and compiler, continue
importing the legacy ``neuronxcc.nki.*`` namespace", and "a single file cannot utilize both
versions of the language" (nki/deep-dives/nki-beta-versions.rst, Neuron 2.27 and 2.28). numeq
runs both through one set of instructions, so the rules that only one compiler applies (what NKI
0.3.0 and later refuse) ask here: "current" (the file imports ``nki``), "older" (``neuronxcc.nki``)
or None (neither, both, or no readable file: such rules stay silent).
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
from typing import Any, Callable

__all__ = ["language_of"]


def language_of(fn: Callable) -> str | None:
    """"current", "older" or None for kernel ``fn`` (a function, or an ``nki.jit`` kernel)."""
    func = getattr(fn, "func", fn)
    code = getattr(inspect.unwrap(func), "__code__", None)
    if code is None:
        return None
    try:
        stamp = os.stat(code.co_filename).st_mtime_ns
    except (OSError, ValueError):
        return None
    return _of_file(code.co_filename, stamp)


@functools.lru_cache(maxsize=256)
def _of_file(filename: str, stamp: int) -> str | None:
    try:
        with open(filename, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    found = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name == "nki" or name.startswith("nki."):
                found.add("current")
            elif name.startswith("neuronxcc.nki") or name == "neuronxcc":
                found.add("older")
    return found.pop() if len(found) == 1 else None
