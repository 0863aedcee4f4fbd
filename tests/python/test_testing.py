"""numeq.testing: assert_equivalent / assert_bit_exact / assert_ported pass the outputs a platform
computes and fail, with the verdict's message, on planted bugs (bf16 accumulation, a dropped K
tile). The emulations themselves are checked against measured vectors elsewhere; here the
oracles are numpy (an fp32 product of the same bf16 values, an independent computation within
the bound) and the planted bugs, whose outputs no correct platform produces."""

from __future__ import annotations

import pydoc

import ml_dtypes
import numpy as np
import pytest

import numeq
from numeq.testing import assert_bit_exact, assert_equivalent, assert_ported

M, K, N = 8, 256, 8
GPU, TRN = "nvidia.h100", "trainium.trn2"


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(15)
    a = numeq.round(rng.standard_normal((M, K)), "bf16")
    b = numeq.round(rng.standard_normal((K, N)), "bf16")
    return a, b, numeq.ops.matmul(a, b, in_fmt="bf16", out="fp32")


def _bf16_accumulation(a, b, platform):
    """The planted bug: the platform's plan with every accumulator narrowed to bf16 (the sum
    nodes' ``accumulate`` format; a fused tensor-core node's output and addend formats)."""

    def narrow(node):
        if isinstance(node, dict):
            if isinstance(node.get("accumulate"), dict):
                node["accumulate"]["format"] = "bf16"
            if "c_format" in node:  # a fused multiply-add node: its sum and its running addend
                node["c_format"] = "bf16"
                node["output"]["format"] = "bf16"
            for child in node.values():
                narrow(child)
        elif isinstance(node, list):
            for child in node:
                narrow(child)

    plan = numeq.plan(platform).to_dict()
    narrow(plan["reduction"])
    return numeq.matmul(a, b, plan=plan, in_fmt="bf16")


def _dropped_tile(a, b, platform, tile=16):
    """The planted bug: the last K tile never accumulated."""
    return numeq.matmul(a[:, :-tile], b[:-tile], platform=platform, in_fmt="bf16")


@pytest.mark.parametrize("platform", [GPU, TRN])
def test_the_platforms_output_passes(case, platform):
    a, b, op = case
    device = numeq.matmul(a, b, platform=platform, in_fmt="bf16")
    verdict = assert_equivalent(device, op, platform)
    assert verdict.passed and verdict.tier == "bit_exact"
    assert assert_bit_exact(device, op, platform).tier == "bit_exact"


@pytest.mark.parametrize("platform", [GPU, TRN])
def test_an_independent_fp32_product_lies_within_the_bound(case, platform):
    # numpy's float32 product of the same bf16 values: a correct computation in another order
    # and precision. The platform's worst-case bound covers it; its probabilistic bound, which
    # tracks the platform's own arithmetic (truncating on the H100), need not: a tier other than
    # bit_exact says the output was not computed as the platform computes.
    a, b, op = case
    numpy_out = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float32)
    verdict = assert_equivalent(numpy_out, op, platform, accept="deterministic")
    assert verdict.tier in ("variant", "probabilistic", "deterministic")
    with pytest.raises(AssertionError, match=r"accepts only bit_exact"):
        assert_bit_exact(numpy_out, op, platform)


@pytest.mark.parametrize("bug", [_bf16_accumulation, _dropped_tile], ids=["bf16_accumulation", "dropped_k_tile"])
@pytest.mark.parametrize("platform", [GPU, TRN])
def test_a_planted_bug_fails_with_the_verdicts_message(case, platform, bug):
    a, b, op = case
    wrong = bug(a, b, platform)
    assert not np.array_equal(wrong, numeq.matmul(a, b, platform=platform, in_fmt="bf16"))
    with pytest.raises(AssertionError) as raised:
        assert_equivalent(wrong, op, platform, msg="layer 3 projection")
    text = str(raised.value)
    verdict = numeq.compare(wrong, op, platform)
    assert not verdict.passed
    assert text == "layer 3 projection\n" + verdict.message
    assert text.startswith("layer 3 projection\nFAIL (")
    assert f"FAIL ({verdict.tier}" in text and verdict.tier in ("deterministic", "violation")
    assert op.signature in text
    assert "worst elements" in text
    assert verdict.concentration and verdict.concentration in text


def test_deterministic_accept_still_fails_a_violation(case):
    a, b, op = case
    wrong = _dropped_tile(a, b, GPU)
    with pytest.raises(AssertionError, match=r"FAIL \(violation\)"):
        assert_equivalent(wrong, op, GPU, accept="deterministic")


def test_a_variant_passes_when_variants_are_accepted(case):
    a, b, op = case
    pairwise = numeq.matmul(a, b, platform=f"{TRN}[pe_order=pairwise]", in_fmt="bf16")
    assert not np.array_equal(pairwise, numeq.matmul(a, b, platform=TRN, in_fmt="bf16"))
    verdict = assert_equivalent(pairwise, op, TRN, accept="variant")
    assert verdict.tier == "variant" and verdict.explained_by == f"{TRN}[pe_order=pairwise]"
    with pytest.raises(AssertionError, match=r"pe_order=pairwise"):
        assert_bit_exact(pairwise, op, TRN)


