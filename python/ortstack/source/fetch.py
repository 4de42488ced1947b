"""Get onnxruntime at the pinned commit into the cache: by git, by archive URL + sha256, or local.

- git: a shallow fetch of exactly the pinned commit into one bare repository in the cache; the
  commit id is the integrity check (``FETCH_HEAD`` must be that commit).
- archive: download, verify the sha256 (pinned in ``stack.toml``, or recorded on first use in
  ``stack.lock``), keep it under its digest, extract it safely.
- local: ``--source-dir`` uses an existing checkout, after checking that it is at the pinned commit.

A complete tree in the cache is reused without any network I/O.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ortstack import _run, diskspace, log
from ortstack.bounds import Bounds, size_limit
from ortstack.cache import Cache, remove_tree, tree_size
from ortstack.errors import ChecksumError, ConfigError, FetchError
from ortstack.lockfile import VERSION_KEY_PREFIX, Lock, write_atomic
from ortstack.source import archive, download

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping

    from ortstack.config import OrtPin, Stack
    from ortstack.settings import Settings

Method = Literal["auto", "git", "archive"]
_DIGEST_LENGTHS = {"sha256": 64, "sha1": 40}
SOURCE_MARKS = ("VERSION_NUMBER", "cmake/CMakeLists.txt")
"""Files every onnxruntime tree has at its root; a tree without them is not the pinned project."""


@dataclass(frozen=True, kw_only=True)
class FetchResult:
    commit: str
    source_dir: Path
    method: str
    """``git``, ``archive`` or ``local``: how the tree was obtained (first time, for cached trees)."""
    origin: str
    """The URL or folder it came from."""
    cached: bool
    """True when the tree was already complete in the cache (no network I/O)."""
    archive_sha256: str = ""
    files: int = 0
    size: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        verb = "using" if self.method.startswith("local") else "cached" if self.cached else "fetched"
        digest = f", sha256 {self.archive_sha256}" if self.archive_sha256 else ""
        return (
            f"{verb} onnxruntime {self.commit[:12]} ({self.method}, {self.origin}) -> {self.source_dir}: "
            f"{self.files} files, {_mib(self.size)}{digest}, {self.seconds:.1f} s"
        )


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def cache_for(settings: Settings) -> Cache:
    return Cache(root=settings.cache_dir, wait_for_lock=settings.wait_for_lock)


def ensure_source(
    stack: Stack, settings: Settings, *, method: Method = "auto", source_dir: Path | None = None
) -> FetchResult:
    """The pinned source tree: from ``source_dir``, from the cache, or fetched into the cache."""
    start = time.perf_counter()
    pin = stack.ort
    if source_dir is not None:
        if _is_extracted_archive(source_dir, settings.env):
            lock = Lock.load(settings.lock_file, locked=settings.locked, bounds=settings.bounds)
            local = _use_extracted_archive(source_dir, pin, cache_for(settings), lock, start=start)
        else:
            local = _use_local(source_dir, pin.commit, settings.env, start)
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        used = {"commit": local.commit, "origin": local.origin, "method": local.method}
        write_atomic(local_record_file(settings), (json.dumps(used, indent=2) + "\n").encode())
        return local
    cache = cache_for(settings)
    cached = _cached(cache, pin.commit, start)
    if cached is not None:
        return cached
    lock = Lock.load(settings.lock_file, locked=settings.locked, bounds=settings.bounds)
    chosen = method if method != "auto" else ("archive" if pin.archive_url else "git")
    if chosen == "archive" and not pin.archive_url:
        msg = f"{stack.path}: [ort] has no archive_url to fetch from"
        raise ConfigError(msg, tip="set archive_url (and archive_sha256), or fetch by git")
    with cache.lock(f"source-{pin.commit}", what=f"the source of {pin.commit[:12]}"):
        cached = _cached(cache, pin.commit, start)  # another process may have finished it meanwhile
        if cached is not None:
            return cached
        diskspace.check("fetch", cache.root, settings.env)
        cache.remove_stale_temps(cache.sources, pin.commit)
        work = cache.temp_dir(cache.sources, pin.commit)
        try:
            staged = work / "tree"
            staged.mkdir()
            limits = archive.Limits.from_env(settings.env)
            if chosen == "git":
                _fetch_git(pin.repository, pin.commit, cache, settings.env, work / "tree.tar")
                archive.extract(work / "tree.tar", staged, label=f"commit {pin.commit[:12]}", limits=limits)
                check_source_tree(staged, f"commit {pin.commit} of {pin.repository}")
                record: dict[str, Any] = {"method": "git", "origin": pin.repository}
            else:
                record = _fetch_archive(pin, cache, lock, staged, limits=limits, bounds=settings.bounds)
            files, size = tree_size(staged)
            record |= {"commit": pin.commit, "files": files, "size": size, "fetched": datetime.now(UTC).isoformat()}
            final = cache.publish_source(staged, pin.commit, record)
        finally:
            remove_tree(work)
    return _result(final, record, cached=False, start=start)


def _cached(cache: Cache, commit: str, start: float) -> FetchResult | None:
    record = cache.source_record(commit)
    if record is None:
        return None
    return _result(cache.source_dir(commit), record, cached=True, start=start)


def _result(source: Path, record: Mapping[str, Any], *, cached: bool, start: float) -> FetchResult:
    return FetchResult(
        commit=str(record["commit"]),
        source_dir=source,
        method=str(record["method"]),
        origin=str(record["origin"]),
        cached=cached,
        archive_sha256=str(record.get("archive_sha256", "")),
        files=int(record.get("files", 0)),
        size=int(record.get("size", 0)),
        seconds=time.perf_counter() - start,
    )


# --------------------------------------------------------------------------------------------------
# By git.


OTHER_SOURCES_TIP = (
    "check that the commit exists there and the URL is reachable; without network to it, give the source "
    "another way: `--source-dir PATH` (an onnxruntime checkout at the pin; `nox -s build -- --source-dir PATH`), "
    "or in stack.toml [ort] archive_url + archive_sha256 (a tarball on a server you reach) or repository "
    "(a git mirror)"
)


def git_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for git: never stop to ask for credentials."""
    return {**env, "GIT_TERMINAL_PROMPT": "0"}


