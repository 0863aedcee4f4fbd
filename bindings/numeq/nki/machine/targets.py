"""The NeuronCore targets a port review checks against: one table per target (trn1, inf2, trn2, trn3),
every value with its unit, its meaning, its evidence tag and its source, as the platforms carry
theirs.

Evidence tags: ``documented`` (AWS's Neuron documentation says so), ``derived`` (computed from
documented values; the rule is stated), ``assumed`` (nobody has published it; numeq's choice is
named so the report can say the verdict rests on it). Sources are the NKI architecture guides
and performance guides of the aws-neuron-sdk documentation, as summarised with their paths in
the project's FACTS (s3, "Limits and rates a tiling and performance review checks").

Example::

    >>> t = numeq.review.targets.target("trn2")
    >>> t["sbuf_partition_bytes"], t.spec("sbuf_partition_bytes").evidence
    (229376.0, 'documented')
"""

from __future__ import annotations

import os

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_TARGET", "ENGINE_CLOCKS", "TARGETS", "Spec", "Target", "peak_flops", "start_partitions", "target", "target_names"]

_ARCH_V2 = "aws-neuron-sdk nki/guides/architecture/trainium_inferentia2_arch.rst"
_ARCH_V3 = "aws-neuron-sdk nki/guides/architecture/trainium2_arch.rst"
_DIRECT_ALLOCATION = "aws-neuron-sdk 2.26 general/nki/nki_direct_allocation_guide.rst (NeuronCore-v2: 192 KiB - 16 KiB)"
_HW_TRN1 = "aws-neuron-sdk about-neuron/arch/neuron-hardware/trainium.rst"
_HW_INF2 = "aws-neuron-sdk about-neuron/arch/neuron-hardware/inferentia2.rst"
_HW_TRN2 = "aws-neuron-sdk about-neuron/arch/neuron-hardware/trainium2.rst"
_ARCH_V4 = "aws-neuron-sdk nki/guides/architecture/trainium3_arch.rst"
_HW_TRN3 = "aws-neuron-sdk about-neuron/arch/neuron-hardware/trainium3.rst"
_MATMUL = "nki.isa.nc_matmul docstring"
_DMA = "aws-neuron-sdk nki/guides/nki-dma-bandwidth-guide.rst"
_DMA_OVERVIEW = "aws-neuron-sdk nki/about/nki-dma-overview.rst"
_PERF = "aws-neuron-sdk nki/guides/nki_perf_guide.rst"
_VECTOR = "nki.isa tensor instruction docstrings (free-size limits), nki.isa.bn_stats docstring"


@dataclass(frozen=True)
class Spec:
    """One value of a target table: ``value`` (in ``unit``), ``meaning``, ``evidence``
    ("documented", "derived" or "assumed") and ``source``."""

    value: float
    unit: str
    meaning: str
    evidence: str
    source: str

    def cite(self) -> str:
        """``"documented: <source>"``: the evidence column of a finding."""
        return f"{self.evidence}: {self.source}"


@dataclass(frozen=True)
class Target:
    """A NeuronCore target: ``name`` ("trn1", "inf2", "trn2"), ``generation`` (its NeuronCore
    generation, ``core`` its name), ``platform`` (the numeq platform whose arithmetic it runs) and ``specs`` (name ->
    ``Spec``); ``target[name]`` is the value, ``target.spec(name)`` the whole entry."""

    name: str
    generation: int  # the NeuronCore generation: 2 (trn1, inf2), 3 (trn2), 4 (trn3): nki.isa.nc_version's gen2-gen4
    platform: str
    specs: dict[str, Spec] = field(default_factory=dict)

    @property
    def core(self) -> str:
        """"NeuronCore-v2", "NeuronCore-v3": the generation as AWS's architecture pages name it."""
        return f"NeuronCore-v{self.generation}"

    def __getitem__(self, key: str) -> float:
        return self.spec(key).value

    def __contains__(self, key: object) -> bool:
        return key in self.specs

    def spec(self, key: str) -> Spec:
        if key not in self.specs:
            raise KeyError(f"target {self.name} has no value {key!r}; it has: {', '.join(sorted(self.specs))}")
        return self.specs[key]

    def rows(self) -> list[dict[str, Any]]:
        """The table as rows (name, value, unit, meaning, evidence, source), for reports."""
        return [{"name": k, "value": s.value, "unit": s.unit, "meaning": s.meaning, "evidence": s.evidence,
                 "source": s.source} for k, s in self.specs.items()]


