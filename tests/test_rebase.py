"""``ortstack rebase`` on the miniature upstream: real git, real ``python -m ortstack`` processes.

The old pin is the miniature's commit; the new pin is two upstream commits later: the first brings
one patch's change upstream, the second moves code under the others. One series meets every outcome:
a patch that applies as written, one whose context moved, one that only a 3-way merge takes, one
already upstream (with a guard: kept as in-base; without: dropped), and one that conflicts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from clirun import one_error
from faultkit import POSIX_SIGNALS, Process
from ortstack import config
from ortstack.errors import PatchError, UsageError
from ortstack.lockfile import Lock
from ortstack.patches import patchfile, prepare
from series_kit import MATMUL, PAGED, Project, commit_edits, format_patch
from upstream import GIT_ENV_FIXED

if TYPE_CHECKING:
    from pathlib import Path

    from clirun import RunOrtstack
    from upstream import Upstream

pytestmark = pytest.mark.slow

PATCH_EXIT = PatchError.exit_code
USAGE_EXIT = UsageError.exit_code
C_API = "include/onnxruntime/core/session/onnxruntime_c_api.h"
QLORA = "onnxruntime/contrib_ops/webgpu/qlora.cc"

EMPTY = (
    MATMUL,
    "  if (k <= 0 || n <= 0) {\n    return 0;",
    "  if (k <= 0 || n <= 0) {\n    return 0;  // an empty weight",
)
BITS = (MATMUL, "  if (bits < 2 || bits > 8", "  if (bits < 1 || bits > 8")
NORM = (PAGED, '  shader += "fn score', '  shader += "// q_norm_weight, k_norm_weight\\n";\n  shader += "fn score')
VERSION_DOC = '// The version from VERSION_NUMBER, e.g. "1.31.0".'
OURS = (C_API, VERSION_DOC, '// The version from VERSION_NUMBER with the stack\'s local part, e.g. "1.31.0+stack".')
THEIRS = (C_API, VERSION_DOC, '// The version string, from VERSION_NUMBER (for example "1.32.0").')
UPSTREAM_MOVES = [
    (
        PAGED,
        "#include <string>\n",
        "#include <string>\n\n// Paged attention over a block table.\n// The shader is generated per head size.\n",
    ),
    (MATMUL, "CeilDiv(k, block_size);", "CeilDiv(k, static_cast<long long>(block_size));"),
    THEIRS,
]


@dataclass(frozen=True, kw_only=True)
class Pins:
    old: str
    upstreamed_in: str
    """The upstream commit that brings EMPTY."""
    new: str
    checkout: Path
    """A git checkout of ``new`` with its history (``--source-dir``)."""


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV_FIXED}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def pins(upstream: Upstream, tmp_path: Path) -> Pins:
    upstreamed_in = commit_edits(upstream, [EMPTY], "Accept an empty weight upstream", upstream.commit, touch_end=False)
    new = commit_edits(upstream, UPSTREAM_MOVES, "Move code under the series", upstreamed_in, touch_end=False)
    checkout = tmp_path / "onnxruntime"
    git("clone", "--quiet", "--shared", "--no-checkout", str(upstream.work), str(checkout), cwd=tmp_path)
    git("checkout", "--quiet", new, cwd=checkout)
    return Pins(old=upstream.commit, upstreamed_in=upstreamed_in, new=new, checkout=checkout)


def patch_of(upstream: Upstream, edits: list[tuple[str, str, str]], subject: str) -> str:
    return format_patch(upstream, commit_edits(upstream, edits, subject, upstream.commit, touch_end=False))


def write_series(upstream: Upstream, project: Project, *, conflict: bool = True) -> config.Stack:
    new_file = upstream.add_commit({QLORA: "// fused LoRA kernels\n"}, "Add the QLoRA kernels")
    entries = [
        project.entry("qlora", "0001-qlora.patch", format_patch(upstream, new_file)),
        project.entry("qk-norm", "0002-qk-norm.patch", patch_of(upstream, [NORM], "Normalize Q and K per head")),
        project.entry("one-bit", "0003-one-bit.patch", patch_of(upstream, [BITS], "Accept one-bit weights")),
        project.entry(
            "empty-guarded",
            "0004-empty.patch",
            patch_of(upstream, [EMPTY], "Accept an empty weight"),
            guard={"files": [MATMUL], "patterns": ["an empty weight"]},
        ),
    ]
    if conflict:
        entries.append(
            project.entry("version-doc", "0005-version.patch", patch_of(upstream, [OURS], "Say the local part"))
        )
    return project.write(entries)


def rebase(
    run_ortstack: RunOrtstack, stack: config.Stack, tmp_path: Path, *args: str | Path
) -> subprocess.CompletedProcess[str]:
    return run_ortstack(
        "rebase", "--stack", stack.path, "--work-dir", tmp_path / "work", "--cache-dir", tmp_path / "cache", *args
    )


def read_stack(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def file_at(checkout: Path, commit: str, relative: str) -> str:
    return git("show", f"{commit}:{relative}", cwd=checkout) + "\n"


def prepared_files(stack_file: Path, source: Path, tmp_path: Path, env: dict[str, str]) -> Path:
    """Apply the written stack with ``ortstack patch``'s own code, as a build would."""
    stack = config.load(stack_file)
    target = prepare.tree_path(tmp_path / "check", "webgpu")
    prepare.prepare(
        stack, Lock.load(stack_file.with_suffix(".lock")), source=source, target=target, platform="linux", env=env
    )
    return target


