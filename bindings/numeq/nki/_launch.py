"""How a kernel is launched: its SPMD grid (the logical cores of ``kernel[2]``, or an older
interface's programs) and its collective ranks (``numeq.nki.run(..., ranks=R)``, with
``per_rank([...])`` arguments), each checked where the run starts.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from .machine.context import TooLarge

__all__ = ["MAX_PROGRAMS", "PerRank", "check_grid", "check_ranks", "per_rank", "rank_arguments", "replaced"]

# The most SPMD programs one run takes: numeq runs a grid's programs one after another on the CPU,
# so a grid is bounded by time, not by the hardware (NKI documents no bound on the launch grid).
# numeq's own limit, named so that a grid of 10**9 is refused at once, not run for days.
MAX_PROGRAMS = 65536


def check_grid(grid: Any) -> tuple[int, ...]:
    """The SPMD grid as a tuple of ints: None or () for no grid, an int, or a tuple / list of ints,
    each at least 1, at most ``MAX_PROGRAMS`` programs in all. Anything else is a ValueError naming
    ``grid`` (a float such as 2.7 is not rounded; a bool is not a size)."""
    if grid is None:
        return ()
    dims = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    valid = f"valid: positive ints (kernel[4], kernel[2, 2]), at most {MAX_PROGRAMS} programs in all (MAX_PROGRAMS)"
    out = []
    for g in dims:
        if isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer)):
            raise ValueError(f"grid: {grid!r} holds {g!r} ({type(g).__name__}), not an int; {valid}")
        g = operator.index(g)
        if g < 1:
            raise ValueError(f"grid: {grid!r} holds {g}; a grid's sizes are at least 1 (a grid of 0 programs runs "
                             f"nothing); {valid}")
        out.append(g)
    programs = math.prod(out)
    if programs > MAX_PROGRAMS:
        raise TooLarge(f"grid: {grid!r} is {programs} programs; numeq runs at most {MAX_PROGRAMS} (MAX_PROGRAMS: it "
                       f"runs them one after another); {valid}")
    return tuple(out)



class PerRank:
    """A kernel argument with one value per collective rank (``numeq.nki.per_rank``)."""

    __slots__ = ("values",)

    def __init__(self, values: Any) -> None:
        self.values = list(values)

    def __repr__(self) -> str:
        return f"per_rank({len(self.values)} values)"


def per_rank(values: Any) -> PerRank:
    """``numeq.nki.run(kernel, per_rank([x0, x1]), ranks=2)``: rank r gets ``values[r]`` (each rank's
    own input, as nki-library's collective tests give one per rank); any other argument goes to
    every rank (each its own copy: ranks share no HBM)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"per_rank: expected a list of values, one per rank, got {type(values).__name__}")
    return PerRank(values)


def rank_arguments(args: tuple, kwargs: dict, rank: int, ranks: int) -> tuple[tuple, dict]:
    """The kernel's arguments as rank ``rank`` of ``ranks`` gets them."""
    def pick(x: Any, name: str) -> Any:
        if not isinstance(x, PerRank):
            return x
        if not ranks:
            raise ValueError(f"{name}: per_rank(...) is given one value per collective rank; pass ranks=N to run")
        if len(x.values) != ranks:
            raise ValueError(f"{name}: per_rank holds {len(x.values)} values for ranks={ranks}; one per rank")
        return x.values[rank]

    return (tuple(pick(a, f"argument {i}") for i, a in enumerate(args)),
            {k: pick(v, k) for k, v in kwargs.items()})


def replaced(x: Any, before: dict) -> Any:
    """Argument ``x`` with each array the run wrote back replaced by its copy from before the run."""
    if isinstance(x, PerRank):
        return PerRank([before.get(id(v), v) for v in x.values])
    return before.get(id(x), x)


def check_ranks(ranks: Any) -> int:
    """The number of collective ranks: None (no collective group: 0) or an int from 1."""
    if ranks is None:
        return 0
    if isinstance(ranks, (bool, np.bool_)) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise ValueError(f"ranks: {ranks!r}; valid: a positive int (the collective ranks, each a launch of the "
                         "kernel), or None")
    if ranks > MAX_PROGRAMS:
        raise TooLarge(f"ranks: {ranks} ranks; numeq runs at most {MAX_PROGRAMS} (MAX_PROGRAMS)")
    return int(ranks)
