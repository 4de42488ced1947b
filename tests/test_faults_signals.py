"""Interrupted steps: real ``python -m ortstack`` processes, real signals in the middle of the work.

Each test lets a good run finish first, interrupts a second one mid-step, then asserts the exit
code, the one error line, that the good outputs are byte for byte as they were, and that the next
run resumes or redoes the step.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import signal
import tarfile
from typing import TYPE_CHECKING

import pytest
from filelock import FileLock

from clirun import one_error
from faultkit import EXIT_CODE_OF_SIGNAL, POSIX_SIGNALS, Process, fault, patch_args
from ortstack.errors import INTERRUPTED
from series_kit import Project, format_patch, snapshot
from test_fetch import archive_stack, assert_intact, assert_tree_is, good_cache
from upstream import Fault, LoopbackServer, Upstream

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.network, POSIX_SIGNALS]

RESUME_TIP = "tip: run the same command again"


# --------------------------------------------------------------------------------------------------
# Download.


@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGINT, marks=fault("download-sigint"), id="sigint"),
        pytest.param(signal.SIGTERM, marks=fault("download-sigterm"), id="sigterm"),
    ],
)
def test_interrupted_download_resumes(
    signum: signal.Signals,
    upstream: Upstream,
    clean_server: LoopbackServer,
    cli_env: dict[str, str],
    tmp_path: Path,
    cache_dir: Path,
) -> None:
    path = upstream.archive_url.removeprefix(clean_server.url)
    clean_server.fault(path, Fault.SLOW)
    stack = archive_stack(tmp_path, upstream, url=upstream.archive_url, sha256=upstream.archive_sha256)
    part = cache_dir / "archives" / f"{upstream.archive_sha256}.tar.gz.part"

    run = Process(["fetch", "--stack", stack, "--cache-dir", cache_dir], env=cli_env, log=tmp_path / "run.log")
    run.wait_for(lambda: part.is_file() and part.stat().st_size >= 1024, "a partial download")
    result = run.signal(signum)

    line = one_error(result, EXIT_CODE_OF_SIGNAL[signum])
    assert line in ("ortstack: error: interrupted", "ortstack: error: terminated")
    assert RESUME_TIP in result.stderr
    kept = part.read_bytes()
    assert 1024 <= len(kept) < len(upstream.archive)
    assert upstream.archive.startswith(kept)  # what arrived, nothing else
    assert not (cache_dir / "sources" / upstream.commit).exists()
    assert not list((cache_dir / "sources").glob(".tmp-*"))  # temporary work removed on the way out

    clean_server.clear_faults()
    clean_server.reset_counts()
    again = Process(["fetch", "--stack", stack, "--cache-dir", cache_dir], env=cli_env, log=tmp_path / "again.log")
    assert again.finish().returncode == 0, again.stderr()
    assert clean_server.ranges() == [(path, f"bytes={len(kept)}-")]  # resumed where it stopped
    assert_tree_is(cache_dir / "sources" / upstream.commit, upstream, upstream.commit)
    assert not part.exists()
    kept_archive = cache_dir / "archives" / f"{upstream.archive_sha256}.tar.gz"
    assert hashlib.sha256(kept_archive.read_bytes()).hexdigest() == upstream.archive_sha256


# --------------------------------------------------------------------------------------------------
# Extraction.

MANY_FILES = 6000


def many_files_archive() -> bytes:
    """A GitHub-shaped archive of an onnxruntime-like tree with enough files that extracting it takes a while."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, text in (("VERSION_NUMBER", b"1.31.0\n"), ("cmake/CMakeLists.txt", b"project(onnxruntime)\n")):
            root_file = tarfile.TarInfo(f"onnxruntime-many/{name}")
            root_file.size = len(text)
            tar.addfile(root_file, io.BytesIO(text))
        for number in range(MANY_FILES):
            data = f"file {number}\n".encode() * 20
            member = tarfile.TarInfo(f"onnxruntime-many/d{number // 100:03d}/f{number:05d}.txt")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


@pytest.fixture(scope="module")
def many(server: LoopbackServer) -> tuple[str, str]:
    """(url, sha256) of the many-files archive on the server."""
    data = many_files_archive()
    return server.add("/many/onnxruntime-many.tar.gz", data), hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGINT, marks=fault("extract-sigint"), id="sigint"),
        pytest.param(signal.SIGKILL, marks=fault("extract-sigkill"), id="sigkill"),
    ],
)
def test_interrupted_extraction_is_redone(
    signum: signal.Signals,
    many: tuple[str, str],
    upstream: Upstream,
    clean_server: LoopbackServer,
    cli_env: dict[str, str],
    base_env: dict[str, str],
    tmp_path: Path,
    cache_dir: Path,
) -> None:
    url, sha256 = many
    before = good_cache(cache_dir, tmp_path, upstream, base_env)  # an earlier good tree of another commit
    pinned = "a" * 40
    stack = archive_stack(tmp_path, upstream, url=url, sha256=sha256, commit=pinned)
    archive = cache_dir / "archives" / f"{sha256}.tar.gz"
    sources = cache_dir / "sources"

    run = Process(["fetch", "--stack", stack, "--cache-dir", cache_dir], env=cli_env, log=tmp_path / "run.log")
    run.wait_for(lambda: any(sources.glob(f".tmp-{pinned}-*/tree/d001")), "extraction under way")
    result = run.signal(signum)

    if signum == signal.SIGKILL:
        assert result.returncode == -signal.SIGKILL
        assert list(sources.glob(f".tmp-{pinned}-*"))  # a crash leaves its temporary tree
    else:
        assert one_error(result, INTERRUPTED) == "ortstack: error: interrupted"
        assert not list(sources.glob(".tmp-*"))
    assert not (sources / f"{pinned}.json").exists()  # nothing half-extracted was published
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == sha256  # the verified download stays
    assert_intact_except_temps(cache_dir, before)

    clean_server.reset_counts()
    again = Process(["fetch", "--stack", stack, "--cache-dir", cache_dir], env=cli_env, log=tmp_path / "again.log")
    assert again.finish().returncode == 0, again.stderr()
    assert clean_server.requests() == 0  # extraction redone from the cached archive
    assert len([p for p in (sources / pinned).rglob("*") if p.is_file()]) == MANY_FILES + 2  # and the two root files
    assert_intact(cache_dir, before)  # and the leftovers are gone


