"""``ortstack fetch`` end to end on the miniature upstream: real git, real HTTP on 127.0.0.1."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from typing import TYPE_CHECKING

import filelock
import pytest

from clirun import RunOrtstack, one_error
from ortstack import settings
from ortstack.cache import Cache
from ortstack.config import load
from ortstack.errors import ChecksumError, FetchError
from ortstack.source import fetch
from upstream import Fault, LoopbackServer, Upstream, git, stack_toml

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

pytestmark = pytest.mark.network


def write_stack(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "stack.toml"
    path.write_text(text, encoding="utf-8")
    return path


def git_stack(tmp_path: Path, upstream: Upstream, *, url: str | None = None, commit: str | None = None) -> Path:
    return write_stack(
        tmp_path / "project", stack_toml(repository=url or upstream.url, commit=commit or upstream.commit)
    )


def archive_stack(tmp_path: Path, upstream: Upstream, *, url: str, sha256: str = "", commit: str | None = None) -> Path:
    text = stack_toml(repository=upstream.url, commit=commit or upstream.commit, archive_url=url, archive_sha256=sha256)
    return write_stack(tmp_path / "project", text)


def assert_tree_is(source: Path, upstream: Upstream, commit: str) -> None:
    """Every file of ``commit`` is in ``source`` byte for byte, and nothing else."""
    expected = upstream.tree_files(commit)
    found = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
    assert found == sorted(expected)
    for name in expected:
        assert (source / name).read_bytes() == upstream.file_at(commit, name), name


def snapshot(cache: Path) -> dict[str, bytes]:
    """Every file of the cache except lock files: what must survive a failed fetch unchanged."""
    return {
        p.relative_to(cache).as_posix(): p.read_bytes()
        for p in sorted(cache.rglob("*"))
        if p.is_file() and "locks" not in p.relative_to(cache).parts and p.name != "FETCH_HEAD"
    }


def good_cache(cache: Path, tmp_path: Path, upstream: Upstream, env: Mapping[str, str]) -> dict[str, bytes]:
    """A cache holding a good tree of the upstream's commit; returns its snapshot."""
    stack = load(git_stack(tmp_path / "good", upstream))
    fetch.ensure_source(stack, settings.resolve(env, stack_file=stack.path, cache_dir=cache))
    return snapshot(cache)


def assert_intact(cache: Path, before: dict[str, bytes]) -> None:
    after = snapshot(cache)
    assert {k: v for k, v in after.items() if k in before} == before
    assert not [name for name in after if "/.tmp-" in name or name.startswith(".tmp-")]


@pytest.fixture(scope="module")
def second(upstream: Upstream) -> str:
    """A second upstream commit, with its archive on the server (for fetches that must miss the cache)."""
    commit = upstream.add_commit({"NOTES.txt": "a second commit\n"}, "Add notes")
    git("push", "--quiet", upstream.url, f"{commit}:refs/heads/second", cwd=upstream.work, env=upstream.env)
    upstream.publish_archive(commit)
    return commit


# --------------------------------------------------------------------------------------------------
# Good paths: cold and warm.


def test_git_cold_then_warm(
    run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path, cache_dir: Path, base_env: dict[str, str]
) -> None:
    mirror = tmp_path / "mirror.git"
    git("clone", "--quiet", "--bare", upstream.url, str(mirror), cwd=tmp_path, env=base_env)
    git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=mirror, env=base_env)
    stack = git_stack(tmp_path, upstream, url=mirror.as_uri())

    cold = run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir)
    assert cold.returncode == 0, cold.stderr
    source = cache_dir / "sources" / upstream.commit
    assert_tree_is(source, upstream, upstream.commit)
    assert f"fetched onnxruntime {upstream.commit[:12]} (git" in cold.stderr
    assert (cache_dir / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert json.loads((cache_dir / "sources" / f"{upstream.commit}.json").read_text())["commit"] == upstream.commit
    assert all(p.stat().st_mode & 0o222 == 0 for p in source.rglob("*") if p.is_file())  # read-only

    # The warm run cannot reach the repository at all, and does not need to.
    git_repo_files = snapshot(cache_dir)
    mirror.rename(tmp_path / "gone.git")
    warm = run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir)
    assert warm.returncode == 0, warm.stderr
    assert f"cached onnxruntime {upstream.commit[:12]}" in warm.stderr
    assert snapshot(cache_dir) == git_repo_files


