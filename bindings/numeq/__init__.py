"""numeq: a cross-platform numerical equivalence harness.

Formats layer: every supported number format, casts in every rounding mode (bit-exact, one
rounding kernel), integer quantisation and block-scaled floats. See ``numeq.formats()``.
References: ``numeq.reference`` (exact and certified results). Machine models: ``numeq.platforms()``,
``numeq.plan()``, ``numeq.sum / dot / matmul`` (bit-exact emulation of a platform's arithmetic),
``numeq.reveal_order`` (the summation order of a black-box sum or dot product, as a plan).
Operation catalogue: ``numeq.ops.*`` (reference, emulation and bound from one object) and
``numeq.compare`` (a device's output judged against them: a Verdict); ``numeq.testing``
(assertions for test suites; the pytest plugin is ``numeq.pytest_plugin``).
"""

from __future__ import annotations

from ._arrays import format_info, formats
from ._casts import cast, decode, encode, round
from ._quantize import block_dequantize, block_quantize, dequantize, mx_quantize, quant_params, quantize
from . import _core, ops, reference
from . import catalogue  # the catalogue as problems (op, formats, K, shape) for sweeps
from . import tolerances
from ._op import Tolerance
from .tolerances import tolerance
from . import bugs  # planted kernel bugs on catalogue problems
from ._arrays import INT32, _check_int
from .fitting import FitResult, Probes, assumption_candidates, fit, fit_platform, probes, tensor_core_candidates
from .machines import (
    Plan,
    dot,
    load_platform,
    matmul,
    numpy_reduction,
    plan,
    platform_assumptions,
    platform_evidence,
    platform_json,
    platforms,
    sum,
)
from .reveal import RevealResult, reveal_order
from .verdicts import PortVerdict, Verdict, compare, compare_port
from . import testing  # assert_equivalent, assert_ported, assert_bit_exact (cheap: compare is loaded already)
from . import examples  # the shipped example ports and NKI kernels (numeq.examples.path)
from . import review  # numeq review: the rubric review of a CUDA-to-NKI port (matplotlib only when rendering HTML)

__version__ = "0.1.0"


def num_threads() -> int:
    """Threads numeq uses for large arrays (NUMEQ_NUM_THREADS if set, else the hardware's).

    Example::

        >>> numeq.num_threads() >= 1
        True
    """
    return int(_core.num_threads())


def set_num_threads(n: int) -> None:
    """Use ``n`` threads for large arrays; 0 restores the default. Results never depend on it.

    Example::

        >>> numeq.set_num_threads(1)
        >>> numeq.num_threads()
        1
        >>> numeq.set_num_threads(0)   # back to NUMEQ_NUM_THREADS or the hardware's count
    """
    _core.set_num_threads(_check_int(n, "n", 0, INT32[1]))


# The modes as the C++ core names them (its one table per enum, formats/names.hpp; the extension
# gives each list as the text its error messages quote).
ROUNDINGS = tuple(_core.roundings().split(", "))
OVERFLOWS = tuple(_core.overflows().split(", "))
SUBNORMALS = tuple(_core.subnormal_modes().split(", "))

__all__ = [
    "OVERFLOWS",
    "ROUNDINGS",
    "SUBNORMALS",
    "FitResult",
    "Plan",
    "RevealResult",
    "PortVerdict",
    "Verdict",
    "Probes",
    "assumption_candidates",
    "block_dequantize",
    "block_quantize",
    "cast",
    "compare",
    "compare_port",
    "decode",
    "dequantize",
    "dot",
    "encode",
    "fit",
    "fit_platform",
    "format_info",
    "formats",
    "load_platform",
    "matmul",
    "mx_quantize",
    "num_threads",
    "numpy_reduction",
    "catalogue",
    "tolerance",
    "tolerances",
    "Tolerance",
    "bugs",
    "ops",
    "plan",
    "review",
    "platform_assumptions",
    "platform_evidence",
    "platform_json",
    "platforms",
    "probes",
    "quant_params",
    "quantize",
    "reference",
    "reveal_order",
    "round",
    "set_num_threads",
    "sum",
    "tensor_core_candidates",
    "testing",
]


def __getattr__(name: str) -> object:
    return tolerances._deprecated_name("numeq", name)
