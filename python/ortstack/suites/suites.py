"""Run the wheel suites (``python/wheel_tests``) against installed wheels, one fresh venv per wheel set.

A wheel set is what one venv holds: an onnxruntime core wheel (CPU ``onnxruntime`` or built-in
WebGPU ``onnxruntime-webgpu``: both provide the ``onnxruntime`` module, so they never share a venv),
optionally the WebGPU plugin EP wheel. Venvs are cached by the hash of their wheel set.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from xml.etree import ElementTree as ET

from ortstack import _run, log, wheelfile
from ortstack.build import buildinfo
from ortstack.errors import ConfigError, SuiteError, UsageError
from ortstack.suites import genai_choice, outcomes, packages, venv, vulkan

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping, Sequence

EpKind = Literal["cpu", "webgpu", "plugin"]
EP_CHOICES: tuple[str, ...] = ("cpu", "webgpu", "plugin", "all")
WEBGPU_DIST = "onnxruntime-webgpu"
WEBGPU_LANES: frozenset[EpKind] = frozenset({"webgpu", "plugin"})
# The stock wheels measured as baselines (see the wheel suites' README section on baselines).
CPU_BASELINE = "onnxruntime==1.31.1"
WEBGPU_BASELINE = "onnxruntime-webgpu==1.27.0"
PLUGIN_BASELINE = "onnxruntime-ep-webgpu==0.4.0"
# What the suites themselves need next to the wheels under test.
SUITE_REQUIREMENTS = ("numpy>=1.26", "onnx>=1.17", "pytest>=8")
# The genai suite's own venv: torch (CPU) + transformers make the tiny model, genai's builder converts it;
# onnxruntime-genai itself is chosen from the set's onnxruntime (``genai_choice``). Floors, not pins: with
# --system-site-packages an offline host's own torch and transformers serve.
GENAI_REQUIREMENTS = ("torch>=2.4", "transformers>=4.45", "tokenizers>=0.20", "onnx-ir")
PYTEST_TIMEOUT_S = 3600
RERUN_TIP = "the pytest output above names the failing tests; rerun one with: ortstack test -- -k NAME"


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
    genai: genai_choice.GenaiChoice | None = None
    """The onnxruntime-genai chosen for the genai suite's set (installed without its dependencies)."""


@dataclass(frozen=True, kw_only=True)
class Lane:
    """One EP of one wheel set's run: whether its tests ran, and why not."""

    ep: str
    run: bool
    reason: str


@dataclass(frozen=True, kw_only=True)
class SuiteResult:
    wheel_set: WheelSet
    returncode: int
    seconds: float
    counts: str = ""
    """``N passed, N failed, N absent, N not checked[, N not run]`` from the run's JUnit report ("" if none)."""
    lane_counts: dict[str, str] = field(default_factory=dict)
    """The same per EP (the tests' ``ep`` property)."""
    lanes: tuple[Lane, ...] = ()
    """Each EP the run asked for, as the suite's plugin reported it (empty if pytest wrote none)."""
    crashed_in: str = ""
    """The test running when the process died (empty when it died between tests, or did not)."""

    @property
    def not_run(self) -> tuple[Lane, ...]:
        """The lanes asked for that could not run: each one fails the result."""
        reported = {lane.ep for lane in self.lanes}
        missing = tuple(
            Lane(ep=ep, run=False, reason="the suite reported nothing for it")
            for ep in self.wheel_set.eps
            if ep not in reported
        )
        return tuple(lane for lane in self.lanes if not lane.run) + missing

    @property
    def outcome(self) -> str:
        if self.returncode == 0 and self.not_run:
            return f"failed ({', '.join(lane.ep for lane in self.not_run)} not run)"
        if self.returncode == 0:
            return "passed"
        if self.returncode < 0 and self.crashed_in:
            return f"crashed ({_signal_name(-self.returncode)}) in {self.crashed_in}"
        if self.returncode < 0 and self.counts:
            # pytest wrote its report, so the tests ran to the end: the process died while exiting.
            return f"crashed ({_signal_name(-self.returncode)}) at exit, after the tests finished"
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
    return wheelfile.check(wheel).name


