"""The wheel suites against a wheel without the WebGPU EP: the stock CPU onnxruntime that the test
environment carries. WebGPU rows are reported as not run, with the reason; CPU rows still pass, or are
skipped as absent where the CPU EP lacks the feature."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import TYPE_CHECKING

import onnxruntime

if TYPE_CHECKING:
    from pathlib import Path


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
    # CPU rows pass, or are skipped as absent where the CPU EP lacks the feature (PagedAttention).
    cpu = re.search(r"^cpu\s+(\d+) passed(?:, (\d+) skipped)?$", out, re.MULTILINE)
    assert cpu is not None, out[-4000:]
    assert int(cpu.group(1)) > 0
    cpu_rows = int(cpu.group(1)) + int(cpu.group(2) or 0)
    webgpu = re.search(r"^webgpu\s+(\d+) skipped$", out, re.MULTILINE)
    assert webgpu is not None, out[-4000:]
    assert int(webgpu.group(1)) == cpu_rows, "every CPU row has its WebGPU twin reported as not run"
