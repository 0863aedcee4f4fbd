"""The Python package's two rooms (bindings/README.md): the API modules import no tool module, at
any depth of their own imports, so that a test suite that imports numeq.ops or numeq.testing does
not pull in the tolerance tables, the reviews or the CLI. Read from the sources with ast."""

from __future__ import annotations

import ast
from pathlib import Path

import numeq

PACKAGE = Path(numeq.__file__).parent
TOOLS = {"tolerance_table", "report_html", "bugs", "review", "cli", "__main__"}
API = ["_arrays", "_casts", "_cast_keywords", "_quantize", "machines", "reference", "_reference_functions", "ops",
       "_op", "_ops_quantized", "_registry", "catalogue", "verdicts", "testing", "pytest_plugin", "tolerances",
       "fitting", "reveal", "_dlpack"]


def _imports(module: str) -> set[str]:
    """The package modules `module` imports (relative imports, first component)."""
    path = PACKAGE / f"{module}.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def test_no_api_module_imports_a_tool():
    seen: dict[str, set[str]] = {}
    todo = list(API)
    while todo:
        m = todo.pop()
        if m in seen or not (PACKAGE / f"{m}.py").exists():
            continue
        seen[m] = _imports(m)
        todo.extend(seen[m])
    bad = {m: sorted(deps & TOOLS) for m, deps in seen.items() if deps & TOOLS}
    assert not bad, f"API modules importing tools: {bad}"
    assert {"ops", "_registry", "verdicts", "tolerances"} <= set(seen)
