"""The example ports and NKI kernels that ship with numeq, found from any folder:
``numeq.examples.path("reviews/unsupported-claim")`` is the folder of that example port review
(its ``manifest.toml``, inputs and outputs), ``numeq.examples.path("nki")`` the example kernels.
An installed package holds them beside this file; a checkout, under its ``examples/`` folder.

Example::

    >>> (numeq.examples.path("reviews/correct-port") / "manifest.toml").is_file()
    True
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["names", "path"]

_HERE = Path(__file__).resolve().parent
_ROOTS = (_HERE, _HERE.parents[2] / "examples")  # installed beside this file; a checkout's examples/


def names() -> list[str]:
    """The shipped examples: "reviews/<port>" for each port review's folder (its manifest.toml),
    "reviews/kernel-ports" (reviews of an NKI kernel itself: a manifest per review, NAME.toml),
    and "nki" (the example NKI kernels)."""
    root = next((r for r in _ROOTS if (r / "reviews").is_dir()), None)
    if root is None:
        return []
    folders = sorted({p.parent for p in (root / "reviews").rglob("*.toml")})
    found = [f"reviews/{f.relative_to(root / 'reviews').as_posix()}" for f in folders]
    return found + (["nki"] if (root / "nki").is_dir() else [])


def path(name: str) -> Path:
    """The folder of the shipped example ``name`` (one of ``names()``), or ValueError naming the
    valid choices."""
    if not isinstance(name, str) or not name or ".." in Path(name).parts or Path(name).is_absolute():
        raise ValueError(f"name: expected an example's name (one of: {', '.join(names())}), got {name!r}")
    for root in _ROOTS:
        folder = root / name
        if folder.is_dir():
            return folder
    raise ValueError(f"name: no example {name!r}; valid: {', '.join(names())}")
