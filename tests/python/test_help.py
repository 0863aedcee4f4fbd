"""help() of every public function and class shows its parameters and a runnable example, and the
examples run: every ``>>>`` example through the standard library's doctest, and every plain
``Example::`` code block (no ``>>>``) through doctest too, as one function body whose failures
doctest reports. The public API is enumerated, not listed, so a new function without an example
fails here."""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import re
import textwrap

import numpy as np

import numeq

# The modules a user imports; names come from their __all__ or, without one, from what they define.
PUBLIC_MODULES = ("numeq", "numeq.ops", "numeq.catalogue", "numeq.tolerances", "numeq.bugs", "numeq.reference", "numeq.verdicts", "numeq.testing",
                  "numeq.machines", "numeq.fitting", "numeq.reveal")

# Parameters whose choices are one of numeq's constants: the docstring names the constant or every choice.
CHOICES = {
    "rounding": ("ROUNDINGS", numeq.ROUNDINGS),
    "overflow": ("OVERFLOWS", numeq.OVERFLOWS),
    "subnormals": ("SUBNORMALS", numeq.SUBNORMALS),
    "accept": ("TIERS", numeq.testing.ACCEPT),
}

FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def _public() -> dict[str, object]:
    """{qualified name: object} for every public function, class and public method of a class."""
    found: dict[str, object] = {}
    seen: set[int] = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None)
        if names is None:
            names = [n for n, v in vars(module).items()
                     if not n.startswith("_") and getattr(v, "__module__", None) == module_name]
        for name in names:
            value = getattr(module, name)
            if inspect.ismodule(value) or not callable(value) or id(value) in seen:
                continue
            if getattr(value, "__deprecated_name_of__", None):  # an old name kept one release (its own test)
                continue
            seen.add(id(value))
            found[f"{module_name}.{name}"] = value
            if inspect.isclass(value):
                for attr, member in vars(value).items():
                    if attr.startswith("_"):
                        continue
                    if isinstance(member, (classmethod, staticmethod)):
                        member = member.__func__
                    if inspect.isfunction(member):
                        found[f"{module_name}.{name}.{attr}"] = member
    return found


PUBLIC = _public()


def _parameters(obj: object) -> list[inspect.Parameter]:
    if inspect.isclass(obj) and obj.__init__ is object.__init__:
        return []
    params = list(inspect.signature(obj).parameters.values())
    return [p for p in params if p.name not in ("self", "cls")
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]


def test_the_public_api_is_enumerated():
    # a sanity check of the enumeration itself: each kind of object is found
    for name in ("numeq.round", "numeq.verdicts.compare", "numeq.verdicts.Verdict", "numeq.ops.matmul",
                 "numeq.ops.Op.emulate", "numeq.reference.exp", "numeq.testing.assert_equivalent",
                 "numeq.machines.Plan.to_json", "numeq.fitting.fit_platform", "numeq.reveal.reveal_order"):
        assert name in PUBLIC or any(k.endswith(name.rsplit(".", 1)[1]) for k in PUBLIC), name
    assert len(PUBLIC) > 80


def test_every_docstring_names_its_parameters_their_choices_and_has_an_example():
    problems = []
    for name, obj in PUBLIC.items():
        doc = inspect.getdoc(obj) or ""
        if not doc:
            problems.append(f"{name}: no docstring")
            continue
        if "Example::" not in doc and ">>>" not in doc:
            problems.append(f"{name}: no example (an 'Example::' block or '>>>' lines)")
        for p in _parameters(obj):
            if not re.search(rf"\b{re.escape(p.name)}\b", doc):
                problems.append(f"{name}: parameter {p.name!r} is not named in the docstring")
            if p.name in CHOICES:
                constant, choices = CHOICES[p.name]
                if p.default in choices and constant not in doc and not all(c in doc for c in choices):
                    problems.append(f"{name}: {p.name!r} choices: name numeq.{constant} or list {choices}")
    assert not problems, "\n".join(problems)


def _plain_block_test(name: str, obj: object, doc: str) -> doctest.DocTest | None:
    """The docstring's ``Example::`` code block, when it has no ``>>>`` lines, as a DocTest: the
    block is the body of one function (so expression statements print nothing), defined and called."""
    if "Example::" not in doc:
        return None
    block = doc.split("Example::", 1)[1]
    if ">>>" in block:
        return None
    lines = block.splitlines()
    body = textwrap.dedent("\n".join(lines)).strip("\n")
    ast.parse(body)  # a syntax error fails here, naming nothing else
    source = "def _example():\n" + textwrap.indent(body, "    ") + "\n"
    examples = [doctest.Example(source, "", lineno=0), doctest.Example("_example()\n", "", lineno=0)]
    globs = {"np": np, "numeq": numeq}
    return doctest.DocTest(examples, globs, f"{name} (Example:: block)", inspect.getsourcefile(obj) or name, 0, doc)


def _doctests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(recurse=False)
    tests: dict[str, doctest.DocTest] = {}
    for name, obj in PUBLIC.items():
        for test in finder.find(obj, name, module=False, globs={"np": np, "numeq": numeq}):
            if test.examples:
                tests[test.name] = test
        plain = _plain_block_test(name, obj, inspect.getdoc(obj) or "")
        if plain is not None:
            tests[plain.name] = plain
    return list(tests.values())


def test_docstring_examples_run():
    tests = _doctests()
    assert len(tests) >= len(PUBLIC)  # every public object has an example, and each runs below
    failed = []
    for test in tests:
        runner = doctest.DocTestRunner(optionflags=FLAGS)
        out: list[str] = []
        result = runner.run(test, out=out.append, clear_globs=True)
        if result.failed:
            failed.append(f"{test.name}: {result.failed} of {result.attempted} failed\n" + "".join(out))
    assert not failed, f"{len(failed)} docstring examples failed:\n" + "\n".join(failed)
