"""A kernel file mentions NKI names long before it calls them: every documented name can be
imported, named, subclassed, annotated and tested with hasattr; only a call of something numeq
does not compute raises Unsupported. Written the way AWS's own kernel files mention them
(nki-library's configuration classes, dtype tables, collectives imports, direct allocation)."""

from __future__ import annotations

import dataclasses
import textwrap

import numpy as np
import pytest

from numeq import nki
from numeq.nki.machine.targets import target_from_environment

nl, nisa = nki.language, nki.isa


def _module_file(tmp_path, source: str):
    path = tmp_path / "kernel_module.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    namespace: dict = {}
    with nki.installed():
        exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


def test_a_kernel_module_that_mentions_unimplemented_names_imports(tmp_path):
    ns = _module_file(tmp_path, """
        from dataclasses import dataclass
        import nki
        import nki.isa as nisa
        import nki.language as nl
        from nki.isa.constants import oob_mode, dge_mode
        from nki.collectives import ReplicaGroup
        from nki.language import NKIObject
        import neuronxcc.nki.compiler as ncc

        # a module-level table naming Trainium3 dtypes and documented activation functions
        MX_DTYPES = {"fp8": nl.float8_e4m3fn_x4, "fp4": nl.float4_e2m1fn_x4, "scale": nl.float8_e8m0fnu}
        ACTIVATIONS = {"gelu": nl.gelu_apprx_sigmoid, "erf": nl.erf, "mish": nl.mish}

        @dataclass
        class TileConfig(nl.NKIObject):
            rows: int = 128
            dtype: nki.dtype = nl.bfloat16

        def helper(t: nl.tensor, d: nki.dtype) -> nl.NkiTensor:
            return t

        HAS_MX = hasattr(nisa, "nc_matmul_mx") and hasattr(nl, "float8_e4m3fn_x4")
        BUFFER = ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,))
    """)
    assert ns["HAS_MX"] and ns["TileConfig"]().rows == 128 and ns["TileConfig"](rows=64).rows == 64
    assert str(ns["MX_DTYPES"]["fp8"]) == "float8_e4m3fn_x4" and ns["BUFFER"].name == "sbuf"
    assert not hasattr(nl, "no_such_name") and not hasattr(nisa, "no_such_instruction")


def test_nkiobject_takes_keywords_as_attributes_and_placeholder_classes_subclass():
    o = nl.NKIObject(a=1, b="x")
    assert (o.a, o.b) == (1, "x")

    class Instruction(nki.isa.NkiInstruction):  # a subclass with its own __init__ is the author's
        def __init__(self, ranks):
            self.ranks = ranks

    assert Instruction([0, 1]).ranks == [0, 1]
    with pytest.raises(nki.Unsupported, match="nki.isa.NkiInstruction"):
        nki.isa.NkiInstruction()


def test_a_call_of_an_unimplemented_name_raises_at_the_kernels_line():
    @nki.jit
    def k(a):
        t = nl.ndarray((1, 4), nl.int32, buffer=nl.sbuf)
        nisa.topk(t, a)
        return t

    with pytest.raises(nki.Unsupported, match=r"test_nki_public_names.py:\d+: .*topk"):
        nki.simulate(k)(np.zeros((1, 4), np.float32))


def test_nc_version_is_an_enum_that_compares_with_ints():
    @nki.jit
    def k(a):
        v = nisa.get_nc_version()
        assert v == nisa.nc_version.gen3 and v >= 3 and v >= nisa.nc_version.gen2 and v.name == "gen3"
        return a

    nki.simulate(k)(np.zeros((1, 1), np.float32))
    assert [m.name for m in nisa.nc_version] == ["gen2", "gen3", "gen4"]


