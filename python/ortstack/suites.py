"""Run the wheel suites (``python/wheel_tests``) against installed wheels, one fresh venv per wheel set.

A wheel set is what one venv holds: an onnxruntime core wheel (CPU ``onnxruntime`` or built-in
WebGPU ``onnxruntime-webgpu``: both provide the ``onnxruntime`` module, so they never share a venv),
optionally the WebGPU plugin EP wheel. Venvs are cached by the hash of their wheel set.
"""

from __future__ import annotations

import dataclasses
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from xml.etree import ElementTree as ET

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

import ortstack
from ortstack import _run, log, venv
from ortstack.errors import SuiteError

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping, Sequence

EpKind = Literal["cpu", "webgpu", "plugin"]
EP_CHOICES: tuple[str, ...] = ("cpu", "webgpu", "plugin", "all")
PLUGIN_DIST = "onnxruntime-ep-webgpu"
# The stock wheels measured as baselines (see the wheel suites' README section on baselines).
CPU_BASELINE = "onnxruntime==1.31.1"
WEBGPU_BASELINE = "onnxruntime-webgpu==1.27.0"
PLUGIN_BASELINE = "onnxruntime-ep-webgpu==0.4.0"
# What the suites themselves need next to the wheels under test.
SUITE_REQUIREMENTS = ("numpy>=1.26", "onnx>=1.17", "pytest>=8")
# The genai suite's own venv: torch (CPU) + transformers make the tiny model, genai's builder converts it.
GENAI_REQUIREMENTS = ("torch==2.13.0", "transformers>=4.45", "tokenizers>=0.20", "onnxruntime-genai==0.18.0", "onnx-ir")
PYTEST_TIMEOUT_S = 3600


@dataclass(frozen=True, kw_only=True)
class WheelSet:
    label: str
    """How the summary names it."""
    requirements: tuple[str, ...]
    """pip arguments: wheel paths or pinned names."""
    eps: tuple[EpKind, ...]
    """The EPs its suite run asks for; those the set lacks are reported as not run."""
    baseline: bool = False
    marker: str = "not genai"
    """The pytest marker expression: the genai suite runs alone in its own venv."""
    extra_requirements: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SuiteResult:
    wheel_set: WheelSet
    returncode: int
    seconds: float
    counts: str = ""
    """``N passed, M not run, K failed`` from the run's JUnit report ("" if pytest wrote none)."""

    @property
    def outcome(self) -> str:
        if self.returncode == 0:
            return "passed"
        if self.returncode < 0:
            return f"crashed ({_signal_name(-self.returncode)})"
        return f"failed (pytest exit {self.returncode})"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def expand_eps(requested: Sequence[str]) -> tuple[EpKind, ...]:
    asked = set(requested or ["all"])
    every: tuple[EpKind, ...] = ("cpu", "webgpu", "plugin")
    return every if "all" in asked else tuple(ep for ep in every if ep in asked)


def _dist_name(wheel: Path) -> str:
    try:
        name, *_ = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        msg = f"{wheel} is not a wheel file name: {exc}"
        raise SuiteError(msg, tip="pass a .whl built by `ortstack build`") from None
    return str(canonicalize_name(name))


def newest_wheels(dist_dir: Path) -> list[Path]:
    """The newest wheel of each distribution in ``dist_dir`` (empty if there is none)."""
    newest: dict[str, Path] = {}
    for wheel in sorted(dist_dir.glob("*.whl"), key=lambda p: p.stat().st_mtime):
        newest[_dist_name(wheel)] = wheel
    return sorted(newest.values())


def plan(wheels: Sequence[Path], requested: Sequence[str]) -> list[WheelSet]:
    """The venvs to test: one per core wheel (plugin wheels join each), or the stock baselines."""
    eps = expand_eps(requested)
    if not wheels:
        sets = []
        if {"cpu", "plugin"} & set(eps):
            sets.append(
                WheelSet(
                    label=f"baseline {CPU_BASELINE} + {PLUGIN_BASELINE}",
                    requirements=(CPU_BASELINE, PLUGIN_BASELINE),
                    eps=tuple(ep for ep in eps if ep in {"cpu", "plugin"}),
                    baseline=True,
                )
            )
        if "webgpu" in eps:
            # Its CPU EP is covered by the set above; this set proves the built-in WebGPU EP.
            sets.append(
                WheelSet(
                    label=f"baseline {WEBGPU_BASELINE}", requirements=(WEBGPU_BASELINE,), eps=("webgpu",), baseline=True
                )
            )
        return sets
    for wheel in wheels:
        if not wheel.is_file():
            msg = f"wheel not found: {wheel}"
            raise SuiteError(msg, tip="build one with `ortstack build` or pass an existing path")
    plugins = [w for w in wheels if _dist_name(w) == PLUGIN_DIST]
    cores = [w for w in wheels if _dist_name(w) != PLUGIN_DIST]
    if not cores:
        # A plugin EP wheel needs an onnxruntime core beside it: the stock CPU one.
        return [
            WheelSet(
                label=" + ".join(w.name for w in plugins), requirements=(CPU_BASELINE, *map(str, plugins)), eps=eps
            )
        ]
    return [
        WheelSet(
            label=" + ".join(w.name for w in (core, *plugins)), requirements=(str(core), *map(str, plugins)), eps=eps
        )
        for core in cores
    ]


