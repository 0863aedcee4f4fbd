"""numeq.examples: the shipped example ports and kernels, found from any folder (the README's
review examples use them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import numeq


def test_every_example_is_found_and_reviewable_from_any_folder(tmp_path) -> None:
    names = numeq.examples.names()
    assert {"reviews/correct-port", "reviews/unsupported-claim", "reviews/kernel-ports", "nki"} <= set(names)
    for name in names:
        assert numeq.examples.path(name).is_dir()
    manifest = numeq.examples.path("reviews/unsupported-claim") / "manifest.toml"
    # The command a README reader runs, from a folder that is not the checkout: exit 1 (the claim fails).
    code = "import numeq, sys; from numeq.cli import main; sys.exit(main(['review', sys.argv[1], '--out', 'r', '--quiet']))"
    p = subprocess.run([sys.executable, "-c", code, str(manifest)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 1 and (tmp_path / "r" / "review.md").is_file(), p.stderr


@pytest.mark.parametrize("bad", ["", "reviews/nope", "../README.md", "/etc", 3])
def test_unknown_names_list_the_valid_ones(bad) -> None:
    with pytest.raises(ValueError, match=r"name: .*reviews/correct-port"):
        numeq.examples.path(bad)