def assert_intact_except_temps(cache: Path, before: dict[str, bytes]) -> None:
    after = {k: v for k, v in snapshot(cache).items() if k in before}
    assert after == before


# --------------------------------------------------------------------------------------------------
# Patching.

SERIES_LENGTH = 16


def series(project: Project, upstream: Upstream, count: int) -> list[dict[str, str]]:
    """``count`` patches, each adding one file: long enough to interrupt in the middle."""
    entries = []
    for number in range(count):
        commit = upstream.add_commit({f"extra/part{number:02d}.txt": f"part {number}\n"}, f"Add part {number}")
        text = format_patch(upstream, commit)
        entries.append(project.entry(f"part{number:02d}", f"{number + 1:04d}-part{number:02d}.patch", text))
    return entries


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    return Project(root=tmp_path / "project", repository=upstream.url, commit=upstream.commit)


@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGINT, marks=fault("patch-sigint"), id="sigint"),
        pytest.param(signal.SIGTERM, marks=fault("patch-sigterm"), id="sigterm"),
        pytest.param(signal.SIGKILL, marks=fault("patch-sigkill"), id="sigkill"),
    ],
)
def test_interrupted_patching_keeps_the_last_good_tree(
    signum: signal.Signals, upstream: Upstream, project: Project, cli_env: dict[str, str], tmp_path: Path
) -> None:
    entries = series(project, upstream, SERIES_LENGTH)
    project.write(entries[:1])
    first = Process(patch_args(project, tmp_path), env=cli_env, log=tmp_path / "first.log")
    assert first.finish().returncode == 0, first.stderr()
    tree = tmp_path / "work" / "prepared" / "default"
    good = snapshot(tree)
    sources = snapshot(tmp_path / "cache" / "sources")  # the cached source and its marker

    project.write(entries)  # a longer series: the tree must be rebuilt
    run = Process(patch_args(project, tmp_path), env=cli_env, log=tmp_path / "run.log")
    run.wait_for(lambda: any(tree.parent.glob(".default.new-*/.git/ORTSTACK_MESSAGE")), "patches being committed")
    result = run.signal(signum)

    if signum == signal.SIGKILL:
        assert result.returncode == -signal.SIGKILL
    else:
        line = one_error(result, EXIT_CODE_OF_SIGNAL[signum])
        assert line in ("ortstack: error: interrupted", "ortstack: error: terminated")
        # The half-made tree is removed on the way out, unless a git the signal cut off still writes there.
        assert not list(tree.parent.glob(".default.*")) or "the next run removes it" in result.stderr
    assert snapshot(tree) == good
    assert snapshot(tmp_path / "cache" / "sources") == sources

    again = Process(patch_args(project, tmp_path), env=cli_env, log=tmp_path / "again.log")
    assert again.finish().returncode == 0, again.stderr()
    assert sorted(p.name for p in (tree / "extra").iterdir()) == [f"part{n:02d}.txt" for n in range(SERIES_LENGTH)]
    assert sorted(p.name for p in tree.parent.iterdir()) == ["default", "default.lock"]  # no leftovers


# --------------------------------------------------------------------------------------------------
# Two runs on one work dir.


@fault("patch-two-runs")
def test_two_patch_runs_at_once(upstream: Upstream, project: Project, cli_env: dict[str, str], tmp_path: Path) -> None:
    project.write(series(project, upstream, 4))
    runs = [Process(patch_args(project, tmp_path), env=cli_env, log=tmp_path / f"run{n}.log") for n in range(2)]
    results = [run.finish() for run in runs]
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    tree = tmp_path / "work" / "prepared" / "default"
    assert sorted(p.name for p in (tree / "extra").iterdir()) == [f"part{n:02d}.txt" for n in range(4)]
    assert sum("is up to date" in r.stderr for r in results) == 1  # the second found the first one's tree
    assert sorted(p.name for p in tree.parent.iterdir()) == ["default", "default.lock"]


@fault("patch-no-wait")
def test_patch_waits_for_another_run_or_refuses_with_no_wait(
    upstream: Upstream, project: Project, cli_env: dict[str, str], tmp_path: Path
) -> None:
    project.write(series(project, upstream, 2))
    tree = tmp_path / "work" / "prepared" / "default"
    tree.parent.mkdir(parents=True)
    with FileLock(f"{tree}.lock"):  # what a run preparing the tree holds
        refused = Process([*patch_args(project, tmp_path), "--no-wait"], env=cli_env, log=tmp_path / "refused.log")
        line = one_error(refused.finish(), 8)
        assert f"another ortstack run is preparing {tree}" in line
        assert not tree.exists()

        waiting = Process(patch_args(project, tmp_path), env=cli_env, log=tmp_path / "waiting.log")
        waiting.wait_for(lambda: "waiting for another ortstack run preparing" in waiting.stderr(), "a waiting message")
        assert not tree.exists()
    assert waiting.finish().returncode == 0, waiting.stderr()
    assert len(list((tree / "extra").iterdir())) == 2
