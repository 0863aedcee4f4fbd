"""Every Python block of README.md runs as written: each block is executed on its own, in a fresh
namespace and an empty working directory, exactly as a reader would paste it. Lines that need a
device are shown in the README as comments (``# on the device: ...``) and so are not run here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks() -> list[tuple[int, str]]:
    text = README.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        blocks.append((line, match.group(1)))
    return blocks


BLOCKS = _python_blocks()


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 5, "README.md lost its Python examples"


@pytest.mark.parametrize("line,source", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_readme_block_runs(line, source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # The README's commands run from the checkout's root: its examples/ are there, files the
    # blocks write go to the scratch folder.
    (tmp_path / "examples").symlink_to(Path(__file__).resolve().parents[2] / "examples")
    code = compile(source, f"README.md:{line}", "exec")
    exec(code, {"__name__": "__readme__"})  # noqa: S102 - the README's own examples
