"""One exit code per mistake across verbs, as the README's table says, and the words that go with it."""

from __future__ import annotations

import json
import zipfile
from typing import TYPE_CHECKING

import pytest

from clirun import one_error

if TYPE_CHECKING:
    from pathlib import Path

    from clirun import RunOrtstack
    from series_kit import Project


@pytest.mark.parametrize("given", ["notes.txt", "folder"])
@pytest.mark.parametrize("verb", [("inspect",), ("test", "--wheel"), ("bench", "--wheel")], ids=lambda v: v[0])
def test_a_path_that_is_not_a_wheel_is_a_usage_error_for_every_verb(
    run_ortstack: RunOrtstack, tmp_path: Path, verb: tuple[str, ...], given: str
) -> None:
    """A text file or a folder where a wheel goes: 2, one line, before any venv or driver check."""
    path = tmp_path / given
    if given == "folder":
        path.mkdir()
    else:
        path.write_text("not a wheel\n")
    cache = tmp_path / "cache"
    line = one_error(run_ortstack(*verb, path, "--cache-dir", cache), 2)
    assert str(path) in line
    assert ("is a folder, not a wheel" if given == "folder" else "is not a wheel file name") in line
    assert not cache.exists()


def test_inspect_of_a_stock_wheel_answers_that_ortstack_did_not_build_it(
    run_ortstack: RunOrtstack, tmp_path: Path
) -> None:
    wheel = tmp_path / "onnxruntime-1.21.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("onnxruntime/__init__.py", "")
    result = run_ortstack("inspect", wheel)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "distribution": "onnxruntime",
        "version": "1.21.0",
        "built_by_ortstack": False,
    }
    assert "it was not built by ortstack" in result.stderr
    assert "error" not in result.stderr


def test_a_missing_earlier_step_is_a_usage_error_naming_the_command_to_run_first(
    run_ortstack: RunOrtstack, project: Project, tmp_path: Path
) -> None:
    project.write([])
    with (project.root / "stack.toml").open("a", encoding="utf-8") as stack:
        stack.write('\n[variant.webgpu]\nkind = "webgpu"\n')
    dirs = ("--cache-dir", tmp_path / "cache", "--work-dir", tmp_path / "work")
    assert run_ortstack("fetch", "--stack", project.stack_file, *dirs).returncode == 0
    result = run_ortstack("build", "--plan", "--stack", project.stack_file, *dirs)
    line = one_error(result, 2)
    assert "no prepared tree for variant 'webgpu'" in line
    assert "run `ortstack patch --variant webgpu` first" in result.stderr


def test_the_common_options_are_accepted_before_the_verb_too(
    run_ortstack: RunOrtstack, project: Project, tmp_path: Path
) -> None:
    project.write([])
    cache = tmp_path / "cache"
    before = run_ortstack("--stack", project.stack_file, f"--cache-dir={cache}", "--no-wait", "status")
    after = run_ortstack("status", "--stack", project.stack_file, f"--cache-dir={cache}", "--no-wait")
    assert before.returncode == after.returncode == 0, before.stderr
    assert (before.stdout, before.stderr) == (after.stdout, after.stderr)
    assert project.commit in before.stdout
    missing = run_ortstack("--stack", tmp_path / "nowhere.toml", "build")
    assert f"no stack file at {tmp_path / 'nowhere.toml'}" in one_error(missing, 3)
    no_verb = run_ortstack("--cache-dir", cache)
    assert no_verb.returncode == 2
    assert "the following arguments are required: VERB" in no_verb.stderr
