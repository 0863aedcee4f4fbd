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

import os
import sys
import types as _types
from typing import Any

from . import collectives, compiler, isa, language, typing
from .machine.context import Finding, Instruction, KernelFault, Unsupported
from .machine.context import active as _active, where as _where
from .machine.memory import Tensor as tensor  # nki.tensor: the older interface's tensor type (annotations)
from ._install import installed
from ._launch import per_rank
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
           "assumptions_of", "compiler", "cpu_simulate", "installed", "isa", "jit", "language", "per_rank", "run",
           "simulate", "simulate_kernel", "tensor", "trace", "typing", "baremetal", "benchmark", "profile"]

# Documented names numeq does not model (nki.FrameworkKernel): they exist, using one raises.
globals().update(_placeholders_of("nki"))


class DeviceKernel(Kernel):
    """A kernel decorated by ``nki.baremetal`` / ``nki.benchmark`` / ``nki.profile`` (SDK 2.26 nki API
    reference: compile for a NeuronDevice and run or time it there). It indexes as a kernel does
    (``kernel[grid]``) and ``nki.simulate`` / ``simulate_kernel`` / ``run`` run it on numeq; called
    itself it raises ``Unsupported`` at the caller's line: numeq has no device."""

    def __init__(self, func: Any, grid: tuple = (), options: dict | None = None, decorator: str = "baremetal") -> None:
        super().__init__(func, grid, options)
        self.decorator = decorator

    def __getitem__(self, grid: Any) -> "DeviceKernel":
        k = super().__getitem__(grid)
        return DeviceKernel(k.func, k.grid, k.options, self.decorator)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _active():  # a helper kernel called inside a run
            return self.func(*args, **kwargs)
        frame = sys._getframe(1)
        at = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        raise Unsupported(f"{at}: nki.{self.decorator}({self.func.__name__}) runs the kernel on a NeuronDevice, which "
                          "numeq does not have; nki.simulate(kernel)(...) runs it on numeq (docs/nki.md)")


def _on_device(decorator: str) -> Any:
    """The decorator ``nki.<decorator>``: bare (``@nki.baremetal``) or with options
    (``nki.benchmark(warmup=5, iters=10)(kernel)``); gives a ``DeviceKernel``."""

    def make(kernel: Any = None, **options: Any) -> Any:
        def wrap(k: Any) -> DeviceKernel:
            return DeviceKernel(getattr(k, "func", k), getattr(k, "grid", ()), {**getattr(k, "options", {}), **options},
                                decorator)

        return wrap if kernel is None else wrap(kernel)

    make.__name__ = make.__qualname__ = decorator
    make.__doc__ = DeviceKernel.__doc__
    make._numeq_placeholder = True  # type: ignore[attr-defined]  # docs/nki.md lists it as raising
    make._numeq_decorator = True  # type: ignore[attr-defined]
    return make


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