def test_the_target_comes_from_aws_environment_variables():
    assert target_from_environment({}) is None
    assert target_from_environment({"NKI_NC_VERSION": "gen2"}) == "trn1"
    assert target_from_environment({"NEURON_PLATFORM_TARGET_OVERRIDE": "trn2", "NKI_NC_VERSION": "gen2"}) == "trn2"
    assert target_from_environment({"NEURON_PLATFORM_TARGET_OVERRIDE": "inf2"}) == "inf2"
    with pytest.raises(ValueError, match="NKI_NC_VERSION='gen9': unknown NeuronCore target; valid: trn1"):
        target_from_environment({"NKI_NC_VERSION": "gen9"})
    # The nki.jit API reference's spellings: "trn3|gen4" (NeuronCore-v4).
    assert target_from_environment({"NEURON_PLATFORM_TARGET_OVERRIDE": "trn3"}) == "trn3"
    assert target_from_environment({"NKI_NC_VERSION": "gen4"}) == "trn3"


def test_compiler_directives_leave_the_kernel_and_its_values_unchanged():
    def f(a):
        return a

    for directive in (nki.compiler.skip_middle_end_transformations, nki.compiler.enable_stack_allocator,
                      nki.compiler.force_auto_alloc):
        assert directive(f) is f and directive()(f) is f
    with pytest.raises(TypeError, match="base_addr is required"):
        nki.compiler.sbuf.mod_alloc(num_free_tiles=(2,))
    with pytest.raises(TypeError, match="base_bank is required"):
        nki.compiler.psum.mod_alloc(base_addr=0)


# --- random numbers ------------------------------------------------------------------------------
def _rand_kernel(seed):
    @nki.jit
    def k():
        out = nl.ndarray((128, 256), nl.float32, buffer=nl.shared_hbm)
        if seed is not None:
            s = nl.full((1, 1), seed, dtype=nl.int32, buffer=nl.sbuf)
            nl.random_seed(s)
        t = nl.rand((128, 256), dtype=nl.float32)
        nisa.dma_copy(dst=out, src=t)
        return out
    return k


