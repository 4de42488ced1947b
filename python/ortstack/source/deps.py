"""onnxruntime's ``cmake/deps.txt``: read it at the pin, mirror every entry, check the mirror is whole.

deps.txt has one dependency a line, ``name;url;sha1``, ``#`` starting a comment
(microsoft/onnxruntime@0112dcfd6221ea75dccac96585881c81ae0a67ea:cmake/external/onnxruntime_external_deps.cmake).
onnxruntime's cmake looks for each ``https://`` URL at ``<onnxruntime_CMAKE_DEPS_MIRROR_DIR>/<url
without https://>`` before downloading it, so a mirror laid out that way makes the build offline.

Dawn's own third-party sources are not deps.txt entries: ``ortstack.dawn`` reads and fetches them.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ortstack.errors import ConfigError, FetchError
from ortstack.source import download, fetch

if TYPE_CHECKING:
    from ortstack.cache import Cache
    from ortstack.settings import Settings

DEPS_FILE = PurePosixPath("cmake/deps.txt")
MIRROR_DEFINE = "onnxruntime_CMAKE_DEPS_MIRROR_DIR"
HEX40 = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True, kw_only=True)
class Dependency:
    name: str
    url: str
    sha1: str
    line: int

    def mirror_path(self, mirror: Path) -> Path:
        """``<mirror>/<url without its scheme>``, the layout onnxruntime's cmake looks for."""
        parts = urlsplit(self.url)
        return mirror.joinpath(parts.netloc, *_segments(parts.path))


def _segments(path: str) -> list[str]:
    segments = [s for s in PurePosixPath(path).parts if s not in {"/", ""}]
    if any(s == ".." for s in segments):
        msg = f"refusing a deps.txt URL path that climbs out of the mirror: {path}"
        raise ConfigError(msg)
    return segments


def parse(text: str, origin: str = "cmake/deps.txt") -> list[Dependency]:
    """Every dependency in a deps.txt text; local-path entries (no URL scheme) are skipped."""
    found: list[Dependency] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(";")
        if len(fields) < 2:  # noqa: PLR2004 - name and URL at least
            msg = f"{origin}:{number}: expected name;url;sha1, got {line!r}"
            raise ConfigError(msg)
        name, url, sha1 = fields[0], fields[1], fields[2].lower() if len(fields) > 2 else ""  # noqa: PLR2004
        if "://" not in url:
            continue
        if sha1 and not HEX40.fullmatch(sha1):
            msg = f"{origin}:{number}: {name}: sha1 {sha1!r} is not 40 hex digits"
            raise ConfigError(msg)
        found.append(Dependency(name=name, url=url, sha1=sha1, line=number))
    return found


def read(tree: Path) -> list[Dependency]:
    path = tree / DEPS_FILE
    if not path.is_file():
        msg = f"no {DEPS_FILE} in {tree}"
        raise ConfigError(msg, tip="is this an onnxruntime tree? run `ortstack fetch` and `ortstack patch` first")
    return parse(path.read_text(encoding="utf-8"), str(path))


def dawn_revision(dependencies: list[Dependency]) -> str:
    """Dawn's deps.txt entry as ``url#sha1`` (empty when the pin has none)."""
    for dependency in dependencies:
        if dependency.name == "dawn":
            return f"{dependency.url}#sha1={dependency.sha1}"
    return ""


def _in_mirror(target: Path, sha1: str, cache: Cache) -> bool:
    """``target`` holds the file with ``sha1``: the cache's own copy linked there, or the same bytes.

    The mirror is laid out by URL, so a pin that changes its sha1 but keeps its URL must not be
    served what the old pin named.
    """
    if not target.is_file():
        return False
    cached = cache.archives / f"sha1-{sha1}"
    if cached.is_file() and target.samefile(cached):
        return True
    return download.digest_of(target, "sha1") == sha1


def _fetch_one(dependency: Dependency, mirror: Path, cache: Cache, max_bytes: int) -> str:
    target = dependency.mirror_path(mirror)
    # The content-addressed cache verifies the sha1; the mirror only links to what it holds.
    if not dependency.sha1:
        msg = f"deps.txt entry {dependency.name} has no sha1 to verify {dependency.url} against"
        raise FetchError(msg, tip="onnxruntime pins every dependency by sha1; check the deps.txt line")
    if _in_mirror(target, dependency.sha1, cache):
        return "in mirror"
    cached = fetch.cached_download(cache, dependency.url, digest=dependency.sha1, algorithm="sha1", max_bytes=max_bytes)
    _link(cached, target)
    return "downloaded"