def assert_applies_to(stack_file: Path, pins: Pins, tmp_path: Path, env: dict[str, str], *, c_api: str) -> None:
    """The new stack applies to the new pin with the ordinary ``patch`` code, to the tree the rebase made."""
    source = tmp_path / "new-source"
    git("worktree", "add", "--quiet", "--detach", str(source), pins.new, cwd=pins.checkout)
    target = prepared_files(stack_file, source, tmp_path, env)
    assert (target / C_API).read_text(encoding="utf-8") == c_api
    matmul = (target / MATMUL).read_text(encoding="utf-8")
    assert "if (bits < 1 || bits > 8" in matmul
    assert "static_cast<long long>(block_size)" in matmul  # upstream's change is kept under the merge
    assert "// q_norm_weight, k_norm_weight" in (target / PAGED).read_text(encoding="utf-8")


def test_every_outcome_then_continue_writes_a_stack_that_applies(
    upstream: Upstream,
    project: Project,
    pins: Pins,
    run_ortstack: RunOrtstack,
    tmp_path: Path,
    base_env: dict[str, str],
) -> None:
    stack = write_series(upstream, project)
    before = {p.name: p.read_bytes() for p in (project.root / "patches").iterdir()}
    into = tmp_path / "new-stack"

    stopped = rebase(run_ortstack, stack, tmp_path, "--onto", pins.new, "--source-dir", pins.checkout, "--into", into)

    line = one_error(stopped, PATCH_EXIT)
    assert "rebase stopped: patch 0005-version.patch (version-doc) does not apply" in line
    assert C_API in line
    assert "ortstack rebase --continue" in stopped.stderr
    assert not into.exists()  # nothing written while the rebase is unfinished
    assert {p.name: p.read_bytes() for p in (project.root / "patches").iterdir()} == before
    tree = tmp_path / "work" / "rebase"
    state = json.loads((tree / ".git" / "ortstack-rebase.json").read_text(encoding="utf-8"))
    assert (state["stopped"], state["stopped_seconds"] > 0) == ("version-doc", True)  # the tried merge's time
    conflicted = (tree / C_API).read_text(encoding="utf-8")
    assert "<<<<<<<" in conflicted
    assert ">>>>>>>" in conflicted

    # Continuing before the conflict is resolved is refused, and changes nothing.
    early = rebase(run_ortstack, stack, tmp_path, "--continue")
    assert "still have conflicts" in one_error(early, PATCH_EXIT)

    resolved = file_at(pins.checkout, pins.new, C_API).replace(
        THEIRS[2],
        '// The version string with the stack\'s local part, from VERSION_NUMBER (for example "1.32.0+stack").',
    )
    (tree / C_API).write_text(resolved, encoding="utf-8")
    git("add", C_API, cwd=tree)
    git("commit", "--quiet", "-m", "Say the local part", cwd=tree)
    report = tmp_path / "report.md"
    done = rebase(run_ortstack, stack, tmp_path, "--continue", "--report", report)

    assert done.returncode == 0, done.stderr
    assert not tree.exists()
    written = read_stack(into / "stack.toml")
    assert written["ort"]["commit"] == pins.new
    by_id = {e["id"]: e for e in written["patch"]}
    assert list(by_id) == ["qlora", "qk-norm", "one-bit", "empty-guarded", "version-doc"]
    assert by_id["empty-guarded"]["mode"] == "in-base"
    assert "file" not in by_id["empty-guarded"]
    assert "sha256" not in by_id["empty-guarded"]
    for entry_id in ("qlora", "qk-norm", "one-bit", "version-doc"):
        data = (into / by_id[entry_id]["file"]).read_bytes()
        assert by_id[entry_id]["sha256"] == patchfile.sha256_hex(data)
    assert (into / "patches/0001-qlora.patch").read_bytes() == before["0001-qlora.patch"]  # applies as written
    assert (into / "patches/0002-qk-norm.patch").read_bytes() == before["0002-qk-norm.patch"]  # moved lines
    assert (into / "patches/0003-one-bit.patch").read_bytes() != before["0003-one-bit.patch"]  # merged
    assert not (into / "patches/0004-empty.patch").exists()

    rows = {
        line.split("|")[1].strip(): line
        for line in report.read_text(encoding="utf-8").splitlines()
        if line.startswith("| ")
    }
    assert "| applies | file unchanged |" in rows["qlora"]
    assert "| applies | file unchanged |" in rows["qk-norm"]
    assert "| merged | re-exported |" in rows["one-bit"]
    assert f"| upstreamed | in {pins.upstreamed_in[:12]}; kept as in-base (its guard holds) |" in rows["empty-guarded"]
    assert "| resolved | conflict resolved by hand; re-exported |" in rows["version-doc"]
    assert report.read_text(encoding="utf-8") in done.stdout  # the same summary on stdout

    assert_applies_to(into / "stack.toml", pins, tmp_path, base_env, c_api=resolved)


