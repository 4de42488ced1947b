"""pytest plugin for the wheel suites: ``--ep``, the feature matrix header, per-EP counts.

Load it explicitly: ``python -m pytest -p wheel_tests.plugin --pyargs wheel_tests --ep all``.

Outcomes (ortstack.suites.outcomes): a feature the wheel lacks ends its test as absent (the ``absent``
fixture, after the test asserted how the wheel refused it), a check that could not run here as not
checked (``not_checked``), an EP lane that cannot run as not run; each is counted apart per EP.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ortstack.suites import outcomes
from wheel_tests import capabilities, eps

if TYPE_CHECKING:
    from collections.abc import Callable, Generator
    from typing import NoReturn

    from _pytest.terminal import TerminalReporter

BASELINES_KEY = pytest.StashKey[list[tuple[str, str]]]()
FEATURES_KEY = pytest.StashKey[list[capabilities.Feature]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("wheel_tests", "onnxruntime wheel suites")
    group.addoption(
        "--ep",
        action="append",
        choices=[*eps.EP_KINDS, "all"],
        help="execution provider(s) to test: cpu, webgpu (built-in), plugin (WebGPU plugin EP) or all "
        "(repeatable; default all). EPs the wheel set lacks, or with no device, are reported as not run.",
    )
    group.addoption(
        "--lanes-json",
        metavar="PATH",
        help="write each requested EP's lane (run or not, and why) to PATH as JSON, for `ortstack test`",
    )
    group.addoption(
        "--running-file",
        metavar="PATH",
        help="keep the id of the test running now in PATH (empty between tests): names the test a crash killed",
    )


def requested_eps(config: pytest.Config) -> tuple[eps.EpKind, ...]:
    asked = config.getoption("--ep") or ["all"]
    if "all" in asked:
        return eps.EP_KINDS
    return tuple(ep for ep in eps.EP_KINDS if ep in asked)


def pytest_configure(config: pytest.Config) -> None:
    owners = capabilities.distributions_of_the_package()
    if len(owners) > 1:
        # Each lane would run a mix of two builds' files and report it as one wheel set.
        reason = (
            f"{' and '.join(owners)} are installed into the same onnxruntime package folder, so their files "
            "overwrote each other: test one core per environment (a plugin EP wheel goes beside a core named "
            "onnxruntime, not onnxruntime-webgpu)"
        )
        pytest.exit(reason, returncode=pytest.ExitCode.USAGE_ERROR)
    config.stash[BASELINES_KEY] = []
    config.stash[FEATURES_KEY] = []
    config.addinivalue_line("markers", "genai: end-to-end onnxruntime-genai tests (own environment)")


def _runnable(config: pytest.Config) -> list[eps.EpKind]:
    return [ep for ep in requested_eps(config) if capabilities.ep_status(ep).runnable]


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [f"wheel set: {capabilities.wheel_set()}"]
    for ep in requested_eps(config):
        status = capabilities.ep_status(ep)
        lines.append(f"EP {ep:<7} {'RUN' if status.runnable else 'NOT RUN'}: {status.reason}")
    lines.append("feature matrix:")
    features = capabilities.matrix(_runnable(config))
    width = max(len(f.name) for f in features)
    lines += [f"  {f.name:<{width}}  {f.state:<8} {f.evidence}" for f in features]
    return lines


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ep" not in metafunc.fixturenames:
        return
    params = []
    for ep in requested_eps(metafunc.config):
        status = capabilities.ep_status(ep)
        marks = [] if status.runnable else [pytest.mark.skip(reason=f"{outcomes.NOT_RUN}: {ep}: {status.reason}")]
        params.append(pytest.param(ep, id=ep, marks=marks))
    metafunc.parametrize("ep", params)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "ep" in callspec.params:
            item.user_properties.append(("ep", callspec.params["ep"]))


@pytest.fixture
def absent(request: pytest.FixtureRequest) -> Callable[[str], NoReturn]:
    """End the test as absent: the wheel lacks the feature, and ``behaviour`` (already asserted) is what it
    did instead; listed at the end of the run."""

    def end(behaviour: str) -> NoReturn:
        request.config.stash[BASELINES_KEY].append((request.node.nodeid, behaviour))
        pytest.skip(f"{outcomes.ABSENT}: {behaviour}")

    return end


@pytest.fixture
def not_checked() -> Callable[[str], NoReturn]:
    """End the test as not checked: the check could not run here (``why``), so it proves nothing either way."""

    def end(why: str) -> NoReturn:
        pytest.skip(f"{outcomes.NOT_CHECKED}: {why}")

    return end


def outcome(report: pytest.TestReport) -> str:
    """What one report counts as: a skip is told apart by its reason's prefix."""
    if report.skipped:
        return outcomes.of_skip(report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr))
    if report.failed:
        return outcomes.FAILED if report.when == "call" else outcomes.ERROR
    return outcomes.PASSED


@pytest.fixture
def record_feature(request: pytest.FixtureRequest) -> Callable[[capabilities.Feature], None]:
    """Settle a feature-matrix row that only a test can decide; listed at the end of the run."""
    return request.config.stash[FEATURES_KEY].append


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:  # noqa: ARG001
    """Keep the running test's id in ``--running-file``: a runtime crash (an EP's SIGSEGV) takes the
    process with it before any report is written, and this names the test it killed."""
    path = item.config.getoption("--running-file")
    if path:
        Path(path).write_text(item.nodeid, encoding="utf-8")
    try:
        return (yield)
    finally:
        if path:
            Path(path).write_text("", encoding="utf-8")


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--lanes-json")
    if path:
        lanes = {ep: capabilities.ep_status(ep) for ep in requested_eps(session.config)}
        rows = {ep: {"run": status.runnable, "reason": status.reason} for ep, status in lanes.items()}
        Path(path).write_text(json.dumps(rows, indent=1), encoding="utf-8")


def pytest_terminal_summary(terminalreporter: TerminalReporter, config: pytest.Config) -> None:
    counts: dict[str, Counter[str]] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            # One report per test: the call phase, or the setup phase for tests skipped or broken before it.
            if not isinstance(report, pytest.TestReport) or (report.when != "call" and report.passed):
                continue
            ep = str(dict(report.user_properties).get("ep", "-"))
            counts.setdefault(ep, Counter())[outcome(report)] += 1
    terminalreporter.section("wheel suites: tests per execution provider")
    for ep in sorted(counts):
        terminalreporter.write_line(f"{ep:<7} {outcomes.counts_line(counts[ep])}")
    features = config.stash.get(FEATURES_KEY, [])
    if features:
        terminalreporter.section("feature matrix rows settled by tests")
        for f in features:
            terminalreporter.write_line(f"{f.name}  {f.state}  {f.evidence}")
    baselines = config.stash.get(BASELINES_KEY, [])
    if baselines:
        terminalreporter.section("absent: what the wheel did instead (features it lacks)")
        for nodeid, behaviour in baselines:
            terminalreporter.write_line(f"{nodeid}: {behaviour}")