def test_assert_ported_passes_the_two_platforms_outputs(case):
    a, b, op = case
    gpu = numeq.matmul(a, b, platform=GPU, in_fmt="bf16")
    trn = numeq.matmul(a, b, platform=TRN, in_fmt="bf16")
    assert not np.array_equal(gpu, trn)  # the port check is about outputs that differ
    port = assert_ported(gpu, trn, op, GPU, TRN)
    assert port.passed and port.beyond == 0
    assert port.gpu.tier == "bit_exact" and port.trainium.tier == "bit_exact"


@pytest.mark.parametrize("side", ["gpu", "trainium"])
def test_assert_ported_fails_when_one_output_has_a_bug(case, side):
    a, b, op = case
    gpu = numeq.matmul(a, b, platform=GPU, in_fmt="bf16")
    trn = numeq.matmul(a, b, platform=TRN, in_fmt="bf16")
    if side == "gpu":
        gpu = _dropped_tile(a, b, GPU)
    else:
        trn = _bf16_accumulation(a, b, TRN)
    with pytest.raises(AssertionError) as raised:
        assert_ported(gpu, trn, op, GPU, TRN, msg="attention out-proj port")
    text = str(raised.value)
    assert text.startswith("attention out-proj port\nFAIL (port check)")
    assert f"gpu output against {GPU}" in text and f"trainium output against {TRN}" in text
    assert "difference:" in text and "beyond the cross-platform bound" in text
    broken = f"{side} output: violation"
    assert broken in text.splitlines()[1]


def test_ml_dtypes_and_fp32_outputs(case):
    a, b, op = case
    device = numeq.matmul(a, b, platform=GPU, in_fmt="bf16")
    assert assert_equivalent(device.astype(np.float32), op, GPU).tier == "bit_exact"
    # the op's output is fp32: bf16 outputs hold other values, which the ladder refuses
    with pytest.raises(AssertionError, match="FAIL"):
        assert_equivalent(device.astype(ml_dtypes.bfloat16), op, GPU)


