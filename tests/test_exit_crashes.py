"""A runtime that crashes while its process exits, after the work was done and reported.

onnxruntime 1.25.0-dev's WebGPU EP does that on NVIDIA's Vulkan driver: every probe answered, every
benchmark case was measured, then the interpreter died of SIGSEGV at exit. Such an answer is kept
(and the crash said), while a crash before any answer still counts as a crash. Real child processes
crash here, by a signal, as that runtime did.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

from ortstack.suites import bench, suites
from wheel_bench import ops
from wheel_tests import probes

if TYPE_CHECKING:
    from pathlib import Path

CRASH = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)


def test_a_probe_that_answered_then_crashed_at_exit_keeps_its_answer() -> None:
    answered = _child(f"import json; print(json.dumps({{'outcome': 'ok', 'detail': ''}}), flush=True); {CRASH}")
    assert answered.returncode < 0
    result = probes.classify(answered)
    assert (result.outcome, result.detail, result.exit_crash) == ("ok", "", "SIGSEGV")
    assert result.describe() == "ok; then SIGSEGV at process exit"
    silent = probes.classify(_child(CRASH))
    assert (silent.outcome, silent.detail, silent.exit_crash) == ("crash", "SIGSEGV", None)


def test_the_empty_adapter_check_keeps_a_verdict_printed_before_a_crash_at_exit() -> None:
    passed = _child(f"print({ops.EMPTY_WEIGHTS_OK!r}, flush=True); {CRASH}")
    assert ops.refusal_of(passed) is None
    assert ops.refusal_of(_child(CRASH)) == "the probe died of signal 11"


def test_a_bench_result_counts_only_when_the_worker_finished_it(tmp_path: Path) -> None:
    finished, partial = tmp_path / "finished.json", tmp_path / "partial.json"
    finished.write_text(json.dumps({"cases": [], "started": "t0", "finished": "t1"}), encoding="utf-8")
    partial.write_text('{"cases": [', encoding="utf-8")
    assert bench.finished_result(finished)
    assert not bench.finished_result(partial)
    assert not bench.finished_result(tmp_path / "absent.json")


def test_a_suite_that_crashed_at_exit_still_fails_and_says_its_tests_finished() -> None:
    wheel_set = suites.WheelSet(label="w", requirements=("w.whl",), eps=("cpu",))
    after = suites.SuiteResult(wheel_set=wheel_set, returncode=-11, seconds=1.0, counts="3 passed, 0 not run")
    assert after.outcome == "crashed (SIGSEGV) at exit, after the tests finished"
    during = suites.SuiteResult(wheel_set=wheel_set, returncode=-11, seconds=1.0)
    assert during.outcome == "crashed (SIGSEGV)"


def test_the_suite_plugin_names_the_test_a_crash_killed(tmp_path: Path) -> None:
    # A real pytest with the suites' plugin; the second test dies as an EP's SIGSEGV would.
    (tmp_path / "test_crash.py").write_text(
        f"def test_fine():\n    pass\n\ndef test_dies():\n    {CRASH}\n\ndef test_never_reached():\n    pass\n",
        encoding="utf-8",
    )
    running = tmp_path / "running.txt"
    argv = [sys.executable, "-m", "pytest", "-p", "wheel_tests.plugin", "-p", "no:cacheprovider", "-q"]
    argv += ["--ep=cpu", f"--running-file={running}", "test_crash.py"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode < 0, done.stdout + done.stderr
    assert running.read_text(encoding="utf-8") == "test_crash.py::test_dies"
    wheel_set = suites.WheelSet(label="w", requirements=("w.whl",), eps=("cpu",))
    result = suites.SuiteResult(
        wheel_set=wheel_set, returncode=done.returncode, seconds=1.0, crashed_in="test_crash.py::test_dies"
    )
    assert result.outcome == "crashed (SIGSEGV) in test_crash.py::test_dies"


def test_between_tests_the_running_file_is_empty(tmp_path: Path) -> None:
    (tmp_path / "test_fine.py").write_text("def test_one():\n    pass\n", encoding="utf-8")
    running = tmp_path / "running.txt"
    argv = [sys.executable, "-m", "pytest", "-p", "wheel_tests.plugin", "-p", "no:cacheprovider", "-q"]
    argv += ["--ep=cpu", f"--running-file={running}", "test_fine.py"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert running.read_text(encoding="utf-8") == ""