def test_upstreamed_without_a_guard_is_dropped_and_skip_drops_a_conflict(
    upstream: Upstream, project: Project, pins: Pins, run_ortstack: RunOrtstack, tmp_path: Path
) -> None:
    stack = project.write(
        [
            project.entry("empty", "0001-empty.patch", patch_of(upstream, [EMPTY], "Accept an empty weight")),
            project.entry("version-doc", "0002-version.patch", patch_of(upstream, [OURS], "Say the local part")),
        ]
    )

    stopped = rebase(run_ortstack, stack, tmp_path, "--onto", pins.new, "--source-dir", pins.checkout)
    assert stopped.returncode == PATCH_EXIT, stopped.stderr
    skipped = rebase(run_ortstack, stack, tmp_path, "--skip")

    assert skipped.returncode == 0, skipped.stderr
    written = read_stack(project.stack_file)  # in place: the default
    assert written["ort"]["commit"] == pins.new
    assert "patch" not in written or written["patch"] == []
    assert not (project.root / "patches/0001-empty.patch").exists()
    assert not (project.root / "patches/0002-version.patch").exists()
    assert f"| empty | upstreamed | in {pins.upstreamed_in[:12]}; dropped (no guard) |" in skipped.stdout
    assert "| version-doc | dropped | skipped on a conflict |" in skipped.stdout


def test_abort_leaves_the_stack_as_it_was(
    upstream: Upstream, project: Project, pins: Pins, run_ortstack: RunOrtstack, tmp_path: Path
) -> None:
    stack = write_series(upstream, project)
    stack_text = project.stack_file.read_bytes()
    assert (
        rebase(run_ortstack, stack, tmp_path, "--onto", pins.new, "--source-dir", pins.checkout).returncode
        == PATCH_EXIT
    )

    # Another rebase may not start over the stopped one.
    again = rebase(run_ortstack, stack, tmp_path, "--onto", pins.new, "--source-dir", pins.checkout)
    assert "stopped at patch version-doc" in one_error(again, USAGE_EXIT)

    aborted = rebase(run_ortstack, stack, tmp_path, "--abort")
    assert aborted.returncode == 0, aborted.stderr
    assert not (tmp_path / "work" / "rebase").exists()
    assert project.stack_file.read_bytes() == stack_text
    nothing = rebase(run_ortstack, stack, tmp_path, "--continue")
    assert "no rebase in progress" in one_error(nothing, USAGE_EXIT)


def test_a_changed_series_cannot_continue_an_old_rebase(
    upstream: Upstream, project: Project, pins: Pins, run_ortstack: RunOrtstack, tmp_path: Path
) -> None:
    stack = write_series(upstream, project)
    assert (
        rebase(run_ortstack, stack, tmp_path, "--onto", pins.new, "--source-dir", pins.checkout).returncode
        == PATCH_EXIT
    )
    stack = project.write([project.entry("qk-norm", "0002-qk-norm.patch", patch_of(upstream, [NORM], "Normalize"))])

    refused = rebase(run_ortstack, stack, tmp_path, "--continue")

    line = one_error(refused, USAGE_EXIT)
    assert "the series of stack.toml changed since the rebase started" in line


