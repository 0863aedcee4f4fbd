"""The engines' random numbers as rows of the instruction table: ``rng`` (32 random bits per
element), ``set_rng_seed``, ``dropout``, NeuronCore-v4's ``rand2`` (uniform in [min, max]) and the
generator's state (``rand_set_state``, ``rand_get_state``: GpSimd's XORWOW lanes). The generator, its seeding and the bits-to-[0, 1) map
are the named assumption ``random_generator`` (machine.randomness); the instructions' documented
parts (dtypes, shapes, prob 0 keeps and prob 1 drops every element, no rescaling) are exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..machine import randomness
from .access import as_tensor, cost_elementwise, memory_name, new_tile, read, write
from .forms import Form
from ..machine.alu import alu
from .operands import constraint, destination, flat, per_partition, shape_fault
from .path import Call
from .table import instruction

_RANDOM = ("random_generator",)


@instruction("rng", engine="vector", engines=("vector", "gpsimd"), assumptions=_RANDOM, forms=[
    Form("current", "dst: tensor")])
def rng(c: Call) -> Any:
    """dst = 32 random bits per element, truncated to dst's integer type (its least significant
    bits; nki.isa.rng docs)."""
    ctx, dst = c.ctx, as_tensor(c.args["dst"], "dst")
    if dst.dtype.kind != "int" or dst.dtype.name == "bool":
        constraint(ctx, "rng", f"dst {dst.name} is {dst.dtype}; it takes int8, int16, int32, uint8, uint16 or uint32")
    bits = randomness.random_bits(ctx, c.engine, dst.shape)
    write(ctx, dst, None, bits=bits.astype(dst.dtype.storage))  # C's conversion: the low bits
    c.issue([dst], [], cycles=cost_elementwise(dst))
    return dst


@instruction("rand", engine="vector", module="nki.language", assumptions=_RANDOM, forms=[
    Form("current", "shape: any, dtype: any? = None, buffer: any? = None", returns=True)])
def rand(c: Call) -> Any:
    """A new tile of values uniform in [0, 1), from the Vector engine's generator (the named
    assumption ``random_generator``), cast into ``dtype`` (nki.language.rand docs; the older
    interface's dtype defaults to float32)."""
    ctx, v = c.ctx, c.args
    shape = (v["shape"],) if isinstance(v["shape"], (int, np.integer)) else tuple(v["shape"])
    t = new_tile(shape, v["dtype"] or c.dtype or "float32", memory_name(v["buffer"]))
    draws = randomness.uniform(ctx, "vector", t.shape)
    if ctx.bounding:  # Run.bound(): the draws are the exact dataflow's values (instructions.bounds)
        ctx.bound_note = draws
    write(ctx, t, draws)
    c.issue([t], [], cycles=max(64, t.free_size()))
    return t


@instruction("set_rng_seed", engine="vector", assumptions=_RANDOM, forms=[Form("current", "src_seeds: tensor")])
def set_rng_seed(c: Call) -> None:
    """Seed the Vector engine's generator from a [1, 1] 32-bit tile (nki.isa.set_rng_seed docs)."""
    ctx, src = c.ctx, as_tensor(c.args["src_seeds"], "src_seeds")
    if src.size != 1 or src.dtype.itemsize != 4:
        constraint(ctx, "set_rng_seed", f"src_seeds {src.name} is {src.shape} {src.dtype}; it takes one 32-bit value")
    read(ctx, src, "src_seeds")
    word = np.ascontiguousarray(src.data).reshape(-1)[:1]
    randomness.reseed(ctx, "vector", int(word.view(np.uint32)[0]) if word.itemsize == 4 else int(word[0]))
    c.issue([], [src], cycles=64)


@instruction("dropout", engine="vector", mask="elements", assumptions=_RANDOM, forms=[
    Form("current", "dst: tensor, data: tensor, prob: value"),
    Form("0.1.0", "data: tensor, prob: value", returns=True)])
def dropout(c: Call) -> Any:
    """dst = data with each element replaced by 0 with probability ``prob`` (a number or a (P, 1)
    tile: one probability per partition), on the Vector engine, without rescaling (nki.isa.dropout
    docs). An element is dropped where the generator's uniform value u in [0, 1) is below prob: prob
    1 drops every element and prob 0 keeps every one, as documented, whatever the generator."""
    ctx, form, v, dtype = c.ctx, c.form, c.args, c.dtype
    data = as_tensor(v["data"], "data")
    x = flat(read(ctx, data, "data", rows=True))
    prob = per_partition(ctx, v["prob"], x.shape[0], "dropout", "prob")
    dst = destination(v, form, data.shape, dtype, data.dtype)
    if dst.dtype != data.dtype and (not form.returns or data.dtype.kind == "int"):
        constraint(ctx, "dropout", f"dst {dst.name} is {dst.dtype} and data {data.name} {data.dtype}; the output "
                   "keeps data's dtype")
    if dst.shape[0] != x.shape[0] or dst.free_size() != x.shape[1]:
        raise shape_fault(ctx, "dropout", f"dst {dst.shape} and data {data.shape} differ")
    draws = randomness.uniform(ctx, "vector", x.shape)
    if ctx.bounding:  # Run.bound(): the draws decide which elements drop (instructions.bounds)
        ctx.bound_note = draws
    dropped = draws < prob
    if dst.dtype == data.dtype:  # kept elements keep their bits; dropped ones are +0
        bits = flat(data.data)
        write(ctx, dst, None, bits=np.where(dropped, np.zeros((), dtype=bits.dtype), bits).reshape(dst.shape))
    else:
        write(ctx, dst, np.where(dropped, x.dtype.type(0), x).reshape(dst.shape))
    c.issue([dst], [data], cycles=cost_elementwise(data))
    return dst


@instruction("rand2", engine="vector", since=4, assumptions=_RANDOM, forms=[
    Form("current", "dst: tensor, min: value, max: value")])
def rand2(c: Call) -> Any:
    """dst = values uniform in [min, max] from the Vector engine's generator ("Uses XORWOW PRNG
    algorithm ... Generates FP32 random values with uniform distribution", nki.isa.rand2): u in
    [0, 1) by assumption ``random_generator``, then min + u * (max - min), each operation one fp32
    rounding, cast into dst's dtype. ``min`` and ``max`` numbers or (P, 1) tiles; ``min < max``."""
    ctx, v = c.ctx, c.args
    dst = as_tensor(v["dst"], "dst")
    p = dst.shape[0] if dst.shape else 1
    lo = per_partition(ctx, v["min"], p, "rand2", "min")
    hi = per_partition(ctx, v["max"], p, "rand2", "max")
    if not (lo < hi).all():
        constraint(ctx, "rand2", f"min {v['min']!r} is not below max {v['max']!r} in every partition (\"min < max for "
                                 "valid range\")")
    u = randomness.uniform(ctx, "vector", (p, dst.free_size()))
    write(ctx, dst, alu("add", lo, alu("multiply", u, alu("subtract", hi, lo))).reshape(dst.shape))
    c.issue([dst], [t for t in (v["min"], v["max"]) if hasattr(t, "base")], cycles=cost_elementwise(dst))
    return dst


# "src_seeds element count for XORWOW must be 6 elements (GpSimd) or 24 elements (Vector)"
_STATE_WORDS = {"gpsimd": 6, "vector": 24}


def _state_engine(c: Call, name: str) -> str:
    ctx, eng = c.ctx, c.engine
    if eng == "vector" and ctx.target.generation < 4:
        constraint(ctx, name, f"engine=vector on {ctx.target.core}: \"NeuronCore-v3: GpSimd. NeuronCore-v4+: GpSimd, "
                              "Vector\"")
    if eng == "vector":
        raise ctx.unsupported(f"nisa.{name} on the Vector engine (how its 24 state words per lane drive its numbers "
                              "is not documented)")
    return eng


@instruction("rand_set_state", engine="gpsimd", engines=("gpsimd", "vector"), since=3, assumptions=_RANDOM,
             forms=[Form("current", "src_seeds: tensor")])
def rand_set_state(c: Call) -> None:
    """Each partition p of ``src_seeds`` (SBUF, uint32, 6 words: XORWOW's x, y, z, w, v and counter)
    becomes the state of compute lane p of the engine's generator (nki.isa.rand_set_state)."""
    ctx, src = c.ctx, as_tensor(c.args["src_seeds"], "src_seeds")
    eng = _state_engine(c, "rand_set_state")
    if src.base.memory.name != "sbuf" or src.dtype.name != "uint32" or src.free_size() != _STATE_WORDS[eng]:
        constraint(ctx, "rand_set_state", f"src_seeds {src.name} is {src.dtype} {src.shape} in {src.base.memory}; it "
                                          f"is a uint32 SBUF tile of {_STATE_WORDS[eng]} words per partition")
        return None
    words = read(ctx, src, "src_seeds", eng, bits=True).reshape(src.shape[0], -1)
    randomness.lane_states(ctx, eng, src.shape[0])[...] = words.astype(np.uint32)
    c.issue([], [src], cycles=64)
    return None


@instruction("rand_get_state", engine="gpsimd", engines=("gpsimd", "vector"), since=3, assumptions=_RANDOM,
             forms=[Form("current", "dst: tensor")])
def rand_get_state(c: Call) -> Any:
    """dst [P, 6] uint32 <- the states of compute lanes 0 .. P-1 of the engine's generator
    (nki.isa.rand_get_state; GpSimd cannot reach PSUM)."""
    ctx, dst = c.ctx, as_tensor(c.args["dst"], "dst")
    eng = _state_engine(c, "rand_get_state")
    if dst.dtype.name != "uint32" or dst.free_size() != _STATE_WORDS[eng] or dst.base.memory.name != "sbuf":
        constraint(ctx, "rand_get_state", f"dst {dst.name} is {dst.dtype} {dst.shape} in {dst.base.memory}; it is a "
                                          f"uint32 SBUF tile of {_STATE_WORDS[eng]} words per partition")
        return dst
    states = randomness.lane_states(ctx, eng, dst.shape[0])
    write(ctx, dst, None, bits=states.copy().reshape(dst.shape))
    c.issue([dst], [], cycles=64)
    return dst
