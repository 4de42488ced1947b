"""The wheel suites against a wheel without the WebGPU EP: the stock CPU onnxruntime that the test
environment carries. WebGPU rows are reported as not run, with the reason; CPU rows pass where the
feature is there, and are absent where it is not (its CPU EP has no PagedAttention, so no Q/K norm):
never passed for a feature the wheel lacks, in the summary or the JUnit XML."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import onnxruntime
import pytest


def test_cpu_wheel_runs_cpu_rows_and_reports_webgpu_not_run(tmp_path: Path) -> None:
    assert "WebGpuExecutionProvider" not in onnxruntime.get_available_providers()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "wheel_tests.plugin",
            "--pyargs",
            "wheel_tests",
            "--ep",
            "cpu",
            "--ep",
            "webgpu",
            "-p",
            "no:cacheprovider",
            f"--junitxml={tmp_path / 'junit.xml'}",
        ],
        cwd=tmp_path,  # outside the repository, as `ortstack test` runs the suites
        capture_output=True,
        text=True,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out[-4000:]
    assert re.search(
        r"^EP webgpu\s+NOT RUN: onnxruntime \S+ has no built-in WebGpuExecutionProvider$", out, re.MULTILINE
    )
    cpu = re.search(r"^cpu\s+(\d+) passed, 0 failed, (\d+) absent, 0 not checked$", out, re.MULTILINE)
    assert cpu is not None, out[-4000:]
    passed, absent = int(cpu.group(1)), int(cpu.group(2))
    assert passed > 0
    assert absent > 0
    webgpu = re.search(r"^webgpu\s+0 passed, 0 failed, 0 absent, 0 not checked, (\d+) not run$", out, re.MULTILINE)
    assert webgpu is not None, out[-4000:]
    assert int(webgpu.group(1)) == passed + absent, "every CPU row has its WebGPU twin reported as not run"
    cases = {case.get("name"): case for case in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}

    def skip_message(name: str) -> str:
        skipped = cases[name].find("skipped")
        assert skipped is not None, f"{name} counted as passed"
        return skipped.get("message", "")

    for case in ("prefill", "prefill-after-cache", "decode"):
        assert skip_message(f"test_qk_norm[cpu-{case}]").startswith("absent: "), "Q/K norm on a wheel without it"
    assert skip_message("test_qk_norm[webgpu-decode]").startswith("not run: webgpu: ")


def test_two_distributions_in_one_package_folder_end_the_run(tmp_path: Path) -> None:
    """A second distribution recorded as owning the onnxruntime package imported here (as pip leaves the
    stock onnxruntime over onnxruntime-webgpu when a plugin wheel requires it): the suites refuse to run."""
    site = tmp_path / "site"
    info = site / "onnxruntime_webgpu-9.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime-webgpu\nVersion: 9.9\n", encoding="utf-8")
    (info / "RECORD").write_text("onnxruntime/__init__.py,,\n", encoding="utf-8")
    (site / "onnxruntime").symlink_to(Path(onnxruntime.__file__).parent, target_is_directory=True)
    argv = [sys.executable, "-m", "pytest", "-p", "wheel_tests.plugin", "--pyargs", "wheel_tests", "--ep", "cpu"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [*argv, "-p", "no:cacheprovider"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout[-4000:]
    assert f"onnxruntime {onnxruntime.__version__} and onnxruntime-webgpu 9.9 are installed into the same" in (
        result.stdout + result.stderr
    )
