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


def _module(name: str, doc: str, names: dict) -> types.ModuleType:
    mod = types.ModuleType(name, doc)
    for key, value in names.items():
        setattr(mod, key, value)
    mod.__all__ = sorted(names)  # type: ignore[attr-defined]
    return mod


def _modules() -> dict[str, types.ModuleType]:
    """NKI's module names (as AWS's package and its CPU simulator lay them out) -> numeq's modules."""
    from .. import nki as package
    from . import collectives, compiler, isa, language, neuron_dtypes, typing as nki_typing
    from .machine.memory import Tensor

    constants, dtypes = isa.constants, language.dtypes
    tensor = _module("nki.tensor", "NKI's tensor type.", {"NkiTensor": Tensor, "tensor": Tensor})
    builtin = package.builtin
    nki_modules = {
        "": package, ".language": language, ".isa": isa, ".isa.constants": constants, ".typing": nki_typing,
        ".compiler": compiler, ".compiler.sbuf": compiler.sbuf, ".compiler.psum": compiler.psum,
        ".collectives": collectives, ".language.dtypes": dtypes, ".dtype": dtypes, ".tensor": tensor,
        ".builtin": builtin,
    }
    mods: dict[str, types.ModuleType] = {}
    # ``nki`` (the current interface), ``neuronxcc.nki`` (the older one) and ``nki_cpu_simulator.nki``
    # (the module names of AWS's CPU simulator, which nki-library's simulation harness imports).
    for prefix in ("nki", "neuronxcc.nki", "nki_cpu_simulator.nki"):
        for suffix, mod in nki_modules.items():
            mods[prefix + suffix] = mod
    for parent in ("neuronxcc", "nki_cpu_simulator"):
        mods[parent] = _module(parent, f"{parent} on numeq: its nki package is numeq.nki.", {"nki": package})
    # The dtype helpers AWS's test suites import (numeq.nki.neuron_dtypes), under both their names.
    mods["neuron_dtypes"] = neuron_dtypes
    mods["neuronxcc.starfish.support.dtype"] = neuron_dtypes
    mods["neuronxcc.starfish.support"] = _module("neuronxcc.starfish.support", "", {"dtype": neuron_dtypes})
    mods["neuronxcc.starfish"] = _module("neuronxcc.starfish", "", {"support": mods["neuronxcc.starfish.support"]})
    mods["neuronxcc"].starfish = mods["neuronxcc.starfish"]  # type: ignore[attr-defined]
    return mods


MODULE_NAMES = tuple(f"{prefix}{suffix}" for prefix in ("nki", "neuronxcc.nki", "nki_cpu_simulator.nki")
                     for suffix in ("", ".language", ".isa", ".isa.constants", ".typing", ".compiler",
                                    ".compiler.sbuf", ".compiler.psum", ".collectives", ".language.dtypes", ".dtype",
                                    ".tensor", ".builtin")) + (
    "neuronxcc", "nki_cpu_simulator", "neuron_dtypes", "neuronxcc.starfish", "neuronxcc.starfish.support",
    "neuronxcc.starfish.support.dtype")


@contextlib.contextmanager
def installed(target: str | None = None, assume: dict | None = None, hazards: bool = False) -> Iterator[list]:
    """Inside the block NKI's module names are numeq's; yields the list of ``Run`` objects of the
    kernels called in it (each call's findings; the latest call's run whole, earlier ones released
    to their findings so that a long block holds one run's memory). ``target``: every kernel's, or
    None: the one AWS's environment variables name at each call (NEURON_PLATFORM_TARGET_OVERRIDE,
    NKI_NC_VERSION), else trn2. ``hazards``: each call's ``Run.hazards()`` join its findings (an
    error one raises ``KernelFault`` as the limits do)."""
    if not isinstance(hazards, bool):
        raise TypeError(f"hazards: True or False, got {hazards!r}")
    from .machine.targets import target as _target
    from .machine.assumptions import chosen as _chosen

    if target is not None:
        _target(target)
    _chosen(target or DEFAULT_TARGET, assume)  # checks the names and values now, not at the first call
    saved = {name: sys.modules.get(name) for name in MODULE_NAMES}
    runs: list = []
    sys.modules.update(_modules())
    _settings.append({"target": target, "assume": dict(assume or {}), "runs": runs, "hazards": hazards})
    try:
        yield runs
    finally:
        _settings.pop()
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