def test_bad_onto_is_a_usage_error(
    project: Project, run_ortstack: RunOrtstack, tmp_path: Path, upstream: Upstream
) -> None:
    stack = write_series(upstream, project, conflict=False)
    assert "not a commit id" in one_error(rebase(run_ortstack, stack, tmp_path, "--onto", "main"), USAGE_EXIT)
    assert "short commit id" in one_error(rebase(run_ortstack, stack, tmp_path, "--onto", "abcdef12"), USAGE_EXIT)
    assert "say where to rebase to" in one_error(rebase(run_ortstack, stack, tmp_path), USAGE_EXIT)


@POSIX_SIGNALS
def test_a_killed_rebase_resumes_where_it_stopped(
    upstream: Upstream, project: Project, pins: Pins, cli_env: dict[str, str], tmp_path: Path
) -> None:
    stack = write_series(upstream, project, conflict=False)
    work = tmp_path / "work"
    into = project.root / "new"
    args: list[str | Path] = [
        "rebase",
        "--stack",
        stack.path,
        "--work-dir",
        work,
        "--cache-dir",
        tmp_path / "cache",
        "--into",
        into,
    ]
    # git made slow at the process boundary, so the kill lands between two patches.
    slow_bin = tmp_path / "slow-bin"
    slow_bin.mkdir()
    real_git = subprocess.run(["which", "git"], capture_output=True, text=True, check=True).stdout.strip()
    (slow_bin / "git").write_text(f'#!/bin/sh\nsleep 0.2\nexec "{real_git}" "$@"\n', encoding="utf-8")
    (slow_bin / "git").chmod(0o755)
    slow_env = {**cli_env, "PATH": f"{slow_bin}{os.pathsep}{cli_env['PATH']}"}
    state_file = work / "rebase" / ".git" / "ortstack-rebase.json"

    def carried() -> int:
        try:
            return len(json.loads(state_file.read_text(encoding="utf-8"))["carried"])
        except (OSError, ValueError):
            return 0

    run = Process([*args, "--onto", pins.new, "--source-dir", pins.checkout], env=slow_env, log=tmp_path / "run.log")
    run.wait_for(lambda: carried() >= 1, "a patch carried")
    killed = run.signal(signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert 1 <= carried() < len(stack.patches)
    assert not into.exists()

    resumed = Process(
        [*args, "--onto", pins.new, "--source-dir", pins.checkout], env=cli_env, log=tmp_path / "again.log"
    )
    result = resumed.finish()

    assert result.returncode == 0, result.stderr
    assert "resuming the rebase" in result.stderr
    written = read_stack(into / "stack.toml")
    assert [e["id"] for e in written["patch"]] == ["qlora", "qk-norm", "one-bit", "empty-guarded"]
    assert written["ort"]["commit"] == pins.new


def test_without_a_checkout_both_pins_come_from_the_cache(
    upstream: Upstream, project: Project, pins: Pins, run_ortstack: RunOrtstack, tmp_path: Path
) -> None:
    git("push", "--quiet", upstream.url, f"{pins.new}:refs/heads/new-pin", cwd=upstream.work)
    stack = write_series(upstream, project, conflict=False)

    done = rebase(run_ortstack, stack, tmp_path, "--onto", pins.new, "--into", tmp_path / "new")

    assert done.returncode == 0, done.stderr
    assert "| one-bit | merged | re-exported |" in done.stdout  # pre-images from the cached old source
    assert "| empty-guarded | upstreamed | commit not found; kept as in-base (its guard holds) |" in done.stdout
    assert sorted(p.name for p in (tmp_path / "cache" / "sources").glob("*.json")) == sorted(
        [f"{pins.old}.json", f"{pins.new}.json"]
    )


def test_a_conflict_resolved_to_no_change_is_upstreamed(
    upstream: Upstream, project: Project, pins: Pins, run_ortstack: RunOrtstack, tmp_path: Path
) -> None:
    stack = project.write(
        [
            project.entry(
                "version-doc",
                "0001-version.patch",
                patch_of(upstream, [OURS], "Say the local part"),
                guard={"files": [C_API], "patterns": ["for example"]},
            ),
        ]
    )
    assert (
        rebase(run_ortstack, stack, tmp_path, "--onto", pins.new, "--source-dir", pins.checkout).returncode
        == PATCH_EXIT
    )
    git("reset", "--quiet", "--hard", "HEAD", cwd=tmp_path / "work" / "rebase")  # upstream's wording is kept

    done = rebase(run_ortstack, stack, tmp_path, "--continue")

    assert done.returncode == 0, done.stderr
    expected = (
        "| version-doc | upstreamed | resolved to no change; commit not found; kept as in-base (its guard holds) |"
    )
    assert expected in done.stdout
    entry = read_stack(project.stack_file)["patch"][0]
    assert entry["mode"] == "in-base"
    assert "file" not in entry