def _offered_eps(core: Path | None, plugins: Sequence[Path]) -> tuple[EpKind, ...]:
    """The EPs a wheel set provides by what its wheels are: the lanes of a run that names no ``--ep``."""
    offered: list[EpKind] = ["cpu"]
    if core is not None and _dist_name(core) == WEBGPU_DIST:
        offered.append("webgpu")
    if plugins:
        offered.append("plugin")
    return tuple(offered)


def newest_wheels(dist_dir: Path) -> list[Path]:
    """The newest wheel of each distribution in ``dist_dir``, and of each variant where ortstack built two
    of one distribution (Dawn static and shared are both onnxruntime-webgpu); empty if there is none."""
    newest: dict[tuple[str, str | None], Path] = {}
    for wheel in sorted(dist_dir.glob("*.whl"), key=lambda p: p.stat().st_mtime):
        newest[_dist_name(wheel), buildinfo.variant_of(wheel)] = wheel
    return sorted(newest.values())


def plan(wheels: Sequence[Path], requested: Sequence[str]) -> list[WheelSet]:
    """The venvs to test: one per core wheel (plugin wheels join each ``onnxruntime`` core, or else the
    stock CPU core), or the stock baselines.

    Without ``requested`` EPs, built wheels are tested on every EP they provide and the baselines on all.
    """
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
    plugins = [w for w in wheels if _dist_name(w) == venv.PLUGIN_DIST]
    cores = [w for w in wheels if _dist_name(w) != venv.PLUGIN_DIST]
    # pip meets a plugin wheel's requirement only with a core named onnxruntime: beside any other core
    # (onnxruntime-webgpu) it installs the stock onnxruntime into the same package folder, and that core's
    # built-in WebGPU EP would be a second WebGPU runtime in the process. Plugins join the onnxruntime
    # cores, or else the stock one.
    hosts = [core for core in cores if _dist_name(core) == venv.PLUGIN_CORE_DIST]
    sets = [
        WheelSet(
            label=core.name,
            requirements=(str(core),),
            eps=tuple(ep for ep in eps if ep != "plugin") if requested else _offered_eps(core, []),
        )
        for core in cores
        if core not in hosts and (not requested or set(eps) - {"plugin"})
    ]
    if plugins and not hosts:
        if cores:
            names = ", ".join(_dist_name(core) for core in cores)
            log.warn(
                f"the plugin EP wheel goes beside the stock {CPU_BASELINE}, not beside {names}: pip would install "
                "onnxruntime over it, and its built-in WebGPU EP would be a second WebGPU runtime in the process "
                "(to test the plugin with the stack's own core patches, build and pass the core variant's wheel)"
            )
        # The built-in WebGPU lane belongs to the run's own cores where it has any.
        asked = tuple(ep for ep in eps if not (cores and ep == "webgpu"))
        sets.append(
            WheelSet(
                label=" + ".join([CPU_BASELINE, *(w.name for w in plugins)]),
                requirements=(CPU_BASELINE, *map(str, plugins)),
                eps=asked if requested else _offered_eps(None, plugins),
            )
        )
    sets += [
        WheelSet(
            label=" + ".join(w.name for w in (core, *plugins)),
            requirements=(str(core), *map(str, plugins)),
            eps=eps if requested else _offered_eps(core, plugins),
        )
        for core in hosts
    ]
    return sets


def with_genai(sets: Sequence[WheelSet]) -> list[WheelSet]:
    """Add the genai end-to-end suite, in its own venv, beside the first set whose core can host it: a core
    wheel under test (onnxruntime-genai goes in without its dependencies, so that core stays the only
    onnxruntime, and its WebGPU EP serves genai's webgpu provider) or the stock CPU core. The stock
    onnxruntime-webgpu baseline is not used. Which genai it gets is chosen later, from that core
    (:func:`choose_genai`)."""
    for wheel_set in sets:
        stock_webgpu = wheel_set.baseline and any(
            "onnxruntime-webgpu" in r or "onnxruntime_webgpu" in r for r in wheel_set.requirements
        )
        if not stock_webgpu:
            genai = dataclasses.replace(
                wheel_set,
                label=f"genai on {wheel_set.label}",
                marker="genai",
                extra_requirements=GENAI_REQUIREMENTS,
            )
            return [*sets, genai]
    msg = "no wheel set can host the genai suite (it needs a core wheel under test or the stock CPU onnxruntime)"
    tip = "test a built onnxruntime-webgpu wheel, or a CPU onnxruntime wheel (plus the plugin EP wheel), with --genai"
    raise UsageError(msg, tip=tip)


