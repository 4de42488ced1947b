"""Which venvs `ortstack test` makes for which wheels, and its errors. The suites themselves run
against real wheels in CI (`nox -s test`), not here: that needs the package index."""

from __future__ import annotations

import os
import zipfile
from typing import TYPE_CHECKING

import pytest

from clirun import one_error
from ortstack.errors import NotAWheelError, UsageError
from ortstack.suites import outcomes, suites

if TYPE_CHECKING:
    from pathlib import Path

    from clirun import RunOrtstack


CORE = "onnxruntime_webgpu-1.32.0+stack.ab12cd-cp311-cp311-manylinux_2_28_x86_64.whl"
CPU = "onnxruntime-1.32.0+stack.ab12cd-cp311-cp311-manylinux_2_28_x86_64.whl"
PLUGIN = "onnxruntime_ep_webgpu-0.5.0+stack.ab12cd-py3-none-manylinux_2_28_x86_64.whl"


def _wheels(tmp_path: Path, *names: str) -> list[Path]:
    """Empty zip archives with wheel names: enough for planning, which reads only names."""
    paths = [tmp_path / name for name in names]
    for path in paths:
        zipfile.ZipFile(path, "w").close()
    return paths


def test_without_wheels_the_stock_baselines_are_planned() -> None:
    sets = suites.plan([], ["all"])
    assert [s.requirements for s in sets] == [
        (suites.CPU_BASELINE, suites.PLUGIN_BASELINE),
        (suites.WEBGPU_BASELINE,),
    ]
    assert [s.eps for s in sets] == [("cpu", "plugin"), ("webgpu",)]
    assert all(s.baseline for s in sets)


@pytest.mark.parametrize(
    ("asked", "requirements"),
    [
        (["cpu"], [(suites.CPU_BASELINE, suites.PLUGIN_BASELINE)]),
        (["webgpu"], [(suites.WEBGPU_BASELINE,)]),
        (["plugin", "webgpu"], [(suites.CPU_BASELINE, suites.PLUGIN_BASELINE), (suites.WEBGPU_BASELINE,)]),
    ],
)
def test_baselines_follow_the_eps_asked_for(asked: list[str], requirements: list[tuple[str, ...]]) -> None:
    assert [s.requirements for s in suites.plan([], asked)] == requirements


def test_each_core_wheel_gets_its_own_venv_and_the_plugin_joins_the_onnxruntime_one(tmp_path: Path) -> None:
    core, cpu, plugin = _wheels(tmp_path, CORE, CPU, PLUGIN)
    sets = suites.plan([core, cpu, plugin], ["all"])
    assert [s.requirements for s in sets] == [(str(core),), (str(cpu), str(plugin))]
    assert [s.eps for s in sets] == [("cpu", "webgpu"), ("cpu", "webgpu", "plugin")]
    assert not any(s.baseline for s in sets)


