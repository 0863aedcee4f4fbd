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

import enum
import types
from typing import Any

# Each engine's module registers its rows of the instruction table (imported under private names:
# nki.isa.vector_engine and its kin are NKI's engine constants).
from .instructions import dma_engine as _dma_rows, gpsimd_engine as _gpsimd_rows  # noqa: F401
from .instructions import scalar_engine as _scalar_rows, tensor_engine as _tensor_rows  # noqa: F401
from .instructions import vector_engine as _vector_rows, vector_select as _select_rows  # noqa: F401
from .instructions import vector_statistics as _statistics_rows  # noqa: F401
from .instructions import vector_random as _random_rows  # noqa: F401
from .instructions import gpsimd_gather as _gather_rows  # noqa: F401
from .instructions import mx as _mx_rows  # noqa: F401
from .instructions import core_sync as _core_sync_rows  # noqa: F401
from .instructions.registers import VirtualRegister  # noqa: F401 - its rows first: unimplemented keeps them
from .instructions import unimplemented as _unimplemented_rows  # noqa: F401
from .instructions.path import public_functions
from .machine.context import current
from .machine.dtypes import FP32_MIN
from .machine.engines import Engine
from .placeholders import placeholders_of as _placeholders_of

__all__ = ["NkiValidationError", "dge_mode", "dma_engine", "engine", "fp32", "get_nc_version", "matmul_perf_mode",
           "nc_version", "oob_mode", "reduce_cmd"]


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


class nc_version(enum.IntEnum):  # noqa: N801
    """NeuronCore version (nki.isa API reference: an Enum; gen2 trn1/inf2, gen3 trn2, gen4 trn3).
    An IntEnum: AWS's own kernels compare it with ints and with each other
    (``get_nc_version() >= nisa.nc_version.gen3``, ``get_nc_version() >= 3``)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    """The current target's NeuronCore generation (nc_version.gen2 for trn1/inf2, gen3 for trn2)."""
    return nc_version(current().target.generation)


class dma_engine(enum.Enum):  # noqa: N801
    """DMA transfer engine (nki.isa API reference): the shared DMA, or GpSimd's own."""

    dma = 1
    gpsimd_dma = 2


class NkiValidationError(Exception):
    """Raised when hardware constraints are violated (nki.isa API reference)."""


class fp32:  # noqa: N801 - the older interface's nisa.fp32.min (SDK 2.26 nki.isa reference)
    min = float(FP32_MIN)


# nki.isa.constants: the enumerations as a submodule (``from nki.isa.constants import oob_mode``,
# ``from nki.isa import constants``).
constants = types.ModuleType("nki.isa.constants", "nki.isa's enumerations.")
for _name in ("engine", "dge_mode", "oob_mode", "reduce_cmd", "matmul_perf_mode", "nc_version", "dma_engine"):
    setattr(constants, _name, globals()[_name])

# Older releases' engine constants.
tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = (
    engine.tensor, engine.vector, engine.scalar, engine.gpsimd, engine.unknown)


# The instructions: one public function per row of the table.
globals().update(public_functions())
__all__ += sorted(public_functions())
# Documented classes and functions numeq does not model yet: they exist, using one raises.
globals().update(_placeholders_of("nki.isa"))


def __getattr__(name: str) -> Any:
    raise AttributeError(f"module 'nki.isa' has no attribute {name!r} (numeq.nki: not a documented NKI name; see "
                         "docs/nki.md's table of NKI names)")
