"""The stack's own native tests: the gtests its patches add, built in a variant's build dir and run there.

A patch that an onnxruntime maintainer reviews carries native tests. They are found in the patch files
(``TEST``, ``TEST_F`` and ``TEST_P`` lines the patches add under a ``test`` folder), the variant's
onnxruntime build is configured again with ``onnxruntime_BUILD_UNIT_TESTS=ON`` (the objects the wheel
build made are reused), onnxruntime's two test executables are built and run with a filter naming
exactly those tests, and each test is reported: passed, failed, skipped, or not built (found in a patch
but in neither executable), which fails the run as a failure does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from unidiff.patch import PatchSet

from ortstack import _run, log
from ortstack.errors import BuildError, SuiteError, UsageError
from ortstack.patches import patchfile

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ortstack.config import Stack

UNIT_TESTS = "onnxruntime_BUILD_UNIT_TESTS"
TEST_EXECUTABLES = ("onnxruntime_provider_test", "onnxruntime_test_all")
"""onnxruntime's test executables: kernels' tests, and everything else (optimizers, framework, EP internals)."""
_TEST_MACRO = re.compile(r"^\s*TEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\)")

Outcome = Literal["passed", "failed", "skipped", "not built"]


@dataclass(frozen=True, kw_only=True)
class NativeTest:
    patch: str
    """The id of the stack entry that adds the test."""
    file: str
    suite: str
    name: str

    @property
    def full_name(self) -> str:
        return f"{self.suite}.{self.name}"


@dataclass(frozen=True, kw_only=True)
class NativeResult:
    test: NativeTest
    outcome: Outcome
    executable: str = ""
    message: str = ""


def stack_tests(stack: Stack, platform: str) -> list[NativeTest]:
    """The gtests that the stack's patches for ``platform`` add, in series order: a test a later patch
    changes is that patch's, and one a later patch removes is gone."""
    found: dict[str, NativeTest] = {}
    for entry in stack.patches:
        if entry.mode != "apply" or (entry.platforms and platform not in entry.platforms):
            continue
        path = stack.root / entry.file
        if not path.is_file():
            continue
        # The diff only: a commit message may quote a TEST line.
        diff = patchfile.split(path.read_text(encoding="utf-8", errors="replace"), entry.id).diff
        for patched in PatchSet(diff):
            if "test" not in Path(patched.path).parts[:-1]:
                continue
            for line in (line for hunk in patched for line in hunk if line.is_removed):
                if match := _TEST_MACRO.match(line.value):
                    found.pop(f"{match[1]}.{match[2]}", None)
            for line in (line for hunk in patched for line in hunk if line.is_added):
                if match := _TEST_MACRO.match(line.value):
                    test = NativeTest(patch=entry.id, file=patched.path, suite=match[1], name=match[2])
                    found[test.full_name] = test
    return list(found.values())


def gtest_filter(tests: Sequence[NativeTest]) -> str:
    """A ``--gtest_filter`` naming exactly ``tests``."""
    return ":".join(t.full_name for t in tests)


