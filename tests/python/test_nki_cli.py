"""``numeq nki run FILE.py::KERNEL``, and docs/nki.md's table of NKI names checked against the package.

The command runs in process (``numeq.cli.main``) on kernel files written here; outputs are checked
against numpy float64 oracles (one fp32 operation on fp32 values, computed in float64 and rounded
to fp32, is the correctly rounded fp32 result: 53 >= 2 * 24 + 2), the trace against the
instructions the kernel issues, counted by hand.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import numeq.nki
from numeq.cli import main
from nki_support import CARRIED_KERNEL

README = Path(__file__).resolve().parents[2] / "docs" / "nki.md"  # the NKI page of the docs

KERNELS = '''
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl


def _load(x):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


@nki.jit
def subtract(a, b, scale=1.0):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    ta, tb = _load(a), _load(b)
    nisa.tensor_scalar(dst=tb, data=tb, op0=nl.multiply, operand0=scale)
    nisa.tensor_tensor(dst=ta, data1=ta, data2=tb, op=nl.subtract)
    nisa.dma_copy(dst=out, src=ta)
    return out


@nki.jit
def sum_and_product(a, b):
    s = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    p = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    ta, tb = _load(a), _load(b)
    r = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=r, data1=ta, data2=tb, op=nl.add)
    nisa.dma_copy(dst=s, src=r)
    nisa.tensor_tensor(dst=r, data1=ta, data2=tb, op=nl.multiply)
    nisa.dma_copy(dst=p, src=r)
    return {"sum": s, "product": p}


@nki.jit
def every_program_copies(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    assert nl.program_id(0) < nl.num_programs(0)
    nisa.dma_copy(dst=out, src=_load(a))
    return out


@nki.jit
def too_many_partitions(a):
    t = nl.ndarray((256, 512), a.dtype, buffer=nl.sbuf)  # LIMIT
    nisa.dma_copy(dst=t, src=a)
    return a


@nki.jit
def uses_an_unimplemented_name(a):
    nl.atomic_rmw(a, value=a, op=nl.add)
    return a


@nki.jit
def raises(a):
    raise ZeroDivisionError("the kernel's own error")
'''

OLDER = '''
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out
'''


def _line_of(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if marker in line)


@pytest.fixture
def work(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "older.py").write_text(OLDER)
    rng = np.random.default_rng(11)
    a = rng.standard_normal((128, 512)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    np.savez(tmp_path / "ab.npz", b=b, a=a)  # b first: the kernel's signature gives the order
    return tmp_path, a, b


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = main(["nki", "run", *map(str, args)])
    except SystemExit as e:  # argparse's own refusals
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32)


# --- running kernels -------------------------------------------------------------------------------

def test_arrays_are_passed_by_parameter_name(work, capsys):
    d, a, b = work
    rc, out, err = _cli(capsys, f"{d}/kernels.py::subtract", "--inputs", d / "ab.npz", "--out", d / "o.npz",
                        "--trace", d / "t.json", "--kwarg", "scale=0.5")
    assert rc == 0 and err == "", err
    with np.load(d / "o.npz") as z:
        assert z.files == ["output_0"]
        expected = _f32(a.astype(np.float64) - _f32(b.astype(np.float64) * 0.5))
        np.testing.assert_array_equal(z["output_0"], expected)
    assert "kernel " in out and "on trn2; platform trainium.trn2" in out
    assert "findings: 0 errors, 0 warnings" in out
    for name, value in numeq.nki.assumptions_of("trn2").items():
        assert f"  {name} = {value['value']}\n" in out
    trace = json.loads((d / "t.json").read_text())
    # 3 DMAs of 128 x 512 fp32 (two loads, one store); tensor_scalar and tensor_tensor: one FLOP per element
    assert [(i["engine"], i["name"]) for i in trace["instructions"]] == [
        ("dma", "dma_copy"), ("dma", "dma_copy"), ("vector", "tensor_scalar"), ("vector", "tensor_tensor"),
        ("dma", "dma_copy")]
    assert trace["engines"]["dma"]["bytes"] == 3 * 128 * 512 * 4
    assert trace["engines"]["vector"]["flops"] == 2 * 128 * 512
    assert re.search(r"\n  dma +3 +0 +786432 +0  busy [0-9.]+ us\n", out), out
    assert trace["summary"]["engines"]["dma"]["bytes"] == 786432 and trace["summary"]["bound_by"] == "dma"
    assert trace["target"] == "trn2" and trace["findings"] == []


def test_a_dict_of_outputs_is_written_by_name(work, capsys):
    d, a, b = work
    rc, _, err = _cli(capsys, f"{d}/kernels.py::sum_and_product", "--inputs", d / "ab.npz", "--out", d / "o")
    assert rc == 0, err
    with np.load(d / "o.npz") as z:  # numpy.savez adds the suffix
        assert sorted(z.files) == ["product", "sum"]
        np.testing.assert_array_equal(z["sum"], _f32(a.astype(np.float64) + b))
        np.testing.assert_array_equal(z["product"], _f32(a.astype(np.float64) * b))


def test_bfloat16_inputs_from_raw_bytes(work, capsys):
    d, a, b = work
    a16, b16 = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    np.savez(d / "bf16.npz", a=a16, b=b16)  # numpy stores them as raw 2-byte elements
    rc, _, err = _cli(capsys, f"{d}/kernels.py::subtract", "--inputs", d / "bf16.npz")
    assert rc == 2 and "array a holds raw 2-byte elements" in err and "--dtype a=DTYPE" in err
    assert "(valid: bfloat16)" in err  # the one 2-byte dtype numpy cannot name (float16 it stores as such)
    rc, _, err = _cli(capsys, f"{d}/kernels.py::subtract", "--inputs", d / "bf16.npz", "--dtype", "a=bfloat16",
                      "--dtype", "b=bf16", "--out", d / "o.npz")
    assert rc == 0, err
    with np.load(d / "o.npz") as z:
        got = z["output_0"].view(ml_dtypes.bfloat16)  # written back as raw bytes too
    expected = (a16.astype(np.float64) - b16.astype(np.float64)).astype(np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))


def test_the_grid_runs_every_program(work, capsys):
    d, a, _ = work
    np.savez(d / "a.npz", a=a)
    rc, out, err = _cli(capsys, f"{d}/kernels.py::every_program_copies", "--inputs", d / "a.npz", "--grid", "2,3",
                        "--trace", d / "t.json")
    assert rc == 0, err
    trace = json.loads((d / "t.json").read_text())
    assert len(trace["instructions"]) == 2 * 6  # a load and a store per program


def test_an_older_generation_file(work, capsys):
    d, a, b = work
    rc, _, err = _cli(capsys, f"{d}/older.py::add_kernel", "--inputs", d / "ab.npz", "--out", d / "o.npz")
    assert rc == 0, err
    with np.load(d / "o.npz") as z:
        np.testing.assert_array_equal(z["output_0"], _f32(a.astype(np.float64) + b))


def test_a_kernel_file_imports_its_neighbours(work, capsys):
    d, a, b = work
    (d / "neighbour_helpers.py").write_text("import nki.language as nl\nADD = nl.add\n")
    (d / "uses_helpers.py").write_text("from neighbour_helpers import ADD\n" + OLDER.replace("nl.add(", "ADD("))
    rc, _, err = _cli(capsys, f"{d}/uses_helpers.py::add_kernel", "--inputs", d / "ab.npz", "--out", d / "o.npz")
    assert rc == 0, err
    with np.load(d / "o.npz") as z:
        np.testing.assert_array_equal(z["output_0"], _f32(a.astype(np.float64) + b))
    sys.modules.pop("neighbour_helpers", None)


def test_error_findings_exit_1_with_where_rule_and_source(work, capsys):
    d, a, _ = work
    np.savez(d / "a.npz", a=a)
    rc, out, _ = _cli(capsys, f"{d}/kernels.py::too_many_partitions", "--inputs", d / "a.npz", "--target", "trn1")
    assert rc == 1
    line = f"  kernels.py:{_line_of(KERNELS, '# LIMIT')}: error: [partition_dim] "
    finding = next(x for x in out.splitlines() if x.startswith(line))
    assert "256 partitions" in finding and "128" in finding and " -- documented: " in finding
    assert "on trn1; platform trainium.trn1" in out and "findings: 1 error," in out


def test_the_assumption_given_is_the_one_used(work, capsys):
    d, _, _ = work
    rc, out, _ = _cli(capsys, f"{d}/kernels.py::subtract", "--inputs", d / "ab.npz", "--assume",
                      "matmul_accumulate=always", "--assume", "pe_order=pairwise", "--trace", d / "t.json")
    assert rc == 0
    assert "  matmul_accumulate = always  (--assume)\n" in out and "  pe_order = pairwise  (--assume)\n" in out
    assert json.loads((d / "t.json").read_text())["assumptions"]["matmul_accumulate"] == "always"


def test_a_kernel_that_raises_exits_1_with_its_traceback(work, capsys):
    d, _, _ = work
    rc, _, err = _cli(capsys, f"{d}/kernels.py::raises", "--inputs", d / "ab.npz")
    assert rc == 2 and "raises takes (a): no parameter b" in err
    np.savez(d / "a.npz", a=np.zeros((2, 2), np.float32))
    rc, _, err = _cli(capsys, f"{d}/kernels.py::raises", "--inputs", d / "a.npz")
    assert rc == 1 and "ZeroDivisionError: the kernel's own error" in err and "Traceback" in err


def test_the_kernel_file_is_imported_inside_installed_only(work, capsys):
    d, _, _ = work
    _cli(capsys, f"{d}/kernels.py::subtract", "--inputs", d / "ab.npz")
    from numeq.nki import _install

    assert _install.settings() is None
    assert "nki" not in sys.modules or not sys.modules["nki"].__name__.startswith("numeq")
    assert not any(name.startswith("numeq_nki_run_") for name in sys.modules)
    assert str(d) not in sys.path


# --- refusals: exit 2, naming the parameter and the valid choices ----------------------------------

@pytest.mark.parametrize("args,message", [
    (["{d}/kernels.py::nothing", "--inputs", "{d}/ab.npz"],
     "has no kernel 'nothing'; valid: subtract, sum_and_product, every_program_copies, too_many_partitions"),
    (["{d}/kernels.py", "--inputs", "{d}/ab.npz"], "FILE.py::KERNEL: expected a kernel file and a kernel name"),
    (["{d}/missing.py::k"], "FILE.py::KERNEL: no such file"),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/nothing.npz"], "--inputs: no such file"),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/kernels.py"], "is not a numpy .npz file"),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/a.npz"],
     "--inputs: {d}/a.npz holds arrays [a]; subtract takes (a, b, scale): b missing"),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/abc.npz"],
     "--inputs: {d}/abc.npz holds arrays [a, b, c]; subtract takes (a, b, scale): no parameter c"),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/ab.npz", "--kwarg", "a=1"], "--kwarg: a is also an array"),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/ab.npz", "--assume", "pe_order"],
     "--assume: expected NAME=VALUE, got 'pe_order'"),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/ab.npz", "--assume", "pe_orders=pairwise"],
     "--assume: trn2 has no assumption 'pe_orders'; valid: pe_order, "),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/ab.npz", "--assume", "pe_order=zigzag"],
     "--assume: pe_order cannot be 'zigzag'; valid: sequential, pairwise, fused"),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/ab.npz", "--grid", "2,x"], "--grid: expected positive integers"),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/ab.npz", "--dtype", "a=float9"],
     "--dtype a: unknown dtype 'float9'; valid: float32, "),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/ab.npz", "--dtype", "z=bfloat16"], "--dtype: "),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/ab.npz", "--dtype", "a=int8"],
     "--dtype: a holds values that are not int8 integers"),
    (["{d}/kernels.py::subtract", "--inputs", "{d}/ab.npz", "--out", "{d}/no/o.npz"], "--out: no such folder"),
    (["{d}/kernels.py::uses_an_unimplemented_name", "--inputs", "{d}/a.npz"],
     "numeq.nki does not implement nki.language.atomic_rmw"),
    (["{d}/kernels.py::subtract", "--target", "trn9"], "argument --target: invalid choice: 'trn9'"),
])
def test_refusals_exit_2(work, capsys, args, message):
    d, a, b = work
    np.savez(d / "a.npz", a=a)
    np.savez(d / "abc.npz", a=a, b=b, c=b)
    rc, out, err = _cli(capsys, *(x.format(d=d) for x in args))
    assert rc == 2
    assert message.format(d=d) in err, err
    assert out == ""


def test_the_command_line_entry_point_and_its_help():
    run = subprocess.run([sys.executable, "-m", "numeq", "nki", "run", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0
    for option in ("FILE.py::KERNEL", "--inputs", "--out", "--target", "--assume", "--grid", "--trace", "--kwarg",
                   "--dtype", "trn2,trn3,trn1,inf2", "Exit status"):
        assert option in run.stdout, option


# --- the README's table of NKI names ---------------------------------------------------------------

# Every NKI name: the nki.isa (section 1) and nki.language (section 2) names of the NKI API reference
# this package implements from, the top-level names (its section 4) and the older generation's
# (section 5), as (module, the README row, names).
NKI_NAMES: list[tuple[str, str, list[str]]] = [
    ("nki", "top level", ["jit", "simulate", "language", "isa", "typing", "collectives", "compiler", "baremetal",
                          "benchmark", "profile"]),
    ("nki", "older generation (neuronxcc.nki)", ["simulate_kernel", "trace", "FrameworkKernel", "tensor"]),
    ("nki.isa", "enums, classes, queries", [
        "engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version", "dma_engine",
        "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "unknown_engine", "NkiInstruction",
        "NkiValidationError", "VirtualRegister", "get_nc_version", "get_nc_sub_version"]),
    ("nki.isa", "data movement, registers", [
        "dma_copy", "dma_transpose", "dma_compute", "tensor_copy", "tensor_copy_predicated", "memset", "nc_n_gather",
        "local_gather", "nc_stream_shuffle", "sendrecv", "core_barrier", "register_alloc", "register_move",
        "register_load", "register_store"]),
    ("nki.isa", "Tensor Engine", ["nc_matmul", "nc_matmul_mx", "nc_transpose"]),
    ("nki.isa", "Vector and GpSimd engines", [
        "tensor_tensor", "tensor_scalar", "scalar_tensor_tensor", "tensor_reduce", "tensor_partition_reduce",
        "tensor_scalar_reduce", "tensor_scalar_cumulative", "tensor_tensor_scan", "reciprocal", "exponential",
        "bn_stats", "bn_aggr", "max8", "nc_find_index8", "nc_match_replace8", "select_reduce", "range_select",
        "affine_select", "iota", "dropout", "rng", "rand2", "set_rng_seed", "rand_set_state", "rand_get_state",
        "sequence_bounds", "nonzero_with_count", "topk", "quantize_mx"]),
    ("nki.isa", "Scalar Engine", ["activation", "activation_reduce", "activate2"]),
    ("nki.isa", "earlier releases", ["tensor_copy_dynamic_src", "tensor_copy_dynamic_dst", "builtin_custom_op"]),
    ("nki.language", "dtypes", [
        "bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32", "bfloat16",
        "tfloat32", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e5m2_x4",
        "float8_e4m3fn_x4", "float4_e2m1fn_x4"]),
    ("nki.language", "memories, tile sizes", [
        "sbuf", "psum", "hbm", "private_hbm", "shared_hbm", "MemoryRegion", "is_hbm", "is_on_chip", "is_psum",
        "is_sbuf", "tile_size"]),
    ("nki.language", "ALU operators", [
        "add", "subtract", "multiply", "maximum", "minimum", "equal", "not_equal", "greater_equal", "greater",
        "less_equal", "less", "logical_and", "logical_or", "logical_xor", "power", "abs_max", "abs_min",
        "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "invert", "average", "bypass"]),
    ("nki.language", "activation functions", [
        "copy", "square", "sigmoid", "relu", "prelu", "gelu", "gelu_dx", "gelu_apprx_tanh", "gelu_apprx_sigmoid",
        "gelu_apprx_sigmoid_dx", "silu", "silu_dx", "tanh", "softplus", "mish", "erf", "erf_dx", "exp", "sign",
        "abs", "log", "sin", "arctan", "sqrt", "rsqrt", "reciprocal"]),
    ("nki.language", "tile functions", [
        "divide", "fmod", "mod", "cos", "tan", "ceil", "floor", "trunc", "negative", "logical_not", "sum", "max",
        "min", "mean", "prod", "var", "all", "softmax", "rms_norm", "where", "dropout"]),
    ("nki.language", "creation, data movement", [
        "ndarray", "zeros", "ones", "full", "zeros_like", "empty_like", "rand", "random_seed", "shared_constant",
        "shared_identity_matrix", "load", "store", "load_transpose2d", "gather_flattened", "transpose", "matmul",
        "broadcast_to", "expand_dims"]),
    ("nki.language", "indexing, loops, SPMD, other", [
        "ds", "affine_range", "sequential_range", "static_range", "dynamic_range", "fori_loop", "while_loop",
        "program_id", "num_programs", "program_ndim", "device_print", "no_reorder", "NKIObject", "NkiTensor"]),
    ("nki.language", "older generation (neuronxcc.nki.language)", [
        "arange", "mgrid", "par_dim", "nc", "spmd_dim", "static_cast", "atomic_rmw", "loop_reduce", "all_reduce",
        "finfo", "gemm_grid", "gemm_stationary_grid", "fp32", "bfp16"]),
    ("nki.collectives", "collective communication", [
        "ReplicaGroup", "all_reduce", "all_gather", "all_gather_v", "reduce_scatter", "all_to_all", "all_to_all_v",
        "collective_permute", "collective_permute_implicit", "collective_permute_implicit_reduce",
        "collective_permute_implicit_current_processing_rank_id", "rank_id"]),
    ("nki.compiler", "older generation's allocation and directives", [
        "sbuf", "psum", "allocation_scope", "enable_stack_allocator", "force_auto_alloc", "multi_buffer",
        "no_reorder", "skip_middle_end_transformations"]),
]

_MODULES = {"nki": "numeq.nki", "nki.isa": "numeq.nki.isa", "nki.language": "numeq.nki.language",
            "nki.collectives": "numeq.nki.collectives", "nki.compiler": "numeq.nki.compiler"}


def _is_unsupported_stub(obj: object) -> bool:
    """A function whose whole body (past its docstring) raises numeq.nki.Unsupported: a name
    that exists only to say it is not implemented."""
    if not inspect.isfunction(obj):
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Raise) and "nsupported" in ast.unparse(body[0])




def status(module: str, name: str) -> str:
    """'implemented', 'unsupported', or 'internal' (a numeq helper that happens to have the NKI
    name: neither), from the package itself."""
    mod = importlib.import_module(_MODULES[module])
    try:
        obj = getattr(mod, name)
    except numeq.nki.Unsupported:
        return "unsupported"
    if inspect.isfunction(obj) and obj.__module__ == "numeq.nki.machine.context":
        return "internal"  # the run context defines no NKI name
    if getattr(obj, "_numeq_placeholder", False):
        return "unsupported"  # a documented name that exists and raises when used (placeholders)
    if isinstance(obj, numeq.nki.language.Operator):
        # An identifier is implemented where something computes it: the ALU, the function model or
        # the older interface's tile functions.
        from numeq.nki.front import tiles
        from numeq.nki.machine.alu import ALU
        from numeq.nki.machine.arithmetic import function_names

        computed = (obj.op_name in ALU or obj.op_name in function_names() or obj.op_name in tiles.__all__
                    or obj.op_name in tiles._TILE_FUNCTIONS
                    or obj.op_name == "average")  # tensor_partition_reduce's operator (its own semantics)
        return "implemented" if computed else "unsupported"
    return "unsupported" if _is_unsupported_stub(obj) else "implemented"


def _readme_table() -> list[tuple[str, str, list[str], list[str]]]:
    """The rows of docs/nki.md's table of NKI names: (module, row, implemented, unsupported)."""
    section = README.read_text(encoding="utf-8")
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `nki"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 3, line
        module, row = re.fullmatch(r"`([\w.]+)` (.+)", cells[0]).groups()
        rows.append((module, row, re.findall(r"`(\w+)`", cells[1]), re.findall(r"`(\w+)`", cells[2])))
    return rows


def render_table() -> str:
    """The table as the package stands (``python3 tests/python/test_nki_cli.py`` prints it)."""
    lines = ["| NKI names | implemented | raise `numeq.nki.Unsupported` |", "|---|---|---|"]
    for module, row, names in NKI_NAMES:
        said = {n: status(module, n) for n in names}
        cells = [", ".join(f"`{n}`" for n in names if said[n] == s) or "-" for s in ("implemented", "unsupported")]
        lines.append(f"| `{module}` {row} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def test_the_readme_table_names_every_nki_name_once_per_row():
    table = {(module, row): (impl, unsup) for module, row, impl, unsup in _readme_table()}
    assert len(table) == len(_readme_table()), "a row appears twice"
    for module, row, names in NKI_NAMES:
        assert (module, row) in table, f"README table: no row `{module}` {row}"
        impl, unsup = table[(module, row)]
        listed = impl + unsup
        assert sorted(listed) == sorted(names), (module, row, sorted(set(listed) ^ set(names)))
    assert set(table) == {(module, row) for module, row, _ in NKI_NAMES}


def test_the_readme_table_is_true():
    wrong = []
    for module, row, impl, unsup in _readme_table():
        wrong += [f"{module}.{n}: the README says implemented" for n in impl if status(module, n) != "implemented"]
        wrong += [f"{module}.{n}: the README says unsupported" for n in unsup
                  if status(module, n) != "unsupported"]
    assert not wrong, "\n".join(wrong) + "\n(python3 tests/python/test_nki_cli.py prints the true table)"


def test_the_docs_table_of_instructions_is_the_instruction_table():
    """The nki.isa instructions of docs/nki.md's table (enums and queries aside) are the rows of
    numeq.nki's instruction table: those it calls implemented are the rows with semantics, those it
    says raise are the rows without, which a kernel can import and name."""
    from numeq.nki.instructions.table import INSTRUCTIONS

    rows = [(impl, unsup) for module, row, impl, unsup in _readme_table()
            if module == "nki.isa" and row != "enums, classes, queries"]
    implemented = {n for impl, _ in rows for n in impl}
    unsupported = {n for _, unsup in rows for n in unsup}
    instructions = {n: spec for n, spec in INSTRUCTIONS.items() if spec.module == "nki.isa"}
    with_semantics = {n for n, spec in instructions.items() if spec.implemented}
    assert implemented == with_semantics, sorted(implemented ^ with_semantics)
    assert unsupported == set(instructions) - with_semantics, sorted(unsupported ^ (set(instructions) - with_semantics))
    for name, spec in instructions.items():
        assert getattr(numeq.nki.isa, name).__name__ == name
        if spec.implemented:
            assert spec.forms and (spec.doc or spec.semantics.__doc__), name
    # The language functions that are rows: named nl.<name>, none of them in nki.isa, each implemented
    # (the front's nl.sin calls its row; nl.rand is its row).
    for key, spec in INSTRUCTIONS.items():
        if spec.module == "nki.language":
            assert key == f"nl.{spec.name}" and spec.implemented and not hasattr(numeq.nki.isa, spec.name), key
    assert numeq.nki.language.rand.__module__ == "numeq.nki.language"


def test_an_unimplemented_instruction_imports_and_raises_with_the_kernels_line_when_called():
    from numeq.nki.isa import topk  # a kernel file naming it imports

    def kernel():
        topk()  # the line the message names
    line = inspect.getsourcelines(kernel)[1] + 1
    with pytest.raises(numeq.nki.Unsupported, match=rf"test_nki_cli.py:{line}: .*nki.isa.topk"):
        numeq.nki.run(kernel)


def test_an_unsupported_name_raises_on_access_or_use():
    for module, _, _, unsup in _readme_table():
        mod = importlib.import_module(_MODULES[module])
        for name in unsup:
            obj = getattr(mod, name)  # every documented name exists: a kernel file can name it
            if isinstance(obj, numeq.nki.language.DType):  # a dtype: a tile of it is refused
                def use(obj=obj):
                    numeq.nki.language.ndarray((1, 4), obj, buffer=numeq.nki.language.sbuf)
            elif isinstance(obj, numeq.nki.language.Operator):  # an identifier: an instruction taking it raises
                def use(obj=obj):
                    t = numeq.nki.language.ndarray((1, 4), numeq.nki.language.float32, buffer=numeq.nki.language.sbuf)
                    numeq.nki.isa.memset(t, 1.0)
                    numeq.nki.isa.activation(dst=t, op=obj, data=t)
                    numeq.nki.isa.tensor_tensor(dst=t, data1=t, data2=t, op=obj)
            elif getattr(obj, "_numeq_decorator", False):  # a device decorator: the decorated kernel raises
                with pytest.raises(numeq.nki.Unsupported, match=name):
                    obj()(lambda: None)()
                continue
            else:
                def use(obj=obj):
                    obj()
            with pytest.raises(numeq.nki.Unsupported, match=name):
                numeq.nki.run(use, target="trn3")  # the newest target: what it lacks is numeq's


def _implemented(row_name: str) -> list[str]:
    return next(impl for module, row, impl, _ in _readme_table() if row == row_name)


def test_implemented_alu_operators_and_activation_functions_compute():
    """An operator or function the table calls implemented is one the instructions compute (an
    identifier that exists but that no instruction takes would not be implemented)."""
    nl, nisa = numeq.nki.language, numeq.nki.isa
    x = np.linspace(0.5, 2.0, 128 * 4, dtype=np.float32).reshape(128, 4)

    def with_op(name: str, activation: bool):
        def kernel(a):
            t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            r = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
            if activation:
                nisa.activation(dst=r, op=getattr(nl, name), data=t)
            elif name == "average":  # the partition reduction's operator only (nki.isa docs)
                r = nl.ndarray((1, a.shape[1]), nl.float32, buffer=nl.sbuf)
                nisa.tensor_partition_reduce(dst=r, op=nl.average, data=t)
            else:
                nisa.tensor_tensor(dst=r, data1=t, data2=t, op=getattr(nl, name))
            return r
        return kernel

    for name in _implemented("ALU operators"):
        want = "tensor_partition_reduce" if name == "average" else "tensor_tensor"
        assert numeq.nki.run(with_op(name, False), x).trace[-1].name == want, name
    for name in _implemented("activation functions"):
        assert numeq.nki.run(with_op(name, True), x).trace[-1].name == "activation", name


def test_the_readme_names_every_rule_and_its_severity():
    section = README.read_text(encoding="utf-8")
    for severity in ("error", "warning"):
        label = "Errors a run checks:" if severity == "error" else "Warnings:"
        sentence = next(s for s in section.split("\n\n") if label in s)
        named = set(re.findall(r"`(\w+)`", sentence.split(label, 1)[1].split(".")[0]))
        assert named == {r for r, rule in numeq.nki.RULES.items() if rule.severity == severity and "run" in rule.checked_by}, severity


if __name__ == "__main__":
    print(render_table())




def test_the_schedule_is_printed_and_traced_and_hazards_are_findings_when_asked(tmp_path, capsys):
    (tmp_path / "carried.py").write_text(CARRIED_KERNEL)
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(0).standard_normal((4, 128, 64)).astype(np.float32))
    spec, inputs = f"{tmp_path}/carried.py::decay", tmp_path / "x.npz"
    rc, out, err = _cli(capsys, spec, "--inputs", inputs, "--trace", tmp_path / "t.json", "--out", tmp_path / "o.npz")
    assert rc == 0 and "findings: 0 errors" in out and "  predicted time " in out, out + err
    trace = json.loads((tmp_path / "t.json").read_text())
    s = trace["schedule"]
    assert s["time_s"] > 0 and s["bound_by"] in s["active"] and s["by_line"][0][0].startswith("carried.py:")
    assert s["parameters"]["dma_fixed_s"]["evidence"] == "assumed"
    assert s["spills"] == 0 and s["spill_bytes"] == 0  # four small tiles: nothing overflows SBUF
    # The file imports neuronxcc.nki: the run says which language it was judged as.
    assert trace["language"] == "older" and "; the older interface (neuronxcc.nki.*)" in out.splitlines()[0]
    rc, out, err = _cli(capsys, spec, "--inputs", inputs, "--hazards")
    reads, writes = _line_of(CARRIED_KERNEL, "# reads acc"), _line_of(CARRIED_KERNEL, "# writes acc")
    assert rc == 1 and f"carried.py:{reads}: error: [loop_carried_dependency]" in out and \
        f"wrote at carried.py:{writes}" in out, out + err
    # Without values: the same schedule, no outputs to write.
    rc, out, err = _cli(capsys, spec, "--inputs", inputs, "--no-values", "--out", tmp_path / "n.npz",
                        "--trace", tmp_path / "n.json")
    assert rc == 0 and "no outputs to write" in out and not (tmp_path / "n.npz").exists(), out + err
    assert json.loads((tmp_path / "n.json").read_text())["schedule"]["time_s"] == s["time_s"]
