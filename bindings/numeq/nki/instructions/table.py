"""The NeuronCore's instruction table: one row (``InstructionSpec``) per ``nki.isa`` instruction,
and per ``nki.language`` function numeq computes as one step rather than through other rows
(``nl.rand``, ``nl.shared_identity_matrix``, the older tile functions ``nl.sin`` ...: ``module``
"nki.language", keyed "nl.<name>"), the op registry's twin. A row says what the instruction is
(name, engine, the engines ``engine=`` may choose, its argument forms per API generation, whether
the older interface's ``mask=`` applies, the first NeuronCore generation that has it, the
assumptions its semantics read, which parameter makes it an fp32 sum, its documentation) and
names its semantics: a small function of one bound call (``path.Call``). Everything else an instruction needs (binding, checks, the
generation, masks, tracing, precision sites) is the generic path's, done once for every row.

Adding an instruction is a row and its semantics, in the module of the engine that runs it::

    @instruction("tensor_abs", engine="vector", mask="elements", forms=[
        Form("current", "dst: tensor, data: tensor")])
    def tensor_abs(c: Call) -> Tensor:
        # dst = |data|: the sign cleared in fp32 (exact), cast into dst's dtype.
        data, dst = as_tensor(c.args["data"], "data"), as_tensor(c.args["dst"], "dst")
        write(c.ctx, dst, np.abs(read(c.ctx, data, "data", c.engine, rows=True)))
        c.issue([dst], [data], flops=dst.size, cycles=cost_elementwise(dst))
        return dst
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .forms import Form

__all__ = ["INSTRUCTIONS", "InstructionSpec", "instruction", "key", "unimplemented"]

MASKS = ("none", "elements", "rows")


@dataclass(frozen=True)
class InstructionSpec:
    """One row of the instruction table.

    ``engine``: the engine it runs on when ``engine=`` is not given; ``engines``: those ``engine=``
    may choose (empty: the keyword is not taken). ``forms``: the argument forms, the current
    generation first. ``mask``: the older interface's ``mask=`` ("none"; "elements": each element
    computed from the same element of its operands; "rows": the free axes reduced).
    ``since``: the first NeuronCore generation that has it (nki.isa's nc_version). ``assumptions``:
    the named assumptions the semantics read. ``sums``: the parameter (or parameters) holding the
    operator that makes it an fp32 sum where it is add (a precision-flow site), "always", or ""
    where it sums nothing. ``one_psum``: operands of which at most one may be in PSUM (the engine
    has one PSUM read port). ``doc`` and ``source``: what it computes and where AWS documents it.
    ``module``: the NKI module whose function it is ("nki.isa", or "nki.language"); ``public``: the
    module's function is the row itself (False: the front's function of that name, which takes the
    older interface's forms, calls the row)."""

    name: str
    engine: str
    semantics: Callable[..., Any] | None  # None: NKI documents it, numeq does not implement it yet
    forms: tuple[Form, ...]
    engines: tuple[str, ...] = ()
    mask: str = "none"
    since: int = 2
    assumptions: tuple[str, ...] = ()
    sums: str | tuple[str, ...] = ""
    one_psum: tuple[str, ...] = ()
    doc: str = ""
    source: str = ""
    module: str = "nki.isa"
    public: bool = True

    def __post_init__(self) -> None:
        if self.mask not in MASKS:
            raise ValueError(f"{self.name}: mask {self.mask!r}; valid: {', '.join(MASKS)}")
        if self.semantics is not None and not self.forms:
            raise ValueError(f"{self.name}: an instruction has at least one argument form")

    @property
    def implemented(self) -> bool:
        return self.semantics is not None

    @property
    def qualified(self) -> str:
        """How a kernel writes it (``nisa.nc_matmul``, ``nl.rand``), and its key in the table
        without the ``nisa.``."""
        return f"{_PREFIX[self.module]}.{self.name}"


_PREFIX = {"nki.isa": "nisa", "nki.language": "nl", "nki.collectives": "ncc"}


def key(spec: InstructionSpec) -> str:
    """A row's key in INSTRUCTIONS: an instruction's name; a language function's ``nl.<name>``."""
    return spec.name if spec.module == "nki.isa" else spec.qualified


INSTRUCTIONS: dict[str, InstructionSpec] = {}


def instruction(name: str, *, engine: str, forms: tuple[Form, ...] | list[Form], **row: Any) -> Callable:
    """Register the decorated semantics function as instruction ``name`` (a row of the table)."""

    def register(semantics: Callable) -> Callable:
        spec = InstructionSpec(name, engine, semantics, tuple(forms), **row)
        if key(spec) in INSTRUCTIONS:
            raise ValueError(f"instruction {key(spec)!r} is already in the table")
        INSTRUCTIONS[key(spec)] = spec
        return semantics

    return register


def unimplemented(name: str, source: str, since: int = 2) -> None:
    """A row for an instruction NKI documents (``source``) and numeq does not implement yet: a kernel
    can import and name it; calling it raises ``numeq.nki.Unsupported`` with the kernel's line. A
    row with semantics registered first (an engine module implementing it) is kept."""
    if name in INSTRUCTIONS:
        if INSTRUCTIONS[name].implemented:
            return
        raise ValueError(f"instruction {name!r} is already in the table")
    INSTRUCTIONS[name] = InstructionSpec(name, "unknown", None, (), since=since, source=source)
