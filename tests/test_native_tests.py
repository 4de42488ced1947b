"""The stack's own native tests: found in its patches, built in a variant's build dir, run and reported.

On the miniature upstream, whose cmake makes onnxruntime's two test executables with
``onnxruntime_BUILD_UNIT_TESTS`` (mini_gtest standing in for googletest).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING

import pytest

from ortstack import config
from ortstack.build import native_tests
from test_build import assert_ok, make_project
from test_dep_sources import WEBGPU_ONLY
from upstream import PACKAGES, git

if TYPE_CHECKING:
    from pathlib import Path

    from test_build import Project
    from upstream import Upstream

KERNEL_TESTS = "onnxruntime/test/contrib_ops/mini_qlora_test.cc"
HELPER = "onnxruntime/test/util/mini_qlora_cases.h"


def _patch(upstream: Upstream, files: dict[str, str | None], message: str, parent: str) -> tuple[str, str]:
    commit = upstream.add_commit(files, message, parent=parent)
    text = git("format-patch", "--full-index", "-1", "--stdout", commit, cwd=upstream.work, env=upstream.env)
    return commit, text


def _write_stack(project: Project, upstream: Upstream, patches: list[tuple[str, str]]) -> None:
    (project.root / "patches").mkdir(exist_ok=True)
    entries = ""
    for index, (patch_id, text) in enumerate(patches, start=1):
        name = f"{index:04d}-{patch_id}.patch"
        (project.root / "patches" / name).write_text(text, encoding="utf-8")
        digest = hashlib.sha256(text.encode()).hexdigest()
        entries += f'\n[[patch]]\nid = "{patch_id}"\nfile = "patches/{name}"\nsha256 = "{digest}"\n'
    make_project(project.root, upstream, project.env, extra=entries + WEBGPU_ONLY)


def test_the_tests_a_series_adds_are_found_in_its_diffs_alone(upstream: Upstream, tmp_path: Path) -> None:
    quoted = "Add kernel tests\n\nLike TEST(Quoted, InTheMessage), which is no test."
    body = '#include "gtest/gtest.h"\nTEST(MiniQLoRA, AddsUp) { EXPECT_EQ(4, 2 + 2); }\nTEST_F(Fixture, Case) {}\n'
    kernel = "onnxruntime/contrib_ops/cpu/quantization/matmul_nbits.cc"
    source = upstream.file_at(upstream.commit, kernel).decode() + "// TEST(NotATest, InASource) {}\n"
    first, text = _patch(upstream, {KERNEL_TESTS: body, kernel: source}, quoted, upstream.commit)
    project = make_project(tmp_path / "p", upstream, {})
    _write_stack(project, upstream, [("kernel-tests", text)])
    found = native_tests.stack_tests(config.load(project.root / "stack.toml"), "linux")
    assert [(t.patch, t.file, t.full_name) for t in found] == [
        ("kernel-tests", KERNEL_TESTS, "MiniQLoRA.AddsUp"),
        ("kernel-tests", KERNEL_TESTS, "Fixture.Case"),
    ]
    assert native_tests.gtest_filter(found) == "MiniQLoRA.AddsUp:Fixture.Case"
    # A later patch changes one test and removes the other.
    changed = body.replace("EXPECT_EQ(4,", "EXPECT_EQ(4u,").replace("TEST_F(Fixture, Case) {}\n", "")
    _, later = _patch(upstream, {KERNEL_TESTS: changed}, "Change one, drop one", first)
    _write_stack(project, upstream, [("kernel-tests", text), ("later", later)])
    found = native_tests.stack_tests(config.load(project.root / "stack.toml"), "linux")
    assert [(t.patch, t.full_name) for t in found] == [("later", "MiniQLoRA.AddsUp")]


@pytest.mark.compile
@pytest.mark.network
@pytest.mark.slow
def test_native_tests_run_the_stacks_own_and_fail_on_a_broken_or_unbuilt_one(
    upstream: Upstream, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    good_body = '#include "gtest/gtest.h"\n\nTEST(MiniQLoRA, AddsUp) { EXPECT_EQ(4, 2 + 2); }\n'
    first, good = _patch(upstream, {KERNEL_TESTS: good_body}, "Add kernel tests", upstream.commit)
    project = make_project(tmp_path / "project", upstream, cli_env)
    _write_stack(project, upstream, [("kernel-tests", good)])
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    # The unit tests' dependency is no wheel's: fetch --deps left it out, and the run says how to give it.
    unfetched = project.ortstack("build", "--native-tests")
    assert unfetched.returncode == 4, unfetched.stderr[-3000:]
    assert "onnxruntime's unit tests need mini_gtest, which the deps mirror does not hold" in unfetched.stderr
    assert "--dep-source NAME=PATH" in unfetched.stderr
    gtest = ("--dep-source", f"mini_gtest={PACKAGES / 'mini_gtest'}")
    passed = assert_ok(project.ortstack("build", "--native-tests", *gtest))
    assert "native tests of the stack: 1 passed, 0 failed, 0 skipped, 0 not built" in passed
    assert "MiniQLoRA.AddsUp" in passed
    assert "BaseTreeTest" not in passed  # the base tree's own tests are not the stack's
    logs = project.work / "logs"
    assert "[       OK ] MiniQLoRA.AddsUp" in (logs / "native-tests-webgpu-onnxruntime_provider_test.log").read_text()
    # Configured with the wheel's flags: the library's objects are the wheel's, none compiled again.
    assert "CMakeFiles/onnxruntime.dir" not in (logs / "native-tests-webgpu-build.log").read_text()

    # A mutant of the test, and a test in a header no executable compiles.
    broken = good_body.replace("EXPECT_EQ(4,", "EXPECT_EQ(5,")
    helper = '#include "gtest/gtest.h"\nTEST(MiniQLoRA, InAHeader) { EXPECT_TRUE(true); }\n'
    _, mutant = _patch(upstream, {KERNEL_TESTS: broken, HELPER: helper}, "Break a test", first)
    _write_stack(project, upstream, [("kernel-tests", good), ("break-a-test", mutant)])
    assert_ok(project.ortstack("patch"))
    # The wheel's next build configures the unit tests off again, or it would build them as well.
    cache = project.work / "cmake" / "webgpu" / "ort" / "CMakeCache.txt"
    assert re.search(r"^onnxruntime_BUILD_UNIT_TESTS:\w+=ON$", cache.read_text(), re.MULTILINE)
    assert "configuring it for the wheel" in assert_ok(project.ortstack("build"))
    assert re.search(r"^onnxruntime_BUILD_UNIT_TESTS:\w+=OFF$", cache.read_text(), re.MULTILINE)
    failed = project.ortstack("build", "--native-tests", *gtest)
    assert failed.returncode == 7, failed.stderr[-3000:]
    output = " ".join((failed.stdout + failed.stderr).split())
    assert "native tests of the stack: 0 passed, 1 failed, 0 skipped, 1 not built" in output
    assert "expected 5 == 2 + 2" in output
    assert "InAHeader" in output


def test_a_googletest_report_is_read_case_by_case(tmp_path: Path) -> None:
    tests = [
        native_tests.NativeTest(patch="p", file="f", suite="S", name=name) for name in ("Ok", "Bad", "Skip", "Gone")
    ]
    report = {
        "testsuites": [
            {
                "name": "S",
                "testsuite": [
                    {"name": "Ok", "status": "RUN", "result": "COMPLETED"},
                    {"name": "Bad", "result": "COMPLETED", "failures": [{"failure": "x.cc:3 boom", "type": ""}]},
                    {"name": "Skip", "result": "SKIPPED"},
                ],
            },
            {"name": "Other", "testsuite": [{"name": "Ok", "result": "COMPLETED"}]},
        ]
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    read = native_tests._read_report(path, "onnxruntime_test_all", tests)
    assert {name: (r.outcome, r.message) for name, r in read.items()} == {
        "S.Ok": ("passed", ""),
        "S.Bad": ("failed", "x.cc:3 boom"),
        "S.Skip": ("skipped", ""),
    }
