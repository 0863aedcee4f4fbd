"""The pytest option ``--numeq-nki[=TARGET]``: an NKI test suite, written for AWS's ``nki`` (current
and older generation), runs unchanged on numeq.nki inside pytest's own ``pytester``. The inner
tests check the kernels' outputs against numpy float64 oracles (an fp32 sum or product of fp32
values rounded once to fp32 is what float64 arithmetic rounded to fp32 gives: 53 >= 2 * 24 + 2)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

pytest_plugins = ["pytester"]

from nki_support import CARRIED_KERNEL

PLUGIN = ("-p", "numeq.pytest_plugin")

# A conftest.py that imports nki: it loads before pytest_configure (pytest_load_initial_conftests).
CONFTEST = '''
import numpy as np
import pytest
import nki


@pytest.fixture
def arrays():
    rng = np.random.default_rng(5)
    return (rng.standard_normal((128, 512)).astype(np.float32), rng.standard_normal((128, 512)).astype(np.float32))
'''

# The current generation: import nki, destination-first nki.isa calls, @nki.jit called with numpy
# arrays, nki.simulate.
CURRENT = '''
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl

SEEN_SBUF = []


@nki.jit
def add_scaled(a, b, scale=2.0):
    SEEN_SBUF.append(nl.tile_size.total_available_sbuf_size)
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    nisa.tensor_scalar(dst=tb, data=tb, op0=nl.multiply, operand0=scale)
    nisa.tensor_tensor(dst=ta, data1=ta, data2=tb, op=nl.add)
    nisa.dma_copy(dst=out, src=ta)
    return out


def expected(a, b, scale):
    scaled = (b.astype(np.float64) * scale).astype(np.float32)
    return (a.astype(np.float64) + scaled).astype(np.float32)


def test_jit_called_with_numpy_arrays(arrays):
    a, b = arrays
    np.testing.assert_array_equal(add_scaled(a, b), expected(a, b, 2.0))


def test_simulate(arrays):
    a, b = arrays
    np.testing.assert_array_equal(nki.simulate(add_scaled)(a, b, scale=0.75), expected(a, b, 0.75))


def test_the_target(arrays):
    add_scaled(*arrays)
    assert SEEN_SBUF[-1] == EXPECTED_SBUF


def test_the_target_of_simulate(arrays):
    nki.simulate(add_scaled)(*arrays)
    assert SEEN_SBUF[-1] == EXPECTED_SBUF
'''

# The older generation: from neuronxcc import nki, value-returning nl.load / nl.store tiles,
# nki.simulate_kernel.
OLDER = '''
import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nl.store(out, nl.add(x, y))
    return out


def test_simulate_kernel(arrays):
    a, b = arrays
    out = nki.simulate_kernel(add_kernel, a, b)
    np.testing.assert_array_equal(out, (a.astype(np.float64) + b).astype(np.float32))
'''

# Per-partition SBUF bytes: 24 MiB = 128 x 192 KiB (NeuronCore-v2: trn1, inf2), 28 MiB = 128 x
# 224 KiB (NeuronCore-v3: trn2), from the NKI architecture guides.
SBUF = {"trn2": 224 * 1024, "trn1": 192 * 1024, "inf2": 192 * 1024}


@pytest.fixture(autouse=True)
def _only_this_plugin(monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def _suite(pytester: pytest.Pytester, target: str) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_current=CURRENT.replace("EXPECTED_SBUF", str(SBUF[target])), test_older=OLDER)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", *args)


def _left_nothing_installed() -> None:
    from numeq.nki import _install

    assert _install.settings() is None
    for name in _install.MODULE_NAMES:
        module = sys.modules.get(name)
        assert module is None or not getattr(module, "__name__", "").startswith("numeq"), name


@pytest.mark.skipif(importlib.util.find_spec("nki") is not None, reason="AWS's nki is installed here")
def test_without_the_option_the_suite_cannot_import_nki(pytester):
    _suite(pytester, "trn2")
    result = _run(pytester)
    assert result.ret != 0
    assert "No module named 'nki'" in result.stdout.str() + result.stderr.str()


def test_the_option_runs_the_suite_on_numeq(pytester):
    _suite(pytester, "trn2")
    result = _run(pytester, "--numeq-nki")
    result.assert_outcomes(passed=5)
    # test_jit_called_with_numpy_arrays and test_the_target call the @nki.jit kernel directly
    result.stdout.fnmatch_lines(["numeq.nki (trn2): 2 @nki.jit kernel calls, 0 error findings, 0 warning findings"])
    _left_nothing_installed()


@pytest.mark.parametrize("target", ["trn1", "inf2"])
def test_the_option_takes_a_target(pytester, target):
    _suite(pytester, target)
    result = _run(pytester, f"--numeq-nki={target}", "-k", "test_the_target and not simulate")
    result.assert_outcomes(passed=1, deselected=4)
    _left_nothing_installed()


def test_simulate_runs_on_the_options_target(pytester):
    _suite(pytester, "trn1")
    result = _run(pytester, "--numeq-nki=trn1", "-k", "test_the_target_of_simulate")
    result.assert_outcomes(passed=1, deselected=4)
    _left_nothing_installed()


def test_a_target_the_kernel_does_not_see_fails(pytester):
    _suite(pytester, "trn1")  # the suite expects trn1's SBUF; the option gives trn2's
    result = _run(pytester, "--numeq-nki=trn2", "-k", "test_the_target and not simulate")
    result.assert_outcomes(failed=1, deselected=4)
    _left_nothing_installed()


@pytest.mark.parametrize("value", ["trn7", "test_current.py"])
def test_an_unknown_target_is_a_usage_error(pytester, value):
    _suite(pytester, "trn2")
    result = _run(pytester, "--numeq-nki", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--numeq-nki: unknown target {value!r}; valid: trn2, trn3, trn1, inf2*"])
    _left_nothing_installed()


def test_the_option_is_documented(pytester):
    result = _run(pytester, "--help")
    result.stdout.fnmatch_lines(["*--numeq-nki=*TARGET*"])


# A kernel the hardware rejects (its matmul writes SBUF) but numeq can still compute.
REJECTED = '''
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_into_sbuf(a, b):
    ta = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    res = nl.ndarray((a.shape[1], b.shape[1]), nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul(res, ta, tb)  # MARK
    out = nl.ndarray(res.shape, nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_rejected(arrays):
    a, b = arrays
    matmul_into_sbuf(a[:, :128], b)
'''


def test_an_error_finding_fails_the_test_and_the_summary_names_it(pytester):
    # As AWS's simulator raises on the rules it checks, a kernel call with an error finding raises
    # KernelFault; the run's summary lists each finding with its rule and line.
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_rejected=REJECTED)
    result = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "--numeq-nki")
    result.assert_outcomes(failed=1)
    # makepyfile drops the text's leading newline, so line i of splitlines() is the file's line i.
    line = next(i for i, text in enumerate(REJECTED.splitlines()) if "# MARK" in text)
    result.stdout.fnmatch_lines([f"*KernelFault*test_rejected.py:{line}: [[]matmul_output_memory[]]*",
                                 f"  test_rejected.py:{line}: error: [[]matmul_output_memory[]]*"])


HAZARDOUS = CARRIED_KERNEL + '''

def test_decay_matches_numpy():
    import numpy as np
    x = np.random.default_rng(0).standard_normal((4, 128, 64)).astype(np.float32)
    ref = np.zeros((128, 64), np.float32)
    for i in range(4):
        ref = ref * np.float32(0.5) + x[i]
    assert np.array_equal(decay(x), ref)
'''


def test_hazards_fail_a_kernel_call_only_when_asked(pytester):
    """A kernel whose affine_range loop carries a value passes numerically (numeq runs the
    iterations in order); --numeq-nki-hazards fails its call with the finding and both lines."""
    pytester.makepyfile(test_user=HAZARDOUS)
    _run(pytester, "--numeq-nki").assert_outcomes(passed=1)
    result = _run(pytester, "--numeq-nki", "--numeq-nki-hazards")
    result.assert_outcomes(failed=1)
    lines = (pytester.path / "test_user.py").read_text().splitlines()
    reads = 1 + next(i for i, line in enumerate(lines) if "# reads acc" in line)
    writes = 1 + next(i for i, line in enumerate(lines) if "# writes acc" in line)
    result.stdout.fnmatch_lines([f"*test_user.py:{reads}: error: [[]loop_carried_dependency[]]*wrote at "
                                 f"test_user.py:{writes}*"])
    _left_nothing_installed()