def _doc(value: float, unit: str, meaning: str, source: str) -> Spec:
    return Spec(float(value), unit, meaning, "documented", source)


def _derived(value: float, unit: str, meaning: str, source: str) -> Spec:
    return Spec(float(value), unit, meaning, "derived", source)


def _assumed(value: float, unit: str, meaning: str, source: str) -> Spec:
    return Spec(float(value), unit, meaning, "assumed", source)


def _common(arch: str) -> dict[str, Spec]:
    """What NeuronCore-v2 and -v3 share: the partition count, PSUM, the matmul and
    Vector/Scalar instruction limits, the DMA efficiency rules and the perf guide's thresholds."""
    return {
        "partitions": _doc(128, "partitions", "SBUF and PSUM partitions; a tile's partition dimension is at most this",
                           arch),
        "psum_partition_bytes": _doc(16 * 1024, "B", "PSUM per partition (2 MiB = 128 x 16 KiB)", arch),
        "psum_banks": _doc(8, "banks", "PSUM banks per partition", arch),
        "psum_bank_bytes": _doc(2048, "B", "one PSUM bank per partition: 512 fp32, the most one matmul writes", arch),
        "matmul_contraction": _doc(128, "rows", "rows of K (the partition axis) one nc_matmul contracts",
                                   f"{arch}; {_MATMUL}"),
        "matmul_stationary_free": _doc(128, "elements", "free size of the stationary tile (M of one nc_matmul)",
                                       f"{arch}; {_MATMUL}"),
        "matmul_moving_free": _doc(512, "elements", "free size of the moving tile (N of one nc_matmul; one PSUM bank "
                                   "of fp32)", f"{arch}; {_MATMUL}"),
        "gemm_moving_fmax": _doc(512, "elements", "nl.tile_size.gemm_moving_fmax: the moving tile's free size "
                                 "kernels tile by (one PSUM bank of fp32)", f"{arch}; nki.language.tile_size"),
        # The architecture guides: an nc_matmul output tile "must fit into one PSUM bank per partition".
        "matmul_result_bytes": _doc(2048, "B", "bytes per partition one nc_matmul result may take: one PSUM bank",
                                    arch),
        "fp32_matmul_rate": _doc(0.25, "x bf16", "fp32 matmul inputs run at a quarter of the bf16 rate",
                                 f"{arch}; {_MATMUL}"),
        "vector_free_sbuf": _doc(65536, "elements", "free size of a Vector/Scalar/GpSimd tile in SBUF", _VECTOR),
        "vector_free_psum": _doc(4096, "elements", "free size of a Vector/Scalar/GpSimd tile in PSUM", _VECTOR),
        "bn_stats_free": _doc(512, "elements", "free size of one bn_stats instruction", _VECTOR),
        "sbuf_stride_bytes": _doc(16, "B", "an innermost free-axis stride above this halves SBUF/PSUM access "
                                  "bandwidth", arch),
        "dma_engines": _doc(16, "engines", "DMA engines per NeuronCore", _DMA),
        "dma_engine_bytes_per_s": _doc(27.2e9, "B/s", "theoretical bandwidth of one DMA engine (NeuronCore-v2 and "
                                       "-v3; a transfer runs on up to 16 engines in parallel)", _DMA_OVERVIEW),
        "dma_partitions_per_engine": _assumed(8, "partitions", "partitions one DMA engine's packet of a transfer "
                                              "covers (a transfer is split into one packet per engine per group of "
                                              "partitions; 128 partitions over 16 engines)",
                                              f"{_DMA_OVERVIEW}; the group size is not published"),
        "dma_fixed_s": _assumed(2048 / 27.2e9, "s", "a DMA transfer's fixed cost (descriptors, semaphores, packet "
                                "setup) before its bytes move: taken as the time one engine moves 256 B for each of "
                                "its 8 partitions, the size below which the guide calls a transfer overhead-bound",
                                f"{_DMA}; the fixed cost itself is not published"),
        "semaphore_s": _assumed(0, "s", "from an instruction finishing to a dependent one on another engine or DMA "
                                "queue starting (the semaphore the compiler inserts); not published, taken as 0",
                                "NKI architecture guides (engines synchronise by semaphores); no latency published"),
        "dma_overhead_bytes": _doc(256, "B", "a DMA transfer moving fewer bytes per partition is dominated by "
                                   "its fixed overhead", _DMA),
        "dma_recommended_bytes": _doc(2048, "B", "the minimum recommended bytes per partition per DMA transfer",
                                      _DMA),
        "dma_target_bytes": _doc(4096, "B", "the bytes per partition per DMA transfer to aim for", _DMA),
        "compute_bound_active_percent": _doc(90, "%", "an engine active at least this share of the time is the "
                                             "bottleneck (compute-bound)", _PERF),
        "memory_bound_mbu_percent": _doc(60, "%", "a kernel at or above this memory-bandwidth utilisation is "
                                         "memory-bound", _PERF),
    }