def choose_genai(
    wheel_set: WheelSet, env: Mapping[str, str], *, pip_args: Sequence[str] = (), override: str | None = None
) -> WheelSet:
    """The genai suite's set with its onnxruntime-genai: the newest whose requirement the set's core meets
    (the stock core's, for a plugin wheel on it), from the run's package sources; ``override`` wins."""
    parts = venv.parse_wheel_spec("+".join(wheel_set.requirements))
    with log.step(f"choose onnxruntime-genai for {wheel_set.label}"):
        version = genai_choice.onnxruntime_version(parts, env=env, pip_args=pip_args)
        choice = genai_choice.choose([version], env=env, pip_args=pip_args, override=override)
    return dataclasses.replace(
        wheel_set, genai=choice, label=f"{wheel_set.label} with onnxruntime-genai {choice.version}"
    )


def prepare_venv(
    wheel_set: WheelSet,
    cache_dir: Path,
    env: Mapping[str, str],
    *,
    pip_args: Sequence[str] = (),
    system_site_packages: bool = False,
) -> venv.Venv:
    """A cached venv with the wheel set and what the suites need (``pip_args``: ``--no-index``, ``--find-links``;
    ``system_site_packages``: the venv sees this interpreter's packages).

    A set's onnxruntime-genai goes in without its dependencies (they would pull a second onnxruntime),
    its other requirements with the rest."""
    genai = wheel_set.genai
    extras = (*SUITE_REQUIREMENTS, *wheel_set.extra_requirements, *(genai.dependencies if genai else ()))
    return venv.ensure(
        "+".join(wheel_set.requirements),
        cache_dir=cache_dir,
        env=env,
        extras=extras,
        extras_no_deps=(genai.requirement,) if genai else (),
        pip_args=pip_args,
        system_site_packages=system_site_packages,
    )


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
    child_env["PYTHONPATH"] = str(packages.suite_pythonpath(cache_dir))
    if WEBGPU_LANES & set(wheel_set.eps):
        child_env = vulkan.webgpu_env(child_env, cache_dir / "mesa-shaders")
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
        lanes_report = Path(outside) / "lanes.json"
        running = Path(outside) / "running.txt"
        argv += [f"--junitxml={report}", f"--lanes-json={lanes_report}", f"--running-file={running}"]
        done = _run.run(argv, cwd=Path(outside), env=child_env, check=False, timeout=PYTEST_TIMEOUT_S)
        tally = _junit_tally(report)
        lanes = _lanes(lanes_report)
        crashed_in = running.read_text(encoding="utf-8").strip() if done.returncode < 0 and running.is_file() else ""
    return SuiteResult(
        wheel_set=wheel_set,
        returncode=done.returncode,
        seconds=time.perf_counter() - start,
        counts=outcomes.counts_line(sum(tally.values(), Counter())) if tally is not None else "",
        lane_counts={ep: outcomes.counts_line(counts) for ep, counts in (tally or {}).items()},
        lanes=lanes,
        crashed_in=crashed_in,
    )


def _lanes(report: Path) -> tuple[Lane, ...]:
    """The lanes the suite's plugin reported (our own file, written by the run above)."""
    if not report.is_file():
        return ()
    rows = json.loads(report.read_text(encoding="utf-8"))
    return tuple(Lane(ep=ep, run=bool(row["run"]), reason=str(row["reason"])) for ep, row in rows.items())


