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


# numeq.nki's rooms (bindings/README.md, DESIGN "Running NKI kernels"): the machine room imports
# nothing above it, the instruction room nothing of the front or the faces, and no emulator module
# anything of numeq.review. Floors from the ground up; a module may import its own floor and below.
NKI = PACKAGE / "nki"
NKI_FLOORS = [
    ("machine", {"machine"}),
    ("instructions", {"machine", "instructions"}),
    ("front", {"machine", "instructions", "front", "isa", "language"}),
]


def _nki_imports(path: Path) -> set[str]:
    """What an nki module imports: the nki room or face ("machine", "instructions", "front", "isa",
    "language", "_run", ...), or "numeq.X" for a module of numeq outside numeq.nki."""
    here = path.parent.relative_to(PACKAGE).parts  # ("nki",) or ("nki", "machine")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = list(here[:len(here) - (node.level - 1)])
        target = base + (node.module.split(".") if node.module else [])
        names = [target + [a.name] for a in node.names] if not node.module else [target]
        for t in names:
            if t[:1] != ["nki"]:
                found.add("numeq." + (t[0] if t else ""))
            elif len(t) > 1:
                found.add(t[1])
    return found


def test_the_emulator_rooms_import_only_downward():
    bad = []
    for room, allowed in NKI_FLOORS:
        for path in sorted((NKI / room).glob("*.py")):
            inside = {d for d in _nki_imports(path) if not d.startswith("numeq.")}
            if inside - allowed:
                bad.append(f"{path.relative_to(PACKAGE)} imports {sorted(inside - allowed)}")
    for path in sorted(NKI.rglob("*.py")):
        if "numeq.review" in _nki_imports(path):
            bad.append(f"{path.relative_to(PACKAGE)} imports numeq.review")
    assert not bad, "\n".join(bad)
    assert (NKI / "machine" / "targets.py").exists() and (NKI / "instructions" / "table.py").exists()
