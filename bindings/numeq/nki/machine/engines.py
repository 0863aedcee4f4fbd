"""The NeuronCore's engines as NKI names them: ``nisa.engine.vector`` ... (``nisa.vector_engine``
in older releases), and the engine an ``engine=`` keyword names."""

from __future__ import annotations

from typing import Any

__all__ = ["ENGINES", "Engine", "engine_name"]

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma", "unknown")


class Engine:
    """``nisa.engine``-style identifiers (``nisa.vector_engine`` ... in older releases)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"engine.{self.name}"


def engine_name(engine: Any, default: str) -> str:
    """The engine an ``engine=`` keyword names (an Engine, a string, or None: ``default``)."""
    if engine is None:
        return default
    name = getattr(engine, "name", engine)
    name = {"act": "scalar", "activation": "scalar", "pool": "gpsimd", "pe": "tensor", "sync": "dma",
            "unknown": default}.get(name, name)
    if name not in ENGINES:
        raise ValueError(f"engine: unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    return name
