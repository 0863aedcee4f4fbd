"""What every example in this folder does around its kernel: draw the default inputs, run the
kernel on numeq.nki, print the run's summary (findings, per-engine work), and print how the
output compares with an exact reference and with numeq's op-level emulation on the platform the
run reports (``Run.platform``; the consistency law says the two are equal bit for bit).

The kernels themselves stay in their own files, as NKI kernels are written; only this driver
code is shared. An example imports it as ``_common``: run as ``python3 examples/nki/NAME.py``
(or through ``numeq nki run``), the example's folder is first on ``sys.path``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np

import numeq
import numeq.nki


def matmul_inputs(seed: int, m: int, k: int, n: int, dtype: Any = ml_dtypes.bfloat16) -> tuple[np.ndarray, np.ndarray]:
    """a [m, k] and b [k, n]: standard normal values rounded to ``dtype`` (bf16 unless told)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


def run(kernel: Any, *args: Any, **kwargs: Any) -> numeq.nki.Run:
    """numeq.nki.run(kernel, *args, **kwargs), its summary printed."""
    result = numeq.nki.run(kernel, *args, **kwargs)
    print(result.summary())
    return result


def report_error(result: numeq.nki.Run, exact: np.ndarray, relative: bool = False, what: str = "") -> float:
    """Print (and return) the largest absolute error of the output against ``exact`` (float64), or
    the largest relative one; ``what`` names the reference in the relative line."""
    error = np.abs(result.outputs.astype(np.float64) - exact)
    if relative:
        worst = float(np.max(error / np.abs(exact)))
        print(f"max relative error against the exact {what}:", worst)
    else:
        worst = float(np.max(error))
        print("max |out - exact|:", worst)
    return worst


def report_law(result: numeq.nki.Run, op: str, emulated: Any, platform: str | None = None) -> bool:
    """Print (and return) whether the output equals ``emulated``, the op-level emulation ``op`` on
    ``platform`` (the platform the kernel's dataflow amounts to, ``Run.kernel_platform``, unless
    told), bit for bit."""
    equal = bool(np.array_equal(result.outputs.astype(np.float64), np.asarray(emulated, dtype=np.float64)))
    print(f"bit-exact with {op} on {platform or result.kernel_platform}:", equal)
    return equal


def check_matmul(kernel: Any, a: np.ndarray, b: np.ndarray, out: str = "fp32", platforms: Sequence[str] = (),
                 **kwargs: Any) -> numeq.nki.Run:
    """Run a matmul kernel that takes (a.T, b), then print its error against the exact product
    (numeq.reference.matmul) and the law: numeq.matmul(a, b) on the platform the kernel's dataflow
    amounts to (``Run.kernel_platform``), and on each of ``platforms`` too, rounded to ``out``,
    equals the output."""
    result = run(kernel, np.ascontiguousarray(a.T), b, **kwargs)
    report_error(result, numeq.reference.matmul(a, b, out="fp64"))
    for platform in (result.kernel_platform, *platforms):
        report_law(result, "numeq.matmul", numeq.matmul(a, b, platform=platform, out=out), platform)
    return result


def check_op(kernel: Any, args: Sequence[Any], exact: np.ndarray, op: str, emulate: Callable[[str], Any],
             relative: bool = False, what: str = "", **kwargs: Any) -> numeq.nki.Run:
    """Run ``kernel(*args, **kwargs)``, then print its error against ``exact`` and the law: the
    catalogue op ``op`` emulated on the platform the kernel's dataflow amounts to
    (``emulate(Run.kernel_platform)``) equals the output."""
    result = run(kernel, *args, **kwargs)
    report_error(result, exact, relative=relative, what=what)
    report_law(result, op, emulate(result.kernel_platform))
    return result
