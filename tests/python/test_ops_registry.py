"""The op registry (cases/registry.hpp, numeq.ops.specs()) is what every Python table of operations
reads: numeq.ops' functions and their signatures, the catalogue, the planted bugs, the tolerance
table's sizes and the review manifest's operations. Functions made from a registry row alone are
checked against oracles independent of numeq (numpy's correctly rounded sqrt, exact fractions)."""

from __future__ import annotations

import inspect
from fractions import Fraction

import numpy as np
import pytest

import numeq
import numeq.bugs
import numeq.catalogue
import numeq.tolerance_table
from numeq.review import manifest

SPECS = numeq.ops.specs()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_row_is_a_function_of_numeq_ops_with_the_rows_signature(spec):
    fn = getattr(numeq.ops, spec.name)
    assert spec.name in numeq.ops.__all__
    sig = inspect.signature(fn).parameters
    for i in spec.inputs:
        assert i.name in sig, f"{spec.name}: input {i.name} missing from numeq.ops.{spec.name}'s signature"
        if i.required:
            assert sig[i.name].default is inspect.Parameter.empty
        else:
            assert sig[i.name].default is None
    for p in spec.params:
        assert p.name in sig, f"{spec.name}: parameter {p.name} missing from numeq.ops.{spec.name}'s signature"
        assert sig[p.name].default == p.default, (spec.name, p.name)
        assert sig[p.name].kind is inspect.Parameter.KEYWORD_ONLY
    assert ("in_fmt" in sig) == spec.format_keywords
    if spec.format_keywords:
        assert sig["out"].default == (spec.default_out or None)
    for p in spec.params:
        assert p.name in (fn.__doc__ or ""), f"numeq.ops.{spec.name}'s docstring does not name {p.name}"


def test_catalogue_bugs_tables_and_manifest_read_the_registry():
    catalogue_rows = [s for s in SPECS if s.catalogue is not None]
    assert numeq.catalogue.OPS == tuple(s.name for s in catalogue_rows)
    for s in catalogue_rows:
        assert numeq.catalogue.formats_for(s.name) == s.catalogue.formats
        assert numeq.catalogue.default_shape(s.name) == s.catalogue.shape
        assert numeq.tolerance_table.TABLE_SHAPES[s.name] == s.catalogue.table_shape
    for bug in numeq.bugs.BUGS:
        assert bug.ops == tuple(s.name for s in catalogue_rows if bug.name in s.bugs)
        assert bug.ops, f"{bug.name}: no registry row lists it"
    assert manifest.OPERATIONS == tuple(s.name for s in SPECS)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.catalogue is not None], ids=lambda s: s.name)
def test_every_catalogue_row_builds_from_its_drawn_inputs(spec):
    fmt = spec.catalogue.formats[0]
    dims = (1, 4, 8) if spec.name == "attention" else tuple(2 for _ in spec.catalogue.shape)
    p = numeq.catalogue.Problem(spec.name, fmt, numeq.catalogue.out_for(spec.name, fmt), k=64, shape=dims)
    built = numeq.catalogue.build(p, "normal", seed=1)
    assert sorted(built.inputs) == sorted(i.name for i in spec.inputs if i.catalogue_shape)
    assert numeq.compare(built.op.emulate("nvidia.h100"), built.op, "nvidia.h100").passed


def test_a_function_made_from_its_row_alone_is_correctly_rounded():
    # sqrt has no Python of its own (numeq.ops makes it from the registry row). numpy's sqrt is
    # IEEE's correctly rounded square root in binary64, and rounding it once more into fp32 is
    # exact rounding too (53 >= 2 * 24 + 2: Figueroa, SIGNUM 1995).
    assert inspect.signature(numeq.ops.sqrt) == numeq._registry.signature(numeq.ops.spec("sqrt"))
    x = np.random.default_rng(0).uniform(0, 1e6, 4096).astype(np.float32)
    op = numeq.ops.sqrt(x)
    expected = np.sqrt(x.astype(np.float64)).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(op.reference(), expected)
    assert numeq.compare(op.emulate("nvidia.h100"), op, "nvidia.h100").passed


def test_a_row_built_by_name_sums_exactly():
    # The sum row's exact value against exact fractions of the inputs.
    x = numeq.round(np.random.default_rng(3).standard_normal((3, 50)) * 1e3, "bf16")
    op = numeq.ops.sum(x, in_fmt="bf16", out="fp64")
    for row, got in zip(x, op.reference()):
        assert got == float(sum(Fraction(v) for v in row.tolist()))


def test_registry_functions_refuse_bad_arguments_by_name():
    x = np.ones(4, dtype=np.float32)
    with pytest.raises(TypeError, match="numeq.ops.sqrt: .*unexpected keyword argument 'variant'"):
        numeq.ops.sqrt(x, variant="fast")
    with pytest.raises(ValueError, match="rounding"):
        numeq.ops.sqrt(x, rounding="sideways")
    with pytest.raises(ValueError, match="name: unknown operation 'sqr'; valid: matmul"):
        numeq.ops.spec("sqr")
    with pytest.raises(ValueError, match="variant: unknown value 'fast'"):
        numeq.ops.softmax(x, variant="fast")


def test_a_generator_that_draws_nothing_meaningful_is_refused_and_left_out():
    # subnormal_rich values times 16 round to int8 code 0 everywhere: the registry leaves it out
    # of int8_matmul's generators; the catalogue refuses it by name, and "all" skips it.
    s = numeq.ops.spec("int8_matmul")
    assert "subnormal_rich" not in s.catalogue.generators
    assert set(numeq.ops.spec("matmul").catalogue.generators) == set(numeq.ops.generators())
    p = numeq.catalogue.Problem("int8_matmul", "int8", "int32", k=64, shape=(2, 2))
    with pytest.raises(ValueError, match="generator: subnormal_rich .* valid for it: normal"):
        numeq.catalogue.build(p, "subnormal_rich", 0)
    t = numeq.tolerance("int8_matmul", "int8", None, "nvidia.h100", k=64, shape=(2, 2), inputs="all")
    assert t.inputs == s.catalogue.generators


def test_new_user_errors_name_what_to_change():
    x = numeq.ops.generate("normal", (2, 64), "bf16", seed=0)
    # a platform without a sum plan for compute names compute, not the plan table's in_fmt
    with pytest.raises(ValueError, match=r"^compute: platform nvidia.h100 has no sum for bf16"):
        numeq.ops.sum_of_squares(x, in_fmt="bf16", compute="bf16").emulate("nvidia.h100")
    # float64 values taken as fp64: the message says to pass in_fmt
    with pytest.raises(ValueError, match="pass in_fmt"):
        numeq.ops.sum_of_squares(x)
    # a misspelt op suggests the registered ones
    with pytest.raises(AttributeError, match="did you mean sum_of_squares"):
        numeq.ops.sumofsquares  # noqa: B018
    assert numeq.ops.sum_of_squares(x, in_fmt="bf16").signature.endswith("-> fp32")