def _v2(name: str, hardware: str) -> Target:
    s = _common(_ARCH_V2)
    s.update({
        "sbuf_partition_bytes": _doc(192 * 1024, "B", "SBUF per partition (24 MiB = 128 x 192 KiB)", _ARCH_V2),
        "sbuf_compiler_reserved_bytes": _doc(16 * 1024, "B", "SBUF per partition the compiler keeps for itself: a "
                                             "direct allocation places tiles below the rest", _DIRECT_ALLOCATION),
        "tensor_clock_hz": _doc(2.8e9, "Hz", "Tensor Engine clock", _ARCH_V2),
        "vector_clock_hz": _doc(1.12e9, "Hz", "Vector Engine clock", _ARCH_V2),
        "scalar_clock_hz": _doc(1.4e9, "Hz", "Scalar Engine clock", _ARCH_V2),
        "gpsimd_clock_hz": _doc(1.4e9, "Hz", "GpSimd Engine clock", _ARCH_V2),
        "peak_flops_bf16": _doc(92e12, "FLOP/s", "Tensor Engine peak, bf16/fp16/tf32 (128 x 128 PEs x 2 x clock)",
                                _ARCH_V2),
        "peak_flops_fp8": _doc(92e12, "FLOP/s", "Tensor Engine peak, cfp8 (the bf16 rate on NeuronCore-v2)", _ARCH_V2),
        "peak_flops_fp32": _doc(23e12, "FLOP/s", "Tensor Engine peak, fp32 inputs", _ARCH_V2),
        "hbm_chip_bytes_per_s": _doc(820e9, "B/s", "HBM bandwidth per chip", hardware),
        "cores_per_chip": _doc(2, "cores", "NeuronCores per chip", hardware),
        "hbm_bytes_per_s": _assumed(410e9, "B/s", "HBM bandwidth one NeuronCore attains: the chip's shared evenly "
                                    "by its cores", f"{hardware}; the per-core share is not documented"),
        "shared_sbuf_vector_gpsimd": _doc(1, "flag", "Vector and GpSimd cannot access SBUF at once; Vector and "
                                          "Scalar cannot access PSUM at once (NeuronCore-v2 only)", _ARCH_V2),
    })
    return Target(name, 2, "trainium.trn1", s)


