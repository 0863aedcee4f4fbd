"""The parts of a port-review manifest as typed values: the NKI kernel's tiling (buffers,
matmuls, DMAs, engine stages) and the performance evidence (neuron-profile summaries, repeated
timings, the claimed speedup). ``numeq.review.manifest`` builds them from TOML and validates
them; the checks (``tiling``, ``performance``) read only these.

Every item keeps ``line``, its line in the manifest (0 when not built from a file), so that a
finding can point at it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ..nki.machine.dtypes import FORMAT_BYTES

__all__ = ["FORMAT_BYTES", "MANIFEST_ENGINES", "MANIFEST_MEMORIES", "Buffer", "Dma", "KernelSpec", "Matmul",
           "Performance", "Profile", "Stage", "Tiling", "Timings"]

# A manifest's words for where a buffer lives and which engine (or DMA queue) runs a stage; buffers'
# bytes per element come from numeq.nki's one dtype table (machine.dtypes' FORMAT_BYTES).
MANIFEST_MEMORIES = ("sbuf", "psum", "hbm")
MANIFEST_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")


@dataclass(frozen=True)
class Buffer:
    """A tensor of the kernel: ``memory`` ("sbuf", "psum", "hbm"), ``dtype`` (a key of
    ``FORMAT_BYTES``), ``shape``, ``partition_dim`` (the axis of ``shape`` on the SBUF/PSUM
    partitions), ``start_partition`` (where a partial-partition tile starts) and ``bufs`` (copies
    alive at once: 2 for double buffering)."""

    name: str
    memory: str
    dtype: str
    shape: tuple[int, ...]
    partition_dim: int = 0
    start_partition: int = 0
    bufs: int = 1
    line: int = 0

    @property
    def partitions(self) -> int:
        """Partitions the tile spans (its partition dimension)."""
        return self.shape[self.partition_dim]

    @property
    def free_elements(self) -> int:
        """Elements per partition: the product of the other dimensions."""
        return math.prod(d for i, d in enumerate(self.shape) if i != self.partition_dim)

    @property
    def bytes_per_partition(self) -> int:
        """Bytes one copy takes in each partition."""
        return self.free_elements * FORMAT_BYTES[self.dtype]


@dataclass(frozen=True)
class Matmul:
    """One nc_matmul of the kernel: ``stationary`` [K, M] and ``moving`` [K, N] (buffer names,
    K on their partition dimension) into ``psum`` [M, N]; ``double_row``: trn2's fp8 mode that
    contracts 256 rows."""

    name: str
    stationary: str
    moving: str
    psum: str
    double_row: bool = False
    line: int = 0


@dataclass(frozen=True)
class Dma:
    """One DMA pattern: ``buffer`` (the SBUF/PSUM side), ``direction`` ("load": HBM to the
    buffer, "store": back), ``bytes_per_partition`` moved per partition by one transfer,
    ``partitions`` it spans, ``stride_bytes`` (the innermost stride on the HBM side; 0: contiguous)
    and ``transfers`` (how many times it runs)."""

    name: str
    buffer: str
    direction: str
    bytes_per_partition: int
    partitions: int
    stride_bytes: int = 0
    transfers: int = 1
    line: int = 0


@dataclass(frozen=True)
class Stage:
    """One engine instruction of the kernel: ``engine`` (one of ``MANIFEST_ENGINES``), ``instruction``
    (the nki.isa name: activation, tensor_reduce, tensor_tensor, tensor_copy, bn_stats,
    bn_aggr, ...), ``operands`` (buffer names) and ``free_size`` (elements per partition one
    instruction processes; None: the first operand's)."""

    name: str
    engine: str
    instruction: str
    operands: tuple[str, ...] = ()
    free_size: int | None = None
    line: int = 0


@dataclass(frozen=True)
class Tiling:
    """The kernel's tiling: the loop tiles over M, N and K, how K tiles accumulate (``psum_group``
    K tiles per PSUM accumulation group, their sums added in fp32 in SBUF; None: every K tile of an
    output tile in one PSUM tile, program order), fp8 ``double_row``, and its buffers, matmuls,
    DMAs and engine stages, on ``target`` ("trn1", "inf2", "trn2")."""

    target: str
    m_tile: int | None = None
    n_tile: int | None = None
    k_tile: int | None = None
    psum_group: int | None = None
    double_row: bool = False
    buffers: tuple[Buffer, ...] = ()
    matmuls: tuple[Matmul, ...] = ()
    dmas: tuple[Dma, ...] = ()
    stages: tuple[Stage, ...] = ()
    line: int = 0

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(f"no buffer {name!r}; buffers: {', '.join(b.name for b in self.buffers)}")


@dataclass(frozen=True)
class Profile:
    """A neuron-profile summary (``neuron-profile view --output-format summary-json``) of one
    run: ``label`` ("baseline" or "candidate") and the ``path`` of its JSON."""

    label: str
    path: str
    line: int = 0


@dataclass(frozen=True)
class Timings:
    """Repeated wall-clock timings of the ``baseline`` and the ``candidate`` kernel, in ``unit``
    ("s", "ms", "us" or "ns"), with what each is (``baseline_label``, ``candidate_label``)."""

    baseline: tuple[float, ...]
    candidate: tuple[float, ...]
    unit: str = "ms"
    baseline_label: str = "baseline"
    candidate_label: str = "candidate"
    line: int = 0


@dataclass(frozen=True)
class Performance:
    """The performance evidence: the author's ``claimed_speedup`` (baseline time / candidate
    time; None: no claim), the ``timings``, the ``profiles``, and ``confidence`` (the bootstrap
    interval's level)."""

    claimed_speedup: float | None = None
    timings: Timings | None = None
    profiles: tuple[Profile, ...] = ()
    confidence: float = 0.95
    line: int = 0
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class KernelSpec:
    """The NKI kernel itself ([kernel]): its ``file`` (resolved next to the manifest), the
    ``function`` (an @nki.jit kernel in it), the SPMD ``grid`` (() without one) and the ``args``
    it takes by parameter name (arrays read from the manifest's files, or values)."""

    file: Path
    function: str
    grid: tuple[int, ...] = ()
    args: dict = field(default_factory=dict)
    line: int = 0
