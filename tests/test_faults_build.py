"""Faults around building wheels: interrupted compiles, a deps.txt pin that lies, no room to build.

The miniature upstream is fetched, patched and built by real ``python -m ortstack`` processes
(real cmake, ninja and compiler); ``dist/`` and the deps mirror must survive every fault unchanged.
"""

from __future__ import annotations

import hashlib
import signal
import sys
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from filelock import FileLock

from clirun import one_error
from faultkit import EXIT_CODE_OF_SIGNAL, POSIX_SIGNALS, Process, fault
from series_kit import EMPTY_WEIGHTS, Project, commit_edits, format_patch, snapshot
from upstream import git

if TYPE_CHECKING:
    import os

    from clirun import RunOrtstack
    from upstream import Upstream

pytestmark = [pytest.mark.network, pytest.mark.compile]

VARIANT = '\n[variant.webgpu]\nkind = "webgpu"\ndawn = "static"\n'


class Workspace:
    """A project with one variant, its cache, work dir and dist/ under one folder."""

    def __init__(self, root: Path, upstream: Upstream, *, commit: str | None = None) -> None:
        self.root = root
        self.project = Project(root=root / "project", repository=upstream.url, commit=commit or upstream.commit)
        self.write([])

    def write(self, entries: list[dict[str, str]]) -> None:
        self.project.write(entries)
        with self.project.stack_file.open("a", encoding="utf-8") as stack:
            stack.write(VARIANT)

    def args(self, verb: str, *extra: str) -> list[str | os.PathLike[str]]:
        return [
            *verb.split(),
            *extra,
            "--stack",
            self.project.stack_file,
            "--cache-dir",
            self.root / "cache",
            "--work-dir",
            self.root / "work",
            "--dist-dir",
            self.root / "dist",
        ]

    @property
    def dist(self) -> Path:
        return self.root / "dist"

    @property
    def mirror(self) -> Path:
        return self.root / "cache" / "deps-mirror"


def ok(run_ortstack: RunOrtstack, *args: str | os.PathLike[str]) -> str:
    result = run_ortstack(*args)
    assert result.returncode == 0, result.stderr
    return result.stderr


@pytest.fixture
def built(run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path) -> Workspace:
    """A workspace after a good fetch (with deps), patch and build: one wheel in dist/."""
    space = Workspace(tmp_path, upstream)
    for verb in ("fetch --deps", "patch", "build"):
        ok(run_ortstack, *space.args(verb))
    assert len(list(space.dist.glob("*.whl"))) == 1
    return space


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (Linux: read from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended while we looked
            continue
        if text in argv:
            found.append(argv)
    return found


@pytest.mark.skipif(sys.platform != "linux", reason="reads live processes from /proc (Linux)")
@POSIX_SIGNALS
@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGINT, marks=fault("build-sigint"), id="sigint"),
        pytest.param(signal.SIGTERM, marks=fault("build-sigterm"), id="sigterm"),
    ],
)
def test_interrupted_build_keeps_dist_and_stops_the_compiler(
    signum: signal.Signals,
    built: Workspace,
    run_ortstack: RunOrtstack,
    upstream: Upstream,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    good_dist = snapshot(built.dist)
    project = built.project
    change = commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit)
    built.write([project.entry("empty", "0001-empty.patch", format_patch(upstream, change))])
    # ortstack's own processes, so no compiler cache: a compile handed to the sccache server is the server's
    # (a daemon shared by every build on the machine) and finishes there.
    with project.stack_file.open("a", encoding="utf-8") as stack:
        stack.write('\n[build]\ncompiler_cache = "none"\n')
    ok(run_ortstack, *built.args("patch"))
    log = built.root / "work" / "logs" / "build-webgpu.log"
    log.unlink()

    # A compiler that takes long and says nothing on one file, as onnxruntime's heaviest files do.
    slow = tmp_path / "slow-c++"
    slow.write_text('#!/bin/sh\ncase "$*" in *matmul_nbits.cc*) sleep 60 ;; esac\nexec c++ "$@"\n')
    slow.chmod(0o755)
    run = Process(built.args("build"), env={**cli_env, "CXX": str(slow)}, log=tmp_path / "build.log")
    run.wait_for(
        lambda: any(str(slow) in p and "matmul_nbits.cc" in p for p in processes_mentioning(str(tmp_path))), "a compile"
    )
    result = run.signal(signum)

    line = one_error(result, EXIT_CODE_OF_SIGNAL[signum])
    assert line in ("ortstack: error: interrupted", "ortstack: error: terminated")
    assert snapshot(built.dist) == good_dist  # the last good wheel, byte for byte
    assert "Successfully built" not in log.read_text()  # the compile was stopped, not waited for
    assert not list((built.root / "work").glob("ortstack-webgpu-*"))  # the temporary wheel folder removed
    deadline = time.monotonic() + 5
    while (left := processes_mentioning(str(tmp_path))) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left  # pip, cmake and the silent compiler stopped with ortstack

    again = run_ortstack(*built.args("build"), env={"CXX": "c++"})
    assert again.returncode == 0, again.stderr
    assert "│ built" in again.stdout
    [wheel] = built.dist.glob("*.whl")
    assert wheel.name not in good_dist  # a new version: the patch is in it


