"""pytest plugin for the wheel suites: ``--ep``, the feature matrix header, per-EP counts.

Load it explicitly: ``python -m pytest -p wheel_tests.plugin --pyargs wheel_tests --ep all``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from wheel_tests import capabilities, eps

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from _pytest.terminal import TerminalReporter

OUTCOMES = ("passed", "failed", "skipped", "error")
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
        marks = [] if status.runnable else [pytest.mark.skip(reason=f"{ep} not run: {status.reason}")]
        params.append(pytest.param(ep, id=ep, marks=marks))
    metafunc.parametrize("ep", params)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "ep" in callspec.params:
            item.user_properties.append(("ep", callspec.params["ep"]))


@pytest.fixture
def record_baseline(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record how a wheel that lacks a feature behaves; listed at the end of the run."""

    def record(behaviour: str) -> None:
        request.config.stash[BASELINES_KEY].append((request.node.nodeid, behaviour))
        request.node.user_properties.append(("baseline", behaviour))

    return record


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
    counts: Counter[tuple[str, str]] = Counter()
    for outcome in OUTCOMES:
        for report in terminalreporter.stats.get(outcome, []):
            # One report per test: the call phase, or the setup phase for tests skipped before it.
            if outcome in {"passed", "failed"} and getattr(report, "when", "call") != "call":
                continue
            counts[str(dict(getattr(report, "user_properties", [])).get("ep", "-")), outcome] += 1
    terminalreporter.section("wheel suites: tests per execution provider")
    for ep in sorted({ep for ep, _ in counts}):
        parts = ", ".join(f"{counts[ep, o]} {o}" for o in OUTCOMES if counts[ep, o])
        terminalreporter.write_line(f"{ep:<7} {parts}")
    features = config.stash.get(FEATURES_KEY, [])
    if features:
        terminalreporter.section("feature matrix rows settled by tests")
        for f in features:
            terminalreporter.write_line(f"{f.name}  {f.state}  {f.evidence}")
    baselines = config.stash.get(BASELINES_KEY, [])
    if baselines:
        terminalreporter.section("baseline behaviour recorded (features this wheel lacks)")
        for nodeid, behaviour in baselines:
            terminalreporter.write_line(f"{nodeid}: {behaviour}")
