"""A run's trace summed up (``Run.summary()``): per engine the instructions, FLOPs, bytes and an
estimated busy time; per DMA queue the transfer sizes; the kernel's arithmetic intensity, its place
on the target's roofline, the engine that bounds it and the estimate's lower bound on run time.

Every figure is an estimate from documented per-instruction costs, not a latency:
- Vector, Scalar and GpSimd instructions take about max(64, N) cycles for N elements per
  partition, nc_matmul about max(min(64, M), N) cycles, 4x for fp32 inputs (SDK 2.26 nki.isa
  docstrings, FACTS.md s3; the cycles each trace row carries), at the engine's clock (the
  target table's ``*_clock_hz``, with their sources);
- DMA moves its bytes at the HBM bandwidth one NeuronCore attains (``hbm_bytes_per_s``, the
  target table's assumption: the chip's bandwidth shared evenly).
The engines run concurrently, so the longest busy time is a lower bound on the run time; the
roofline's peak is the Tensor Engine's for the kernel's dominant matmul format (``peak_flops``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from .machine.targets import ENGINE_CLOCKS, Target, peak_flops

__all__ = ["EngineUse", "TraceSummary", "summarise"]



@dataclass
class EngineUse:
    """One engine's share of a run: ``busy_s`` estimated from ``cycles`` at ``rate`` (a clock in
    Hz) or, for DMA, from ``bytes`` at ``rate`` B/s; ``source`` cites the rate."""

    instructions: int = 0
    flops: int = 0
    bytes: int = 0
    cycles: int = 0
    busy_s: float = 0.0
    rate: float = 0.0
    source: str = ""


@dataclass
class TraceSummary:
    """What ``Run.summary()`` gives (``str()`` renders it)."""

    target: str
    platform: str
    findings: list
    engines: dict[str, EngineUse]
    dma_sizes: dict[str, dict[int, int]]  # queue -> {upper bound in bytes (a power of two): transfers}
    flops: int  # Tensor Engine FLOPs
    hbm_bytes: int  # bytes the DMAs moved to or from HBM
    intensity: float  # flops / hbm_bytes (inf without HBM traffic)
    peak_flops: float
    peak_source: str
    hbm_bytes_per_s: float
    hbm_source: str
    hbm_chip_bytes_per_s: float  # the whole chip's (documented): no core's DMAs move more
    hbm_chip_source: str
    bound_by: str  # the engine with the longest estimated busy time
    lower_bound_s: float
    notes: list[str] = field(default_factory=list)
    # memory -> {"curve": [(step, live bytes per partition)], "peak", "limit"} (_rules.live_use);
    # psum also "banks" (peak / bank bytes) and "bank_count".
    memory: dict = field(default_factory=dict)

    @property
    def ridge(self) -> float:
        """The intensity (FLOP/B) where the roofline's memory slope meets its peak."""
        return self.peak_flops / self.hbm_bytes_per_s

    @property
    def regime(self) -> str:
        return "compute-bound" if self.intensity >= self.ridge else "memory-bound"

    @property
    def attainable_flops(self) -> float:
        return min(self.peak_flops, self.intensity * self.hbm_bytes_per_s)

    def __str__(self) -> str:
        lines = [f"target {self.target}; platform {self.platform}"]
        lines += [str(f) for f in self.findings] or ["no findings"]
        lines.append("engine   instructions           FLOP          bytes       cycles   est. busy (estimate)")
        for name, e in self.engines.items():
            lines.append(f"{name:7s} {e.instructions:13d} {e.flops:14d} {e.bytes:14d} {e.cycles:12d} "
                         f"{e.busy_s * 1e6:12.2f} us  at {e.rate:.3g} ({e.source})")
        for queue, sizes in self.dma_sizes.items():
            hist = ", ".join(f"<= {_bytes(b)}: {n}" for b, n in sorted(sizes.items()))
            lines.append(f"DMA queue {queue}: transfer sizes {hist}")
        ai = "inf" if self.intensity == float("inf") else f"{self.intensity:.1f}"
        lines.append(f"arithmetic intensity {ai} FLOP/B (Tensor FLOPs / HBM bytes); ridge {self.ridge:.1f} FLOP/B "
                     f"(peak {self.peak_flops:.3g} FLOP/s: {self.peak_source}; HBM {self.hbm_bytes_per_s:.3g} B/s: "
                     f"{self.hbm_source}): {self.regime}, attainable {self.attainable_flops:.3g} FLOP/s")
        lines.append(f"bound by the {self.bound_by} engine; estimated lower bound on run time "
                     f"{self.lower_bound_s * 1e6:.2f} us (an estimate from the documented per-instruction costs)")
        for name, use in self.memory.items():
            banks = f" ({use['banks']:g} of {use['bank_count']} banks)" if "banks" in use else ""
            lines.append(f"peak live {name.upper()} {use['peak']} B of {use['limit']} B per partition{banks}")
        lines += self.notes
        return "\n".join(lines)


