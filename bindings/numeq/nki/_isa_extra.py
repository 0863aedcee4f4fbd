"""The NeuronCore instructions beyond the core set of ``isa`` (statistics, scans, selects, masks,
partition reductions, top-8 search, shuffles, DMA transposes and computes), on the same reading,
writing and checking path (``_engine``, ``_rules``); ``isa`` re-exports every name in
``__all__``."""

from __future__ import annotations

__all__: list[str] = []
