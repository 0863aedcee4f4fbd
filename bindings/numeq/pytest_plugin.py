"""numeq's pytest plugin (registered through the ``pytest11`` entry point; from a source tree
without installing, load it with ``-p numeq.pytest_plugin``).

- fixture ``numeq_platform``: the platform of the current test, from the marker or the ini option;
- fixture ``numeq_check``: ``numeq.testing.assert_equivalent`` (``platform`` defaults to the
  test's ``numeq_platform``) that records every check of the session; ``numeq_check.port(...)``
  is ``assert_ported``, recorded likewise;
- marker ``@pytest.mark.numeq(platform="nvidia.h100")`` or ``(platforms=[...])``: runs a test that
  requests ``numeq_platform`` once per platform (without arguments: the ini option's platforms);
- ini option ``numeq_platforms``: the default platforms of the marker (names of numeq.platforms());
- ``--numeq-report=PATH``: at the end of the session, every recorded check written to PATH.json
  (machine-readable) and/or PATH.html (one self-contained page); a PATH without a suffix writes
  both;
- a terminal summary line: ``numeq: N checks, tiers: bit_exact a, variant b, ...``;
- ``--numeq-nki[=TARGET]`` (TARGET trn2, trn1 or inf2; without one, each run takes the target AWS's
  environment variables name, NEURON_PLATFORM_TARGET_OVERRIDE or NKI_NC_VERSION, else trn2): the whole run
  inside ``numeq.nki.installed(target=TARGET)``, from the loading of the first conftest.py on, so
  an NKI test suite (``import nki``, ``from neuronxcc import nki``, ``@nki.jit`` kernels called with
  numpy arrays, ``nki.simulate(kernel)(...)``, ``nki.simulate_kernel(kernel, ...)``) runs on numeq;
- ``--numeq-nki-hazards`` (with ``--numeq-nki``): each kernel run's hazards join its findings
  (``Run.hazards()``), so a confirmed loop-carried dependence fails the kernel call.

Under pytest-xdist each worker's checks travel to the controller, which writes the report.

numeq itself is imported when first needed, so the plugin costs a pytest run that never uses it
nothing beyond this module.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
from dataclasses import asdict, dataclass
from typing import Any

import pytest

MARKER = "numeq"
INI = "numeq_platforms"
_MARKER_KEYWORDS = ("platform", "platforms")
_TIERS = ("bit_exact", "variant", "probabilistic", "deterministic", "violation")  # numeq.verdicts.TIERS' order
_RECORDS = pytest.StashKey[list]()
_INI_PLATFORMS = pytest.StashKey[list]()
_WORKER_KEY = "numeq_checks"  # pytest-xdist: a worker's records, sent to the controller

_NKI = pytest.StashKey[dict]()  # {"target", "stack" (the installed() context), "runs"}


@dataclass(frozen=True)
class CheckRecord:
    """One check of the session, as the report lists it. ``kind``: "compare" (assert_equivalent)
    or "port" (assert_ported: ``platform`` is "gpu | trainium", ``tier`` the weaker of the two
    outputs' tiers, "violation" when the difference lies beyond the cross-platform bound)."""

    nodeid: str
    kind: str
    signature: str
    platform: str
    accept: str
    tier: str
    explained_by: str | None
    passed: bool
    elements: int
    failures: int
    message: str


# ---------------------------------------------------------------------------------------------
# Options, marker, platforms
# ---------------------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("numeq", "numeq numerical equivalence checks")
    group.addoption("--numeq-report", dest="numeq_report", metavar="PATH", default=None,
                    help="write every numeq check of the session to PATH.json and/or PATH.html (by PATH's suffix; "
                         "both when PATH has none)")
    group.addoption("--numeq-nki-hazards", dest="numeq_nki_hazards", action="store_true", default=False,
                    help="with --numeq-nki: each kernel run's hazards (Run.hazards(): a value carried between "
                         "affine_range iterations, confirmed by a backwards rerun) join its findings; an error "
                         "one fails the kernel call")
    group.addoption("--numeq-nki", dest="numeq_nki", metavar="TARGET", nargs="?", const=_DEFAULT, default=None,
                    help="run the session's NKI kernels on numeq.nki: `import nki` / `neuronxcc.nki` resolve to "
                         "numeq from collection on (numeq.nki.installed); TARGET: trn2 (the default), trn1 or inf2; "
                         "write --numeq-nki=TARGET (a bare value after --numeq-nki is read as the target)")
    parser.addini(INI, type="args", default=[],
                  help="default platforms of @pytest.mark.numeq and the numeq_platform fixture (names of "
                       "numeq.platforms(), e.g. nvidia.h100 trainium.trn2)")


def _platform_error(name: Any, where: str, detail: str = "") -> str:
    """The error for a platform name: ``detail`` when the platform is known but a [...] selection
    is not (numeq's own message lists the valid assumptions), else the valid platform names."""
    if detail:
        return f"{where}: {name!r}: {detail}"
    import numeq

    return (f"{where}: unknown platform {name!r}; valid: {', '.join(numeq.platforms())} (assumptions select "
            "with brackets: 'trainium.trn2[pe_order=pairwise]', 'nvidia.h100[split_k=4]')")


def _check_platform(name: Any, where: str) -> str | None:
    """None when ``name`` is a platform numeq knows (with any [...] selections), else the error."""
    if not isinstance(name, str) or not name:
        return _platform_error(name, where)
    import numeq

    try:
        numeq.plan(name)
    except ValueError as exc:
        text = str(exc)
        if text.startswith("platform:"):  # the name or a selection is unknown (other errors: no bf16 matmul)
            detail = text[len("platform:"):].strip()  # e.g. "trainium.trn2 has no assumption 'x'; valid: ..."
            return _platform_error(name, where, "" if detail.startswith("unknown platform") else detail)
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(platform=None, platforms=None): run the test once per numeq platform (it requests the "
        f"numeq_platform fixture); without arguments the ini option {INI} gives the platforms")
    config.stash[_RECORDS] = []
    platforms = list(config.getini(INI))
    for name in platforms:
        error = _check_platform(name, f"ini option {INI}")
        if error:
            raise pytest.UsageError(error)
    config.stash[_INI_PLATFORMS] = platforms
    report = config.getoption("numeq_report")
    if report is not None:
        _report_paths(report)  # a bad suffix is refused before the tests run
    _install_nki(config, config.getoption("numeq_nki"))  # when pytest_load_initial_conftests did not run


# ---------------------------------------------------------------------------------------------
# --numeq-nki: NKI test suites on numeq.nki
# ---------------------------------------------------------------------------------------------
# A bare --numeq-nki: the machine room's default target (read when the option is used: loading the
# plugin imports nothing of numeq).
_DEFAULT = "default"


def _option(config: pytest.Config, name: str) -> Any:
    """An option's value, from the early parse where that is all there is yet."""
    known = getattr(config, "known_args_namespace", None)
    if known is not None and hasattr(known, name):
        return getattr(known, name)
    try:
        return config.getoption(name)
    except ValueError:
        return None


def _install_nki(config: pytest.Config, target: Any) -> None:
    """Enter ``numeq.nki.installed(target=target)`` for the rest of the run (once); left in the
    config's cleanup, which pytest runs at the end of the session."""
    if target is None or _NKI in config.stash:
        return
    from .nki.machine.targets import target_names

    # A bare --numeq-nki: each run's target from AWS's environment variables, else trn2 (_run._defaults).
    target = None if target == _DEFAULT else target
    if target is not None and target not in target_names():
        raise pytest.UsageError(f"--numeq-nki: unknown target {target!r}; valid: {', '.join(target_names())} (write "
                                "--numeq-nki=TARGET: a bare word after --numeq-nki is read as the target, not a path)")
    from .nki import installed

    stack = contextlib.ExitStack()
    hazards = bool(_option(config, "numeq_nki_hazards"))
    runs = stack.enter_context(installed(target=target, hazards=hazards))
    config.stash[_NKI] = {"target": target, "stack": stack, "runs": runs}
    config.add_cleanup(_uninstall_nki(config))


def _uninstall_nki(config: pytest.Config) -> Any:
    def close() -> None:
        state = config.stash.get(_NKI, None)
        if state is not None:
            del config.stash[_NKI]
            state["stack"].close()
    return close


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> Any:
    # The first conftest.py files load here, before pytest_configure: an NKI suite's conftest may
    # import nki already. Should loading them fail, pytest never unconfigures: leave nothing behind.
    _install_nki(early_config, getattr(early_config.known_args_namespace, "numeq_nki", None))
    try:
        return (yield)
    except BaseException:
        _uninstall_nki(early_config)()
        raise


def _marker_platforms(config: pytest.Config, node: Any) -> list[str]:
    """The test's platforms: its closest numeq marker's, else the ini option's (may be empty)."""
    marker = node.get_closest_marker(MARKER)
    if marker is None:
        return list(config.stash.get(_INI_PLATFORMS, []))
    where = f"@pytest.mark.{MARKER} on {node.nodeid}"
    unknown = sorted(set(marker.kwargs) - set(_MARKER_KEYWORDS))
    if marker.args or unknown:
        pytest.fail(f"{where}: takes only the keywords platform='...' or platforms=[...]; got "
                    f"{', '.join([repr(a) for a in marker.args] + [k + '=' for k in unknown])}", pytrace=False)
    if "platform" in marker.kwargs and "platforms" in marker.kwargs:
        pytest.fail(f"{where}: give platform= or platforms=, not both", pytrace=False)
    if "platform" in marker.kwargs:
        platforms = [marker.kwargs["platform"]]
        option = f"{where}: platform"
    elif "platforms" in marker.kwargs:
        platforms = marker.kwargs["platforms"]
        option = f"{where}: platforms"
        if isinstance(platforms, str) or not isinstance(platforms, (list, tuple)) or not platforms:
            pytest.fail(f"{option}: expected a non-empty list of platform names, got {platforms!r}", pytrace=False)
        platforms = list(platforms)
    else:
        return list(config.stash.get(_INI_PLATFORMS, []))
    for name in platforms:
        error = _check_platform(name, option)
        if error:
            pytest.fail(error, pytrace=False)
    if len(set(platforms)) != len(platforms):
        pytest.fail(f"{option}: a platform is named twice: {platforms!r}", pytrace=False)
    return platforms


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "numeq_platform" not in metafunc.fixturenames:
        return
    platforms = _marker_platforms(metafunc.config, metafunc.definition)
    if platforms:
        metafunc.parametrize("numeq_platform", platforms, indirect=True, ids=platforms)


@pytest.fixture
def numeq_platform(request: pytest.FixtureRequest) -> str:
    """The platform of the current test: one of ``@pytest.mark.numeq(platform=...)`` /
    ``(platforms=[...])`` (the test runs once per platform), else of the ini option
    ``numeq_platforms``."""
    if hasattr(request, "param"):
        return request.param
    import numeq

    pytest.fail(f"numeq_platform: {request.node.nodeid} has no platform: mark it with "
                f"@pytest.mark.{MARKER}(platform=...) or (platforms=[...]), or set the ini option {INI}; valid: "
                f"{', '.join(numeq.platforms())}", pytrace=False)


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
class NumeqCheck:
    """``numeq_check(actual, op, platform=None, *, accept=..., failure_probability=...,
    variants=..., msg=None)``: ``numeq.testing.assert_equivalent``, recorded for the report;
    ``platform`` defaults to the test's ``numeq_platform``. ``numeq_check.port(gpu_output,
    trainium_output, op, gpu_platform, trainium_platform, ...)``: ``assert_ported``, recorded."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._records: list[CheckRecord] = request.config.stash.setdefault(_RECORDS, [])

    def _platform(self) -> str:
        if "numeq_platform" in self._request.fixturenames:
            return self._request.getfixturevalue("numeq_platform")
        platforms = _marker_platforms(self._request.config, self._request.node)
        if len(platforms) == 1:
            return platforms[0]
        raise TypeError(f"platform: numeq_check needs a platform: pass platform=, request the numeq_platform fixture "
                        f"(with @pytest.mark.{MARKER}(...) or the ini option {INI}), or give the marker / ini option "
                        f"a single platform (it names {len(platforms)})")

    def __call__(self, actual: Any, op: Any, platform: str | None = None, *, accept: str = "probabilistic",
                 failure_probability: float = 1e-6, variants: bool = True, msg: str | None = None) -> Any:
        __tracebackhide__ = True
        from .verdicts import compare
        from .testing import _check_msg, _failure_text, _values

        msg = _check_msg(msg)
        platform = self._platform() if platform is None else platform
        verdict = compare(_values(actual, "actual"), op, platform, accept=accept,
                          failure_probability=failure_probability, variants=variants)
        self._records.append(CheckRecord(
            nodeid=self._request.node.nodeid, kind="compare", signature=verdict.signature, platform=verdict.platform,
            accept=verdict.accept, tier=verdict.tier, explained_by=verdict.explained_by, passed=verdict.passed,
            elements=verdict.elements, failures=verdict.failures, message=verdict.message))
        if not verdict.passed:
            raise AssertionError(_failure_text(msg, verdict.message))
        return verdict

    def port(self, gpu_output: Any, trainium_output: Any, op: Any, gpu_platform: str, trainium_platform: str, *,
             accept: str = "probabilistic", failure_probability: float = 1e-6, variants: bool = True,
             msg: str | None = None) -> Any:
        __tracebackhide__ = True
        from .verdicts import compare_port
        from .testing import _check_msg, _failure_text, _values

        msg = _check_msg(msg)
        port = compare_port(_values(gpu_output, "gpu_output"), _values(trainium_output, "trainium_output"), op,
                            gpu_platform, trainium_platform, accept=accept, failure_probability=failure_probability,
                            variants=variants)
        tier = max(port.gpu.tier, port.trainium.tier, key=_TIERS.index)
        if port.beyond:
            tier = "violation"
        explained = " | ".join(v.explained_by or "-" for v in (port.gpu, port.trainium))
        self._records.append(CheckRecord(
            nodeid=self._request.node.nodeid, kind="port", signature=port.gpu.signature,
            platform=f"{port.gpu.platform} | {port.trainium.platform}", accept=port.gpu.accept, tier=tier,
            explained_by=explained, passed=port.passed, elements=port.elements,
            failures=max(port.gpu.failures, port.trainium.failures, port.beyond), message=port.message))
        if not port.passed:
            raise AssertionError(_failure_text(msg, port.message))
        return port


@pytest.fixture
def numeq_check(request: pytest.FixtureRequest) -> NumeqCheck:
    """A callable like ``numeq.testing.assert_equivalent`` (``platform`` defaults to the test's
    ``numeq_platform``) that records every check for ``--numeq-report`` and the terminal summary;
    ``numeq_check.port(...)`` is ``assert_ported``, recorded likewise."""
    return NumeqCheck(request)


# ---------------------------------------------------------------------------------------------
# Report and summary
# ---------------------------------------------------------------------------------------------
def _report_paths(path: str) -> list[str]:
    """PATH.json / PATH.html by the suffix; both when there is none; other suffixes refused."""
    root, suffix = os.path.splitext(path)
    if not path or os.path.basename(path) in ("", ".", ".."):
        raise pytest.UsageError(f"--numeq-report: expected a file path, got {path!r}")
    if suffix == "":
        return [path + ".json", path + ".html"]
    if suffix.lower() in (".json", ".html"):
        return [path]
    raise pytest.UsageError(f"--numeq-report: {path!r} ends in {suffix!r}; valid: .json, .html, or no suffix "
                            "(both files)")


def _tier_counts(records: list[CheckRecord]) -> dict[str, int]:
    return {tier: sum(1 for r in records if r.tier == tier) for tier in _TIERS}


def _summary(records: list[CheckRecord]) -> dict[str, Any]:
    return {"checks": len(records), "passed": sum(r.passed for r in records),
            "failed": sum(not r.passed for r in records), "tiers": _tier_counts(records)}


def _json_report(records: list[CheckRecord]) -> str:
    import numeq

    body = {"numeq_version": numeq.__version__, "summary": _summary(records),
            "checks": [asdict(r) for r in records]}
    return json.dumps(body, indent=1) + "\n"


# Tier colours: strongest (green) to violation (red).
_COLOURS = {"bit_exact": "#1a7f37", "variant": "#4c9a2a", "probabilistic": "#9a6700", "deterministic": "#bc4c00",
            "violation": "#cf222e"}


def _html_report(records: list[CheckRecord]) -> str:
    import numeq

    e = html.escape
    summary = _summary(records)
    tiers = ", ".join(f"{t} {n}" for t, n in summary["tiers"].items())
    rows = []
    for r in records:
        colour = _COLOURS.get(r.tier, "#57606a")
        rows.append(
            "<tr>"
            f"<td>{e(r.nodeid)}</td><td>{e(r.kind)}</td><td><code>{e(r.signature)}</code></td>"
            f"<td>{e(r.platform)}</td><td>{e(r.accept)}</td>"
            f"<td class=\"tier\" style=\"background:{colour}\">{e(r.tier)}</td>"
            f"<td>{e(r.explained_by or '')}</td><td>{'PASS' if r.passed else 'FAIL'}</td>"
            f"<td>{r.elements}</td><td>{r.failures}</td>"
            f"<td><details><summary>{e(r.message.splitlines()[0] if r.message else '')}</summary>"
            f"<pre>{e(r.message)}</pre></details></td>"
            "</tr>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>numeq checks</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #d0d7de; padding: 0.3em 0.5em; vertical-align: top; text-align: left; }}
td.tier {{ color: white; font-weight: bold; }}
pre {{ font-size: 0.85em; }}
</style></head><body>
<h1>numeq checks</h1>
<p>numeq {e(numeq.__version__)}: {summary['checks']} checks, {summary['passed']} passed, {summary['failed']} failed;
tiers: {e(tiers)}</p>
<table>
<thead><tr><th>test</th><th>kind</th><th>op</th><th>platform</th><th>accepts</th><th>tier</th><th>explained by</th>
<th>result</th><th>elements</th><th>failures</th><th>message</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
</table>
</body></html>
"""


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    records = config.stash.get(_RECORDS, [])
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its checks travel to the controller, which reports
        workeroutput[_WORKER_KEY] = [asdict(r) for r in records]
        return
    path = config.getoption("numeq_report", None)
    if path is None:
        return
    for out in _report_paths(path):
        text = _json_report(records) if out.lower().endswith(".json") else _html_report(records)
        directory = os.path.dirname(out)
        if directory:
            os.makedirs(directory, exist_ok=True)
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist, on the controller: a worker's checks join the session's (its workeroutput)."""
    records = node.config.stash.setdefault(_RECORDS, [])
    records.extend(CheckRecord(**r) for r in getattr(node, "workeroutput", {}).get(_WORKER_KEY, []))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    nki = config.stash.get(_NKI, None)
    if nki is not None and nki["runs"]:
        runs = nki["runs"]
        errors = sum(len(r.errors) for r in runs)
        warnings = sum(len(r.warnings) for r in runs)
        targets = ", ".join(sorted({r.target for r in runs}))  # each run's (AWS's variables may differ per test)
        terminalreporter.write_line(f"numeq.nki ({targets}): {len(runs)} @nki.jit kernel calls, "
                                    f"{errors} error findings, {warnings} warning findings")
        seen: set[tuple[str, str]] = set()
        for f in (f for r in runs for f in r.findings):  # each rule at each kernel line once
            if (f.rule, f.where) not in seen:
                seen.add((f.rule, f.where))
                terminalreporter.write_line(f"  {f}")
    records = config.stash.get(_RECORDS, [])
    if not records:
        return
    counts = _tier_counts(records)
    line = f"numeq: {len(records)} checks, tiers: " + ", ".join(f"{t} {n}" for t, n in counts.items())
    failed = sum(not r.passed for r in records)
    if failed:
        line += f"; {failed} failed"
    terminalreporter.write_line(line)
    path = config.getoption("numeq_report", None)
    if path is not None:
        terminalreporter.write_line("numeq report: " + ", ".join(_report_paths(path)))

