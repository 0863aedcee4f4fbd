"""Machine models: platforms, plans, and bit-exact emulation of how a platform sums, dots and
multiplies matrices (numeq.platforms(), numeq.plan(), numeq.sum / dot / matmul).

A platform (``numeq.platforms()``) is a named bundle of plans, one per operation and input /
output format, each parameter with its evidence (``platform_evidence(name)``). A plan
(``numeq.plan(...)``, a ``Plan``) states the order and the arithmetic of every addition; the
evaluator in C++ (core/evaluate.hpp) reproduces it bit for bit. Give the emulation functions either
a platform name or a plan (a built-in one, one you edited, or your own JSON).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from . import _core
from ._arrays import _INTAKE, FORMAT_NAMES, SIZE, _check_format, _check_int, _check_str, _renamed, _sized
from ._reference_functions import _holds_every_value, _input_values


class Plan:
    """An accumulation plan: plain data, printable, comparable, serialisable to JSON.

    ``text``: the plan as JSON text or a dict (as ``to_json`` / ``to_dict`` give it; ``from_json``
    is the same constructor). ``str(plan)`` reads the plan in one line; ``plan.name`` names it.

    Example::

        >>> p = numeq.plan("trainium.trn2", "sum", "fp32", "fp32")
        >>> print(p)
        trainium.trn2 sum fp32 -> fp32: sequential(fp32 nearest_even fma), c first, out fp32 nearest_even
        >>> numeq.Plan(p.to_json()) == p
        True
    """

    __slots__ = ("_json",)

    def __init__(self, text: str | dict) -> None:
        body = _json_text(text, "plan")
        with _sized("plan"), _renamed({"JSON": "plan"}):
            self._json = _core.core_plan_check(body)  # validates; errors name the field

    @classmethod
    def _canonical(cls, text: str) -> Plan:
        """A plan from JSON the extension wrote itself (canonical and valid): no second check."""
        p = cls.__new__(cls)
        p._json = text
        return p

    @classmethod
    def from_json(cls, text: str | dict) -> Plan:
        """The plan that ``text`` describes (checked: errors name the field).

        ``text``: JSON text or a dict, as ``Plan(text)``.

        Example::

            >>> p = numeq.plan("nvidia.h100")
            >>> numeq.Plan.from_json(p.to_dict()) == p
            True
        """
        return cls(text)

    def to_json(self) -> str:
        """The plan as JSON text, which ``Plan(text)`` and ``plan=`` arguments read back.

        Example::

            >>> numeq.plan("nvidia.h100").to_json().startswith("{")
            True
        """
        return self._json

    def to_dict(self) -> dict:
        """The plan as a dict (the JSON parsed): its fields, to read or edit.

        Example::

            >>> numeq.plan("nvidia.h100").to_dict()["name"]
            'nvidia.h100 matmul bf16 -> fp32'
        """
        return json.loads(self._json)

    @property
    def name(self) -> str:
        return str(self.to_dict().get("name", ""))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and json.loads(self._json) == json.loads(other._json)

    def __hash__(self) -> int:
        return hash(self._json)

    def __repr__(self) -> str:
        return f"Plan({_core.core_plan_text(self._json)})"

    def __str__(self) -> str:
        return _core.core_plan_text(self._json)


def platforms() -> list[str]:
    """Names of the built-in (and registered) platforms.

    Example::

        >>> "nvidia.h100" in numeq.platforms(), "trainium.trn2" in numeq.platforms()
        (True, True)
    """
    return list(_core.core_platforms())


def platform_json(name: str) -> str:
    """A platform as JSON: every plan and every evidence entry. Edit it and load it back with
    ``load_platform``.

    ``name``: a name of ``platforms()`` (variants in brackets are accepted).

    Example::

        >>> import json
        >>> sorted(json.loads(numeq.platform_json("numpy")))
        ['aliases', 'assumptions', 'description', 'evidence', 'functions', 'name', 'plans']
    """
    _check_str(name, "name")
    with _renamed({"platform": "name"}):
        return _core.core_platform_json(name)


def platform_evidence(name: str) -> str:
    """Every parameter's evidence, one line each: kind, parameter, source.

    ``name``: a name of ``platforms()``.

    Example::

        >>> lines = numeq.platform_evidence("nvidia.h100").splitlines()
        >>> sorted({line.split()[0] for line in lines})
        ['assumed', 'documented', 'measured']
    """
    _check_str(name, "name")
    with _renamed({"platform": "name"}):
        return _core.core_platform_evidence(name)


def platform_assumptions(name: str) -> list[dict]:
    """The platform's assumptions (parameters nobody has published), each a dict with ``name``,
    ``value`` (in force), ``alternatives`` (the default first), ``meaning`` and ``source``. Select
    other values anywhere a platform name is taken: ``"trainium.trn1[products=bf16,pe_order=pairwise]"``.
    Platforms built only from measured or documented facts have none.

    ``name``: a name of ``platforms()``.

    Example::

        >>> first = numeq.platform_assumptions("trainium.trn2")[0]
        >>> first["name"], first["value"], first["alternatives"]
        ('pe_order', 'sequential', ['sequential', 'pairwise', 'fused'])
        >>> numeq.platform_assumptions("nvidia.h100")
        []
    """
    return list(json.loads(platform_json(name)).get("assumptions", []))


def _json_text(value: Any, parameter: str) -> str:
    """JSON text of a dict, or a str checked to be text; no string in it may hold a NUL character
    (the C++ layer's messages and names end at one)."""
    if isinstance(value, dict):
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{parameter}: the dict is not JSON data: {e}") from None
        _no_nul(value, parameter)
        return text
    if not isinstance(value, str):
        raise TypeError(f"{parameter}: expected JSON text or a dict, got {type(value).__name__}")
    _check_str(value, parameter)
    value = value[1:] if value.startswith("\ufeff") else value  # a byte-order mark: JSON text may start with one
    if "\\u0000" in value:  # an escaped NUL: find where (malformed JSON is left to the C++ parser's report)
        try:
            _no_nul(json.loads(value), parameter)
        except json.JSONDecodeError:
            pass
        except RecursionError:
            raise ValueError(f"{parameter}: JSON nested too deeply to be a platform profile") from None
    return value


def _no_nul(node: Any, path: str) -> None:
    """No string in ``node`` (keys included) holds a NUL; walked with a stack, any depth."""
    stack = [(node, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            _check_str(item, where)
        elif isinstance(item, dict):
            for key, value in item.items():
                _check_str(key, where)
                stack.append((value, f"{where}.{key}"))
        elif isinstance(item, list):
            stack.extend((value, f"{where}[{i}]") for i, value in enumerate(item))


def load_platform(source: str | os.PathLike | dict | None = None, *, path: str | os.PathLike | None = None,
                  text: str | None = None) -> str:
    """Registers a platform profile (JSON) for this process; returns its name.

    Give exactly one of: ``path=`` a .json file; ``text=`` JSON text; or ``source``: a dict (the
    profile), an ``os.PathLike`` (``pathlib.Path``: a file), or a str, which is JSON text when its
    first non-blank character is ``{`` (a profile is a JSON object) and a file path otherwise.
    A malformed profile raises ValueError naming the field; a missing file, ValueError naming
    the path.

    A built-in platform's name is refused: edit ``name`` when starting from ``platform_json``.

    Example::

        >>> import json
        >>> profile = json.loads(numeq.platform_json("numpy"))
        >>> profile["name"] = "example.numpy_copy"
        >>> numeq.load_platform(profile)
        'example.numpy_copy'
        >>> "example.numpy_copy" in numeq.platforms()
        True
    """
    given = [name for name, value in (("source", source), ("path", path), ("text", text)) if value is not None]
    if len(given) != 1:
        raise TypeError(f"source, path, text: give exactly one (got {', '.join(given) or 'none'})")
    if text is not None:
        with _sized("text"), _renamed({"JSON": "text"}):
            return _core.core_register_platform(_json_text(text, "text"))
    parameter = "path" if path is not None else "source"
    where = path if path is not None else source
    if parameter == "source" and isinstance(source, (dict, str)) and (
            isinstance(source, dict) or source.lstrip("\ufeff \t\r\n").startswith("{")):
        with _sized("source"), _renamed({"JSON": "source"}):
            return _core.core_register_platform(_json_text(source, "source"))
    if isinstance(where, str):
        _check_str(where, parameter)
    elif not isinstance(where, os.PathLike):
        raise TypeError(f"{parameter}: expected a path (str or os.PathLike), JSON text or a dict, got "
                        f"{type(where).__name__}")
    file = Path(where)
    try:
        body = file.read_text()
    except OSError as e:
        raise ValueError(f"{parameter}: cannot read the profile file {str(file)!r}: {e.strerror or e} (JSON text "
                         "starts with '{'; or pass text=...)") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{parameter}: {str(file)!r} is not UTF-8 text: {e}") from None
    with _sized(parameter), _renamed({"JSON": parameter}):
        return _core.core_register_platform(_check_str(body, parameter))



def plan(platform: str, op: str = "matmul", in_fmt: str = "bf16", out: str = "fp32", *, split_k: int = 1,
         split_mode: str = "serial") -> Plan:
    """The plan a platform uses for ``op`` ("sum", "dot", "matmul") on ``in_fmt`` inputs with
    ``out`` results; ``split_k`` > 1 cuts K into that many parts ("serial": through the output
    type, CUTLASS serial split-K; "parallel": fp32 partials summed in order).

    ``platform``: a name of ``platforms()`` (with ``[...]`` assumptions); ``in_fmt``, ``out``: names
    of ``numeq.formats()``; ``split_mode``: "serial" or "parallel".

    Example::

        >>> print(numeq.plan("nvidia.h100", "matmul", "bf16", "fp32"))
        nvidia.h100 matmul bf16 -> fp32: fused(16 products, F=25 truncate, bf16 x bf16 + fp32 -> fp32 toward_zero), c first, out fp32 nearest_even
        >>> print(numeq.plan("nvidia.h100", split_k=2).name)
        nvidia.h100 matmul bf16 -> fp32, split-K 2 serial
    """
    for value, parameter in ((platform, "platform"), (op, "op"), (in_fmt, "in_fmt"), (out, "out"),
                             (split_mode, "split_mode")):
        _check_str(value, parameter)
    split_k = _check_int(split_k, "split_k", 1, SIZE[1])
    return Plan._canonical(_core.core_plan(platform, op, in_fmt, out, split_k, split_mode))


def _resolve(platform: str | None, plan_: Plan | str | dict | None, op: str, in_fmt: str, out: str) -> Plan:
    if (platform is None) == (plan_ is None):
        raise ValueError("platform, plan: give exactly one (a platform name, or a Plan)")
    if plan_ is not None:
        if isinstance(plan_, Plan):
            return plan_
        if not isinstance(plan_, (str, dict)):
            raise TypeError(f"plan: expected a Plan, JSON text or a dict, got {type(plan_).__name__}")
        return Plan(plan_)
    _check_str(platform, "platform")
    return plan(platform, op, in_fmt, out)


def _values(x: Any, in_fmt: str | None, parameter: str) -> tuple[np.ndarray, str]:
    if in_fmt is not None:
        _check_str(in_fmt, "in_fmt")
    own = _INTAKE.get(x.dtype) if type(x) is np.ndarray else None
    if (own is not None and x.ndim > 0 and x.flags.c_contiguous and x.flags.aligned and x.dtype.isnative
            and (in_fmt is None or in_fmt in FORMAT_NAMES)):
        # The extension reads the array as it lies (float16 and ml_dtypes as bit patterns of their
        # formats) and widens it to float64 in one pass: nothing to copy here.
        fmt = in_fmt or own
        if not (x.dtype.itemsize == 8 and x.dtype.kind in "iu") and _holds_every_value(own, fmt):
            return x, fmt  # every value of the array's own format is one of in_fmt's: nothing to check
        if int(_core.first_not_in_format(x, fmt)) < 0:
            return x, fmt  # checked in one pass in place (64-bit integers: exact in float64 too)
        # Otherwise the general path below (it names the first element that is not a value).
    values, _ = _input_values(x, in_fmt, "keep", parameter)
    if np.ndim(x) == 0:
        values = values.reshape(())
    if in_fmt is None:
        from ._arrays import _as_source
        in_fmt = _as_source(x, parameter)[1]
    return values, in_fmt


def _float64_values(x: Any, in_fmt: str | None, parameter: str) -> tuple[np.ndarray, str]:
    """_values as C-ordered float64, for callers that need the values in Python: the arrays that
    _values leaves to the extension are widened by it in one pass (ml_dtypes' own cast would warn
    on NaN and run on one thread)."""
    values, fmt = _values(x, in_fmt, parameter)
    if values.dtype != np.float64 or not values.flags.c_contiguous:
        values = _core.as_float64(values, parameter)
    return values, fmt


def _axes(axis: Any, ndim: int) -> list[int] | None:
    """``axis`` as a list of ints (None: every axis of an ndim-dimensional array); an int gives
    None back for the callers' one-axis path. Range and repetition are checked in C++."""
    if axis is None:
        return list(range(ndim))
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        _check_int(axis, "axis")  # within the C++ type (range and repetition: C++)
        return None
    if isinstance(axis, (tuple, list)) and all(isinstance(a, (int, np.integer)) and not isinstance(a, bool)
                                               for a in axis):
        return [_check_int(a, "axis") for a in axis]
    raise TypeError(f"axis: expected an integer, a tuple of integers or None, got {axis!r}")


def _layout(x: Any) -> tuple[list[int], bool]:
    """The memory layout numpy's reduction order follows: x's strides (bytes) and whether numpy
    must copy x through its buffer even without a dtype change (misaligned or byte-swapped)."""
    if isinstance(x, np.ndarray):
        return [int(s) for s in x.strides], not (x.flags.aligned and x.dtype.isnative)
    shape = np.shape(x)
    strides = [1] * len(shape)
    for d in range(len(shape) - 1, 0, -1):
        strides[d - 1] = strides[d] * int(shape[d])
    return strides, False


def numpy_reduction(x: Any, *, axis: Any = None, in_fmt: str | None = None, compute: str | None = None,
                    bufsize: int | None = None) -> tuple[tuple[int, ...], Plan]:
    """The order in which numpy's add.reduce (np.sum, np.add.reduce, the sum in np.mean) adds the
    terms of x over ``axis`` (an int, a tuple, or None: all), given x's memory layout (strides):
    ``(axes, plan)``, the reduced axes outermost first (each output element's terms, in C order
    over them) and the plan over those terms. ``in_fmt``: x's values (default: its dtype's);
    ``compute``: np.sum's dtype (default: in_fmt). ``bufsize``: numpy's buffer size in elements
    (default: this process's np.getbufsize(), 8192 unless changed).

    Example::

        >>> axes, p = numeq.numpy_reduction(np.ones((4, 1000), dtype=np.float32), axis=-1)
        >>> axes
        (1,)
        >>> print(p)
        numpy sum fp32 (runs of 1000 in sweeps of 1000): added to 0.000000, pairwise(leaf 128, multiple 8, fp32 nearest_even fma, leaf=lanes(8, fp32 nearest_even fma)), c first, out fp32 nearest_even
    """
    from ._arrays import _array
    arr = x if isinstance(x, np.ndarray) else _array(x, "x")
    if in_fmt is None:
        from ._arrays import _as_source
        in_fmt = _as_source(arr, "x")[1]
    _check_format(in_fmt, "in_fmt")
    compute = in_fmt if compute is None else compute
    _check_format(compute, "compute")
    axes = _axes(axis, arr.ndim)
    bufsize = np.getbufsize() if bufsize is None else _check_int(bufsize, "bufsize", 1, SIZE[1])
    strides, buffered = _layout(x)
    order, text = _core.core_numpy_reduction([int(d) for d in arr.shape], strides,
                                             [int(axis)] if axes is None else axes, in_fmt, compute, buffered,
                                             int(bufsize))
    return tuple(order), Plan(text)


def sum(x: Any, *, axis: Any = -1, platform: str | None = None, plan: Plan | str | dict | None = None,  # noqa: A001
        fmt: str | None = None) -> np.ndarray:
    """Emulate: x summed over ``axis`` (an int, a tuple of ints, or None: every axis) as the platform (or
    plan) sums, e.g. platform="numpy" for np.sum; float64 values of the emulated result. ``fmt``:
    the format of x's values and of the sum (default: the array's own, float32 -> fp32).

    platform="numpy" follows x's memory layout as numpy does (numpy_reduction): pass the array
    itself, not a copy. Every other platform, and a given plan, reduce one axis by its plan; over
    several axes, the plan reduces each element's terms taken in C order of the axes (the
    flattened reduced axes, as ``x.transpose(kept + axes).reshape(..., -1)``).

    Give ``platform`` (a name of ``platforms()``) or ``plan`` (a ``Plan``, its JSON or dict).

    Example::

        >>> x = np.full(4096, 0.1, dtype=np.float32)
        >>> bool(numeq.sum(x, platform="numpy") == np.sum(x))          # numpy's pairwise order, bit for bit
        True
        >>> bool(numeq.sum(x, platform="trainium.trn2") == np.sum(x))  # a sequential sum rounds differently
        False
    """
    if fmt is not None:
        _check_format(fmt, "fmt")
    if platform is not None:
        _check_str(platform, "platform")
    values, f = _values(x, fmt, "x")
    axes = _axes(axis, np.ndim(values))
    if platform == "numpy" and plan is None:
        order, p = numpy_reduction(x, axis=axis, in_fmt=f, compute=f)
        return _core.core_sum_axes(values, list(order), p.to_json())
    p = _resolve(platform, plan, "sum", f, f)
    if axes is None:
        return _core.core_sum(values, int(axis), p.to_json())
    return _core.core_sum_axes(values, sorted(axes, key=lambda a: a % max(np.ndim(x), 1)), p.to_json())


def dot(a: Any, b: Any, *, c: Any = None, platform: str | None = None, plan: Plan | str | dict | None = None,
        in_fmt: str | None = None, out: str = "fp32") -> np.ndarray:
    """Emulate: a . b along the last axis (leading axes broadcast) (+ c), as the platform computes it;
    float64 values of the emulated result.

    Give ``platform`` (a name of ``platforms()``) or ``plan`` (a ``Plan``, its JSON or dict), as
    ``matmul``. ``in_fmt``: the format of a's and b's values (default: their dtype's); ``out``: the
    result's format; ``c``: an addend of the result's shape.

    Example::

        >>> a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
        >>> numeq.dot(a, a, platform="nvidia.h100")
        array([ 5., 25.])
    """
    return _dot_or_matmul(False, a, b, c, platform, plan, in_fmt, out)


def _dot_or_matmul(matmul: bool, a: Any, b: Any, c: Any, platform: str | None, plan: Plan | str | dict | None,
                   in_fmt: str | None, out: str) -> np.ndarray:
    """numeq.dot (matmul False) and numeq.matmul (True): the operands read and checked, then run on
    the named platform or on the plan resolved."""
    av, fa = _values(a, in_fmt, "a")
    bv, fb = _values(b, in_fmt, "b")
    if in_fmt is None and fa != fb:
        raise ValueError(f"in_fmt: a holds {fa} values and b {fb}; pass in_fmt (the format both are values of)")
    cv = None
    if c is not None:
        cv = _float64_values(c, None, "c")[0]
        sa, sb = av.shape, bv.shape  # _values gives arrays
        if matmul and len(sa) >= 2 and len(sb) >= 2:  # (..., M, K) @ (..., K, N)
            _check_c(cv.shape, lambda: np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]))
        elif not matmul and sa and sb:  # leading axes broadcast, the last contracted
            _check_c(cv.shape, lambda: np.broadcast_shapes(sa[:-1], sb[:-1]))
    if plan is None and platform is not None:
        _check_str(platform, "platform")
        _check_str(out, "out")
        return _core.core_dot_or_matmul_on(av, bv, cv, matmul, platform, fa, out)
    p = _resolve(platform, plan, "matmul" if matmul else "dot", fa, out)
    return _core.core_dot_or_matmul(av, bv, cv, matmul, p.to_json())


def _check_c(c_shape: tuple, result_shape: Any) -> None:
    """c must broadcast to the result's shape (``result_shape()``: from a's and b's shapes)."""
    try:
        result = tuple(result_shape())
    except ValueError:
        return  # a and b themselves do not fit: the extension names them
    try:
        fits = np.broadcast_shapes(c_shape, result) == result
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"c: shape {c_shape} does not broadcast to the result {result}")


