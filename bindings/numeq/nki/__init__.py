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

import functools
import os
import sys
import types as _types
from typing import Any

from . import collectives, compiler, isa, language, typing
from .machine.context import Finding, Instruction, KernelFault, Unsupported
from .machine.context import active as _active, where as _where
from .machine.memory import Tensor as tensor  # nki.tensor: the older interface's tensor type (annotations)
from ._install import installed
from ._run import ASSUMPTIONS, Kernel, Run, assumptions_of, jit, run, simulate, simulate_kernel
from .machine.rules import RULES
from .placeholders import placeholders_of as _placeholders_of
from . import front

front.install()

# nki.builtin: the names a kernel reaches without an import (AWS's CPU simulator exposes the module;
# nki-library's harness installs it as ``builtins.builtin``): nki.language's.
builtin = _types.ModuleType("nki.builtin", "The names NKI kernels reach without an import: nki.language's.")
builtin.__dict__.update((name, getattr(language, name)) for name in language.__all__)

# nki.dtype: the dtypes module (AWS's kernels annotate ``dtype: nki.dtype``).
dtype = language.dtypes

# nki.trace: the older releases' name of the kernel decorator (the SDK's own examples use it).
trace = jit

__all__ = ["ASSUMPTIONS", "Finding", "Instruction", "Kernel", "KernelFault", "RULES", "Run", "Unsupported",
           "assumptions_of", "compiler", "cpu_simulate", "installed", "isa", "jit", "language", "run", "simulate",
           "simulate_kernel", "tensor", "trace", "typing", "baremetal", "benchmark", "profile"]

# Documented names numeq does not model (nki.FrameworkKernel): they exist, using one raises.
globals().update(_placeholders_of("nki"))


def _on_device(decorator: str) -> Any:
    """``@nki.baremetal`` / ``@nki.benchmark(...)`` / ``@nki.profile(...)`` (SDK 2.26 nki API
    reference): decorators that compile a kernel for a NeuronDevice and run or time it there.
    Decorating works (test modules decorate at import); calling the decorated kernel raises
    ``Unsupported``, at the caller's line: numeq has no device (``nki.simulate`` runs it on numeq)."""

    def make(kernel: Any = None, **options: Any) -> Any:
        def wrap(k: Any) -> Any:
            name = getattr(k, "__name__", type(k).__name__)

            @functools.wraps(getattr(k, "func", k))
            def on_device(*args: Any, **kwargs: Any) -> Any:
                at = _where() if _active() else _caller()
                raise Unsupported(f"{at}: nki.{decorator}({name}) runs the kernel on a NeuronDevice, which numeq does "
                                  "not have; nki.simulate(kernel)(...) runs it on numeq (docs/nki.md)")

            on_device.options = options  # type: ignore[attr-defined]
            return on_device

        return wrap if kernel is None else wrap(kernel)

    make.__name__ = make.__qualname__ = decorator
    make.__doc__ = _on_device.__doc__
    make._numeq_placeholder = True  # type: ignore[attr-defined]  # docs/nki.md lists it as raising
    make._numeq_decorator = True  # type: ignore[attr-defined]
    return make


def _caller() -> str:
    frame = sys._getframe(2)
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


baremetal, benchmark, profile = _on_device("baremetal"), _on_device("benchmark"), _on_device("profile")


class _ByCores:
    """``nki.cpu_simulate(kernel)[cores](**inputs)``: the entry AWS's test harnesses call (nki-library's
    simulation mode), ``cores`` the logical NeuronCores (LNC) the kernel is launched on."""

    def __init__(self, kernel: object) -> None:
        self._kernel = kernel

    def __getitem__(self, cores: object):
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise ValueError(f"cores: cpu_simulate(kernel)[cores] takes a positive int (1 or 2 logical NeuronCores), "
                             f"got {cores!r}")
        kernel = self._kernel if cores == 1 else Kernel(getattr(self._kernel, "func", self._kernel))[cores]
        return simulate(kernel)  # the target: installed()'s, else AWS's environment variables, else trn2

    def __call__(self, *args: object, **kwargs: object):
        return self[1](*args, **kwargs)


def cpu_simulate(kernel: object) -> _ByCores:
    """Run ``kernel`` on numeq as AWS's CPU simulator entry does: ``cpu_simulate(k)[lnc](**inputs)``
    (or ``cpu_simulate(k)(**inputs)`` on one core); the outputs as numpy arrays."""
    return _ByCores(kernel)
