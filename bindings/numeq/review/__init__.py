"""``numeq review``: a rubric-based review of one CUDA-to-NKI port, from a TOML manifest.

``review(path)`` gives a ``Review``: ``markdown()``, ``html()``, ``write(folder)``, ``rubric()``,
``passed``. Parts: ``manifest`` (the TOML schema, validated with errors naming the key and line),
``model`` (the manifest's tiling and performance evidence as typed values), ``targets`` (the
NeuronCore tables: limits and rates with their sources), ``tiling`` (the hardware rules),
``performance`` (roofline and the claimed speedup against repeated timings), ``correctness``
(the verdict ladder on the plan derived from the kernel's tiling), ``findings`` (what every part
reports) and ``report`` (Markdown and HTML).

Example::

    review = numeq.review.review("examples/reviews/correct-port/manifest.toml")
    print(review.markdown())
"""

from __future__ import annotations

from . import findings, model
from ..nki.machine import targets as targets
from .findings import CRITERIA, ReviewFinding
from .manifest import Manifest, ManifestError, load, parse
from .run import Review, review

__all__ = ["CRITERIA", "ReviewFinding", "Manifest", "ManifestError", "Review", "findings", "load", "model", "parse",
           "review", "targets"]
