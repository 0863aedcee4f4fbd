"""numeq's pytest plugin, run inside pytest's own ``pytester`` (the tests here use the source tree
without installing numeq, so the plugin is loaded with ``-p numeq.pytest_plugin``; the entry point
an installation registers is checked in pyproject.toml)."""

from __future__ import annotations

import html.parser
import json
import re
from pathlib import Path

import numpy as np
import pytest

import numeq

pytest_plugins = ["pytester"]

PLUGIN = ("-p", "numeq.pytest_plugin")
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
SIGNATURE = numeq.ops.matmul(np.zeros((4, 96)), np.zeros((96, 4)), in_fmt="bf16").signature  # DATA's op

# The inner test files' shared data: a small bf16 matmul, its op, and outputs with a planted bug.
DATA = '''
import numpy as np
import pytest
import numeq

rng = np.random.default_rng(3)
A = numeq.round(rng.standard_normal((4, 96)), "bf16")
B = numeq.round(rng.standard_normal((96, 4)), "bf16")
OP = numeq.ops.matmul(A, B, in_fmt="bf16", out="fp32")


def device(platform):
    return numeq.matmul(A, B, platform=platform, in_fmt="bf16")


def dropped_tile(platform):
    return numeq.matmul(A[:, :-16], B[:-16], platform=platform, in_fmt="bf16")
'''


@pytest.fixture(autouse=True)
def _only_this_plugin(monkeypatch):
    # The inner runs load numeq's plugin by name, as an uninstalled checkout does, and no other
    # installed plugin (which would also cost seconds per run).
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", *args)


def test_the_entry_point_is_declared():
    tomllib = pytest.importorskip("tomllib")
    with PYPROJECT.open("rb") as f:
        project = tomllib.load(f)["project"]
    assert project["entry-points"]["pytest11"] == {"numeq": "numeq.pytest_plugin"}


def test_the_marker_runs_a_test_once_per_platform(pytester):
    pytester.makepyfile(DATA + '''
@pytest.mark.numeq(platforms=["nvidia.h100", "trainium.trn2"])
def test_matmul(numeq_platform, numeq_check):
    numeq_check(device(numeq_platform), OP)


@pytest.mark.numeq(platform="nvidia.a100")
def test_single(numeq_platform):
    assert numeq_platform == "nvidia.a100"


def test_without_platforms():
    pass
''')
    collected = _run(pytester, "--collect-only", "-q")
    ids = [line for line in collected.outlines if "::" in line]
    assert ids == ["test_the_marker_runs_a_test_once_per_platform.py::test_matmul[nvidia.h100]",
                   "test_the_marker_runs_a_test_once_per_platform.py::test_matmul[trainium.trn2]",
                   "test_the_marker_runs_a_test_once_per_platform.py::test_single[nvidia.a100]",
                   "test_the_marker_runs_a_test_once_per_platform.py::test_without_platforms"]
    result = _run(pytester)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["numeq: 2 checks, tiers: bit_exact 2, variant 0, probabilistic 0, "
                                 "deterministic 0, violation 0"])


@pytest.mark.parametrize("config_file", ["pytest.ini", "pyproject.toml"])
def test_the_ini_option_gives_the_default_platforms(pytester, config_file):
    if config_file == "pytest.ini":
        pytester.makeini("[pytest]\nnumeq_platforms = nvidia.h100 trainium.trn2 trainium.trn2[pe_order=pairwise]\n")
    else:
        pytester.makepyprojecttoml('[tool.pytest.ini_options]\n'
                                   'numeq_platforms = ["nvidia.h100", "trainium.trn2", "trainium.trn2[pe_order=pairwise]"]\n')
    pytester.makepyfile(DATA + '''
@pytest.mark.numeq
def test_marked(numeq_platform, numeq_check):
    numeq_check(device(numeq_platform), OP, accept="bit_exact")


def test_fixture_only(numeq_platform):
    assert numeq_platform in ("nvidia.h100", "trainium.trn2", "trainium.trn2[pe_order=pairwise]")


@pytest.mark.numeq(platform="nvidia.b200")
def test_marker_wins(numeq_platform):
    assert numeq_platform == "nvidia.b200"
''')
    result = _run(pytester, "-v")
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*test_marked?trainium.trn2?pe_order=pairwise?? PASSED*"])
    result.stdout.fnmatch_lines(["numeq: 3 checks, tiers: bit_exact 3, *"])


