"""numeq review of a kernel against the author's own reference function (--reference REF.py::FUNC):
numeq's operation and the kernel's own math are each judged against it.

Oracles: the author's numpy function (written here, independently of numeq), and a planted mistake
(a mean square over n - 1) that numpy's function does not make."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "nki" / "rmsnorm.py"

REFERENCE = '''
import numpy as np


def rms(x, gamma, eps=1e-6):
    """What the kernel should compute, as its author writes it."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gamma.reshape(1, -1)


def rms_other_eps(x, gamma):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-1) * gamma.reshape(1, -1)


def wrong_arguments(a, b):
    return a
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("own_reference")
    shutil.copy(EXAMPLE, d / "rmsnorm.py")
    shutil.copy(EXAMPLE.parent / "_common.py", d / "_common.py")
    source = EXAMPLE.read_text()
    assert "scale=1.0 / n," in source
    (d / "rmsnorm_minus_one.py").write_text(source.replace("scale=1.0 / n,", "scale=1.0 / (n - 1),"))
    (d / "ref.py").write_text(REFERENCE)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)
    gamma = (1 + 0.1 * rng.standard_normal((1, 256))).astype(ml_dtypes.bfloat16)
    np.savez(d / "in.npz", x=x, gamma=gamma)
    return d


def _review(folder: Path, kernel_file: str, func: str, out: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "numeq", "review", f"{folder / kernel_file}::rmsnorm", "--inputs",
                           str(folder / "in.npz"), "--dtype", "x=bfloat16", "--dtype", "gamma=bfloat16", "--op",
                           "rmsnorm", "--reference", f"{folder / 'ref.py'}::{func}", "--out", str(folder / out),
                           "--quiet"], capture_output=True, text=True, timeout=300)


def test_a_correct_kernel_is_its_author_s_reference(folder):
    done = _review(folder, "rmsnorm.py", "rms", "good")
    assert done.returncode == 0, done.stderr
    text = (folder / "good" / "review.md").read_text()
    assert "your reference ref.py::rms is numeq's" in text
    assert "the kernel's own math is your reference ref.py::rms on all 32768 elements" in text


def test_a_kernel_whose_math_differs_from_its_author_s_reference_fails_as_an_algorithm_difference(folder):
    done = _review(folder, "rmsnorm_minus_one.py", "rms", "bad")
    assert done.returncode == 1, done.stderr
    text = (folder / "bad" / "review.md").read_text()
    assert "the kernel's own math (its dataflow without the hardware's roundings) differs from your reference" in text
    assert "a difference in the algorithm" in text


def test_a_reference_numeq_s_operation_is_not_is_said_so(folder):
    done = _review(folder, "rmsnorm.py", "rms_other_eps", "other")
    text = (folder / "other" / "review.md").read_text()
    assert "your reference ref.py::rms_other_eps and numeq's" in text and "check --op and its --param" in text
    # the kernel computes eps = 1e-6 (as numeq's op): against eps = 0.1 its math differs
    assert done.returncode == 1 and "differs from your reference ref.py::rms_other_eps" in text


def test_a_reference_that_cannot_take_the_inputs_is_refused_by_name(folder):
    done = _review(folder, "rmsnorm.py", "wrong_arguments", "refused")
    assert done.returncode == 2
    assert "reference: wrong_arguments takes (a, b)" in done.stderr and "x, gamma" in done.stderr
    missing = _review(folder, "rmsnorm.py", "no_such_function", "refused2")
    assert missing.returncode == 2 and "has no function 'no_such_function'" in missing.stderr
    assert "rms" in missing.stderr


def test_a_reference_that_raises_is_said_so(folder):
    (folder / "ref_raises.py").write_text("def rms(x, gamma):\n    return 1 / (x.size - x.size)\n")
    done = subprocess.run([sys.executable, "-m", "numeq", "review", f"{folder / 'rmsnorm.py'}::rmsnorm", "--inputs",
                           str(folder / "in.npz"), "--dtype", "x=bfloat16", "--dtype", "gamma=bfloat16", "--op",
                           "rmsnorm", "--reference", f"{folder / 'ref_raises.py'}::rms", "--out",
                           str(folder / "raises"), "--quiet"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "reference: rms raised ZeroDivisionError" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