def _v3() -> Target:
    s = _common(_ARCH_V3)
    s.update({
        "sbuf_partition_bytes": _doc(224 * 1024, "B", "SBUF per partition (28 MiB = 128 x 224 KiB)", _ARCH_V3),
        "sbuf_compiler_reserved_bytes": _assumed(16 * 1024, "B", "SBUF per partition the compiler keeps for itself "
                                                 "(NeuronCore-v2's figure; not documented for v3)", _DIRECT_ALLOCATION),
        "matmul_contraction_double_row": _doc(256, "rows", "rows of K one fp8 nc_matmul contracts in double_row "
                                              "mode (K padded to even)", f"{_ARCH_V3}; {_MATMUL}"),
        "tensor_clock_hz": _doc(2.4e9, "Hz", "Tensor Engine clock", _ARCH_V3),
        "vector_clock_hz": _doc(0.96e9, "Hz", "Vector Engine clock", _ARCH_V3),
        "scalar_clock_hz": _doc(1.2e9, "Hz", "Scalar Engine clock", _ARCH_V3),
        "gpsimd_clock_hz": _doc(1.2e9, "Hz", "GpSimd Engine clock", _ARCH_V3),
        "peak_flops_bf16": _doc(79e12, "FLOP/s", "Tensor Engine peak, bf16/fp16/tf32", _ARCH_V3),
        "peak_flops_fp8": _doc(158e12, "FLOP/s", "Tensor Engine peak, fp8 e4m3/e5m2 (double_row)", _ARCH_V3),
        "peak_flops_fp32": _doc(20e12, "FLOP/s", "Tensor Engine peak, fp32 inputs", _ARCH_V3),
        "hbm_chip_bytes_per_s": _doc(2.9e12, "B/s", "HBM bandwidth per chip (3 TB/s in the NKI guide)", _HW_TRN2),
        "cores_per_chip": _doc(8, "cores", "NeuronCores per chip", _HW_TRN2),
        "hbm_bytes_per_s": _assumed(2.9e12 / 8, "B/s", "HBM bandwidth one NeuronCore attains: the chip's shared evenly "
                                    "by its cores", f"{_HW_TRN2}; the per-core share is not documented"),
    })
    return Target("trn2", 3, "trainium.trn2", s)


