"""Every Python block of README.md and of the pages under docs/ runs as written: each block is
executed on its own, in a fresh namespace and an empty working directory, exactly as a reader would
paste it. Lines that need a device are shown as comments (``# on the device: ...``) and so are not
run here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def _python_blocks() -> list[tuple[str, int, str]]:
    blocks = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((str(page.relative_to(ROOT)), line, match.group(1)))
    return blocks


BLOCKS = _python_blocks()


def test_readme_has_python_blocks():
    assert sum(1 for page, _, _ in BLOCKS if page == "README.md") >= 3, "README.md lost its Python examples"
    assert len(BLOCKS) >= 12, "the docs lost their Python examples"


def test_readme_links_every_page():
    text = README.read_text(encoding="utf-8")
    for page in PAGES[1:]:
        if page.name != "README.md":
            assert f"docs/{page.name}" in text, f"README.md does not link docs/{page.name}"


@pytest.mark.parametrize("page,line,source", BLOCKS, ids=[f"{page}:{line}" for page, line, _ in BLOCKS])
def test_readme_block_runs(page, line, source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # The README's commands run from the checkout's root: its examples/ are there, files the
    # blocks write go to the scratch folder.
    (tmp_path / "examples").symlink_to(Path(__file__).resolve().parents[2] / "examples")
    code = compile(source, f"{page}:{line}", "exec")
    exec(code, {"__name__": "__readme__"})  # noqa: S102 - the README's own examples
