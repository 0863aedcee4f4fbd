"""``nki.collectives`` on numeq: NKI's collective communication API (nki.collectives API reference).
Every documented name exists (kernels import ``ReplicaGroup`` at module level); numeq does not
compute collectives yet (two cores and collectives: docs/nki.md), so calling one raises
``Unsupported`` at the kernel's line.
"""

from __future__ import annotations

from .placeholders import placeholders_of

globals().update(placeholders_of("nki.collectives"))
__all__ = sorted(placeholders_of("nki.collectives"))