def _junit_tally(report: Path) -> dict[str, Counter[str]] | None:
    """Each EP's tests by outcome, from pytest's JUnit XML (our own file, written by the run above).

    A failure or error is failed; a skip is absent, not checked or not run by its message's prefix.
    """
    if not report.is_file():
        return None
    tally: dict[str, Counter[str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314 - a file this run just wrote
        ep = next((p.get("value", "-") for p in case.iter("property") if p.get("name") == "ep"), "-")
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            kind = outcomes.FAILED
        elif skipped is not None:
            kind = outcomes.of_skip(skipped.get("message", ""))
        else:
            kind = outcomes.PASSED
        tally.setdefault(ep, Counter())[kind] += 1
    return tally


def check_lanes_can_run(sets: Sequence[WheelSet], env: Mapping[str, str]) -> None:
    """Stop before any venv is made when a wheel is built for another platform (pip would refuse it) or
    a WebGPU lane asked for has no driver to run on."""
    for requirement in (r for s in sets for r in s.requirements if r.endswith(".whl")):
        wheelfile.check_fits_machine(wheelfile.check(Path(requirement)))
    asked = sorted({ep for s in sets for ep in s.eps} & WEBGPU_LANES)
    missing = vulkan.missing_driver(env) if asked else None
    if missing is not None:
        msg = f"the {' and '.join(asked)} lanes cannot run: {missing} (a machine setup problem: nothing was run)"
        raise ConfigError(msg, tip=vulkan.LAVAPIPE_TIP)


def _lane_rows(results: Sequence[SuiteResult]) -> list[list[str]]:
    rows = []
    for r in results:
        lanes = {lane.ep: lane for lane in r.lanes}
        for ep in r.wheel_set.eps:
            lane = lanes.get(ep)
            state = "run" if lane is not None and lane.run else "NOT RUN"
            why = lane.reason if lane is not None else "the suite reported nothing for it"
            rows.append([r.wheel_set.label, ep, state, r.lane_counts.get(ep, ""), why])
    return rows


def _not_run_tip(lane: Lane) -> str:
    fix = (
        vulkan.LAVAPIPE_TIP
        if lane.reason.startswith("no usable device")
        else "test a wheel set that provides it, or narrow the lanes with `--ep cpu`"
    )
    return f"{lane.ep} not run: {lane.reason}; {fix}"


def run_all(
    wheels: Sequence[Path],
    requested: Sequence[str],
    *,
    cache_dir: Path,
    env: Mapping[str, str],
    pytest_args: Sequence[str] = (),
    genai: bool = False,
    genai_version: str | None = None,
    pip_args: Sequence[str] = (),
    system_site_packages: bool = False,
) -> list[SuiteResult]:
    """Run every wheel set's suite; a failed test, a crash or a lane asked for that did not run fails.

    ``genai_version`` names the onnxruntime-genai of the genai suite instead of the chosen one."""
    sets = plan(wheels, requested)
    if genai:
        sets = with_genai(sets)
    check_lanes_can_run(sets, env)
    sets = [choose_genai(s, env, pip_args=pip_args, override=genai_version) if s.marker == "genai" else s for s in sets]
    if any(s.baseline for s in sets):
        log.loud(
            "No wheel under test: running the suites on the STOCK BASELINE wheels "
            f"({', '.join(s.label.removeprefix('baseline ') for s in sets)}). "
            "Build wheels with `ortstack build` or pass --wheel PATH to test your own."
        )
    results = []
    for wheel_set in sets:
        with log.step(f"test {wheel_set.label} on {', '.join(wheel_set.eps)}"):
            suite_venv = prepare_venv(
                wheel_set, cache_dir, env, pip_args=pip_args, system_site_packages=system_site_packages
            )
            results.append(run_suite(wheel_set, suite_venv, env, cache_dir=cache_dir, pytest_args=pytest_args))
    log.table(
        "wheel suites",
        ["wheel set", "EPs", "result", "tests", "time"],
        [[r.wheel_set.label, ",".join(r.wheel_set.eps), r.outcome, r.counts, f"{r.seconds:.0f} s"] for r in results],
    )
    log.table("lanes", ["wheel set", "EP", "state", "tests", "why"], _lane_rows(results))
    failed = [r for r in results if r.returncode != 0 or r.not_run]
    if failed:
        not_run = [lane for r in failed for lane in r.not_run]
        tip = _not_run_tip(not_run[0]) if not_run else RERUN_TIP
        msg = "wheel suites failed for " + "; ".join(f"{r.wheel_set.label}: {r.outcome}" for r in failed)
        raise SuiteError(msg, tip=tip)
    log.success(f"wheel suites passed: {len(results)} wheel sets, every lane asked for ran")
    return results