def test_archive_cold_then_warm(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path
) -> None:
    stack = archive_stack(tmp_path, upstream, url=upstream.archive_url, sha256=upstream.archive_sha256)
    path = upstream.archive_url.removeprefix(clean_server.url)

    cold = run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir)
    assert cold.returncode == 0, cold.stderr
    assert clean_server.requests() == 1
    assert clean_server.requests(path) == 1
    assert_tree_is(cache_dir / "sources" / upstream.commit, upstream, upstream.commit)
    assert (cache_dir / "archives" / f"{upstream.archive_sha256}.tar.gz").read_bytes() == upstream.archive
    assert upstream.archive_sha256 in cold.stderr
    assert not (stack.parent / "stack.lock").exists()  # the pin had the digest: nothing to record

    clean_server.reset_counts()
    warm = run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir)
    assert warm.returncode == 0, warm.stderr
    assert clean_server.requests() == 0
    assert "cached onnxruntime" in warm.stderr


def test_archive_trust_on_first_use_and_locked(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path
) -> None:
    stack = archive_stack(tmp_path, upstream, url=upstream.archive_url)
    locked = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir, "--locked"), 3)
    assert "--locked forbids resolving it" in locked
    assert clean_server.requests() == 0  # refused before any download

    first = run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir)
    assert first.returncode == 0, first.stderr
    lock_text = (stack.parent / "stack.lock").read_text()
    assert f'"{upstream.archive_url}" = "{upstream.archive_sha256}"' in lock_text
    assert "trust on first use" in first.stderr

    # With the digest locked, a fresh cache fetches under --locked and verifies against the lock.
    again = run_ortstack("fetch", "--stack", stack, "--cache-dir", tmp_path / "cache2", "--locked")
    assert again.returncode == 0, again.stderr


def test_local_checkout(
    run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path, base_env: dict[str, str]
) -> None:
    checkout = tmp_path / "checkout"
    git("clone", "--quiet", upstream.url, str(checkout), cwd=tmp_path, env=base_env)
    stack = git_stack(tmp_path, upstream)
    good = run_ortstack("fetch", "--stack", stack, "--cache-dir", tmp_path / "cache", "--source-dir", checkout)
    assert good.returncode == 0, good.stderr
    assert f"using onnxruntime {upstream.commit[:12]} (local" in good.stderr
    assert not (tmp_path / "cache" / "sources").exists()  # a local checkout is used in place

    other = upstream.add_commit({"NOTES.txt": "elsewhere\n"}, "Elsewhere")
    git("fetch", "--quiet", str(upstream.work), other, cwd=checkout, env=base_env)
    git("checkout", "--quiet", other, cwd=checkout, env=base_env)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--source-dir", checkout), 4)
    assert f"is at commit {other}, not at the pinned {upstream.commit}" in line

    line = one_error(run_ortstack("fetch", "--stack", stack, "--source-dir", tmp_path), 4)
    assert "is not a git checkout" in line


# --------------------------------------------------------------------------------------------------
# The network misbehaves.


def test_resume_after_dropped_connection(
    upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path, base_env: dict[str, str]
) -> None:
    path = upstream.archive_url.removeprefix(clean_server.url)
    clean_server.fault(path, Fault.DROP, times=1)
    stack = load(archive_stack(tmp_path, upstream, url=upstream.archive_url, sha256=upstream.archive_sha256))
    result = fetch.ensure_source(stack, settings.resolve(base_env, stack_file=stack.path, cache_dir=cache_dir))
    assert not result.cached
    assert clean_server.requests(path) == 2
    [(ranged_path, header)] = clean_server.ranges()
    assert ranged_path == path
    assert header == f"bytes={len(upstream.archive) // 2}-"  # resumed where the connection dropped
    assert_tree_is(result.source_dir, upstream, upstream.commit)


def test_restart_when_server_cannot_resume(
    upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path, base_env: dict[str, str]
) -> None:
    path = upstream.archive_url.removeprefix(clean_server.url)
    clean_server.fault(path, Fault.DROP, times=1)
    clean_server.set_range_support(enabled=False)
    stack = load(archive_stack(tmp_path, upstream, url=upstream.archive_url, sha256=upstream.archive_sha256))
    result = fetch.ensure_source(stack, settings.resolve(base_env, stack_file=stack.path, cache_dir=cache_dir))
    assert clean_server.requests(path) == 2
    assert_tree_is(result.source_dir, upstream, upstream.commit)