class _DLPackOnly:
    """An array of another framework as far as the DLPack protocol goes (no __array__)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class _ArrayOnly:
    def __init__(self, array):
        self._array = array

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._array, dtype=dtype)


class _Broken:
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("tensor lives on cuda:0")


def test_other_frameworks_arrays(case):
    a, b, op = case
    device = numeq.matmul(a, b, platform=GPU, in_fmt="bf16").astype(np.float32)
    trn = numeq.matmul(a, b, platform=TRN, in_fmt="bf16").astype(np.float32)
    assert assert_equivalent(_DLPackOnly(device), op, GPU).tier == "bit_exact"
    assert assert_equivalent(_ArrayOnly(device), op, GPU).tier == "bit_exact"
    assert assert_ported(_DLPackOnly(device), _ArrayOnly(trn), op, GPU, TRN).passed
    wrong = _dropped_tile(a, b, GPU).astype(np.float32)
    with pytest.raises(AssertionError, match="violation"):
        assert_equivalent(_DLPackOnly(wrong), op, GPU)
    # numpy cannot import bfloat16 through DLPack: the error names the parameter and the way out
    with pytest.raises(TypeError, match=r"^actual: .*DLPack.*float32"):
        assert_equivalent(_DLPackOnly(device.astype(ml_dtypes.bfloat16)), op, GPU)
    with pytest.raises(TypeError, match=r"^trainium_output: .*cuda:0"):
        assert_ported(device, _Broken(), op, GPU, TRN)


def test_compare_reads_other_frameworks_arrays(case):
    # numeq.compare / compare_port read other frameworks' arrays through the same conversion as
    # numeq.testing (compare._as_numpy): DLPack first, then __array__; errors name the parameter
    a, b, op = case
    device = numeq.matmul(a, b, platform=GPU, in_fmt="bf16").astype(np.float32)
    trn = numeq.matmul(a, b, platform=TRN, in_fmt="bf16").astype(np.float32)
    assert numeq.compare(_DLPackOnly(device), op, GPU).tier == "bit_exact"
    assert numeq.compare(_ArrayOnly(device), op, GPU).tier == "bit_exact"
    assert numeq.compare_port(_DLPackOnly(device), _ArrayOnly(trn), op, GPU, TRN).passed
    assert numeq.compare(_DLPackOnly(_dropped_tile(a, b, GPU).astype(np.float32)), op, GPU).tier == "violation"
    # a bfloat16 output through __array__ (an ml_dtypes array), judged against a bf16-output op
    op16 = numeq.ops.matmul(a, b, in_fmt="bf16", out="bf16")
    gpu16 = numeq.matmul(a, b, platform=GPU, in_fmt="bf16", out="bf16").astype(ml_dtypes.bfloat16)
    trn16 = numeq.matmul(a, b, platform=TRN, in_fmt="bf16", out="bf16").astype(ml_dtypes.bfloat16)
    assert numeq.compare(_ArrayOnly(gpu16), op16, GPU).tier == "bit_exact"
    assert numeq.compare_port(_ArrayOnly(gpu16), _ArrayOnly(trn16), op16, GPU, TRN).passed
    # numpy cannot import bfloat16 through DLPack: the error names the parameter and the way out
    with pytest.raises(TypeError, match=r"^actual: .*DLPack.*float32"):
        numeq.compare(_DLPackOnly(gpu16), op16, GPU)
    with pytest.raises(TypeError, match=r"^gpu_output: .*DLPack.*float32"):
        numeq.compare_port(_DLPackOnly(gpu16), trn16, op16, GPU, TRN)
    with pytest.raises(TypeError, match=r"^trainium_output: .*cuda:0"):
        numeq.compare_port(device, _Broken(), op, GPU, TRN)
    with pytest.raises(TypeError, match=r"^actual: .*cuda:0"):
        numeq.compare(_Broken(), op, GPU)
    # what the conversion hands on is still checked as before: complex values are refused by name
    with pytest.raises(TypeError, match=r"^gpu_output: expected real values, got complex"):
        numeq.compare_port(_ArrayOnly(device.astype(complex)), trn, op, GPU, TRN)


@pytest.mark.parametrize("module", ["torch", "jax"])
def test_torch_and_jax(case, module):
    lib = pytest.importorskip(module)
    a, b, op = case
    device = numeq.matmul(a, b, platform=GPU, in_fmt="bf16").astype(np.float32)
    tensor = lib.tensor(device) if module == "torch" else lib.numpy.asarray(device)
    assert assert_equivalent(tensor, op, GPU).tier == "bit_exact"


def test_bad_input_names_the_parameter(case):
    a, b, op = case
    device = numeq.matmul(a, b, platform=GPU, in_fmt="bf16")
    with pytest.raises(TypeError, match=r"^platform: expected a string"):
        assert_equivalent(device, op, 100)
    with pytest.raises(ValueError, match=r"^platform: unknown platform 'nvidia\.h999'; valid: .*nvidia\.h100"):
        assert_equivalent(device, op, "nvidia.h999")
    with pytest.raises(ValueError, match=r"^accept: unknown tier 'exact'; valid: bit_exact, variant, probabilistic"):
        assert_equivalent(device, op, GPU, accept="exact")
    with pytest.raises(ValueError, match=r"^failure_probability: "):
        assert_equivalent(device, op, GPU, failure_probability=2.0)
    with pytest.raises(TypeError, match=r"^variants: "):
        assert_equivalent(device, op, GPU, variants="yes")
    with pytest.raises(TypeError, match=r"^msg: expected a string"):
        assert_equivalent(device, op, GPU, msg=3)
    with pytest.raises(TypeError, match=r"^op: expected a numeq\.ops\.Op"):
        assert_equivalent(device, "matmul", GPU)
    with pytest.raises(ValueError, match=r"^actual: shape \(3, 3\) differs"):
        assert_bit_exact(np.zeros((3, 3)), op, GPU)
    with pytest.raises(TypeError, match=r"^actual: expected real values"):
        assert_equivalent("0.5", op, GPU)
    with pytest.raises(TypeError, match=r"^gpu_output: expected real values, got complex"):
        assert_ported(device.astype(complex), device, op, GPU, TRN)
    with pytest.raises(TypeError, match=r"^trainium_output: expected real values"):
        assert_ported(device, "x", op, GPU, TRN)
    with pytest.raises(TypeError, match=r"^trainium_platform: expected a string"):
        assert_ported(device, device, op, GPU, None)
    with pytest.raises(ValueError, match=r"^trainium_platform: unknown platform 'trainium\.trn9'"):
        assert_ported(device, device, op, GPU, "trainium.trn9")


def test_help_shows_parameters_choices_and_an_example():
    for function, words in ((assert_equivalent, ("actual", "op", "platform", "accept", "failure_probability",
                                                 "variants", "msg")),
                            (assert_ported, ("gpu_output", "trainium_output", "gpu_platform", "trainium_platform",
                                             "accept")),
                            (assert_bit_exact, ("actual", "op", "platform"))):
        text = pydoc.render_doc(function, renderer=pydoc.plaintext)
        for word in words:
            assert f"``{word}``" in text or f"{word}," in text or f"{word}:" in text, (function.__name__, word)
        assert "Example::" in text
        if function is not assert_bit_exact:
            for tier in ("bit_exact", "variant", "probabilistic", "deterministic"):
                assert f'"{tier}"' in text


def test_docstring_examples_run():
    for function in (assert_equivalent, assert_ported, assert_bit_exact):
        lines = function.__doc__.split("Example::", 1)[1].splitlines()
        indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
        exec("\n".join(line[indent:] for line in lines), {})  # noqa: S102 - our own docstrings


def test_numeq_exports_the_module():
    assert numeq.testing.assert_equivalent is assert_equivalent
    assert "testing" in numeq.__all__
