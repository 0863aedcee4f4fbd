"""What the current NKI compiler refuses, found on CPU: kernels written as their authors write them
(a file importing the ``nki`` namespace, or the older ``neuronxcc.nki``), run under
``numeq.nki.installed()``.

Oracle: AWS's release notes and docstrings, quoted in each rule's source (NKI 0.3.0's breaking
changes, its known issues); the language is the file's import, as AWS's compiler takes it
(nki-beta-versions.rst). Each planted mistake is paired with the same kernel without it, and the
older interface's kernel with it, where the rule does not apply.
"""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import numpy as np
import pytest

import numeq.nki
from numeq.nki.front.namespace import language_of
from nki_support import CARRIED_KERNEL, kernel_module

_HEADERS = {
    "current": "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n",
    "older": "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\nimport neuronxcc.nki.isa as nisa\n",
}
_COUNT = itertools.count()


def _load(tmp_path: Path, language: str, body: str):
    """The module of a kernel file: ``body`` under the imports of ``language``."""
    return kernel_module(tmp_path / f"kernel_{language}_{next(_COUNT)}.py", _HEADERS[language] + textwrap.dedent(body))


def _rules(run) -> dict[str, str]:
    return {f.rule: f.where for f in run.findings}


_DMA_FROM_PSUM = """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    p = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=p, src=t)
    {store}
    return out
"""
_THROUGH_PSUM = "nisa.dma_copy(dst=out, src=p)  # PSUM"
_THROUGH_SBUF = "o = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)\n    nisa.tensor_copy(dst=o, src=p)\n" \
                "    nisa.dma_copy(dst=out, src=o)"


def test_the_language_is_the_files_import(tmp_path):
    assert language_of(_load(tmp_path, "current", _DMA_FROM_PSUM.format(store=_THROUGH_SBUF)).kernel) == "current"
    assert language_of(_load(tmp_path, "older", _DMA_FROM_PSUM.format(store=_THROUGH_SBUF)).kernel) == "older"
    both = kernel_module(tmp_path / "both.py", _HEADERS["current"] + _HEADERS["older"] + "def kernel(x):\n    return x\n")
    assert language_of(both.kernel) is None  # the docs: one file, one language


def test_a_dma_reading_psum_is_refused_in_the_current_interface(tmp_path):
    x = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    bad = _load(tmp_path, "current", _DMA_FROM_PSUM.format(store=_THROUGH_PSUM))
    run = numeq.nki.run(bad.kernel, x)
    where = _rules(run)
    assert "dma_memory" in where and where["dma_memory"].endswith(f":{_line_of(bad, '# PSUM')}")
    (f,) = [f for f in run.errors if f.rule == "dma_memory"]
    assert "NKI 0.3.0" in f.source and "src" in f.message
    assert (run.outputs == x).all()  # numeq still moves the values: the finding is the refusal
    good = _load(tmp_path, "current", _DMA_FROM_PSUM.format(store=_THROUGH_SBUF))
    assert "dma_memory" not in _rules(numeq.nki.run(good.kernel, x))
    older = _load(tmp_path, "older", _DMA_FROM_PSUM.format(store=_THROUGH_PSUM))
    assert "dma_memory" not in _rules(numeq.nki.run(older.kernel, x))


def _line_of(module, marker: str) -> int:
    lines = Path(module.__file__).read_text().splitlines()
    (n,) = [i + 1 for i, line in enumerate(lines) if marker in line]
    return n


_HWDGE = """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 512), {dtype}, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), {dtype}, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, dge_mode=nisa.dge_mode.{mode})  # LOAD
    nisa.dma_copy(dst=out, src=t)
    return out
"""


@pytest.mark.parametrize("dtype, mode, refused", [("nl.bfloat16", "hwdge", True), ("nl.bfloat16", "swdge", False),
                                                   ("nl.float32", "hwdge", False)])
def test_a_hardware_dge_transfer_casts_nothing(tmp_path, dtype, mode, refused):
    x = np.ones((128, 512), np.float32)
    m = _load(tmp_path, "current", _HWDGE.format(dtype=dtype, mode=mode))
    where = _rules(numeq.nki.run(m.kernel, x))
    assert ("dma_hwdge_cast" in where) == refused
    if refused:
        assert where["dma_hwdge_cast"].endswith(f":{_line_of(m, '# LOAD')}")


_MOD = """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    u = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    {line}  # OP
    nisa.dma_copy(dst=out, src=u)
    return out
"""


