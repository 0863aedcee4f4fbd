"""The NeuronCore instructions beyond the core set of ``isa`` (statistics, scans, selects, masks,
partition reductions, top-8 search, shuffles, DMA transposes and computes), on the same reading,
writing and checking path (``_engine``, ``_rules``); ``isa`` re-exports every name in
``__all__``.

Where each lives: ``_isa_stats`` (bn_stats, bn_aggr, scans, fused arithmetic, partition reduce,
activation_reduce), ``_isa_select`` (iota, affine_select, range_select, select_reduce, predicated
copy, stream shuffle, dropout), ``_isa_search`` (max8, nc_find_index8, nc_match_replace8,
nonzero_with_count, dma_transpose, dma_compute), ``_isa_args`` (argument forms, accumulator
commands, the Vector accumulator). Every instruction takes its current form (destination first) and, where one
existed, its older forms (value-returning without dst; earlier argument orders).
"""

from __future__ import annotations

from ._isa_search import dma_compute, dma_transpose, max8, nc_find_index8, nc_match_replace8, nonzero_with_count
from ._isa_select import (affine_select, dropout, iota, nc_stream_shuffle, range_select, select_reduce,
                          tensor_copy_predicated)
from ._isa_stats import (activation_reduce, bn_aggr, bn_stats, scalar_tensor_tensor, tensor_partition_reduce,
                         tensor_scalar_cumulative, tensor_scalar_reduce, tensor_tensor_scan)

__all__: list[str] = [
    "activation_reduce", "affine_select", "bn_aggr", "bn_stats", "dma_compute", "dma_transpose", "dropout", "iota",
    "max8", "nc_find_index8", "nc_match_replace8", "nc_stream_shuffle", "nonzero_with_count", "range_select",
    "scalar_tensor_tensor", "select_reduce", "tensor_copy_predicated", "tensor_partition_reduce",
    "tensor_scalar_cumulative", "tensor_scalar_reduce", "tensor_tensor_scan",
]
