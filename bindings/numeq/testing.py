"""Assertions for test suites: a device's output checked against an operation of the catalogue
(``numeq.ops``) through the verdict ladder (``numeq.compare``), failing with the verdict's full
message.

    from numeq.testing import assert_equivalent, assert_ported, assert_bit_exact

    assert_equivalent(device_output, op, "nvidia.h100")               # probabilistic or stronger
    assert_bit_exact(device_output, op, "nvidia.h100")                # the emulation, bit for bit
    assert_ported(gpu_output, nki_output, op, "nvidia.h100", "trainium.trn2")

Outputs may be numpy or ml_dtypes arrays, scalars, lists, or arrays of other frameworks (objects
with ``__dlpack__``, such as torch / jax / cupy arrays on the host, or with ``__array__``). The
pytest plugin (``numeq.pytest_plugin``) adds fixtures, a marker over platforms and a report.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import _check_str
from .verdicts import TIERS, PortVerdict, Verdict, _actual_values, compare, compare_port

__all__ = ["ACCEPT", "assert_bit_exact", "assert_equivalent", "assert_ported"]

# The tiers a check may accept (the weakest that passes); "violation" never passes.
ACCEPT = TIERS[:-1]


def _values(x: Any, parameter: str) -> np.ndarray:
    """The output's float64 values (as numeq.compare reads them: other frameworks' arrays too),
    errors naming ``parameter``."""
    return _actual_values(x, parameter)


def _check_msg(msg: Any) -> str:
    if msg is None:
        return ""
    if not isinstance(msg, str):
        raise TypeError(f"msg: expected a string or None, got {type(msg).__name__}")
    return msg


def _failure_text(msg: str, message: str) -> str:
    return f"{msg}\n{message}" if msg else message


def assert_equivalent(actual: Any, op: Any, platform: str, *, accept: str = "probabilistic",
                      failure_probability: float = 1e-6, variants: bool = True, msg: str | None = None) -> Verdict:
    """Assert that ``actual`` (a device's output) is what ``platform`` computes for ``op``: the
    verdict ladder's tier (``numeq.compare``) is ``accept`` or stronger. Returns the ``Verdict``;
    raises ``AssertionError`` whose text is ``msg`` (when given) followed by the verdict's message
    (tier, op signature, counts, where the failures lie, worst elements).

    Parameters:

    - ``actual``: the output, of the op's result shape: numpy / ml_dtypes arrays, scalars, lists,
      or another framework's host array (``__dlpack__`` or ``__array__``: torch, jax, cupy, ...);
      or a ``numeq.nki.Run``, whose outputs are judged and whose kernel diagnoses a failure
      (``numeq.compare``).
    - ``op``: a ``numeq.ops.Op`` (``numeq.ops.matmul(a, b, ...)``, ``numeq.ops.softmax(x)``, ...).
    - ``platform``: a name of ``numeq.platforms()``, optionally with assumptions or split-K
      selected: ``"trainium.trn2[pe_order=pairwise]"``, ``"nvidia.h100[split_k=4]"``.
    - ``accept``: the weakest tier that passes, one of ``"bit_exact"``, ``"variant"``,
      ``"probabilistic"`` (default), ``"deterministic"``.
    - ``failure_probability``: the probabilistic bound may fail with at most this probability for
      the whole check (default 1e-6).
    - ``variants``: search the platform's named variants when the output is not bit-exact.
    - ``msg``: text put before the verdict's message on failure.

    Example::

        import numpy as np, numeq
        from numeq.testing import assert_equivalent
        rng = np.random.default_rng(0)
        a = numeq.round(rng.standard_normal((16, 64)), "bf16")
        b = numeq.round(rng.standard_normal((64, 8)), "bf16")
        op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
        device = numeq.matmul(a, b, platform="nvidia.h100", in_fmt="bf16")  # stands for the GPU's output
        verdict = assert_equivalent(device, op, "nvidia.h100")
        assert verdict.tier == "bit_exact"
    """
    __tracebackhide__ = True
    msg = _check_msg(msg)
    _check_str(platform, "platform")
    verdict = compare(actual, op, platform, accept=accept, failure_probability=failure_probability,
                      variants=variants)
    if not verdict.passed:
        raise AssertionError(_failure_text(msg, verdict.message))
    return verdict


def assert_bit_exact(actual: Any, op: Any, platform: str, *, msg: str | None = None) -> Verdict:
    """Assert that ``actual`` equals ``platform``'s emulation of ``op`` bit for bit, every element
    (NaNs alike, signs of zeros too): ``assert_equivalent`` with ``accept="bit_exact"``. On failure
    the message still says which tier explains the output (a named variant, the bounds) and where
    it differs. Parameters (``actual``, ``op``, ``platform``, ``msg``) as ``assert_equivalent``.

    Example::

        import numpy as np, numeq
        from numeq.testing import assert_bit_exact
        x = numeq.round(np.random.default_rng(0).standard_normal((4, 512)), "bf16")
        op = numeq.ops.sum(x, axis=-1, in_fmt="bf16", out="fp32")
        assert_bit_exact(op.emulate("trainium.trn2"), op, "trainium.trn2")
    """
    __tracebackhide__ = True
    return assert_equivalent(actual, op, platform, accept="bit_exact", msg=msg)


def assert_ported(gpu_output: Any, trainium_output: Any, op: Any, gpu_platform: str, trainium_platform: str, *,
                  accept: str = "probabilistic", failure_probability: float = 1e-6, variants: bool = True,
                  msg: str | None = None) -> PortVerdict:
    """Assert that a CUDA kernel and its NKI port both compute ``op`` as their platforms do and
    differ only as far as the two platforms' arithmetic explains (``numeq.compare_port``): each
    output's tier is ``accept`` or stronger and no element's difference exceeds the cross-platform
    bound. Returns the ``PortVerdict``; raises ``AssertionError`` whose text is ``msg`` (when given)
    followed by both verdicts' messages and the worst differences.

    Parameters:

    - ``gpu_output``, ``trainium_output``: the two outputs (arrays as for ``assert_equivalent``).
    - ``op``: a ``numeq.ops.Op``; ``gpu_platform``, ``trainium_platform``: names of
      ``numeq.platforms()`` (``"nvidia.h100"``, ``"trainium.trn2"``, with ``[...]`` assumptions).
    - ``accept``: one of ``"bit_exact"``, ``"variant"``, ``"probabilistic"`` (default),
      ``"deterministic"``; ``failure_probability``: shared by the two platforms (half each);
      ``variants``, ``msg``: as ``assert_equivalent``.

    Example::

        import numpy as np, numeq
        from numeq.testing import assert_ported
        rng = np.random.default_rng(0)
        a = numeq.round(rng.standard_normal((8, 300)), "bf16")
        b = numeq.round(rng.standard_normal((300, 4)), "bf16")
        op = numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")
        gpu = numeq.matmul(a, b, platform="nvidia.h100", in_fmt="bf16")    # the CUDA kernel's output
        trn = numeq.matmul(a, b, platform="trainium.trn2", in_fmt="bf16")  # the NKI kernel's output
        assert_ported(gpu, trn, op, "nvidia.h100", "trainium.trn2")
    """
    __tracebackhide__ = True
    msg = _check_msg(msg)
    _check_str(gpu_platform, "gpu_platform")
    _check_str(trainium_platform, "trainium_platform")
    port = compare_port(_values(gpu_output, "gpu_output"), _values(trainium_output, "trainium_output"), op,
                        gpu_platform, trainium_platform, accept=accept, failure_probability=failure_probability,
                        variants=variants)
    if not port.passed:
        raise AssertionError(_failure_text(msg, port.message))
    return port
