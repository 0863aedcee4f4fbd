"""``nki.isa`` on numeq: NeuronCore instructions, one function per row of the instruction table
(``instructions.table``), each taking the generic path (``instructions.path``): its arguments bound
to one of its forms, its operands checked against the target's limits (``machine.rules``), its
semantics computed the way numeq's Trainium model says the engine computes it
(``machine.arithmetic``), recorded in the run's trace.

Current interface (destination first): ``nisa.nc_matmul(dst, stationary, moving)``,
``nisa.dma_copy(dst=, src=)``, ``nisa.tensor_copy(dst, src)``, ... The older value-returning form
(``res = nisa.nc_matmul(stationary, moving)``) is accepted too: the instruction allocates its
result (PSUM for the Tensor Engine, SBUF otherwise) and returns it.
"""

from __future__ import annotations

from typing import Any

# Each engine's module registers its rows of the instruction table (imported under private names:
# nki.isa.vector_engine and its kin are NKI's engine constants).
from .instructions import dma_engine as _dma_rows, gpsimd_engine as _gpsimd_rows  # noqa: F401
from .instructions import scalar_engine as _scalar_rows, tensor_engine as _tensor_rows  # noqa: F401
from .instructions import vector_engine as _vector_rows, vector_select as _select_rows  # noqa: F401
from .instructions import vector_statistics as _statistics_rows  # noqa: F401
from .instructions import unimplemented as _unimplemented_rows  # noqa: F401
from .instructions.path import public_functions
from .machine.context import current
from .machine.engines import Engine
from .machine.context import Unsupported as _Unsupported, active as _active, where as _where

__all__ = ["dge_mode", "engine", "get_nc_version", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd"]


class engine:  # noqa: N801 - NKI's spelling (nisa.engine.vector, ...)
    tensor = Engine("tensor")
    vector = Engine("vector")
    scalar = Engine("scalar")
    activation = Engine("scalar")
    gpsimd = Engine("gpsimd")
    pool = Engine("gpsimd")
    sync = Engine("dma")
    dma = Engine("dma")
    unknown = Engine("unknown")


class matmul_perf_mode:  # noqa: N801 - nisa.matmul_perf_mode (0.2.0+)
    none = "none"
    double_row = "double_row"


class oob_mode:  # noqa: N801
    error = "error"
    skip = "skip"


class dge_mode:  # noqa: N801
    unknown, swdge, hwdge, none = "unknown", "swdge", "hwdge", "none"


class reduce_cmd:  # noqa: N801
    idle, reset, reduce, reset_reduce, load_reduce = "idle", "reset", "reduce", "reset_reduce", "load_reduce"


class nc_version:  # noqa: N801
    gen2, gen3, gen4 = 2, 3, 4


def get_nc_version() -> int:
    """The current target's NeuronCore generation (nc_version.gen2 for trn1/inf2, gen3 for trn2)."""
    return current().target.generation


# Older releases' engine constants.
tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = (
    engine.tensor, engine.vector, engine.scalar, engine.gpsimd, engine.unknown)


# The instructions: one public function per row of the table.
globals().update(public_functions())
__all__ += sorted(public_functions())


def __getattr__(name: str) -> Any:
    # An ISA name numeq does not implement: say so, with the kernel's line, never an AttributeError
    # from inside numeq.
    if name.startswith("_"):
        raise AttributeError(name)
    raise _Unsupported(f"{_where() if _active() else '<import>'}: numeq.nki does not implement nki.isa.{name}; see "
                      "docs/nki.md's table of NKI names")