def test_server_error_is_retried_not_found_is_not(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path
) -> None:
    path = upstream.archive_url.removeprefix(clean_server.url)
    stack = archive_stack(tmp_path, upstream, url=upstream.archive_url, sha256=upstream.archive_sha256)
    clean_server.fault(path, Fault.NOT_FOUND)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert "HTTP 404" in line
    assert clean_server.requests(path) == 1

    clean_server.fault(path, Fault.SERVER_ERROR, times=1)
    result = run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir)
    assert result.returncode == 0, result.stderr
    assert clean_server.requests(path) == 3
    assert "HTTP 503" in result.stderr  # the retry was announced


def test_unreachable_host(run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path, cache_dir: Path) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stack = archive_stack(tmp_path, upstream, url=f"http://127.0.0.1:{port}/onnxruntime.tar.gz")
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert f"could not download http://127.0.0.1:{port}/onnxruntime.tar.gz" in line
    assert "refused" in line.lower()
    assert not (stack.parent / "stack.lock").exists()


def test_offline_build_stops_at_once_naming_the_other_ways_to_give_sources(
    run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path, cache_dir: Path
) -> None:
    """`nox -s build`'s first step on a machine that cannot reach the repository (nothing listens there)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stack = git_stack(tmp_path, upstream, url=f"http://127.0.0.1:{port}/onnxruntime.git")
    start = time.monotonic()
    result = run_ortstack("fetch", "--deps", "--stack", stack, "--cache-dir", cache_dir)
    assert time.monotonic() - start < 30
    line = one_error(result, 4)
    assert f"git could not fetch commit {upstream.commit}" in line
    tip = " ".join(result.stderr.split("tip:", 1)[1].split())
    for way in ("`--source-dir PATH`", "`nox -s build -- --source-dir PATH`", "archive_url + archive_sha256", "mirror"):
        assert way in tip, tip


# --------------------------------------------------------------------------------------------------
# Bad input: one clear line, a documented exit code, the cache and the earlier good tree intact.


def test_sha256_mismatch(
    run_ortstack: RunOrtstack,
    upstream: Upstream,
    second: str,
    clean_server: LoopbackServer,
    tmp_path: Path,
    cache_dir: Path,
    base_env: dict[str, str],
) -> None:
    before = good_cache(cache_dir, tmp_path, upstream, base_env)
    url = f"{clean_server.url}/microsoft/onnxruntime/archive/{second}.tar.gz"
    stack = archive_stack(tmp_path, upstream, url=url, sha256="0" * 64, commit=second)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert f"sha256 mismatch for {url}: expected {'0' * 64}, got " in line
    assert_intact(cache_dir, before)
    assert not list((cache_dir / "archives").iterdir())  # nothing kept, not even a .part
    assert not (cache_dir / "sources" / second).exists()


def test_wrong_bytes_against_a_locked_digest(
    run_ortstack: RunOrtstack,
    upstream: Upstream,
    second: str,
    clean_server: LoopbackServer,
    tmp_path: Path,
    cache_dir: Path,
    base_env: dict[str, str],
) -> None:
    before = good_cache(cache_dir, tmp_path, upstream, base_env)
    path = f"/microsoft/onnxruntime/archive/{second}.tar.gz"
    real = hashlib.sha256(upstream.archive_of(second)).hexdigest()
    stack = archive_stack(tmp_path, upstream, url=clean_server.url + path, sha256=real, commit=second)
    clean_server.fault(path, Fault.WRONG_BYTES)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert f"expected {real}" in line
    assert_intact(cache_dir, before)


def test_truncated_archive(
    run_ortstack: RunOrtstack,
    upstream: Upstream,
    second: str,
    clean_server: LoopbackServer,
    tmp_path: Path,
    cache_dir: Path,
    base_env: dict[str, str],
) -> None:
    before = good_cache(cache_dir, tmp_path, upstream, base_env)
    path = f"/microsoft/onnxruntime/archive/{second}.tar.gz"
    clean_server.fault(path, Fault.TRUNCATED)
    stack = archive_stack(tmp_path, upstream, url=clean_server.url + path, commit=second)  # trust on first use
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert "is truncated or corrupt" in line
    assert_intact(cache_dir, before)
    assert not list((cache_dir / "archives").iterdir())
    assert not (stack.parent / "stack.lock").exists()  # a bad download is never trusted


def evil_tar(kind: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        good = tarfile.TarInfo("onnxruntime-x/VERSION_NUMBER")
        good.size = 7
        tar.addfile(good, io.BytesIO(b"1.31.0\n"))
        member = tarfile.TarInfo(
            {"dotdot": "onnxruntime-x/../../escaped.txt", "absolute": "/tmp/escaped.txt"}.get(
                kind, "onnxruntime-x/link"
            )
        )
        if kind == "symlink":
            member.type = tarfile.SYMTYPE
            member.linkname = "../../../outside"
            tar.addfile(member)
        elif kind == "device":
            member.type = tarfile.CHRTYPE
            tar.addfile(member)
        else:
            member.size = 4
            tar.addfile(member, io.BytesIO(b"evil"))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("dotdot", "'onnxruntime-x/../../escaped.txt': '..' climbs out of the destination"),
        ("absolute", "'/tmp/escaped.txt': absolute path"),
        ("symlink", "'onnxruntime-x/link': symlink to '../../../outside' points outside the destination"),
        ("device", "'onnxruntime-x/link': device file or FIFO"),
    ],
)
def test_unsafe_archive_members(
    kind: str,
    message: str,
    run_ortstack: RunOrtstack,
    upstream: Upstream,
    clean_server: LoopbackServer,
    tmp_path: Path,
    cache_dir: Path,
    base_env: dict[str, str],
) -> None:
    before = good_cache(cache_dir, tmp_path, upstream, base_env)
    url = clean_server.add(f"/evil/{kind}.tar.gz", evil_tar(kind))
    stack = archive_stack(tmp_path, upstream, url=url, commit="e" * 40)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert f"{url}: refusing member {message}" in line
    assert_intact(cache_dir, before)
    assert not list((cache_dir / "archives").iterdir())
    assert not (cache_dir / "sources" / ("e" * 40)).exists()
    assert not list(tmp_path.rglob("escaped.txt"))
    assert not list(tmp_path.rglob("outside"))


def test_archive_of_another_commit(
    run_ortstack: RunOrtstack, upstream: Upstream, second: str, tmp_path: Path, cache_dir: Path
) -> None:
    stack = archive_stack(tmp_path, upstream, url=upstream.archive_url, commit=second)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert f"is an archive of commit {upstream.commit}, not of the pinned {second}" in line


def test_commit_not_found(
    run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path, cache_dir: Path, base_env: dict[str, str]
) -> None:
    before = good_cache(cache_dir, tmp_path, upstream, base_env)
    missing = "0123456789abcdef0123456789abcdef01234567"
    stack = git_stack(tmp_path, upstream, commit=missing)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert f"git could not fetch commit {missing} from {upstream.url}" in line
    assert_intact(cache_dir, before)
    assert not (cache_dir / "sources" / missing).exists()


def test_library_error_is_a_fetch_error(upstream: Upstream, tmp_path: Path, base_env: dict[str, str]) -> None:
    stack = load(git_stack(tmp_path, upstream, url=(tmp_path / "nowhere.git").as_uri()))
    with pytest.raises(FetchError, match="does not appear to be a git repository"):
        fetch.ensure_source(stack, settings.resolve(base_env, stack_file=stack.path, cache_dir=tmp_path / "c"))


# --------------------------------------------------------------------------------------------------
# Two processes at once.


def test_lock_held_by_another_process(
    run_ortstack: RunOrtstack,
    cli_env: dict[str, str],
    upstream: Upstream,
    tmp_path: Path,
    cache_dir: Path,
) -> None:
    stack = git_stack(tmp_path, upstream)
    holder = filelock.FileLock(cache_dir / "locks" / f"source-{upstream.commit}.lock")
    (cache_dir / "locks").mkdir(parents=True)
    with holder:
        line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir, "--no-wait"), 8)
        assert f"another ortstack run is working on the source of {upstream.commit[:12]}" in line

        log_file = tmp_path / "waiting.log"
        with log_file.open("w") as stderr:
            waiting = subprocess.Popen(
                [sys.executable, "-m", "ortstack", "fetch", "--stack", str(stack), "--cache-dir", str(cache_dir)],
                env=cli_env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
            deadline = time.monotonic() + 60
            while "waiting for another ortstack run" not in log_file.read_text():
                assert waiting.poll() is None, log_file.read_text()
                assert time.monotonic() < deadline, log_file.read_text()
                time.sleep(0.1)
    assert waiting.wait(timeout=60) == 0, log_file.read_text()
    assert_tree_is(cache_dir / "sources" / upstream.commit, upstream, upstream.commit)


def test_two_fetches_at_once(
    cli_env: dict[str, str], upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path
) -> None:
    stack = archive_stack(tmp_path, upstream, url=upstream.archive_url, sha256=upstream.archive_sha256)
    argv = [sys.executable, "-m", "ortstack", "fetch", "--stack", str(stack), "--cache-dir", str(cache_dir)]
    runs = [
        subprocess.Popen(argv, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert clean_server.requests() == 1  # the second one found the first one's tree
    assert_tree_is(cache_dir / "sources" / upstream.commit, upstream, upstream.commit)


# --------------------------------------------------------------------------------------------------
# Zip archives and other cached downloads.


def test_zip_archive(
    upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path, base_env: dict[str, str]
) -> None:
    zipped = tmp_path / "source.zip"
    prefix = f"--prefix=onnxruntime-{upstream.commit}/"
    git("archive", "--format=zip", prefix, "-o", str(zipped), upstream.commit, cwd=upstream.work, env=base_env)
    url = clean_server.add(f"/zip/{upstream.commit}.zip", zipped.read_bytes())
    stack = load(archive_stack(tmp_path, upstream, url=url))
    result = fetch.ensure_source(stack, settings.resolve(base_env, stack_file=stack.path, cache_dir=cache_dir))
    assert result.archive_sha256 == hashlib.sha256(zipped.read_bytes()).hexdigest()
    assert_tree_is(result.source_dir, upstream, upstream.commit)


def test_zip_member_escaping(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr("onnxruntime-x/VERSION_NUMBER", "1.31.0\n")
        bundle.writestr("onnxruntime-x/../../escaped.txt", "evil")
    url = clean_server.add("/evil/dotdot.zip", buffer.getvalue())
    stack = archive_stack(tmp_path, upstream, url=url, commit="f" * 40)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert f"{url}: refusing member 'onnxruntime-x/../../escaped.txt'" in line
    assert not list(tmp_path.rglob("escaped.txt"))


def test_cached_download_by_sha1(upstream: Upstream, clean_server: LoopbackServer, cache_dir: Path) -> None:
    """The way deps.txt pins are fetched: SHA1, cached under the digest, no network when present."""
    cache = Cache(root=cache_dir)

    def get(digest: str) -> Path:
        return fetch.cached_download(cache, upstream.mini_dep_url, digest=digest, algorithm="sha1", suffix=".zip")

    path = get(upstream.mini_dep_sha1)
    assert path == cache_dir / "archives" / f"sha1-{upstream.mini_dep_sha1}.zip"
    assert hashlib.sha1(path.read_bytes()).hexdigest() == upstream.mini_dep_sha1
    clean_server.reset_counts()
    assert get(upstream.mini_dep_sha1) == path
    assert clean_server.requests() == 0
    with pytest.raises(ChecksumError, match=f"sha1 mismatch for {upstream.mini_dep_url}: expected {'1' * 40}"):
        get("1" * 40)
    assert sorted(p.name for p in (cache_dir / "archives").iterdir()) == [path.name]


def test_resume_a_download_an_earlier_run_left(
    upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path, base_env: dict[str, str]
) -> None:
    """A ``.part`` file left by an interrupted run is continued, and what a crash left is cleaned up."""
    part = cache_dir / "archives" / f"{upstream.archive_sha256}.tar.gz.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(upstream.archive[:1000])
    leftover = cache_dir / "sources" / f".tmp-{upstream.commit}-crashed"
    (leftover / "tree").mkdir(parents=True)
    unmarked = cache_dir / "sources" / upstream.commit / "half-extracted.txt"  # renamed, marker never written
    unmarked.parent.mkdir()
    unmarked.write_text("stale\n")
    stack = load(archive_stack(tmp_path, upstream, url=upstream.archive_url, sha256=upstream.archive_sha256))
    result = fetch.ensure_source(stack, settings.resolve(base_env, stack_file=stack.path, cache_dir=cache_dir))
    assert [header for _, header in clean_server.ranges()] == ["bytes=1000-"]
    assert_tree_is(result.source_dir, upstream, upstream.commit)
    assert not leftover.exists()
    assert not unmarked.exists()
    assert not part.exists()


def test_not_enough_disk_space(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path
) -> None:
    stack = archive_stack(tmp_path, upstream, url=upstream.archive_url, sha256=upstream.archive_sha256)
    too_much = {"ORTSTACK_MIN_FREE_GIB_FETCH": "1e9"}
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir, env=too_much), 9)
    assert f"fetch needs 1000000000.0 GiB free under {cache_dir}" in line
    assert clean_server.requests() == 0  # checked before any download