def _bytes(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


def _bucket(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def summarise(trace: list, target: Target, platform: str, findings: list, lives: list = (),
              psum_by_bank: bool = True, from_first_access: bool = True) -> TraceSummary:
    engines: dict[str, EngineUse] = {}
    sizes: dict[str, dict[int, int]] = {}
    hbm_bytes = 0
    flops_by_format: dict[str, int] = {}
    hbm = target.spec("hbm_bytes_per_s")
    chip = target.spec("hbm_chip_bytes_per_s")
    for ins in trace:
        e = engines.setdefault(ins.engine, EngineUse())
        e.instructions += 1
        e.flops += ins.flops
        e.bytes += ins.bytes
        e.cycles += ins.cycles
        if ins.engine == "dma":
            queue = str(ins.detail.get("queue", "dma"))
            bucket = sizes.setdefault(queue, {})
            b = _bucket(ins.bytes)
            bucket[b] = bucket.get(b, 0) + 1
            if any(o[1] not in ("sbuf", "psum") for o in ins.dst + ins.srcs):
                hbm_bytes += ins.bytes
        if ins.name in ("nc_matmul", "nc_matmul_mx"):
            fmt = "mx" if ins.detail.get("mx") else str(ins.detail.get("in_fmt", "bf16"))
            flops_by_format[fmt] = flops_by_format.get(fmt, 0) + ins.flops
    for name, e in engines.items():
        if name == "dma":
            e.rate, e.source = hbm.value, hbm.cite()
            e.busy_s = e.bytes / hbm.value
        elif name in ENGINE_CLOCKS:
            clock = target.spec(ENGINE_CLOCKS[name])
            e.rate, e.source = clock.value, clock.cite()
            e.busy_s = e.cycles / clock.value
    fmt = max(flops_by_format, key=flops_by_format.get) if flops_by_format else "bf16"
    try:
        peak = peak_flops(target, fmt)
    except ValueError:
        peak = peak_flops(target, "fp32")
    flops = sum(flops_by_format.values())
    busiest = max(engines.items(), key=lambda kv: kv[1].busy_s) if engines else ("none", EngineUse())
    notes = []
    if len(flops_by_format) > 1:
        notes.append(f"matmul formats {sorted(flops_by_format)}: the roofline's peak is the {fmt} one (most FLOPs)")
    from .machine.rules import live_use

    bank = int(target["psum_bank_bytes"])
    memory = {}
    for name, limit in (("sbuf", "sbuf_partition_bytes"), ("psum", "psum_partition_bytes")):
        curve = [(step, live) for step, live, _ in live_use(list(lives), name, bank, psum_by_bank, from_first_access)]
        use = {"curve": curve, "peak": max((v for _, v in curve), default=0), "limit": int(target[limit])}
        if name == "psum":
            use["banks"] = use["peak"] / bank
            use["bank_count"] = int(target[limit]) // bank
        memory[name] = use
    return TraceSummary(target.name, platform, list(findings), engines, sizes, flops, hbm_bytes,
                        flops / hbm_bytes if hbm_bytes else float("inf"), peak.value, peak.cite(), hbm.value,
                        hbm.cite(), chip.value, chip.cite(), busiest[0], busiest[1].busy_s, notes, memory)
