"""The NeuronCore's undocumented behaviours, each a named assumption: one typed table.

A run's assumptions are the Trainium platform's (PE order, products, PSUM rounding, the
function model ... : ``numeq.machines.platform_assumptions``, stated with the platform in C++)
and the instruction layer's own, below. Each has alternatives (the default first: the one place
a default is stated), a meaning and its source; every run prints the values it used, and each is
switchable per run with ``assume={name: value}``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from .targets import target as _target

_platforms = importlib.import_module("numeq.machines")

__all__ = ["ASSUMPTIONS", "Assumption", "assumptions_of", "chosen"]


@dataclass(frozen=True)
class Assumption:
    """One undocumented behaviour: ``alternatives`` (the default first), ``meaning`` (what each
    alternative decides) and ``source`` (what the documentation says, and why it is open)."""

    name: str
    alternatives: tuple[str, ...]
    meaning: str
    source: str

    @property
    def default(self) -> str:
        return self.alternatives[0]


def _table(*rows: Assumption) -> dict[str, Assumption]:
    return {a.name: a for a in rows}


# The instruction layer's own assumptions (the platform's come from numeq.machines).
ASSUMPTIONS: dict[str, Assumption] = _table(
    Assumption("matmul_accumulate", ("first_write", "after_read", "always", "never"),
               "how nc_matmul without accumulate= treats PSUM: first_write overwrites a location no matmul has "
               "written since its allocation and adds to later ones; after_read also overwrites a location whose "
               "matmul result another instruction has read since; always adds; never overwrites",
               "nki.isa.nc_matmul docs (0.3.0+): accumulate=None is auto, the first write to a PSUM location "
               "overwrites and later writes accumulate; what a location is across a tile's reuse is the compiler's "
               "inference, not documented (FACTS.md s3)"),
    Assumption("activation_affine", ("rounded", "fused"),
               "activation's data * scale + bias: each operation rounded to fp32, or one rounding",
               "nki.isa.activation docs give the formula, not its rounding (FACTS.md s3)"),
    Assumption("activation_sin_outside", ("documented_cubic", "true_sin"),
               "what nisa.activation(op=nl.sin) gives for an argument beyond [-PI, PI] (PI the fp32 nearest pi): "
               "documented_cubic extrapolates sin's Taylor cubic at +-pi, -u + u^3/6 with u = x -+ pi (evaluated in "
               "binary64, rounded to fp32), which gives the documented sin(9.0) ~ 27.65 (27.652); true_sin gives sin "
               "correctly rounded. Either way the argument is an activation_range finding",
               "NKI API reference, note under the activation table (nki.api.shared): the Scalar Engine \"performs no "
               "argument range reduction or clamping. It evaluates the fitting polynomial directly, so "
               "nki.isa.activation(op=nl.sin) extrapolates a cubic outside [-PI, PI] and sin(9.0) returns ~27.65 "
               "(not ~0.41)\"; the cubic's coefficients are not stated (one value is)"),
    Assumption("tensor_scalar_fusion", ("rounded", "fused"),
               "tensor_scalar's two operators: the first result rounded to fp32, or one rounding of both (where "
               "both are + - *)",
               "nki.isa.tensor_scalar docs give the formula, not its rounding (FACTS.md s3)"),
    Assumption("scan_carry", ("fp32", "dtype"),
               "tensor_tensor_scan's running value between elements: kept in fp32, or rounded to data0's dtype at "
               "each step",
               "the docstring's pseudocode keeps the carry in data0.dtype; the engines compute in fp32 (nki.isa "
               "docs; FACTS.md s3)"),
    Assumption("partition_reduce_order", ("sequential", "pairwise"),
               "the order in which GpSimd tensor_partition_reduce combines partitions, in fp32",
               "nki.isa.tensor_partition_reduce docs give no order"),
    Assumption("dma_cast_rounding", ("nearest_even", "toward_zero"),
               "the rounding of a DMA's dtype cast (through fp32)",
               "docs: DMA casts go through fp32; their rounding is not stated (FACTS.md s3)"),
    Assumption("memset_rounding", ("nearest_even", "toward_zero"),
               "the rounding of memset's value into the destination's dtype",
               "nki.isa.memset docs: the value is a compile-time constant of dst's type; how a float is narrowed "
               "is not stated"),
    Assumption("dma_compute_order", ("sequential", "pairwise"),
               "the order in which dma_compute adds more than two sources, in fp32",
               "nki.isa.dma_compute docs give the formula, not the order"),
    Assumption("random_generator", ("xorwow_lanes", "pcg64"),
               "the engines' random numbers (nl.rand, nl.dropout, nisa.rng, nisa.dropout): xorwow_lanes runs one "
               "XORWOW generator per partition lane (Marsaglia 2003), its five state words and counter drawn from "
               "splitmix64 of (seed, lane), the lane's numbers in order along the free axis, a uniform value taken "
               "as the top 24 bits times 2^-24; pcg64 draws the tile from numpy's PCG64 seeded with the seed. The "
               "seed is nl.random_seed's / nisa.set_rng_seed's value, 0 before the kernel sets one",
               "nki.isa rand_set_state / rand_get_state docs name XORWOW and a per-lane state (6 words on GpSimd, "
               "24 on Vector); how a 32-bit seed fills the state, the order of numbers within a tile and the "
               "conversion to [0, 1) are not documented"),
    Assumption("integer_overflow", ("wrap", "saturate"),
               "tensor_tensor's native int32/uint32 arithmetic on GpSimd where a result leaves the destination's "
               "range: wrap keeps its low 32 bits (two's complement), saturate clips it to the range",
               "nki.isa.tensor_tensor docs: with int32/uint32 tiles GpSimd \"uses native integer arithmetic. This "
               "ensures exact results for all 32-bit integer values\"; what an overflowing result becomes is not "
               "stated"),
    Assumption("matmul_column_tiling", ("supported", "row_only"),
               "whether nc_matmul takes PE column tiling (tile_size's column_size 32 or 64, a start_column other "
               "than 0): supported takes it as row tiling is taken; row_only refuses it (a matmul_tile error), "
               "as the docstring's parameter lines state",
               "nki.isa.nc_matmul docstring, Tiling mode: \"Column tiling mode slices the 128 PE columns in the "
               "same fashion\" (also SDK 2.26's PE tiling, the Trainium2 guide's \"Column tiling mode\" and AWS's "
               "example test, tile_position=(.., 64), tile_size=(64, 64)); yet its :param: lines say "
               "\"start_column must be 0\" and \"column_size must be 128\", the words of nc_matmul_mx, which "
               "\"supports only row tiling mode\""),
    Assumption("tile_liveness", ("first_access", "allocation"),
               "when an automatically allocated tile starts taking SBUF / PSUM (the capacity rules and the memory "
               "curve): at the first instruction that writes or reads it (a compiler's liveness, from a value's "
               "definition to its last use), or where the kernel declares it; both end at its last use",
               "the allocator is not documented; evidence for first_access: nki-library's RoPE at LNC=2 declares its "
               "output tile before four intermediates and fits trn2's SBUF only if the output starts taking memory "
               "at its first write (232 KiB declared-to-last-use, 200 KiB first-write-to-last-use, of 224 KiB)"),
    Assumption("sbuf_overflow", ("save_reload", "reload_inputs", "error"),
               "what happens where the automatically allocated tiles live at one time take more SBUF per partition "
               "than the target holds, while each instruction's own tiles fit: save_reload: the compiler spills, "
               "saving tiles to device memory and reloading them before their next use (an sbuf_spill warning; "
               "Run.schedule() adds the transfers, the tile used furthest ahead leaving first); reload_inputs: as "
               "save_reload, but a tile holding an unchanged copy of an HBM tensor the kernel never writes is loaded "
               "again from there, unsaved; error: the kernel does not fit (an sbuf_capacity error)",
               "nki_perf_guide.rst, Opt #2: \"compiler generated spilling\", the profile's spill_save_bytes / "
               "spill_reload_bytes, \"oversized block size might be causing spills\"; AWS's kernel-optimization "
               "tutorial profiles on trn2 a matmul (blocked free dimensions) whose tiles, live in program order, take "
               "322 KiB per partition of 224 KiB; which tiles the compiler spills, and whether it reloads a copy of "
               "an input from the input, is not documented"),
    Assumption("psum_allocation", ("bank", "bytes"),
               "PSUM capacity counted in whole 2 KiB banks per tile, or in bytes",
               "the allocator's granularity is not documented; matmul results occupy banks"),
    Assumption("register_overflow", ("wrap", "error"),
               "a value that does not fit where it goes: an immediate of register_alloc / register_move or an "
               "integer element register_load reads outside a register's signed 32 bits (int32), or a register's "
               "value outside the integer dtype register_store writes: wrap keeps its low bits (two's complement: "
               "a uint32 0xFFFFFFFF loads as -1, 300 stores into uint8 as 44); error stops the run with an "
               "instruction_constraint finding. A register is read as a signed int32 (loop bounds, scalar_offset)",
               "nki.isa.register_alloc docs: \"64x 32-bit registers per engine sequencer\"; register_load / "
               "register_store: \"a single scalar value (up to 32-bit)\"; whether a register is signed and what a "
               "value too wide becomes are not documented"),
    Assumption("register_unwritten", ("error", "zero"),
               "reading a register that nisa.register_alloc() (no value) left uninitialized and nothing wrote since "
               "(a loop bound, a while_loop condition, scalar_offset, register_move / register_store from it): error "
               "stops the run with a read_uninitialised finding; zero reads 0",
               "nki.isa.register_alloc docs: None \"allocate an uninitialized register\"; what it holds is not "
               "documented"),
    Assumption("register_float", ("truncate", "bits"),
               "register_load from / register_store into a float tile: truncate loads the element's value truncated "
               "toward zero (a NaN or infinity stops the run) and stores the register's value rounded into the "
               "float dtype; bits loads the element's bit pattern (zero-extended below 32 bits, read as int32) and "
               "stores the register's low bits",
               "nki.isa.register_load / register_store docs: \"a single scalar value (up to 32-bit)\"; their "
               "examples use int32 tiles; what a float element becomes is not documented"),
    Assumption("register_loop_bound", ("entry", "each_iteration"),
               "when nl.fori_loop and nl.dynamic_range read a VirtualRegister bound: entry reads both bounds once, "
               "when the loop starts; each_iteration reads the upper bound again before each iteration's test (a "
               "body that writes the bound register changes the trip count)",
               "nki.language.fori_loop docs: \"roughly equivalent to ... for i in range(lower, upper, step)\" "
               "(Python reads range's bounds once); dynamic_range docs: \"The loop runs on device with dynamic "
               "bounds\"; when the sequencer reads the bound register is not documented"),
    Assumption("collective_order", ("group_order", "pairwise"),
               "the order in which an nki.collectives all_reduce / reduce_scatter adds the ranks' values: "
               "group_order ((v0 + v1) + v2 ..., the replica group's order) or pairwise (neighbours first)",
               "nki.collectives API reference: the reduction operator, not its order (the ring or mesh algorithm "
               "the runtime picks is not documented)"),
    Assumption("collective_accumulator", ("fp32", "dtype"),
               "the precision of those additions: fp32 (each sum rounded to fp32, the result rounded once into "
               "the destination) or dtype (each partial sum also rounded into the tensors' dtype)",
               "nki.collectives API reference: silent on the reduction's precision"),
    Assumption("mx_scale", ("documented", "ocp"),
               "quantize_mx's block scale for a group of 32 values with largest magnitude amax: documented is "
               "2^(floor(log2 amax) - (E_max - 1)), E_max 8 for float8_e4m3fn and 15 for float8_e5m2; ocp is half "
               "that, 2^(floor(log2 amax) - E_max), the OCP MX sample algorithm's, which AWS's own numpy goldens "
               "compute (nki-samples mxfp-matmul mx_cpu_utils.quantize_mx_golden; nki-library "
               "mx_torch_common.quantize_to_mx, \"matching nisa.quantize_mx hardware behavior\"). An all-zero "
               "group takes 2^-127 either way",
               "nki.isa.quantize_mx docstring (SDK 2.32): \"a block scale that is two times larger, reserving "
               "additional range for rounding the largest values in each group without saturation\", and its "
               "formula; AWS's two goldens keep the OCP scale, and nki-library's trn3 test of "
               "load_and_quantize_mxfp_mk (test_mxfp_load.py, 2026-02) demands its golden bit for bit (accuracy "
               "0); the docstring's sentence is newer (SDK 2.32, 2026-08): the sources disagree"),
    Assumption("mx_conversion", ("nearest_even", "ieee_overflow", "flush_subnormals"),
               "how quantize_mx rounds each value / scale into the fp8 element: nearest_even rounds to nearest, "
               "ties to even, keeping subnormals, and saturates beyond the format's largest finite value (what "
               "AWS's golden does: np.clip to +-max, then ml_dtypes' round to nearest even); ieee_overflow rounds "
               "the same but overflows to NaN (e4m3fn) or Inf (e5m2); flush_subnormals also flushes results below "
               "the smallest normal to zero. Under the documented scale no quotient reaches the largest finite "
               "value, so the overflow choice matters with mx_scale=ocp only",
               "nki.isa.quantize_mx docstring: \"divides them by the calculated scale, and casts to the target "
               "MXFP8 element data type\"; the cast's rounding, saturation and subnormals are not documented"),
)


_PLATFORM_TABLES: dict[str, tuple] = {}


def platform_assumptions(platform: str) -> tuple:
    """``numeq.machines.platform_assumptions(platform)`` for a target's (built-in) Trainium
    platform, read once: every run and rerun asks, and a built-in platform cannot be registered
    again (load_platform refuses its name). Callers copy what they change."""
    if platform not in _PLATFORM_TABLES:
        _PLATFORM_TABLES[platform] = tuple(_platforms.platform_assumptions(platform))
    return _PLATFORM_TABLES[platform]


def assumptions_of(target_name: str) -> dict[str, dict]:
    """Every assumption of a target: the platform's and the instruction layer's, each as
    {value, alternatives, meaning, source}, the value at its default."""
    t = _target(target_name)
    out = {}
    for a in platform_assumptions(t.platform):
        out[a["name"]] = {"value": a["value"], "alternatives": list(a["alternatives"]), "meaning": a["meaning"],
                          "source": a["source"]}
    for a in ASSUMPTIONS.values():
        out[a.name] = {"value": a.default, "alternatives": list(a.alternatives), "meaning": a.meaning,
                       "source": a.source}
    return out


def chosen(target_name: str, assume: dict | None) -> dict[str, dict]:
    """``assumptions_of(target_name)`` with ``assume``'s values set (each checked: its name and
    value among the alternatives)."""
    table = assumptions_of(target_name)
    for key, value in (assume or {}).items():
        if key not in table:
            raise ValueError(f"assume: {target_name} has no assumption {key!r}; valid: {', '.join(table)}")
        value = str(value).lower() if isinstance(value, bool) else str(value)
        if value not in table[key]["alternatives"]:
            raise ValueError(f"assume: {key} cannot be {value!r}; valid: {', '.join(table[key]['alternatives'])}")
        table[key]["value"] = value
    return table