def _v4() -> Target:
    """Trainium3 (NeuronCore-v4): what its architecture guide changes from NeuronCore-v3; the rest
    is NeuronCore-v3's (``_common``). Where AWS's two Trainium3 pages disagree, the value is an
    assumption citing both."""
    s = _common(_ARCH_V4)
    s.update({
        "sbuf_partition_bytes": _doc(256 * 1024, "B", "SBUF per partition (32 MiB = 128 x 256 KiB)", _ARCH_V4),
        "sbuf_compiler_reserved_bytes": _assumed(16 * 1024, "B", "SBUF per partition the compiler keeps for itself "
                                                 "(NeuronCore-v2's figure; not documented for v4)", _DIRECT_ALLOCATION),
        "matmul_contraction_double_row": _doc(256, "rows", "rows of K one fp8 nc_matmul contracts in double_row "
                                              "mode (K padded to even)", _MATMUL),
        # nc_matmul docstring, Tile size: "Starting NeuronCore-v4, the free dimension size of moving
        # tile can go up to 4096 for float32 dst or 8192 for bfloat16 dst, matching the size of 8x PSUM
        # banks (the entire PSUM)".
        "matmul_moving_free": _doc(4096, "elements", "free size of the moving tile with an fp32 dst (the whole "
                                   "PSUM: 8 banks of 512 fp32)", _MATMUL),
        # The instruction takes more, but the tile size kernels are written to stays 512: AWS's trn3 MX
        # deep dive tabulates "Max Tile Size in Code" Moving [128P, 512F], and its kernels (trn3 only)
        # write MAX_TILE_N = nl.tile_size.gemm_moving_fmax  # 512, asserting their tiles' shapes by it.
        "gemm_moving_fmax": _doc(512, "elements", "nl.tile_size.gemm_moving_fmax: the moving tile's free size "
                                 "kernels tile by (below what one nc_matmul takes on NeuronCore-v4)",
                                 "aws-neuron-sdk nki/deep-dives/mxfp-matmul.rst (Max Tile Size in Code) and its "
                                 "mx_kernels.py"),
        "matmul_moving_free_bf16": _doc(8192, "elements", "free size of the moving tile with a bf16 dst (the whole "
                                        "PSUM: 8 banks of 1024 bf16)", _MATMUL),
        "matmul_result_bytes": _doc(16 * 1024, "B", "bytes per partition one nc_matmul result may take: the whole "
                                    "PSUM (\"matching the size of 8x PSUM banks\")", _MATMUL),
        "tensor_clock_hz": _doc(2.4e9, "Hz", "Tensor Engine clock", _ARCH_V4),
        "vector_clock_hz": _doc(1.2e9, "Hz", "Vector Engine clock", _ARCH_V4),
        "scalar_clock_hz": _doc(1.2e9, "Hz", "Scalar Engine clock", _ARCH_V4),
        "gpsimd_clock_hz": _doc(1.2e9, "Hz", "GpSimd Engine clock", _ARCH_V4),
        "peak_flops_bf16": _doc(79e12, "FLOP/s", "Tensor Engine peak, bf16/fp16/tf32", _ARCH_V4),
        "peak_flops_fp8": _derived(158e12, "FLOP/s", "Tensor Engine peak, fp8 e4m3/e4m3fn/e5m2 in double_row mode: "
                                   "twice the bf16 rate", f"{_MATMUL} (Performance mode: FP8 double performance on "
                                   "NeuronCore-v3 and -v4); {_ARCH_V4} (79 BF16 TFLOPS)"),
        "peak_flops_mx": _doc(315e12, "FLOP/s", "Tensor Engine peak, MXFP8 / MXFP4 (nc_matmul_mx)", _ARCH_V4),
        "peak_flops_fp32": _doc(20e12, "FLOP/s", "Tensor Engine peak, fp32 inputs", _ARCH_V4),
        "dma_engines": _derived(16, "engines", "DMA engines per NeuronCore: the device's 128 over its 8 cores",
                                _ARCH_V4),
        "dma_engine_bytes_per_s": _derived(4.9e12 / 128, "B/s", "bandwidth of one DMA engine: the device's 4.9 TB/s "
                                           "of DMA bandwidth over its 128 engines", f"{_HW_TRN3}; {_ARCH_V4}"),
        # trainium3_arch.rst gives the device 4.7 TB/s of HBM bandwidth, trainium3.rst 4.9 TB/s.
        "hbm_chip_bytes_per_s": _assumed(4.7e12, "B/s", "HBM bandwidth per chip: 4.7 TB/s by the NKI architecture "
                                         "guide, 4.9 TB/s by the hardware page; the guide's figure is taken",
                                         f"{_ARCH_V4} (4.7 TB/s); {_HW_TRN3} (4.9 TB/s)"),
        "cores_per_chip": _doc(8, "cores", "NeuronCores per chip", f"{_ARCH_V4}; {_HW_TRN3}"),
        # trainium3_arch.rst: "20 CC-Cores for collective communication"; trainium3.rst: "16 CC-Cores
        # orchestrate collective communication".
        "collective_cores": _assumed(20, "cores", "collective-communication cores (CC-Cores) per device: 20 by "
                                     "the NKI architecture guide, 16 by the hardware page; the guide's figure is "
                                     "taken", f"{_ARCH_V4} (20); {_HW_TRN3} (16)"),
        "hbm_bytes_per_s": _assumed(4.7e12 / 8, "B/s", "HBM bandwidth one NeuronCore attains: the chip's shared evenly "
                                    "by its cores", f"{_ARCH_V4}; the per-core share is not documented"),
    })
    return Target("trn3", 4, "trainium.trn3", s)