def test_a_plugin_beside_a_webgpu_core_only_goes_on_the_stock_core(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pip would put the stock onnxruntime the plugin requires over onnxruntime-webgpu's package folder."""
    core, plugin = _wheels(tmp_path, CORE, PLUGIN)
    sets = suites.plan([core, plugin], ["plugin"])
    said = " ".join(capsys.readouterr().err.split())
    assert f"the plugin EP wheel goes beside the stock {suites.CPU_BASELINE}, not beside onnxruntime-webgpu" in said
    assert [(s.requirements, s.eps) for s in sets] == [((suites.CPU_BASELINE, str(plugin)), ("plugin",))]
    sets = suites.plan([core, plugin], ["all"])
    assert [(s.requirements, s.eps) for s in sets] == [
        ((str(core),), ("cpu", "webgpu")),
        ((suites.CPU_BASELINE, str(plugin)), ("cpu", "plugin")),
    ]
    assert [s.eps for s in suites.plan([core, plugin], [])] == [("cpu", "webgpu"), ("cpu", "plugin")]


def test_without_ep_built_wheels_are_tested_on_every_ep_they_provide(tmp_path: Path) -> None:
    core, cpu, plugin = _wheels(tmp_path, CORE, CPU, PLUGIN)
    assert [s.eps for s in suites.plan([core, cpu], [])] == [("cpu", "webgpu"), ("cpu",)]
    assert [s.eps for s in suites.plan([cpu, plugin], [])] == [("cpu", "plugin")]
    assert [s.eps for s in suites.plan([plugin], [])] == [("cpu", "plugin")]


def test_a_lane_that_did_not_run_fails_the_result() -> None:
    (wheel_set,) = suites.plan([], ["cpu", "plugin"])
    cpu = suites.Lane(ep="cpu", run=True, reason="device answered a probe session")
    plugin_off = suites.Lane(ep="plugin", run=False, reason="no usable device")
    plugin_on = suites.Lane(ep="plugin", run=True, reason="device answered a probe session")

    def result(*lanes: suites.Lane) -> suites.SuiteResult:
        return suites.SuiteResult(wheel_set=wheel_set, returncode=0, seconds=1.0, lanes=lanes)

    assert [lane.ep for lane in result(cpu, plugin_off).not_run] == ["plugin"]
    assert result(cpu, plugin_off).outcome == "failed (plugin not run)"
    assert [lane.ep for lane in result(cpu).not_run] == ["plugin"], "a lane the suite did not report is no pass"
    assert result(cpu, plugin_on).outcome == "passed"


def test_newest_wheel_of_each_distribution(tmp_path: Path) -> None:
    old, new, plugin = _wheels(tmp_path, CORE, CORE.replace("1.32.0", "1.32.1"), PLUGIN)
    os.utime(old, (1_000, 1_000))
    os.utime(new, (2_000, 2_000))
    assert suites.newest_wheels(tmp_path) == sorted([new, plugin])
    assert suites.newest_wheels(tmp_path / "missing") == []


def test_a_missing_wheel_is_not_a_wheel(tmp_path: Path) -> None:
    with pytest.raises(NotAWheelError, match="wheel not found") as caught:
        suites.plan([tmp_path / CORE], ["all"])
    assert caught.value.exit_code == 2


def test_genai_runs_in_its_own_venv_beside_the_cpu_core() -> None:
    sets = suites.with_genai(suites.plan([], ["all"]))
    genai = sets[-1]
    assert genai.marker == "genai"
    assert genai.requirements == (suites.CPU_BASELINE, suites.PLUGIN_BASELINE)
    assert set(suites.GENAI_REQUIREMENTS) <= set(genai.extra_requirements)
    assert all(s.marker == "not genai" for s in sets[:-1])


def test_genai_needs_a_cpu_core_or_a_built_core() -> None:
    with pytest.raises(UsageError, match="genai"):
        suites.with_genai(suites.plan([], ["webgpu"]))


def test_genai_runs_on_a_built_webgpu_core(tmp_path: Path) -> None:
    (core,) = _wheels(tmp_path, CORE)
    genai = suites.with_genai(suites.plan([core], ["webgpu"]))[-1]
    assert genai.marker == "genai"
    assert genai.requirements == (str(core),)


def test_junit_tally_tells_absent_and_not_checked_from_passed_per_lane(tmp_path: Path) -> None:
    """What the suites' plugin writes: the EP as a property, absent and not checked as skip messages."""

    def case(ep: str, inner: str = "") -> str:
        return f'<testcase name="t"><properties><property name="ep" value="{ep}"/></properties>{inner}</testcase>'

    report = tmp_path / "junit.xml"
    report.write_text(
        "<testsuites><testsuite>"
        + case("cpu") * 3
        + case("cpu", '<skipped message="absent: schema has no q_norm_weight"/>') * 2
        + case("cpu", '<failure message="boom"/>')
        + case("webgpu", '<skipped message="not checked: capture replay: no device OrtValues"/>')
        + case("webgpu", '<skipped message="not run: webgpu: no usable device"/>') * 4
        + case("webgpu", '<error message="fixture"/>')
        + "</testsuite></testsuites>"
    )
    tally = suites._junit_tally(report)
    assert tally is not None
    assert outcomes.counts_line(tally["cpu"]) == "3 passed, 1 failed, 2 absent, 0 not checked"
    assert outcomes.counts_line(tally["webgpu"]) == "0 passed, 1 failed, 0 absent, 1 not checked, 4 not run"
    assert suites._junit_tally(tmp_path / "missing.xml") is None


@pytest.mark.parametrize("lanes", [["webgpu"], ["plugin"], []], ids=["webgpu", "plugin", "default"])
def test_a_webgpu_lane_without_a_driver_fails_before_any_venv(
    run_ortstack: RunOrtstack, tmp_path: Path, lanes: list[str]
) -> None:
    """The state of a machine without lavapipe or a GPU driver: the Vulkan loader finds no manifest."""
    cache = tmp_path / "cache"
    argv = [a for ep in lanes for a in ("--ep", ep)]
    result = run_ortstack("test", *argv, "--cache-dir", cache, env={"VK_DRIVER_FILES": str(tmp_path / "none.json")})
    line = one_error(result, 3)
    assert "lanes cannot run" in line
    assert "a machine setup problem: nothing was run" in line
    assert "none.json names no existing Vulkan driver manifest" in line
    assert "sudo bash ci/lavapipe.sh" in result.stderr
    assert "--ep cpu" in result.stderr
    assert not (cache / "venvs").exists(), "no venv is made for a run that cannot pass"
