"""NKI's documented names that numeq does not compute yet, as names that exist.

A kernel file *mentions* names long before it calls them: a module-level table holding
``nl.float8_e4m3fn_x4``, ``class Config(nl.NKIObject)``, an annotation ``dtype: nki.dtype``,
``hasattr(nisa, "nc_matmul_mx")``. AWS's package has every documented name, so a mention must
import, name, subclass, annotate and ``hasattr`` on numeq too; only a *call* of something numeq
does not compute raises ``Unsupported``, naming the kernel's line (docs/nki.md's table of NKI
names says what is implemented).

Each row below is a documented name (module, name, kind) with the page that documents it. The
public modules (``nki``, ``nki.language``, ``nki.isa``, ``nki.compiler``, ``nki.collectives``) take
their missing names from here; ``nki.isa``'s instructions are rows of the instruction table
instead (``instructions.unimplemented``).
"""

from __future__ import annotations

from typing import Any, Callable

from .machine.context import Unsupported, active, where

__all__ = ["PLACEHOLDERS", "placeholder_class", "placeholder_function", "placeholders_of"]

_API = "nki API reference (aws-neuron-sdk nki/api)"
_OLDER = "neuronxcc.nki API reference (SDK 2.26, general/nki/api)"

# (module, name, kind, source). kind: "function" (raises when called), "class" (subclassable;
# making one raises), "value" (an object that raises when called or used as a tile).
PLACEHOLDERS: tuple[tuple[str, str, str, str], ...] = (
    # nki.language: documented functions numeq does not compute yet.
    *(("nki.language", n, "function", _API) for n in (
        "softmax", "rms_norm")),
    *(("nki.language", n, "function", _OLDER) for n in (
        "all_reduce", "atomic_rmw", "gemm_grid", "gemm_stationary_grid")),
    # nki.isa: classes of the register and instruction interface (NeuronCore registers: issue 41).
    ("nki.isa", "NkiInstruction", "class", _API),
    ("nki.isa", "get_nc_sub_version", "function", _API),
    ("nki", "FrameworkKernel", "class", _OLDER),
    # nki.collectives: the variable-size and ring collectives (the rest: instructions.collectives).
    *(("nki.collectives", n, "function", _API) for n in (
        "all_gather_v", "all_to_all_v", "collective_permute_implicit", "collective_permute_implicit_reduce",
        "collective_permute_implicit_current_processing_rank_id")),
)


def _refuse(module: str, name: str, source: str) -> Unsupported:
    at = where() if active() else "<kernel>"
    return Unsupported(f"{at}: numeq.nki does not implement {module}.{name} (documented: {source}); see "
                       "docs/nki.md's table of NKI names")


def placeholder_function(module: str, name: str, source: str) -> Callable:
    """A documented function numeq does not compute: it exists, and calling it raises."""

    def function(*args: Any, **kwargs: Any) -> Any:
        raise _refuse(module, name, source)

    function.__name__ = function.__qualname__ = name
    function.__module__ = "numeq." + module
    function.__doc__ = f"{module}.{name}: documented by NKI ({source}); numeq.nki does not implement it yet."
    function._numeq_placeholder = True  # type: ignore[attr-defined]
    return function


def placeholder_class(module: str, name: str, source: str, base: type = object) -> type:
    """A documented class numeq does not model: it can be named, annotated and subclassed;
    making one raises (a subclass that defines its own ``__init__`` is the kernel author's)."""

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls.__dict__.get("_numeq_placeholder"):
            raise _refuse(module, name, source)
        return base.__new__(cls) if base is object else base.__new__(cls, *args, **kwargs)

    return type(name, (base,), {"__new__": __new__, "_numeq_placeholder": True, "__module__": "numeq." + module,
                                "__doc__": f"{module}.{name}: documented by NKI ({source}); numeq.nki does not "
                                           "implement it yet."})


def placeholders_of(module: str) -> dict[str, Any]:
    """The placeholder objects of ``module`` ("nki.language", ...), by name."""
    made: dict[str, Any] = {}
    for mod, name, kind, source in PLACEHOLDERS:
        if mod != module:
            continue
        made[name] = (placeholder_class(mod, name, source) if kind == "class"
                      else placeholder_function(mod, name, source))
    return made
