"""``nki.compiler`` (``neuronxcc.nki.compiler``) on numeq: the older interface's direct allocation
and compiler directives (SDK 2.26 nki.compiler API reference).

Directives that steer the compiler (``skip_middle_end_transformations``, ``enable_stack_allocator``,
``force_auto_alloc``, ``no_reorder``, ``allocation_scope``) change where tiles live or when
instructions run, not what they compute: numeq runs a kernel in program order with every tile in
its own memory, so each directive is accepted and changes nothing.

``sbuf`` / ``psum`` are both the memories (``buffer=ncc.sbuf`` is ``ncc.sbuf.auto_alloc()``) and
the allocators (``ncc.sbuf.mod_alloc(base_addr=...)``, ``ncc.sbuf.alloc(func)``). A direct
allocation places a tensor's logical tiles at fixed addresses, several of them possibly at the same
address (modulo allocation). numeq places them as documented (``machine.placement``: each address
checked against the memory) and gives each tile its own storage: for a kernel whose tiles at one
address are never live together (what the direct-allocation guide requires) the values are the
same, and a read that on the hardware would see another tile's values is the
``allocation_conflict`` finding.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from ..machine.memory import MEMORIES

__all__ = ["allocation_scope", "enable_stack_allocator", "force_auto_alloc", "multi_buffer", "no_reorder", "psum",
           "sbuf", "skip_middle_end_transformations"]


class Placement:
    """A direct allocation given as ``buffer=``: the memory (``name``, what nl.ndarray reads) and
    how the compiler was told to place the tensor's logical tiles (``how``, ``arguments``)."""

    def __init__(self, memory: str, how: str, arguments: dict) -> None:
        self.name = memory
        self.how = how
        self.arguments = arguments

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"ncc.{self.name}.{self.how}({args})"


class Allocator:
    """``ncc.sbuf`` / ``ncc.psum``: the memory itself and its allocation functions."""

    def __init__(self, memory: str) -> None:
        self.name = memory
        self.on_chip = MEMORIES[memory].on_chip
        self.__name__ = f"nki.compiler.{memory}"

    def __repr__(self) -> str:
        return f"ncc.{self.name}"

    def auto_alloc(self) -> Placement:
        """The compiler places the tensor (the default)."""
        return Placement(self.name, "auto_alloc", {})

    def alloc(self, func: Callable) -> Placement:
        """Tiles placed by ``func`` (logical tile index -> address)."""
        if not callable(func):
            raise TypeError(f"func: ncc.{self.name}.alloc takes a callable placing each logical tile, got {func!r}")
        return Placement(self.name, "alloc", {"func": func})

    def mod_alloc(self, *, base_addr: int | None = None, base_bank: int | None = None, base_partition: int = 0,
                  num_par_tiles: tuple = (), num_free_tiles: tuple = (), num_bank_tiles: tuple = ()) -> Placement:
        """Modulo allocation: logical tile i at the base address plus (i mod the tile counts)
        times the tile size (SBUF: ``base_addr``; PSUM: ``base_bank``, ``base_addr``)."""
        if self.name == "sbuf":
            if base_addr is None or base_bank is not None or num_bank_tiles:
                raise TypeError("ncc.sbuf.mod_alloc(*, base_addr, base_partition=0, num_par_tiles=(), "
                                "num_free_tiles=()): base_addr is required; base_bank / num_bank_tiles are PSUM's")
            args = {"base_addr": base_addr, "base_partition": base_partition, "num_par_tiles": tuple(num_par_tiles),
                    "num_free_tiles": tuple(num_free_tiles)}
        else:
            if base_bank is None:
                raise TypeError("ncc.psum.mod_alloc(*, base_bank, base_addr=0, base_partition=0, num_bank_tiles=(), "
                                "num_par_tiles=(), num_free_tiles=()): base_bank is required")
            args = {"base_bank": base_bank, "base_addr": base_addr or 0, "base_partition": base_partition,
                    "num_bank_tiles": tuple(num_bank_tiles), "num_par_tiles": tuple(num_par_tiles),
                    "num_free_tiles": tuple(num_free_tiles)}
        return Placement(self.name, "mod_alloc", args)


sbuf = Allocator("sbuf")
psum = Allocator("psum")


def _directive(func: Callable | None, **options: Any) -> Any:
    # Usable bare (@ncc.directive) or called (@ncc.directive(...)): the kernel comes back unchanged.
    if func is None:
        return lambda f: f
    return func


def skip_middle_end_transformations(func: Callable | None = None) -> Any:
    """Compiler directive (no effect on what numeq computes)."""
    return _directive(func)


def enable_stack_allocator(func: Callable | None = None, log_level: int = 50) -> Any:
    """Compiler directive: allocate with the stack allocator (no effect on what numeq computes)."""
    return _directive(func)


def force_auto_alloc(func: Callable | None = None) -> Any:
    """Compiler directive: ignore the kernel's direct allocations (numeq places every tile apart)."""
    return _directive(func)


@contextlib.contextmanager
def allocation_scope() -> Iterator[None]:
    """An allocation scope (the compiler frees its tiles at its end; no effect on values)."""
    yield


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    """Instructions in the block run in program order: numeq runs every instruction so."""
    yield


def multi_buffer(factor: int = 2) -> Any:
    """Loop directive: give a loop's tiles ``factor`` buffers (a scheduling choice; no effect on values)."""
    if not isinstance(factor, int) or factor < 1:
        raise ValueError(f"factor: multi_buffer takes a positive int, got {factor!r}")
    return {"multi_buffer": factor}
