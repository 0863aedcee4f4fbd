"""How a call's arguments bind to an instruction's documented signature.

nki-library's attention backward writes ``nisa.tensor_tensor(acc[:, cols], data1=acc[:, cols],
data2=dk_psum, op=nl.add)``: the destination positional, the operands by keyword. Before the
instruction table, numeq bound a positional destination only when three tensors came
positionally and dropped the leftover argument without a word: the sum went to a fresh tile, the
kernel's dK and dV accumulators stayed zero, and its dK / dV came out ~100% off with no finding
(dQ, accumulated by ``scalar_tensor_tensor(dst=...)``, was right). These tests hold the documented binding
(positional parameters first, then keywords) for every row of the table, and the kernel-level
case against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from numeq import nki
from numeq.nki.instructions import table
from numeq.nki.instructions.forms import REQUIRED, bind
from numeq.nki.machine.memory import Tensor

nl, nisa = nki.language, nki.isa
RNG = np.random.default_rng(41)


def test_a_positional_destination_with_keyword_operands_accumulates_into_the_destination():
    @nki.jit
    def k(x, y):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
        nisa.memset(acc, value=0.0)
        a = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        nisa.dma_copy(dst=b, src=y)
        for _ in range(2):  # acc[:, 512:] += a, then += b * 1, as attention_bwd's dK / dV sums
            nisa.tensor_tensor(acc[:, 512:1024], data1=acc[:, 512:1024], data2=a, op=nl.add)
            nisa.scalar_tensor_tensor(acc[:, 512:1024], data=b, op0=nl.multiply, operand0=1.0, op1=nl.add,
                                      operand1=acc[:, 512:1024])
        nisa.dma_copy(dst=out, src=acc[:, 512:1024])
        return out

    x, y = (RNG.standard_normal((128, 512)).astype(np.float32) for _ in range(2))
    r = nki.run(k, x, y)
    want = np.zeros_like(x)
    for _ in range(2):
        want = (want + x).astype(np.float32)
        want = (y * np.float32(1.0) + want).astype(np.float32)
    assert not r.errors and np.array_equal(r.outputs, want)


def _value(kind: str) -> object:
    """An argument of a signature kind (forms.KINDS)."""
    kind = kind.rstrip("?")
    return {"tensor": _tensor(), "op": nl.add, "value": 1.0, "int": 0, "list": [], "any": None}[kind]


def _tensor() -> Tensor:
    return nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf)


def _current_forms_with_a_destination():
    for spec in table.INSTRUCTIONS.values():
        if spec.implemented and spec.forms and spec.forms[0].params and spec.forms[0].params[0][0] == "dst":
            yield pytest.param(spec, id=spec.qualified)


@pytest.mark.parametrize("spec", list(_current_forms_with_a_destination()))
def test_every_row_binds_a_positional_destination_and_refuses_an_extra_argument(spec):
    def check():
        form = spec.forms[0]
        required = {n: _value(kind) for n, kind, default in form.params if default is REQUIRED}
        dst = required.pop("dst")
        got_form, vals, _ = bind(spec.name, (dst,), dict(required), list(spec.forms))
        assert got_form is form and vals["dst"] is dst
        # every positional parameter given, then one more: an error, never an argument dropped
        positional = [required.get(n, _value(kind)) for n, kind, _ in form.params[1:form.positional]]
        with pytest.raises(TypeError, match="matches no form"):
            bind(spec.name, (dst, *positional, _tensor()), {}, list(spec.forms))

    @nki.jit
    def k(a):
        check()
        return a

    nki.run(k, np.zeros((1, 1), np.float32))
