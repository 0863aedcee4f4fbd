"""``installed()``: ``import nki``, ``nki.language``, ``nki.isa``, ``neuronxcc.nki`` ... resolve to
numeq's modules while the block runs (``sys.modules`` restored after), so kernel files and their
test modules import unchanged and ``@nki.jit`` kernels called with numpy arrays run on numeq, as
AWS's simulator mode does (nki-library's harness swaps its CPU simulator in the same way).
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Iterator

from .machine.targets import DEFAULT_TARGET

__all__ = ["installed", "settings", "MODULE_NAMES"]

_settings: list[dict] = []


def settings() -> dict | None:
    return _settings[-1] if _settings else None


def _modules() -> dict[str, types.ModuleType]:
    from .. import nki as package
    from . import isa, language, typing as nki_typing

    constants = types.ModuleType("nki.isa.constants")
    for name in ("engine", "dge_mode", "oob_mode", "reduce_cmd", "matmul_perf_mode", "nc_version"):
        setattr(constants, name, getattr(isa, name))
    mods = {
        "nki": package, "nki.language": language, "nki.isa": isa, "nki.isa.constants": constants,
        "nki.typing": nki_typing,
        "neuronxcc": types.ModuleType("neuronxcc"), "neuronxcc.nki": package, "neuronxcc.nki.language": language,
        "neuronxcc.nki.isa": isa, "neuronxcc.nki.isa.constants": constants, "neuronxcc.nki.typing": nki_typing,
    }
    mods["neuronxcc"].nki = package  # type: ignore[attr-defined]
    return mods


MODULE_NAMES = ("nki", "nki.language", "nki.isa", "nki.isa.constants", "nki.typing", "neuronxcc", "neuronxcc.nki",
                "neuronxcc.nki.language", "neuronxcc.nki.isa", "neuronxcc.nki.isa.constants", "neuronxcc.nki.typing")


@contextlib.contextmanager
def installed(target: str = DEFAULT_TARGET, assume: dict | None = None) -> Iterator[list]:
    """Inside the block NKI's module names are numeq's; yields the list of ``Run`` objects of the
    kernels called in it."""
    from .machine.targets import target as _target
    from .machine.assumptions import chosen as _chosen

    _target(target)
    _chosen(target, assume)  # checks the names and values now, not at the first kernel call
    saved = {name: sys.modules.get(name) for name in MODULE_NAMES}
    runs: list = []
    sys.modules.update(_modules())
    _settings.append({"target": target, "assume": dict(assume or {}), "runs": runs})
    try:
        yield runs
    finally:
        _settings.pop()
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
