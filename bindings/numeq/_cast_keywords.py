"""The cast keywords: how a value is rounded once into a format (numeq.round's rounding, overflow,
subnormals, seed and random_bits).

Every function that ends in one rounding takes this same bundle: numeq.round / encode / cast,
every numeq.reference function, block_quantize, quantize and numeq.ops.cast. It is declared,
defaulted and checked here once: ``check_cast_keywords`` checks the values (the choices themselves
are the extension's to judge: it names the parameter and the valid choices), and
``takes_cast_keywords`` gives a function whose signature ends in the whole bundle its keywords,
defaults and check.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, NamedTuple, TypeVar

from ._arrays import UINT64, _check_int, _check_str


class CastKeywords(NamedTuple):
    """The checked cast keywords, in the order the extension's cast functions take them."""

    rounding: str = "nearest_even"
    overflow: str = "ieee"
    subnormals: str = "keep"
    seed: int = 0
    random_bits: int = 32


_DEFAULTS = CastKeywords()


def check_cast_keywords(rounding: Any = _DEFAULTS.rounding, overflow: Any = _DEFAULTS.overflow,
                        subnormals: Any = _DEFAULTS.subnormals, seed: Any = _DEFAULTS.seed,
                        random_bits: Any = _DEFAULTS.random_bits) -> CastKeywords:
    """The keywords checked: the three policies are strings, ``seed`` a uint64 and ``random_bits``
    in [1, 64] (TypeError / ValueError naming the parameter otherwise). A function that takes only
    part of the bundle leaves the rest at their defaults."""
    for value, parameter in ((rounding, "rounding"), (overflow, "overflow"), (subnormals, "subnormals")):
        _check_str(value, parameter)
    return CastKeywords(rounding, overflow, subnormals, _check_int(seed, "seed", *UINT64),
                        _check_int(random_bits, "random_bits", 1, 64))


# The bundle as keyword-only parameters, as a public signature shows them.
_PARAMETERS = [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=type(default).__name__)
    for name, default in _DEFAULTS._asdict().items()
]

F = TypeVar("F", bound=Callable[..., Any])


def takes_cast_keywords(body: F) -> F:
    """``body(..., *, ..., cast)`` as the public function ``body(..., *, ..., rounding="nearest_even",
    overflow="ieee", subnormals="keep", seed=0, random_bits=32)``: the five keywords take the place
    of body's keyword-only ``cast`` (its last parameter) in the signature help() shows, and reach
    body checked, as one CastKeywords."""
    signature = inspect.signature(body)
    own = list(signature.parameters.values())
    if not own or own[-1].name != "cast" or own[-1].kind is not inspect.Parameter.KEYWORD_ONLY:
        raise TypeError(f"{body.__qualname__}: the last parameter must be the keyword-only 'cast'")

    @functools.wraps(body)
    def function(*args: Any, **kwargs: Any) -> Any:
        if "cast" in kwargs:  # body's own name for the bundle is no keyword of the public function
            raise TypeError(f"{body.__name__}() got an unexpected keyword argument 'cast'")
        given = {name: kwargs.pop(name) for name in _DEFAULTS._fields if name in kwargs}
        return body(*args, cast=check_cast_keywords(**given), **kwargs)

    function.__signature__ = signature.replace(parameters=own[:-1] + _PARAMETERS)  # type: ignore[attr-defined]
    return function  # type: ignore[return-value]
