"""The older NKI interface (``neuronxcc.nki`` 0.1.0 - 0.3.x) as a front onto the same instructions:
tile operations (``nl.load``, ``nl.store``, ``nl.matmul``, tile arithmetic: ``tiles``), index
expressions (``nl.arange``, ``nl.mgrid``: ``index_expressions``) and instruction masks
(``mask=``: ``masks``). ``install()`` puts it in place once, when ``numeq.nki`` is imported.
"""

from __future__ import annotations

from .. import language
from ..instructions import path
from ..machine import indirect, views
from . import index_expressions, operators, tiles
from .masks import NOTHING, masked_call

__all__ = ["install"]


def install() -> None:
    """Index expressions, tile assignment and indirect access patterns (``t.ap(vector_offset=)``,
    machine.indirect) in the machine room's views, the tile operators on
    its tensors, ``nl.fp32.min`` in the language module, ``mask=`` on the instructions whose row
    accepts it (elementwise ones, and those reducing the free axes)."""
    views.FRONT.update(index=tiles.index, assign=tiles.assign, indirect_pattern=indirect.indirect_pattern,
                       mgrid=index_expressions.mgrid)
    language.FRONT.update(tiles=tiles, index_expressions=index_expressions)
    path.MASKED.update(call=masked_call, nothing=NOTHING, clipped=index_expressions._Clipped)
    operators.install()
    tiles._install_language()