def build_and_run(
    tests: Sequence[NativeTest],
    *,
    ort_build_dir: Path,
    defines: Mapping[str, str],
    warnings_as_errors: bool,
    cmake: str,
    ninja: str,
    jobs: int,
    env: Mapping[str, str],
    log_prefix: Path,
) -> list[NativeResult]:
    """Configure ``ort_build_dir`` with the unit tests on (``defines``: where their dependencies come from;
    onnxruntime's warnings as errors only with ``warnings_as_errors``, as for the wheel), build onnxruntime's
    test executables there and run ``tests`` in them; each step's output goes to ``<log_prefix>-<step>.log``."""
    if not (ort_build_dir / "CMakeCache.txt").is_file():
        msg = f"no onnxruntime build in {ort_build_dir}"
        raise UsageError(msg, tip="build the variant's wheel first: ortstack build --variant NAME")
    log_file = log_prefix.with_name(f"{log_prefix.name}-build.log")
    try:
        configure = [cmake, f"-D{UNIT_TESTS}=ON", *(f"-D{k}={v}" for k, v in defines.items()), "."]
        if not warnings_as_errors:
            # As the wheel's configure (cpp_ext): the same flags, so its objects are reused.
            configure.insert(1, "--compile-no-warning-as-error")
        _run.run(configure, cwd=ort_build_dir, env=env, log_file=log_file)
        targets = [t for t in TEST_EXECUTABLES if _has_target(ninja, ort_build_dir, t, env)]
        if not targets:
            msg = f"onnxruntime's cmake in {ort_build_dir} made none of {', '.join(TEST_EXECUTABLES)}"
            raise BuildError(msg)
        argv = [cmake, "--build", ".", "--parallel", str(jobs), "--target", *targets]
        _run.run(argv, cwd=ort_build_dir, env=env, log_file=log_file)
    except subprocess.CalledProcessError:
        msg = "building onnxruntime's unit tests failed"
        raise BuildError(msg, tip=f"full log: {log_file}") from None
    ran: dict[str, NativeResult] = {}
    with tempfile.TemporaryDirectory(prefix="ortstack-gtest-") as tmp:
        for target in targets:
            report = Path(tmp) / f"{target}.json"
            executable = ort_build_dir / (target + (".exe" if os.name == "nt" else ""))
            argv = [str(executable), f"--gtest_filter={gtest_filter(tests)}", f"--gtest_output=json:{report}"]
            output = log_prefix.with_name(f"{log_prefix.name}-{target}.log")
            # A failing test exits non-zero; the report says which.
            _run.run(argv, cwd=ort_build_dir, env=env, check=False, log_file=output)
            if not report.is_file():
                msg = f"{target} wrote no test report (crashed?)"
                raise SuiteError(msg, tip=f"its output: {output}")
            ran |= _read_report(report, target, tests)
    return [ran.get(t.full_name) or NativeResult(test=t, outcome="not built") for t in tests]


def _has_target(ninja: str, build_dir: Path, target: str, env: Mapping[str, str]) -> bool:
    """Whether the build (always Ninja: ``ortstack build`` configures it so) knows ``target``."""
    query = [ninja, "-t", "query", target]
    return _run.run(query, cwd=build_dir, env=env, capture=True, quiet=True, check=False).returncode == 0


def _read_report(report: Path, executable: str, tests: Sequence[NativeTest]) -> dict[str, NativeResult]:
    """googletest's JSON report: ``testsuites`` of ``testsuite`` cases, each with its ``failures``."""
    by_name = {t.full_name: t for t in tests}
    results: dict[str, NativeResult] = {}
    for suite in json.loads(report.read_text(encoding="utf-8")).get("testsuites", []):
        for case in suite.get("testsuite", []):
            full_name = f"{suite['name']}.{case['name']}"
            if full_name not in by_name:
                continue
            failures = [f.get("failure", "") for f in case.get("failures", [])]
            outcome: Outcome = "failed" if failures else "skipped" if case.get("result") == "SKIPPED" else "passed"
            results[full_name] = NativeResult(
                test=by_name[full_name], outcome=outcome, executable=executable, message=" | ".join(failures)
            )
    return results


def report(results: Sequence[NativeResult]) -> None:
    """A table of the results; a failed or unbuilt test fails the run (exit 7)."""
    rows = [[r.test.patch, r.test.full_name, r.executable or "-", r.outcome, r.message[:200]] for r in results]
    log.table("native tests of the stack", ["patch", "test", "executable", "outcome", "message"], rows)
    counts = {outcome: sum(r.outcome == outcome for r in results) for outcome in ("passed", "failed", "skipped")}
    unbuilt = sum(r.outcome == "not built" for r in results)
    summary = (
        f"native tests of the stack: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped, {unbuilt} not built"
    )
    if counts["failed"] or unbuilt:
        raise SuiteError(summary, tip="the table above names them; each executable's output is in the work dir's logs/")
    log.success(summary)
