"""numeq: a cross-platform numerical equivalence harness.

Formats layer: every supported number format, casts in every rounding mode (bit-exact, one
rounding kernel), integer quantisation and block-scaled floats. See ``numeq.formats()``.
"""

from __future__ import annotations

from ._arrays import (
    block_dequantize,
    block_quantize,
    cast,
    decode,
    dequantize,
    encode,
    format_info,
    formats,
    mx_quantize,
    quant_params,
    quantize,
    round,
)
from . import reference
from ._core import num_threads, set_num_threads

__version__ = "0.1.0"

ROUNDINGS = ("nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd", "stochastic")
OVERFLOWS = ("ieee", "saturate")
SUBNORMALS = ("keep", "flush_outputs", "flush_inputs", "flush_both")

__all__ = [
    "OVERFLOWS",
    "ROUNDINGS",
    "SUBNORMALS",
    "block_dequantize",
    "block_quantize",
    "cast",
    "decode",
    "dequantize",
    "encode",
    "format_info",
    "formats",
    "mx_quantize",
    "num_threads",
    "quant_params",
    "quantize",
    "reference",
    "round",
    "set_num_threads",
]