def test_rand_is_uniform_in_0_1_and_reproducible_from_its_seed():
    a = nki.run(_rand_kernel(42)).outputs
    b = nki.run(_rand_kernel(42)).outputs
    c = nki.run(_rand_kernel(7)).outputs
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.min() >= 0.0 and a.max() < 1.0
    # top 24 bits times 2^-24: every value is a multiple of 2^-24 (exact in fp32)
    assert np.all(np.ldexp(a.astype(np.float64), 24) == np.round(np.ldexp(a.astype(np.float64), 24)))
    # uniform: mean 1/2, variance 1/12 within 5 standard errors over 32768 draws
    n = a.size
    assert abs(a.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(a.var() - 1 / 12) < 5 * np.sqrt(1 / 180 / n)
    # both generators of the named assumption run, and differ
    pcg = nki.run(_rand_kernel(42), assume={"random_generator": "pcg64"}).outputs
    assert not np.array_equal(a, pcg) and 0 <= pcg.min() and pcg.max() < 1


def _xorwow(x, y, z, w, v, d, count):
    """Marsaglia's XORWOW (J. Stat. Softw. 8(14), 2003), in Python ints."""
    out, m = [], 0xFFFFFFFF
    for _ in range(count):
        t = (x ^ (x >> 2)) & m
        x, y, z, w = y, z, w, v
        v = (v ^ ((v << 4) & m)) ^ (t ^ ((t << 1) & m))
        d = (d + 362437) & m
        out.append((v + d) & m)
    return out


def test_rng_bits_are_each_lanes_xorwow_sequence_truncated_to_the_low_bits():
    from numeq.nki.machine.randomness import _xorwow_state

    @nki.jit
    def k():
        wide = nl.ndarray((4, 6), nl.uint32, buffer=nl.sbuf)
        s = nl.full((1, 1), 5, dtype=nl.int32, buffer=nl.sbuf)
        nisa.set_rng_seed(s)
        nisa.rng(wide)
        narrow = nl.ndarray((4, 6), nl.uint8, buffer=nl.sbuf)
        nisa.set_rng_seed(s)
        nisa.rng(narrow)
        o1 = nl.ndarray((4, 6), nl.uint32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((4, 6), nl.uint8, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o1, src=wide)
        nisa.dma_copy(dst=o2, src=narrow)
        return o1, o2

    wide, narrow = nki.run(k).outputs
    state = _xorwow_state(5, 128)
    for p in range(4):
        assert wide[p].tolist() == _xorwow(*(int(w) for w in state[p]), 6)
    assert np.array_equal(narrow, (wide & 0xFF).astype(np.uint8))


def test_dropout_drops_at_the_documented_rate_without_rescaling():
    x = np.linspace(1, 2, 128 * 512, dtype=np.float32).reshape(128, 512)
    prob = np.linspace(0, 1, 128, dtype=np.float32).reshape(128, 1)

    @nki.jit
    def k(x, prob):
        t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        p = nl.ndarray(prob.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=p, src=prob)
        d = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.dropout(d, t, p)
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=d)
        return out

    d = nki.run(k, x, prob).outputs
    kept = d != 0
    assert np.array_equal(d[kept], x[kept])  # no rescaling
    rate = 1 - kept.mean(axis=1)
    assert rate[0] == 0 and rate[-1] == 1
    assert np.all(np.abs(rate - prob[:, 0]) < 5 * np.sqrt(prob[:, 0] * (1 - prob[:, 0]) / 512) + 1e-9)


def test_the_dtype_helpers_aws_suites_import_cast_as_cpp_static_cast():
    import ml_dtypes

    with nki.installed():
        import neuron_dtypes as dt
        from neuronxcc.starfish.support.dtype import static_cast
        from nki.isa import constants
        import nki as aws_nki

    assert static_cast is dt.static_cast and constants.oob_mode is nisa.oob_mode
    assert aws_nki.dtype.bfloat16 == nl.bfloat16 and aws_nki.language.dtypes.float8_e4m3fn_x4.packed
    x = np.random.default_rng(3).standard_normal(4096).astype(np.float32) * np.float32(300)
    for dtype in (ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3):
        got = dt.static_cast(x, dtype)
        want = x.astype(dtype)  # ml_dtypes: round to nearest even, IEEE overflow
        assert got.dtype == np.dtype(dtype)
        assert np.array_equal(got.view(np.uint8 if got.itemsize == 1 else np.uint16),
                              want.view(np.uint8 if want.itemsize == 1 else np.uint16)), dtype
    assert dt.static_cast(np.array([2.9, -2.9, 0.5]), np.int32).tolist() == [2, -2, 0]
    assert dt.static_cast(np.array([300, -1]), np.uint8).tolist() == [44, 255]
    with pytest.raises(ValueError, match="outside int8"):
        dt.static_cast(np.array([1.0, 200.0]), np.int8)
    # Into a packed dtype: each value cast as into float8_e4m3fn, four along the last axis per word
    # (value j in byte j, as AWS's MX tutorial packs them with ml_dtypes' view as uint32).
    packed = dt.static_cast(x.reshape(-1, 8), dt.float8_e4m3fn_x4)
    assert packed.dtype == np.uint32 and packed.shape == (512, 2)
    assert np.array_equal(packed, x.reshape(-1, 8).astype(ml_dtypes.float8_e4m3fn).view(np.uint32))
    with pytest.raises(ValueError, match="four values"):
        dt.static_cast(x[:6], dt.float8_e4m3fn_x4)
    assert dt.sizeinbytes(np.float32) == 4 and dt.sizeinbytes(ml_dtypes.bfloat16) == 2
    assert dt.is_float_type(ml_dtypes.bfloat16) and not dt.is_float_type(np.int8)
    assert float(dt.finfo(ml_dtypes.float8_e4m3fn).max) == 448.0


def test_a_run_takes_its_target_from_aws_environment_unless_one_is_named(monkeypatch):
    @nki.jit
    def version(a):
        out = nl.ndarray((1, 1), nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.memset(t, int(nisa.get_nc_version()))
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.zeros((1, 1), np.float32)
    monkeypatch.setenv("NKI_NC_VERSION", "gen2")
    with nki.installed():  # as a bare `pytest --numeq-nki`: AWS's variable decides
        assert int(version(x)[0, 0]) == 2
        assert int(nki.cpu_simulate(version)[1](a=x)[0, 0]) == 2
    with nki.installed(target="trn2"):  # a named target wins
        assert int(version(x)[0, 0]) == 3
    monkeypatch.delenv("NKI_NC_VERSION")
    with nki.installed():
        assert int(version(x)[0, 0]) == 3  # trn2 by default
    assert nki.run(version, x, target="trn1").target == "trn1"


def test_device_decorators_decorate_and_refuse_only_when_the_kernel_is_called():
    def kernel(a):
        return a

    timed = nki.benchmark(warmup=5, iters=10)(kernel)  # test modules do this at import
    bare = nki.baremetal(kernel)
    for f in (timed, bare, nki.profile()(kernel)):
        with pytest.raises(nki.Unsupported, match=r"test_nki_public_names.py:\d+: nki.\w+\(kernel\) runs the kernel "
                                                  r"on a NeuronDevice"):
            f(np.zeros(1))


def test_a_device_decorated_kernel_still_simulates():
    @nki.jit
    def double(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[nl.program_id(0)])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out, src=t)
        return out

    bare = nki.baremetal(double)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert np.array_equal(nki.simulate_kernel(bare[1], x[None, 1]), 2 * x[1:2])
    assert np.array_equal(nki.simulate(bare)(x[None, 0]), 2 * x[0:1])


def test_shared_constant_from_an_array_or_a_npy_file(tmp_path):
    table = np.arange(128 * 8, dtype=np.float32).reshape(128, 8) / 7
    np.save(tmp_path / "table.npy", table)

    @nki.jit
    def k(path):
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=nl.shared_constant(path if path is not None else table))
        nisa.dma_copy(dst=out, src=t)
        return out

    assert np.array_equal(nki.run(k, str(tmp_path / "table.npy")).outputs, table)
    assert np.array_equal(nki.run(k, None).outputs, table)
    with pytest.raises(ValueError, match="constant: cannot read the .npy file"):
        nki.simulate(k)(str(tmp_path / "missing.npy"))


