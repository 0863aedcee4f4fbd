"""numeq.nki: run NKI kernels on numeq's NeuronCore model.

Unmodified kernel files (the current ``nki`` interface and the older ``neuronxcc.nki`` one) run on
a CPU; every instruction computes the way numeq's Trainium model says the NeuronCore computes it
(casts through the one rounding kernel, nc_matmul through the Trainium platform's PE-array and
PSUM plan, activations through the platform's function model), the target's limits are checked as
the kernel runs, and every instruction is traced.

Example::

    >>> import numpy as np, ml_dtypes
    >>> from numeq import nki
    >>> nl, nisa = nki.language, nki.isa
    >>> @nki.jit
    ... def double(a):
    ...     out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    ...     t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    ...     nisa.dma_copy(dst=t, src=a)
    ...     nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    ...     nisa.dma_copy(dst=out, src=t)
    ...     return out
    >>> r = nki.run(double, np.ones((128, 512), np.float32))
    >>> float(r.outputs[0, 0]), r.findings
    (2.0, [])
"""

from __future__ import annotations

from . import isa, language, typing
from .machine.context import Finding, Instruction, KernelFault, Unsupported
from ._install import installed
from ._run import ASSUMPTIONS, Kernel, Run, assumptions_of, jit, run, simulate, simulate_kernel
from .machine.rules import RULES
from . import front

front.install()

__all__ = ["ASSUMPTIONS", "Finding", "Instruction", "Kernel", "KernelFault", "RULES", "Run", "Unsupported",
           "assumptions_of", "installed", "isa", "jit", "language", "run", "simulate", "simulate_kernel", "typing"]


def __getattr__(name: str):
    # nki.baremetal, nki.benchmark, nki.profile ... : names of AWS's package numeq does not implement.
    if name.startswith("_"):  # private names and submodules being imported
        raise AttributeError(name)
    raise Unsupported(f"numeq.nki does not implement nki.{name}; see docs/nki.md's table of NKI names")