def _link(source: Path, target: Path) -> None:
    """Put ``source`` at ``target`` as a hard link (a copy where links cannot be made), atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.{os.getpid()}.tmp")  # runs sharing the mirror stage apart
    staged.unlink(missing_ok=True)
    try:
        staged.hardlink_to(source)
    except OSError:  # another file system, or no hard links there
        shutil.copyfile(source, staged)
    staged.replace(target)
    # Renaming a link onto a link of the same file (another run got there first) leaves both names.
    staged.unlink(missing_ok=True)


def link_tree_mirror(dependencies: list[Dependency], mirror: Path, tree: Path) -> None:
    """For a tree that reads its mirror from ``<tree>/mirror`` (onnxruntime 1.21): the needed entries there."""
    for dependency in dependencies:
        source, target = dependency.mirror_path(mirror), dependency.mirror_path(tree / "mirror")
        if not target.is_file() or not target.samefile(source):
            _link(source, target)


def mirror_all(
    dependencies: list[Dependency],
    mirror: Path,
    cache: Cache,
    *,
    jobs: int = 8,
    max_bytes: int = download.DEFAULT_MAX_BYTES,
) -> dict[str, str]:
    """Put every dependency into ``mirror``, downloading in parallel (each no larger than ``max_bytes``);
    returns name -> what happened."""
    mirror.mkdir(parents=True, exist_ok=True)
    cache.ensure()
    _check_reachable([d for d in dependencies if not d.mirror_path(mirror).is_file()], mirror)
    outcomes: dict[str, str] = {}
    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_fetch_one, dep, mirror, cache, max_bytes): dep for dep in dependencies}
        for future, dependency in futures.items():
            try:
                outcomes[dependency.name] = future.result()
            except FetchError as exc:
                errors.append(exc.message)
            except OSError as exc:
                errors.append(f"{dependency.name}: {dependency.url}: {exc}")
    if errors:
        msg = f"{len(errors)} of {len(dependencies)} deps.txt entries failed: " + "; ".join(errors)
        raise FetchError(msg, tip="run `ortstack fetch --deps` again; finished downloads are kept")
    return outcomes


def missing_from_mirror(dependencies: list[Dependency], mirror: Path) -> list[Dependency]:
    """Entries that the mirror lacks (presence only: ``mirror_all`` verified them when they landed)."""
    return [dep for dep in dependencies if not dep.mirror_path(mirror).is_file()]


def mirror_path(settings: Settings) -> Path:
    """Where the deps mirror lives: in the cache, shared by every build of every variant."""
    return settings.cache_dir / "deps-mirror"


# Offline, a host that does not resolve is asked this often, this far apart, before the entries it
# serves are reported missing in one line (rather than each download retrying on its own).
RESOLVE_ATTEMPTS = 2
RESOLVE_DELAY_S = 1.0


def unresolved_hosts(urls: list[str]) -> dict[str, str]:
    """The hosts of ``urls`` whose names do not resolve (offline, or no DNS), each with the resolver's reason."""
    pending = sorted({host for url in urls if (host := urlsplit(url).hostname)})
    reasons: dict[str, str] = {}
    for attempt in range(RESOLVE_ATTEMPTS):
        if attempt:
            time.sleep(RESOLVE_DELAY_S)
        reasons = {}
        for host in pending:
            try:
                socket.getaddrinfo(host, None)
            except OSError as exc:  # socket.gaierror: no such name, or no resolver reachable
                reasons[host] = exc.strerror or str(exc)
        pending = sorted(reasons)
        if not pending:
            break
    return reasons


def _check_reachable(pending: list[Dependency], mirror: Path) -> None:
    """One line for the entries whose host cannot be reached, before any download retries on its own."""
    unreachable = unresolved_hosts([dependency.url for dependency in pending])
    if not unreachable:
        return
    cut_off = [dependency for dependency in pending if urlsplit(dependency.url).hostname in unreachable]
    hosts = ", ".join(f"{host} ({reason})" for host, reason in sorted(unreachable.items()))
    names = ", ".join(dependency.name for dependency in cut_off)
    msg = f"offline: cannot reach {hosts}, so {len(cut_off)} deps.txt entries are missing: {names}"
    tip = (
        f"run `ortstack fetch --deps` where the network reaches them, with the same --cache-dir (it fills {mirror}); "
        f"or put each archive at {mirror}/<its URL without https://>, or give each source on disk: "
        "[deps.NAME] source_dir in stack.toml or --dep-source NAME=PATH"
    )
    raise FetchError(msg, tip=tip)