def matmul(a: Any, b: Any, *, c: Any = None, platform: str | None = None, plan: Plan | str | dict | None = None,
           in_fmt: str | None = None, out: str = "fp32") -> np.ndarray:
    """Emulate: a[..., M, K] @ b[..., K, N] (+ c), as the platform computes it, bit for bit; float64
    values. (The exact product: ``numeq.reference.matmul``; the op with reference, emulation and
    bound together: ``numeq.ops.matmul``.)

    Give ``platform`` (a name of ``platforms()``, optionally with ``[...]`` assumptions or
    ``[split_k=N]``) or ``plan`` (a ``Plan``, its JSON or dict). ``in_fmt``: the format of a's and b's
    values (default: their dtype's; float64 arrays of bf16 values need ``in_fmt="bf16"``); ``out``: the
    result's format; ``c``: an addend that broadcasts to the result.

    Example::

        >>> a = numeq.round(np.random.default_rng(0).standard_normal((4, 64)), "bf16")
        >>> d = numeq.matmul(a, a.T, platform="nvidia.h100", in_fmt="bf16")
        >>> d.shape, bool(np.all(numeq.round(d, "fp32") == d))
        ((4, 4), True)
    """
    return _dot_or_matmul(True, a, b, c, platform, plan, in_fmt, out)