@fault("deps-wrong-sha1")
def test_deps_entry_with_a_wrong_sha1(run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path) -> None:
    built = Workspace(tmp_path / "good", upstream)
    ok(run_ortstack, *built.args("fetch --deps"))
    deps_txt = upstream.file_at(upstream.commit, "cmake/deps.txt").decode()
    wrong = ("1" if upstream.mini_dep_sha1[0] == "0" else "0") + upstream.mini_dep_sha1[1:]  # one digit off
    lying = upstream.add_commit({"cmake/deps.txt": deps_txt.replace(upstream.mini_dep_sha1, wrong)}, "Wrong pin")
    git("push", "--quiet", upstream.url, f"{lying}:refs/heads/wrong-deps-pin", cwd=upstream.work, env=upstream.env)
    mirror_before = snapshot(built.mirror)
    archives_before = sorted(p.name for p in (built.root / "cache" / "archives").iterdir())

    other = Workspace(tmp_path / "lying", upstream, commit=lying)
    other_args = other.args("fetch --deps")
    other_args[other_args.index("--cache-dir") + 1] = built.root / "cache"  # the same cache as the good build
    line = one_error(run_ortstack(*other_args), 4)
    assert f"sha1 mismatch for {upstream.mini_dep_url}: expected {wrong}, got {upstream.mini_dep_sha1}" in line
    assert snapshot(built.mirror) == mirror_before  # the good mirror entry untouched
    assert sorted(p.name for p in (built.root / "cache" / "archives").iterdir()) == archives_before  # nothing kept
    assert hashlib.sha1(next(built.mirror.rglob("mini_dep-1.0.zip")).read_bytes()).hexdigest() == upstream.mini_dep_sha1


@fault("disk-deps")
def test_not_enough_space_for_the_deps_mirror(run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path) -> None:
    space = Workspace(tmp_path, upstream)
    ok(run_ortstack, *space.args("fetch"))
    result = run_ortstack(*space.args("fetch --deps"), env={"ORTSTACK_MIN_FREE_GIB_DEPS": "1e9"})
    line = one_error(result, 9)
    assert f"deps needs 1000000000.0 GiB free under {space.mirror}" in line
    assert not list(space.mirror.rglob("*.zip"))
    ok(run_ortstack, *space.args("fetch --deps"))  # a mirror already complete needs no space check
    assert run_ortstack(*space.args("fetch --deps"), env={"ORTSTACK_MIN_FREE_GIB_DEPS": "1e9"}).returncode == 0