def test_shared_constant_takes_the_older_interfaces_dtype():
    @nki.jit
    def k():
        out = nl.ndarray((4, 4), nl.bfloat16, buffer=nl.shared_hbm)
        c = nl.shared_constant(np.identity(4, dtype=np.int8), dtype=nl.bfloat16)
        t = nl.ndarray((4, 4), nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=c)
        nisa.dma_copy(dst=out, src=t)
        return out

    r = nki.run(k)
    assert r.outputs.dtype == nl.bfloat16.dtype and np.array_equal(r.outputs.astype(np.float32), np.identity(4))


def test_nkiobject_subclasses_are_data_classes_with_or_without_the_decorator():
    # NKI language guide, "Class Support": every field defaults to None, the initializer takes each
    # field and calls __post_init__; plain class attributes are fields (nki-library builds
    # ``@dataclass class SectionParams(nl.NKIObject): section_idx = None`` with keywords).
    from dataclasses import dataclass

    @dataclass
    class SectionParams(nl.NKIObject):
        section_idx = None
        section_offset = 0

    s = SectionParams(section_idx=3)
    assert (s.section_idx, s.section_offset) == (3, 0)

    @dataclass
    class C(nl.NKIObject):  # the guide's example
        x: int
        y: bool = False

        def toggle(self):
            self.y = not self.y

    c = C(1)
    c.toggle()
    assert (c.x, c.y) == (1, True) and C().x is None

    class D(nl.NKIObject):  # no decorator: the same initializer
        a = 1
        b: int = 2
        seen = []

        def __post_init__(self):
            self.total = self.a + self.b

    d = D(b=5)
    assert (d.a, d.b, d.total) == (1, 5, 6) and D().seen is not D().seen and {d: 1}[d] == 1

    class A(nl.NKIObject):  # its own __init__ is kept
        x: int = 1

        def __init__(self, x):
            self.x = 2 * x

    assert A(7).x == 14
    with pytest.raises(TypeError):
        SectionParams(no_such_field=1)

    @dataclass(frozen=True)
    class Args(nl.NKIObject):  # nki-library's RmsNormQuantKernelArgs: frozen, checked after init
        lower_bound: float = 0.0
        eps: float = 1e-6

        def __post_init__(self):
            assert self.eps > 0

    a = Args(lower_bound=2.0)
    assert (a.lower_bound, a.eps) == (2.0, 1e-6)
    with pytest.raises(Exception, match="cannot assign"):
        a.eps = 1.0