def _git(repo: Path, *args: str, env: Mapping[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run.run(["git", f"--git-dir={repo}", *args], env=git_env(env), capture=True, check=check, quiet=True)


def _fetch_git(
    repository: str, commit: str, cache: Cache, env: Mapping[str, str], tar: Path, *, tip: str = OTHER_SOURCES_TIP
) -> None:
    """Put ``commit``'s tree into ``tar``, fetching the commit into the cache's repository if needed."""
    repo = cache.git_dir
    with cache.lock("git", what="the git object cache"):
        if not (repo / "HEAD").is_file():
            repo.parent.mkdir(parents=True, exist_ok=True)
            _run.run(["git", "init", "--quiet", "--bare", str(repo)], env=git_env(env), capture=True, quiet=True)
        if _git(repo, "cat-file", "-e", f"{commit}^{{commit}}", env=env, check=False).returncode != 0:
            log.command(f"git fetch --depth 1 {repository} {commit}")
            with log.waiting(f"fetching {commit[:12]} from {repository}"):
                fetched = _git(
                    repo,
                    "fetch",
                    "--quiet",
                    "--depth",
                    "1",
                    "--no-tags",
                    repository,
                    commit,
                    env=env,
                    check=False,
                )
            if fetched.returncode != 0:
                msg = f"git could not fetch commit {commit} from {repository}: {_git_reason(fetched.stderr)}"
                raise FetchError(msg, tip=tip)
            head = _git(repo, "rev-parse", "FETCH_HEAD", env=env).stdout.strip()
            if head != commit:
                msg = f"git fetched {head} from {repository}, not the pinned {commit}"
                raise FetchError(msg, tip="the server answered with another commit; check the repository URL")
        # One top folder, stripped on extraction like a GitHub archive's: the same code path for both.
        _git(repo, "archive", "--format=tar", "--prefix=onnxruntime/", f"--output={tar}", commit, env=env)


def _git_reason(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    important = [line for line in lines if line.startswith(("fatal:", "error:"))]
    return (important or lines or ["no message"])[0]


def git_tree(cache: Cache, repository: str, commit: str, env: Mapping[str, str], *, what: str, tip: str) -> Path:
    """``commit`` of ``repository`` as a read-only tree in the cache (fetched shallow, by its id, once)."""
    if cache.source_record(commit) is not None:
        return cache.source_dir(commit)
    with cache.lock(f"source-{commit}", what=f"the source of {commit[:12]}"):
        if cache.source_record(commit) is None:
            cache.remove_stale_temps(cache.sources, commit)
            work = cache.temp_dir(cache.sources, commit)
            try:
                staged = work / "tree"
                staged.mkdir()
                _fetch_git(repository, commit, cache, env, work / "tree.tar", tip=tip)
                limits = archive.Limits.from_env(env)
                archive.extract(work / "tree.tar", staged, label=f"commit {commit[:12]}", limits=limits)
                files, size = tree_size(staged)
                record: dict[str, Any] = {"method": "git", "origin": repository, "commit": commit, "what": what}
                record |= {"files": files, "size": size, "fetched": datetime.now(UTC).isoformat()}
                cache.publish_source(staged, commit, record)
            finally:
                remove_tree(work)
    return cache.source_dir(commit)


# --------------------------------------------------------------------------------------------------
# By archive.


def _fetch_archive(
    pin: OrtPin, cache: Cache, lock: Lock, staged: Path, *, limits: archive.Limits, bounds: Bounds
) -> dict[str, Any]:
    """Get the archive (verified), extract it into ``staged``; returns the marker record."""
    url = pin.archive_url
    suffix = archive.suffix_of(url)
    expected = pin.archive_sha256 or lock.get(url)
    if not expected and lock.locked:
        msg = f"the sha256 of {url} is neither in stack.toml nor in {lock.path.name}, and --locked forbids resolving it"
        raise ConfigError(msg, tip="run once without --locked and commit the lock file, or set archive_sha256")
    if expected:
        max_bytes = size_limit(bounds.download_mib)
        path = cached_download(cache, url, digest=expected, suffix=suffix, max_bytes=max_bytes)
        digest = expected
    else:
        path, digest = _first_download(url, suffix, cache, size_limit(bounds.download_mib))
    try:
        named = archive.extract(path, staged, label=url, limits=limits)
        _check_commit(url, named, pin.commit)
        check_source_tree(staged, url)
        if named is None:  # nothing in the archive ties it to the pin but its version
            check_version(staged, pin, url, lock=lock, earlier=None)
    except FetchError:
        # Never keep, or trust, what could not be used, whatever its digest: a pinned one is refused again.
        path.unlink(missing_ok=True)
        raise
    if not expected:
        lock.resolve(url, digest, what=f"sha256 of {url}")
    return {"method": "archive", "origin": url, "archive_sha256": digest}


def check_source_tree(tree: Path, origin: str, tip: str = "") -> None:
    """Refuse a tree that is not the pinned project: empty, or without onnxruntime's root files."""
    if not any(path.is_file() for path in tree.rglob("*")):
        msg = f"{origin} holds no files: it is not an onnxruntime source tree"
        raise FetchError(msg, tip=tip or _NOT_A_SOURCE_TIP)
    missing = [name for name in SOURCE_MARKS if not (tree / name).is_file()]
    if missing:
        msg = f"{origin} is not an onnxruntime source tree: {', '.join(missing)} missing at its root"
        raise FetchError(msg, tip=tip or _NOT_A_SOURCE_TIP)


_NOT_A_SOURCE_TIP = "point archive_url (or repository) at onnxruntime itself, at the pinned commit"


def _check_commit(url: str, found: str | None, pinned: str) -> None:
    if found is not None and found != pinned:
        msg = f"{url} is an archive of commit {found}, not of the pinned {pinned}"
        raise FetchError(msg, tip="make archive_url and commit in stack.toml name the same commit")


def cached_download(
    cache: Cache,
    url: str,
    *,
    digest: str,
    algorithm: str = "sha256",
    suffix: str = "",
    max_bytes: int = download.DEFAULT_MAX_BYTES,
) -> Path:
    """The file at ``url`` whose ``algorithm`` digest is ``digest``, from the cache or downloaded and verified.

    Kept as ``archives/<digest><suffix>`` (sha256) or ``archives/<algorithm>-<digest><suffix>``;
    a file already there is checked against its digest (disks and people damage caches) and returned
    without network I/O; a damaged one is downloaded again. A download larger than ``max_bytes`` is refused.
    """
    if not re.fullmatch(f"[0-9a-f]{{{_DIGEST_LENGTHS[algorithm]}}}", digest):  # it becomes a file name
        msg = f"the pinned {algorithm} of {url} is not {_DIGEST_LENGTHS[algorithm]} hex digits: {digest[:80]!r}"
        raise ConfigError(msg, tip="pin the digest the file has: lowercase hex, nothing else")
    name = digest if algorithm == "sha256" else f"{algorithm}-{digest}"
    final = cache.archives / f"{name}{suffix}"
    if final.is_file() and download.digest_of(final, algorithm) == digest:
        return final
    with cache.lock(f"archive-{name}", what=f"the download of {url}"):
        if final.is_file():
            if download.digest_of(final, algorithm) == digest:
                return final  # another run just put it there
            log.warn(f"{final} no longer has {algorithm} {digest} (damaged in the cache); downloading it again")
            final.unlink()
        part = final.with_name(final.name + ".part")
        download.download(url, part, max_bytes=max_bytes)
        found = download.digest_of(part, algorithm)
        if found != digest:
            size = part.stat().st_size
            part.unlink()
            msg = f"{algorithm} mismatch for {url}: expected {digest}, got {found} ({size} bytes)"
            tip = "if the pin changed on purpose, update its digest; otherwise the download is corrupt"
            raise ChecksumError(msg, tip=tip)
        part.replace(final)
    return final


def _first_download(url: str, suffix: str, cache: Cache, max_bytes: int) -> tuple[Path, str]:
    """Trust on first use: download, then file the archive under the digest it turned out to have."""
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    with cache.lock(f"archive-url-{key}", what=f"the download of {url}"):
        part = cache.archives / f"url-{key}{suffix}.part"
        download.download(url, part, max_bytes=max_bytes)
        digest = download.digest_of(part)
        final = cache.archives / f"{digest}{suffix}"
        part.replace(final)
    return final, digest


# --------------------------------------------------------------------------------------------------
# A local checkout.


def _use_local(path: Path, commit: str, env: Mapping[str, str], start: float) -> FetchResult:
    try:
        source = path.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a loop of links, before Python 3.13
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "a loop of links"
        msg = f"--source-dir {path} cannot be followed ({reason})"
        raise FetchError(msg, tip="pass the folder of an onnxruntime checkout itself") from None
    if not source.is_dir():
        msg = f"--source-dir {path} does not exist"
        raise FetchError(msg, tip="pass the folder of an onnxruntime checkout")
    head = _run.run(
        ["git", "-C", str(source), "rev-parse", "HEAD"], env=git_env(env), capture=True, check=False, quiet=True
    )
    if head.returncode != 0:
        msg = f"--source-dir {path} is not a git checkout ({_git_reason(head.stderr)})"
        raise FetchError(msg, tip="pass the folder of a git clone of onnxruntime")
    at = head.stdout.strip()
    if at != commit:
        msg = f"--source-dir {path} is at commit {at}, not at the pinned {commit}"
        raise FetchError(msg, tip=f"run `git -C {path} checkout {commit}`, or drop --source-dir")
    changes = _run.run(
        ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
        env=git_env(env),
        capture=True,
        quiet=True,
    )
    if changes.stdout.strip():
        log.warn(f"{path} has uncommitted changes; they become part of the source")
    check_source_tree(source, f"--source-dir {path}", tip="pass the folder of an onnxruntime checkout")
    leaving = _link_leaving(source)
    if leaving is not None:
        name, target = leaving
        msg = f"--source-dir {path} holds {name!r}, a link to {target!r} outside the checkout"
        tip = "remove the link from the checkout: a source tree may hold no link that leads out of it"
        raise FetchError(msg, tip=tip)
    record = {"commit": commit, "method": "local", "origin": str(source)}
    return _result(source, record, cached=True, start=start)


def _link_leaving(tree: Path) -> tuple[str, str] | None:
    """The first link in ``tree`` (``.git`` aside) that resolves outside it, with its target; links not followed."""
    root = os.path.realpath(tree)
    for folder, folders, files in os.walk(root):
        if folder == root:
            folders[:] = [name for name in folders if name != ".git"]
        for name in folders + files:
            entry = Path(folder, name)
            if entry.is_symlink() and os.path.commonpath([root, os.path.realpath(entry)]) != root:
                return entry.relative_to(root).as_posix(), str(entry.readlink())
    return None


def local_record_file(settings: Settings) -> Path:
    """Where the last ``--source-dir`` run says which checkout it used (for ``status``)."""
    return settings.work_dir / "source-dir.json"


def local_source(settings: Settings, commit: str) -> str:
    """The checkout the last ``--source-dir`` run used for ``commit``; empty when none did."""
    try:
        record = json.loads(local_record_file(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(record, dict) or record.get("commit") != commit:
        return ""
    extracted = " (an extracted source archive)" if record.get("method") == "local archive" else ""
    return f"{record.get('origin', '')}{extracted}"


def cached_sources(cache: Cache) -> list[dict[str, Any]]:
    """Markers of every complete source tree in the cache, newest first."""
    records = [cache.source_record(marker.stem) for marker in cache.sources.glob("*.json")]
    complete = [r for r in records if r is not None]
    return sorted(complete, key=lambda r: str(r.get("fetched", "")), reverse=True)


# --------------------------------------------------------------------------------------------------
# A source without git: an extracted source archive, or an archive that names no commit.


def _is_extracted_archive(path: Path, env: Mapping[str, str]) -> bool:
    """A folder with onnxruntime's root files that git does not know as a checkout (an extracted tarball)."""
    if not all((path / name).is_file() for name in SOURCE_MARKS):
        return False
    head = _run.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], env=git_env(env), capture=True, check=False, quiet=True
    )
    return head.returncode != 0


def _use_extracted_archive(path: Path, pin: OrtPin, cache: Cache, lock: Lock, *, start: float) -> FetchResult:
    """``--source-dir`` of an extracted source tarball: its commit cannot be read, so its version is what is
    checked; recorded as an extracted archive."""
    source = path.resolve()
    earlier = cache.source_dir(pin.commit) if cache.source_record(pin.commit) is not None else None
    check_version(source, pin, f"--source-dir {path}", lock=lock, earlier=earlier)
    record = {"commit": pin.commit, "method": "local archive", "origin": str(source)}
    return _result(source, record, cached=True, start=start)


def version_lock_key(commit: str) -> str:
    return f"{VERSION_KEY_PREFIX}{commit}"


def check_version(tree: Path, pin: OrtPin, origin: str, *, lock: Lock, earlier: Path | None) -> None:
    """Refuse a tree that names no commit and whose ``VERSION_NUMBER`` is not the pin's: ``[ort] version``,
    else the version the lock kept from the first such fetch, else that of the pin's tree fetched
    ``earlier`` into the cache. With none of them, the version is trusted on first use and kept in the lock."""
    found = (tree / "VERSION_NUMBER").read_text(encoding="utf-8").strip()
    key = version_lock_key(pin.commit)
    expected, known_from = pin.version, "[ort] version in the stack file"
    if not expected and (kept := lock.get(key)):
        expected, known_from = kept, f"kept in {lock.path.name} at the first fetch"
    if not expected and earlier is not None and (earlier / "VERSION_NUMBER").is_file():
        expected = (earlier / "VERSION_NUMBER").read_text(encoding="utf-8").strip()
        known_from = f"the tree of {pin.commit[:12]} fetched earlier into the cache"
    if not expected:
        what = f"{origin} names no commit: its VERSION_NUMBER is taken as that of the pinned {pin.commit[:12]}"
        if lock.locked:  # nothing new may be resolved: say it, and leave the lock as it is
            log.warn(f"{what} ({found}; set [ort] version in the stack file to have it checked)")
        else:
            lock.resolve(key, found, what=what)
        return
    if found != expected:
        msg = f"{origin} is onnxruntime {found}, but the pinned commit {pin.commit[:12]} is {expected} ({known_from})"
        raise FetchError(msg, tip="give the source of the pinned commit, or pin the commit this source is of")