@fault("disk-build")
def test_not_enough_space_to_build(built: Workspace, run_ortstack: RunOrtstack, upstream: Upstream) -> None:
    good_dist = snapshot(built.dist)
    no_room = {"ORTSTACK_MIN_FREE_GIB_BUILD": "1e9"}
    assert run_ortstack(*built.args("build"), env=no_room).returncode == 0  # up to date: nothing to build

    change = commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit)
    built.write([built.project.entry("empty", "0001-empty.patch", format_patch(upstream, change))])
    ok(run_ortstack, *built.args("patch"))
    result = run_ortstack(*built.args("build"), env=no_room)
    line = one_error(result, 9)
    assert f"build needs 1000000000.0 GiB free under {built.root / 'work' / 'cmake' / 'webgpu'}" in line
    assert "pip" not in result.stderr  # refused before compiling
    assert snapshot(built.dist) == good_dist


def with_patch(space: Workspace, upstream: Upstream, run_ortstack: RunOrtstack, old: str, new: str) -> None:
    """Add a patch replacing ``old`` by ``new`` in the MatMulNBits kernel and prepare the tree again."""
    change = commit_edits(upstream, [(EMPTY_WEIGHTS[0], old, new)], "Change the kernel", upstream.commit)
    space.write([space.project.entry("change", "0001-change.patch", format_patch(upstream, change))])
    ok(run_ortstack, *space.args("patch"))


@fault("build-compile-error")
def test_compile_error_keeps_dist(built: Workspace, run_ortstack: RunOrtstack, upstream: Upstream) -> None:
    good_dist = snapshot(built.dist)
    with_patch(built, upstream, run_ortstack, EMPTY_WEIGHTS[1], EMPTY_WEIGHTS[1].replace("return 0;", "return 0 +;"))
    result = run_ortstack(*built.args("build"))
    line = one_error(result, 6)
    assert "building variant 'webgpu' failed: " in line
    assert "matmul_nbits.cc" in line  # the compiler's first error, not just "failed"
    assert f"full log: {built.root / 'work' / 'logs' / 'build-webgpu.log'}" in result.stderr
    assert snapshot(built.dist) == good_dist
    assert not list((built.root / "work").glob("ortstack-webgpu-*"))


@fault("build-two-runs")
def test_two_builds_at_once(
    built: Workspace, run_ortstack: RunOrtstack, upstream: Upstream, cli_env: dict[str, str], tmp_path: Path
) -> None:
    with_patch(built, upstream, run_ortstack, EMPTY_WEIGHTS[1], EMPTY_WEIGHTS[2])
    runs = [Process(built.args("build"), env=cli_env, log=tmp_path / f"build{n}.log") for n in range(2)]
    results = [run.finish(timeout=120) for run in runs]
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert sum("waiting for another ortstack run building in" in r.stderr for r in results) == 1
    assert sorted("│ up to date" in r.stderr for r in results) == [False, True]  # the second used the first's
    [wheel] = built.dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as whole:
        assert whole.testzip() is None  # never a torn wheel
    build_dir = built.root / "work" / "cmake" / "webgpu"
    with FileLock(f"{build_dir}.lock"):  # what a running build holds
        line = one_error(run_ortstack(*built.args("build", "--no-wait")), 8)
    assert f"another ortstack run is building in {build_dir}" in line


@fault("deps-two-runs")
def test_two_deps_mirrors_at_once(
    run_ortstack: RunOrtstack, upstream: Upstream, cli_env: dict[str, str], tmp_path: Path
) -> None:
    space = Workspace(tmp_path, upstream)
    ok(run_ortstack, *space.args("fetch"))
    runs = [Process(space.args("fetch --deps"), env=cli_env, log=tmp_path / f"deps{n}.log") for n in range(3)]
    results = [run.finish() for run in runs]
    assert [r.returncode for r in results] == [0, 0, 0], [r.stderr for r in results]
    [mini_dep] = space.mirror.rglob("mini_dep-1.0.zip")
    assert hashlib.sha1(mini_dep.read_bytes()).hexdigest() == upstream.mini_dep_sha1  # never a torn file
    assert sorted(p.name for p in space.mirror.rglob("*") if p.is_file()) == ["mini_dawn-1.0.zip", "mini_dep-1.0.zip"]
