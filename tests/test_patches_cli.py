"""``ortstack patch`` / ``status`` as real processes: fetch from the cache, prepare, fail with one line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from clirun import RunOrtstack, one_error
from ortstack import _git
from series_kit import EMPTY_WEIGHTS, MATMUL, TELEMETRY_SKIP, Project, commit_edits, format_patch, snapshot

if TYPE_CHECKING:
    from upstream import Upstream

pytestmark = pytest.mark.network


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    return Project(root=tmp_path / "project", repository=upstream.url, commit=upstream.commit)


def dirs(project: Project, tmp_path: Path) -> list[str]:
    return [
        "--stack",
        str(project.stack_file),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--work-dir",
        str(tmp_path / "work"),
    ]


def test_patch_verb_fetches_prepares_and_fails_with_one_line(
    upstream: Upstream, project: Project, tmp_path: Path, run_ortstack: RunOrtstack, base_env: dict[str, str]
) -> None:
    change = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    windows = commit_edits(upstream, [TELEMETRY_SKIP], "Skip telemetry teardown", upstream.commit)
    good = [
        project.entry("empty-weights", "0001-empty-weights.patch", format_patch(upstream, change)),
        project.entry("telemetry", "0002-telemetry.patch", format_patch(upstream, windows), platforms=["windows"]),
    ]
    project.write(good)

    result = run_ortstack("patch", "--platform", "linux", *dirs(project, tmp_path))
    assert result.returncode == 0, result.stderr
    assert "ok: prepared default" in result.stderr
    tree = tmp_path / "work" / "prepared" / "default"
    subjects = _git.out(["log", "--format=%s"], cwd=tree, env=base_env).splitlines()
    assert subjects == ["Accept empty packed weights", f"onnxruntime {upstream.commit}"]
    assert "telemetry: skipped on linux" in result.stderr

    status = run_ortstack("status", *dirs(project, tmp_path))
    assert status.returncode == 0, status.stderr
    lines = [" ".join(line.split()) for line in status.stdout.splitlines()]
    assert any(line.startswith("empty-weights │ local │ vendored │ applies │") for line in lines), status.stderr
    assert any(line.startswith("telemetry │ local │ vendored │ skipped on linux │") for line in lines), status.stderr

    before = snapshot(tree)
    conflicting = commit_edits(
        upstream, [(MATMUL, "    return 0;\n  }\n  if", "    return -1;\n  }\n  if")], "x", upstream.commit
    )
    project.write([*good, project.entry("negative", "0003-negative.patch", format_patch(upstream, conflicting))])
    failed = run_ortstack("patch", "--platform", "linux", *dirs(project, tmp_path))
    line = one_error(failed, 5)
    assert f"0003-negative.patch (negative) does not apply: {MATMUL}: hunk #1 @@" in line
    assert snapshot(tree) == before

    status = run_ortstack("status", *dirs(project, tmp_path))
    cells = {row[0]: row for row in table_rows(status.stdout)}
    assert cells["negative"][2:4] == ["vendored", "CONFLICTS"]
    assert cells["empty-weights"][3] == "applies"  # it applied before the run stopped
    assert "the last `ortstack patch` stopped: patch 0003-negative.patch" in " ".join(status.stderr.split())


def test_locked_build_refuses_to_vendor(
    upstream: Upstream, project: Project, tmp_path: Path, run_ortstack: RunOrtstack
) -> None:
    origin = {"kind": "pr", "repository": "https://github.com/microsoft/onnxruntime", "pr": 33559}
    project.write([{"id": "empty-weights", "file": "patches/0001-empty-weights.patch", "origin": origin}])

    line = one_error(run_ortstack("patch", "--locked", *dirs(project, tmp_path)), 5)
    assert "patch empty-weights is not vendored" in line
    assert "--locked forbids downloading it" in line

    status = run_ortstack("status", *dirs(project, tmp_path))
    text = " ".join((status.stdout + status.stderr).split())
    assert "1 of 1 patch entries are not vendored yet: empty-weights" in text
    assert "Vendor them with: nox -s refresh-patches (or: ortstack refresh-patches)" in text


def test_pull_request_stack_status_names_every_mission_entry(tmp_path: Path, run_ortstack: RunOrtstack) -> None:
    stack_file = Path(__file__).parents[1] / "stacks" / "pr-06f88ea6" / "stack.toml"
    result = run_ortstack("status", "--stack", stack_file, "--cache-dir", tmp_path / "c", "--work-dir", tmp_path / "w")
    assert result.returncode == 0, result.stderr
    rows = {cells[0]: cells for cells in table_rows(result.stdout) if len(cells) == 6}
    telemetry = rows["telemetry-shutdown-skip"]
    assert (telemetry[2], telemetry[5]) == ("NOT VENDORED", "windows")
    if sys.platform.startswith("linux"):
        assert telemetry[3] == "skipped on linux"
    assert rows["matmulnbits-qlora"][1:3] == ["PR #33370 @ 507021fd21", "NOT VENDORED"]
    assert rows["paged-attention-qk-norm"][1:4] == [
        "PR #32808 (merged upstream)",
        "-",
        "in base (not checked: run ortstack patch)",
    ]
    assert rows["webgpu-batched-uploads"][1:3] == ["PR #33491 (merged upstream)", "-"]
    text = " ".join(result.stderr.split())
    assert (
        "3 of 5 patch entries are not vendored yet: matmulnbits-empty-weights, telemetry-shutdown-skip, "
        "matmulnbits-qlora. Vendor them with: nox -s refresh-patches (or: ortstack refresh-patches)."
    ) in text


def table_rows(output: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("│")] for line in output.splitlines() if "│" in line]


def test_export_from_the_command_line(
    upstream: Upstream, project: Project, tmp_path: Path, run_ortstack: RunOrtstack, base_env: dict[str, str]
) -> None:
    change = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    project.write([project.entry("empty-weights", "0001-empty-weights.patch", format_patch(upstream, change))])
    assert run_ortstack("patch", *dirs(project, tmp_path)).returncode == 0
    tree = tmp_path / "work" / "prepared" / "default"
    (tree / "NOTES.md").write_text("carried notes\n")
    _git.git(["add", "NOTES.md"], cwd=tree, env=base_env)
    _git.git(["commit", "-q", "-m", "Add notes"], cwd=tree, env=_git.environment(base_env))

    unsaved = one_error(run_ortstack("patch", *dirs(project, tmp_path)), 5)
    assert "has 1 commit(s) made after the series; rebuilding it would lose them" in unsaved

    result = run_ortstack("patch", "--export", *dirs(project, tmp_path))
    assert result.returncode == 0, result.stderr
    assert "ok: exported 1 commits as patches" in result.stderr
    assert (project.root / "patches" / "0002-add-notes.patch").is_file()
    rebuilt = run_ortstack("patch", *dirs(project, tmp_path))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (tree / "NOTES.md").read_text() == "carried notes\n"
    assert _git.out(["log", "--format=%s"], cwd=tree, env=base_env).splitlines()[:2] == [
        "Add notes",
        "Accept empty packed weights",
    ]
