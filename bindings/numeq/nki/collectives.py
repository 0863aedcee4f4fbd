"""``nki.collectives`` on numeq: NKI's collective communication API (nki.collectives API reference).
The collectives numeq computes are rows of the instruction table (``instructions.collectives``:
ranks launched by ``numeq.nki.run(kernel, ..., ranks=R)`` meet at each); every other documented
name exists (kernels import them at module level), and calling one raises ``Unsupported`` at the
kernel's line.
"""

from __future__ import annotations

from .instructions import collectives as _rows
from .instructions.path import module_functions
from .language import NKIObject
from .placeholders import placeholders_of


class ReplicaGroup(_rows.ReplicaGroup, NKIObject):
    __doc__ = _rows.ReplicaGroup.__doc__


globals().update(placeholders_of("nki.collectives"))
globals().update(module_functions("nki.collectives"))
__all__ = sorted({"ReplicaGroup", *placeholders_of("nki.collectives"), *module_functions("nki.collectives")})