@pytest.mark.parametrize("name", ["mod", "fmod", "divide"])
def test_functions_that_work_in_simulation_only_are_named(tmp_path, name):
    x = np.arange(1, 128 * 512 + 1, dtype=np.float32).reshape(128, 512)
    m = _load(tmp_path, "current", _MOD.format(line=f"nisa.tensor_copy(dst=u, src=nl.{name}(t, 3.0))"))
    run = numeq.nki.run(m.kernel, x)
    (f,) = [f for f in run.findings if f.rule == "simulation_only"]
    assert f.severity == "warning" and f.where.endswith(f":{_line_of(m, '# OP')}") and f"nl.{name}" in f.message
    expected = {"mod": np.mod(x, np.float32(3)), "fmod": np.fmod(x, np.float32(3)), "divide": x / np.float32(3)}[name]
    assert np.allclose(run.outputs, expected, rtol=1e-6)
    # The same operator as an instruction's ALU op is the hardware's own: nothing to say.
    alu = _load(tmp_path, "current", _MOD.format(
        line=f"nisa.tensor_scalar(dst=u, data=t, op0=nl.{name}, operand0=3.0)"))
    assert "simulation_only" not in _rules(numeq.nki.run(alu.kernel, x))


_TARGETED = """
@nki.jit(platform_target="trn2")
def kernel(x):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
"""


def test_platform_target_is_refused_in_the_current_interface_only(tmp_path):
    x = np.ones((128, 512), np.float32)
    with pytest.warns(DeprecationWarning):
        current = _load(tmp_path, "current", _TARGETED)
    where = _rules(numeq.nki.run(current.kernel, x))
    assert where.get("removed_keyword", "").endswith(f":{_line_of(current, 'platform_target')}")
    with pytest.warns(DeprecationWarning):
        older = _load(tmp_path, "older", _TARGETED)
    assert "removed_keyword" not in _rules(numeq.nki.run(older.kernel, x))


def test_a_value_carried_through_affine_range_is_a_hazard_of_the_older_interface_only(tmp_path):
    # The older interface's affine_range declares its iterations independent; from NKI 0.3.0 the
    # current interface's is Python's range (its docstring), which keeps program order.
    x = np.random.default_rng(0).standard_normal((4, 128, 64)).astype(np.float32)
    older = kernel_module(tmp_path / "carried_older.py", CARRIED_KERNEL)
    run = numeq.nki.run(older.decay, x)
    assert run.language == "older" and [h.rule for h in run.hazards()] == ["loop_carried_dependency"]
    current_text = CARRIED_KERNEL.replace("import neuronxcc.nki as nki", "import nki").replace("neuronxcc.nki.", "nki.")
    current = kernel_module(tmp_path / "carried_current.py", current_text)
    run = numeq.nki.run(current.decay, x)
    assert run.language == "current" and run.hazards() == []
    acc = np.zeros((128, 64), np.float32)
    for xi in x:  # the values either way: the recurrence in program order
        acc = np.float32(0.5) * acc + xi
    assert (run.outputs == acc).all()


_SCALAR_COPY = """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    u = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t, engine=nisa.engine.scalar)  # COPY
    nisa.dma_copy(dst=out, src=u)
    return out
"""


def test_tensor_copy_on_neuroncore_v2s_scalar_engine_is_refused_in_the_current_interface(tmp_path):
    # The current docstring: "On NeuronCore v2, tensor_copy is not supported on the Scalar Engine";
    # SDK 2.26's (the older interface): it copies through fp32.
    x = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    current = _load(tmp_path, "current", _SCALAR_COPY)
    where = {f.rule: f.where for f in numeq.nki.run(current.kernel, x, target="trn1").errors}
    assert where.get("instruction_constraint", "").endswith(f":{_line_of(current, '# COPY')}")
    assert numeq.nki.run(current.kernel, x, target="trn2").errors == []
    older = _load(tmp_path, "older", _SCALAR_COPY)
    run = numeq.nki.run(older.kernel, x, target="trn1")
    assert run.errors == [] and (run.outputs == x).all()


_STARRED = """
@nki.jit  # KERNEL
def kernel(x, *, scale=2.0):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=scale)
    nisa.dma_copy(dst=out, src=t)
    return out
"""
_LISTED = """
@nki.jit  # KERNEL
def kernel(x, sizes):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=float(sizes[0]))
    nisa.dma_copy(dst=out, src=t)
    return out
"""


@pytest.mark.parametrize("body, arguments", [(_STARRED, {}), (_LISTED, {"sizes": [2]})])
def test_a_keyword_only_separator_or_a_list_argument_is_refused_in_the_current_interface(tmp_path, body, arguments):
    # The nki migration guide, NKI 0.3.0: the compiler "does not support the * separator in kernel
    # function signatures" and "does not support list as a kernel argument type".
    x = np.random.default_rng(2).standard_normal((128, 64)).astype(np.float32)
    current = _load(tmp_path, "current", body)
    run = numeq.nki.run(current.kernel, x, **arguments)
    (f,) = [f for f in run.errors if f.rule == "kernel_signature"]
    assert f.where.endswith(f":{_line_of(current, '# KERNEL')}") and "NKI 0.3.0" in f.source
    assert (run.outputs == x * np.float32(2)).all()  # the values are computed all the same
    older = _load(tmp_path, "older", body)
    assert "kernel_signature" not in _rules(numeq.nki.run(older.kernel, x, **arguments))
    if arguments:  # a tuple is what the guide says to pass
        assert "kernel_signature" not in _rules(numeq.nki.run(current.kernel, x, sizes=(2,)))