# The current generation first (the order every list of targets is given in).
TARGETS: dict[str, Target] = {"trn2": _v3(), "trn3": _v4(), "trn1": _v2("trn1", _HW_TRN1),
                              "inf2": _v2("inf2", _HW_INF2)}
# The target a run, a review or the pytest option takes when none is named: the current generation.
DEFAULT_TARGET = "trn2"


# Each compute engine's clock, by its row of the target table (the trace's cycles run at it).
ENGINE_CLOCKS = {"tensor": "tensor_clock_hz", "vector": "vector_clock_hz", "scalar": "scalar_clock_hz",
                 "gpsimd": "gpsimd_clock_hz"}


def target_names() -> list[str]:
    return list(TARGETS)


# Where AWS's tools name the target: NEURON_PLATFORM_TARGET_OVERRIDE (nki.jit API reference:
# "trn1|inf2|gen2", "trn2|gen3", "trn3|gen4") and NKI_NC_VERSION (the NeuronCore generation,
# nki.isa.nc_version's member name, as nki-library's simulation harness sets it).
_ENVIRONMENT = ("NEURON_PLATFORM_TARGET_OVERRIDE", "NKI_NC_VERSION")
_TARGET_SPELLINGS = {"trn1": "trn1", "inf2": "inf2", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2",
                     "trn3": "trn3", "gen4": "trn3"}


def target_from_environment(environ: Any = None) -> str | None:
    """The target AWS's environment variables name (the first of ``_ENVIRONMENT`` set), or None."""
    environ = os.environ if environ is None else environ
    for variable in _ENVIRONMENT:
        value = environ.get(variable)
        if value:
            name = _TARGET_SPELLINGS.get(value.strip().lower())
            if name is None:
                raise ValueError(f"{variable}={value!r}: unknown NeuronCore target; valid: "
                                 f"{', '.join(_TARGET_SPELLINGS)}")
            return name
    return None


def target(name: str) -> Target:
    """The table of target ``name`` ("trn1", "inf2", "trn2" or "trn3")."""
    if not isinstance(name, str) or name not in TARGETS:
        raise ValueError(f"target: unknown NeuronCore target {name!r}; valid: {', '.join(TARGETS)}")
    return TARGETS[name]


# Tensor Engine input formats by the peak that applies to them.
_PEAK_OF = {"bf16": "peak_flops_bf16", "fp16": "peak_flops_bf16", "tf32": "peak_flops_bf16",
            "fp32": "peak_flops_fp32", "e4m3": "peak_flops_fp8", "e5m2": "peak_flops_fp8", "e4m3fn": "peak_flops_fp8",
            "mx": "peak_flops_mx"}
_FROM_V4 = ("e4m3fn", "mx")  # OCP e4m3fn and the MX matmul (nc_matmul_mx) from NeuronCore-v4


def peak_flops(t: Target, dtype: str) -> Spec:
    """The Tensor Engine's peak for matmul inputs of ``dtype`` (numeq format names: bf16, fp16,
    tf32, fp32, e4m3, e5m2, e4m3fn; "mx": nc_matmul_mx's MXFP8 / MXFP4)."""
    takes = [d for d in _PEAK_OF if d not in _FROM_V4 or t.generation >= 4]
    if dtype not in takes:
        raise ValueError(f"dtype: the Tensor Engine of {t.name} takes {', '.join(takes)}, not {dtype!r}")
    return t.spec(_PEAK_OF[dtype])


def start_partitions(count: int) -> tuple[int, ...]:
    """The partitions an access of ``count`` partitions may start at (partial-partition access
    rule of the NKI architecture guides): more than 64 partitions start at 0; 33-64 at 0 or 64;
    32 or fewer at 0, 32, 64 or 96."""
    if count > 64:
        return (0,)
    if count > 32:
        return (0, 64)
    return (0, 32, 64, 96)