def test_a_failing_check_shows_the_numeq_message(pytester):
    pytester.makepyfile(DATA + '''
@pytest.mark.numeq(platform="nvidia.h100")
def test_bug(numeq_platform, numeq_check):
    numeq_check(dropped_tile(numeq_platform), OP, msg="tile loop bound")


def test_port_bug(numeq_check):
    numeq_check.port(device("nvidia.h100"), dropped_tile("trainium.trn2"), OP, "nvidia.h100", "trainium.trn2")
''')
    result = _run(pytester)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "tile loop bound" in out
    assert "FAIL (violation)" in out and "FAIL (port check)" in out
    assert SIGNATURE in out
    assert "worst elements" in out
    assert "_failure_text" not in out  # __tracebackhide__: the traceback ends in the test
    result.stdout.fnmatch_lines(["numeq: 2 checks, tiers: bit_exact 0, variant 0, probabilistic 0, "
                                 "deterministic 0, violation 2; 2 failed"])


class _Tables(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.cells: list[str] = []
        self._in_td = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_td = tag == "td"

    def handle_endtag(self, tag):
        if tag == "td":
            self._in_td = False

    def handle_data(self, data):
        if self._in_td and data.strip():
            self.cells.append(data.strip())


@pytest.mark.parametrize("suffix", ["", ".json", ".html"])
def test_the_report(pytester, suffix):
    pytester.makepyfile(DATA + '''
@pytest.mark.numeq(platforms=["nvidia.h100", "trainium.trn2"])
def test_good(numeq_platform, numeq_check):
    numeq_check(device(numeq_platform), OP)


def test_bad(numeq_check):
    numeq_check(dropped_tile("nvidia.h100"), OP, "nvidia.h100")


def test_port(numeq_check):
    numeq_check.port(device("nvidia.h100"), device("trainium.trn2"), OP, "nvidia.h100", "trainium.trn2")


def test_no_check():
    pass
''')
    path = pytester.path / "reports" / f"numeq{suffix}"
    result = _run(pytester, f"--numeq-report={path}")
    result.assert_outcomes(passed=4, failed=1)
    wanted = {"": [".json", ".html"], ".json": [".json"], ".html": [".html"]}[suffix]
    files = sorted(p.name for p in (pytester.path / "reports").iterdir())
    assert files == sorted("numeq" + w for w in wanted)
    result.stdout.fnmatch_lines(["numeq report: *"])
    if ".json" in wanted:
        report = json.loads(path.with_name("numeq.json").read_text(encoding="utf-8"))
        checks = report["checks"]
        assert [(c["nodeid"].split("::")[1], c["platform"], c["passed"]) for c in checks] == [
            ("test_good[nvidia.h100]", "nvidia.h100", True),
            ("test_good[trainium.trn2]", "trainium.trn2", True),
            ("test_bad", "nvidia.h100", False),
            ("test_port", "nvidia.h100 | trainium.trn2", True)]
        for c in checks:
            assert set(c) >= {"nodeid", "signature", "platform", "tier", "explained_by", "passed", "elements",
                              "failures", "message"}
            assert c["signature"] == SIGNATURE
            assert c["elements"] == 16
            assert c["message"].startswith("PASS" if c["passed"] else "FAIL")
        assert checks[0]["tier"] == "bit_exact" and checks[0]["explained_by"] == "nvidia.h100"
        assert checks[2]["tier"] == "violation" and checks[2]["failures"] > 0
        assert report["summary"]["checks"] == 4 and report["summary"]["failed"] == 1
        assert sum(report["summary"]["tiers"].values()) == 4
    if ".html" in wanted:
        text = path.with_name("numeq.html").read_text(encoding="utf-8")
        parser = _Tables()
        parser.feed(text)
        assert parser.tags.count("table") == 1 and parser.tags.count("tr") == 5  # header + 4 checks
        assert parser.tags.count("details") == 4
        assert "test_bad" in " ".join(parser.cells) and "violation" in parser.cells
        assert "<script" not in text and "http" not in text  # self-contained
        assert re.search(r'class="tier" style="background:#[0-9a-f]{6}">violation<', text)


def test_no_checks_no_summary_line(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = _run(pytester)
    result.assert_outcomes(passed=1)
    assert "numeq:" not in result.stdout.str()


def test_unknown_platforms_are_refused_with_the_valid_names(pytester):
    pytester.makepyfile(DATA + '''
@pytest.mark.numeq(platforms=["nvidia.h100", "nvidia.h999"])
def test_typo(numeq_platform):
    pass
''')
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert "@pytest.mark.numeq on test_unknown_platforms_are_refused_with_the_valid_names.py::test_typo: platforms:" \
           " unknown platform 'nvidia.h999'" in out
    assert ", ".join(numeq.platforms()) in out

    pytester.makeini("[pytest]\nnumeq_platforms = nvidia.h100 trainium.trn7\n")
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "ini option numeq_platforms: unknown platform 'trainium.trn7'" in err
    assert ", ".join(numeq.platforms()) in err


@pytest.mark.parametrize("marker, words", [
    ('numeq(platform="trainium.trn2[bogus=1]")', "has no assumption 'bogus'"),
    ('numeq("nvidia.h100")', "takes only the keywords platform='...' or platforms=[...]"),
    ('numeq(platform="nvidia.h100", platforms=["nvidia.a100"])', "not both"),
    ('numeq(platforms="nvidia.h100")', "expected a non-empty list"),
    ('numeq(platforms=["nvidia.h100", "nvidia.h100"])', "named twice"),
])
def test_bad_markers(pytester, marker, words):
    pytester.makepyfile(f'''
import pytest

@pytest.mark.{marker}
def test_it(numeq_platform):
    pass
''')
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    assert words in result.stdout.str()


def test_a_platform_is_needed(pytester):
    pytester.makepyfile(DATA + '''
def test_fixture(numeq_platform):
    pass


def test_check(numeq_check):
    numeq_check(device("nvidia.h100"), OP)
''')
    result = _run(pytester)
    result.assert_outcomes(failed=1, errors=1)
    out = result.stdout.str()
    assert "numeq_platform: test_a_platform_is_needed.py::test_fixture has no platform" in out
    assert "platform: numeq_check needs a platform" in out


def test_bad_report_path(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = _run(pytester, "--numeq-report=out.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--numeq-report: 'out.txt' ends in '.txt'; valid: .json, .html" in result.stderr.str()


def test_the_marker_and_options_are_registered(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    helped = _run(pytester, "--help")
    helped.stdout.fnmatch_lines(["numeq numerical equivalence checks:", "*--numeq-report=PATH*"])
    helped.stdout.fnmatch_lines(["*numeq_platforms (args):*"])
    result = _run(pytester, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.numeq(platform=None, platforms=None): *"])
    strict = _run(pytester, "--strict-markers")
    strict.assert_outcomes(passed=1)


def test_xdist_workers_checks_reach_the_controllers_report(pytester):
    # pytest-xdist is not needed to check the hand-over: a worker is a run whose config has a
    # workeroutput dict (xdist sends it to the controller), the controller a run whose
    # pytest_testnodedown receives it.
    pytester.makepyfile(DATA + '''
@pytest.mark.numeq(platforms=["nvidia.h100", "trainium.trn2"])
def test_good(numeq_platform, numeq_check):
    numeq_check(device(numeq_platform), OP)
''')
    worker = pytester.makeconftest('''
import json

def pytest_configure(config):
    config.workeroutput = {}

def pytest_unconfigure(config):
    with open("workeroutput.json", "w") as f:
        json.dump(config.workeroutput, f)
''')
    _run(pytester, "--numeq-report=worker.json").assert_outcomes(passed=2)
    assert not (pytester.path / "worker.json").exists()  # workers leave the report to the controller
    sent = json.loads((pytester.path / "workeroutput.json").read_text(encoding="utf-8"))
    assert [c["platform"] for c in sent["numeq_checks"]] == ["nvidia.h100", "trainium.trn2"]

    worker.unlink()
    pytester.makeconftest('''
import json
import types
import pytest
from numeq import pytest_plugin

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    with open("workeroutput.json") as f:
        node = types.SimpleNamespace(config=session.config, workeroutput=json.load(f))
    pytest_plugin.pytest_testnodedown(node, None)
''')
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = _run(pytester, "--numeq-report=controller.json")
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "controller.json").read_text(encoding="utf-8"))
    assert report["checks"] == sent["numeq_checks"]
    result.stdout.fnmatch_lines(["numeq: 2 checks, tiers: bit_exact 2, *"])


def test_every_numeq_platform_is_accepted(pytester):
    pytester.makepyfile(f'''
import pytest

@pytest.mark.numeq(platforms={numeq.platforms()!r})
def test_it(numeq_platform):
    pass
''')
    result = _run(pytester, "--collect-only", "-q")
    ids = [line.split("::", 1)[1] for line in result.outlines if "::" in line]
    assert ids == [f"test_it[{name}]" for name in numeq.platforms()]
