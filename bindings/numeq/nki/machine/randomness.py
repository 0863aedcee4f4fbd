"""The engines' random numbers: one generator per run and engine, seeded by the kernel
(``nl.random_seed``, ``nisa.set_rng_seed``), its algorithm the named assumption
``random_generator``.

AWS documents the generator's algorithm and state layout (nki.isa ``rand_set_state``: XORWOW, one
state per compute lane, 6 uint32 on GpSimd) but not how a 32-bit seed fills the state, the order
in which a tile's elements take numbers, nor how 32 random bits become a value in [0, 1): those are
the assumption's. ``xorwow_lanes`` (the default): lane p's state is five words and a counter from
splitmix64 of (seed, p) (Steele, Lea and Flood 2014), each lane yields its numbers in order along
the free axis, and a uniform value is the top 24 bits times 2^-24 (exact in fp32, in [0, 1)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["lane_states", "random_bits", "reseed", "uniform"]

_M64 = (1 << 64) - 1
_WEYL = np.uint32(362437)  # XORWOW's counter increment (Marsaglia 2003, "Xorshift RNGs", J. Stat. Softw. 8(14))


def _splitmix64(state: int) -> tuple[int, int]:
    state = (state + 0x9E3779B97F4A7C15) & _M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return state, z ^ (z >> 31)


def _xorwow_state(seed: int, lanes: int) -> np.ndarray:
    """[lanes, 6] uint32: x, y, z, w, v and the counter d of each lane."""
    state = np.empty((lanes, 6), np.uint32)
    for p in range(lanes):
        s = ((seed & 0xFFFFFFFF) << 32) | p
        words = []
        for _ in range(3):
            s, z = _splitmix64(s)
            words += [z & 0xFFFFFFFF, z >> 32]
        if not any(words[:5]):  # an all-zero xorshift state never leaves zero
            words[0] = 1
        state[p] = words
    return state


class _Generator:
    """One engine's generator in one run."""

    def __init__(self, kind: str, seed: int) -> None:
        self.kind, self.seed = kind, seed
        self.lanes: np.ndarray | None = None  # xorwow: [lanes, 6]
        self.numpy = np.random.Generator(np.random.PCG64(seed)) if kind == "pcg64" else None

    def bits(self, partitions: int, count: int) -> np.ndarray:
        """[partitions, count] uint32: each lane's next ``count`` numbers."""
        if self.numpy is not None:
            return self.numpy.integers(0, 1 << 32, size=(partitions, count), dtype=np.uint32)
        if self.lanes is None or len(self.lanes) < partitions:
            self.lanes = _xorwow_state(self.seed, max(partitions, 128))
        x, y, z, w, v, d = (self.lanes[:partitions, i].copy() for i in range(6))
        out = np.empty((partitions, count), np.uint32)
        for j in range(count):
            t = x ^ (x >> np.uint32(2))
            x, y, z, w = y, z, w, v
            v = (v ^ (v << np.uint32(4))) ^ (t ^ (t << np.uint32(1)))
            d = d + _WEYL
            out[:, j] = v + d
        for i, word in enumerate((x, y, z, w, v, d)):
            self.lanes[:partitions, i] = word
        return out


def _generator(ctx: Any, engine: str) -> _Generator:
    generators = ctx.__dict__.setdefault("random_generators", {})
    g = generators.get(engine)
    if g is None:
        g = generators[engine] = _Generator(ctx.assumptions["random_generator"], 0)
    return g


def reseed(ctx: Any, engine: str, seed: int) -> None:
    """The engine's generator restarts from ``seed`` (a 32-bit value)."""
    ctx.__dict__.setdefault("random_generators", {})[engine] = _Generator(ctx.assumptions["random_generator"],
                                                                          int(seed) & 0xFFFFFFFF)


def lane_states(ctx: Any, engine: str, partitions: int) -> np.ndarray:
    """The engine's XORWOW states of lanes 0 .. partitions-1, [partitions, 6] uint32 (x, y, z, w, v
    and the counter d: the order of Marsaglia's algorithm), as a writable view."""
    g = _generator(ctx, engine)
    if g.numpy is not None:
        raise ctx.unsupported("the XORWOW state of the engine's generator under assumption random_generator=pcg64 "
                              "(it has none)")
    if g.lanes is None or len(g.lanes) < partitions:
        g.lanes = _xorwow_state(g.seed, max(partitions, 128))
    return g.lanes[:partitions]


def random_bits(ctx: Any, engine: str, shape: tuple) -> np.ndarray:
    """32 random bits per element of a tile of ``shape`` (partitions first)."""
    partitions = shape[0] if shape else 1
    count = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return _generator(ctx, engine).bits(partitions, count).reshape(shape)


def uniform(ctx: Any, engine: str, shape: tuple) -> np.ndarray:
    """fp32 values uniform in [0, 1): the top 24 of 32 random bits times 2^-24."""
    return (random_bits(ctx, engine, shape) >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