def with_genai(sets: Sequence[WheelSet]) -> list[WheelSet]:
    """Add the genai end-to-end suite, in its own venv, beside the first set with an onnxruntime core
    that genai accepts (the CPU ``onnxruntime`` one; genai needs onnxruntime >= 1.31)."""
    for wheel_set in sets:
        if not any("onnxruntime-webgpu" in r or "onnxruntime_webgpu" in r for r in wheel_set.requirements):
            genai = dataclasses.replace(
                wheel_set,
                label=f"genai on {wheel_set.label}",
                marker="genai",
                extra_requirements=GENAI_REQUIREMENTS,
            )
            return [*sets, genai]
    msg = "no wheel set can host the genai suite (it needs the CPU onnxruntime core, >= 1.31)"
    raise SuiteError(msg, tip="test a CPU onnxruntime wheel (plus the plugin EP wheel) with --genai")


def _ortstack_source() -> Path:
    """The ``python/`` project this ortstack runs from; the suite venvs install it for wheel_tests."""
    source = Path(ortstack.__file__).resolve().parent.parent
    if not (source / "pyproject.toml").is_file() or not (source / "wheel_tests").is_dir():
        msg = f"ortstack at {source} is not a source checkout, so wheel_tests cannot be installed from it"
        raise SuiteError(
            msg,
            tip="install ortstack from the repository: pip install -e python",
        )
    return source


def prepare_venv(wheel_set: WheelSet, cache_dir: Path, env: Mapping[str, str]) -> venv.Venv:
    """A cached venv with the wheel set, what the suites need and ortstack itself (editable)."""
    extras = (*SUITE_REQUIREMENTS, *wheel_set.extra_requirements, f"--editable={_ortstack_source()}")
    return venv.ensure("+".join(wheel_set.requirements), cache_dir=cache_dir, env=env, extras=extras)


def run_suite(
    wheel_set: WheelSet,
    suite_venv: venv.Venv,
    env: Mapping[str, str],
    *,
    cache_dir: Path,
    pytest_args: Sequence[str] = (),
) -> SuiteResult:
    """``python -m pytest --pyargs wheel_tests`` in ``venv``, from an empty directory outside the repo."""
    child_env = {k: v for k, v in env.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    child_env["WHEEL_TESTS_CACHE"] = str(cache_dir / "wheel-tests")
    argv: list[str | os.PathLike[str]] = [
        suite_venv.python,
        "-m",
        "pytest",
        "-p",
        "wheel_tests.plugin",
        "-p",
        "no:cacheprovider",
    ]
    argv += [
        "-rs",
        "--durations=10",
        "--pyargs",
        "wheel_tests",
        "-m",
        wheel_set.marker,
        *(f"--ep={ep}" for ep in wheel_set.eps),
        *pytest_args,
    ]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ortstack-suite-") as outside:
        report = Path(outside) / "junit.xml"
        argv.append(f"--junitxml={report}")
        done = _run.run(argv, cwd=Path(outside), env=child_env, check=False, timeout=PYTEST_TIMEOUT_S)
        counts = _junit_counts(report)
    return SuiteResult(
        wheel_set=wheel_set, returncode=done.returncode, seconds=time.perf_counter() - start, counts=counts
    )


def _junit_counts(report: Path) -> str:
    """Passed / not run / failed from pytest's JUnit XML (our own file, written by the run above)."""
    if not report.is_file():
        return ""
    suite = ET.parse(report).getroot()  # noqa: S314 - a file this run just wrote
    suite = suite if suite.tag == "testsuite" else suite[0]
    tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
    failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    parts = [f"{tests - skipped - failed} passed", f"{skipped} not run"] + ([f"{failed} failed"] if failed else [])
    return ", ".join(parts)


def run_all(
    wheels: Sequence[Path],
    requested: Sequence[str],
    *,
    cache_dir: Path,
    env: Mapping[str, str],
    pytest_args: Sequence[str] = (),
    genai: bool = False,
) -> list[SuiteResult]:
    sets = plan(wheels, requested)
    if genai:
        sets = with_genai(sets)
    if any(s.baseline for s in sets):
        log.loud(
            "No wheel under test: running the suites on the STOCK BASELINE wheels "
            f"({', '.join(s.label.removeprefix('baseline ') for s in sets)}). "
            "Build wheels with `ortstack build` or pass --wheel PATH to test your own."
        )
    results = []
    for wheel_set in sets:
        with log.step(f"test {wheel_set.label} on {', '.join(wheel_set.eps)}"):
            suite_venv = prepare_venv(wheel_set, cache_dir, env)
            results.append(run_suite(wheel_set, suite_venv, env, cache_dir=cache_dir, pytest_args=pytest_args))
    log.table(
        "wheel suites",
        ["wheel set", "EPs", "result", "tests", "time"],
        [[r.wheel_set.label, ",".join(r.wheel_set.eps), r.outcome, r.counts, f"{r.seconds:.0f} s"] for r in results],
    )
    failed = [r for r in results if r.returncode != 0]
    if failed:
        raise SuiteError(
            "wheel suites failed for " + "; ".join(f"{r.wheel_set.label}: {r.outcome}" for r in failed),
            tip="the pytest output above names the failing tests; rerun one with: ortstack test -- -k NAME",
        )
    return results
