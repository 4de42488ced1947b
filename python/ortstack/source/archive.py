"""Safe extraction of source archives (``.tar.gz``, ``.tar.xz``, ``.tar.bz2``, ``.tar``, ``.zip``).

Every member is checked before anything is written: no absolute paths, no ``..``, no links that
point outside the destination, no device files or FIFOs, no name twice (a later member could
overwrite an earlier one through a link). While writing, each path is resolved again with the links
already on disk, so a chain of links that each look harmless cannot lead outside either: tarfile's
``data`` filter does this for tar, ``_inside`` for zip. GitHub archives hold one top folder
(``onnxruntime-<commit>/``); when an archive has exactly one, it is stripped.

What an archive expands to is limited (``Limits``: total bytes and bytes per archive byte, from the
declared member sizes, checked before anything is written), so a small archive cannot fill the disk.
"""

from __future__ import annotations

import copy
import errno
import gzip
import lzma
import os
import posixpath
import re
import stat
import tarfile
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from ortstack.bounds import positive_number
from ortstack.errors import DiskSpaceError, FetchError, UnsafeArchiveError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from pathlib import Path

SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar", ".zip")
_UNSAFE_TIP = "the archive is not a plain source archive; check the URL and where it comes from"
MIB = 1024**2
_SHOWN = 120
"""Characters of a member's name an error shows."""
# What the decompressors and readers raise for bytes that are not a whole archive.
_CORRUPT = (
    tarfile.ReadError,
    tarfile.CompressionError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    gzip.BadGzipFile,
    zipfile.BadZipFile,
)


@dataclass(frozen=True, kw_only=True)
class Limits:
    """How far an archive may expand; ORT's tree is about 300 MiB from a 50-100 MiB archive."""

    max_mib: float = 4096.0
    """Total size of the files (``ORTSTACK_ARCHIVE_MAX_MIB``)."""
    max_ratio: float = 100.0
    """Expanded bytes per archive byte (``ORTSTACK_ARCHIVE_MAX_RATIO``); source code compresses 5-10 times."""
    max_depth: int = 64
    """Folders in one member's path (``ORTSTACK_ARCHIVE_MAX_DEPTH``); onnxruntime's deepest is about 15."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        max_mib = positive_number(env, "ORTSTACK_ARCHIVE_MAX_MIB")
        max_ratio = positive_number(env, "ORTSTACK_ARCHIVE_MAX_RATIO")
        max_depth = positive_number(env, "ORTSTACK_ARCHIVE_MAX_DEPTH")
        default = cls()
        return cls(
            max_mib=max_mib or default.max_mib,
            max_ratio=max_ratio or default.max_ratio,
            max_depth=max(1, int(max_depth)) if max_depth else default.max_depth,
        )


@dataclass(kw_only=True)
class _Tally:
    """Declared bytes so far, against the limits for an archive of ``size`` bytes."""

    label: str
    size: int
    limits: Limits
    total: int = 0

    def check_depth(self, name: str) -> None:
        """A path deeper than the limit is refused before anything is written (extracting it would recurse)."""
        depth = len(PurePosixPath(name.replace("\\", "/")).parts)
        if depth > self.limits.max_depth:
            why = f"{depth} folders deep, more than {self.limits.max_depth} (ORTSTACK_ARCHIVE_MAX_DEPTH)"
            raise _unsafe(self.label, name if len(name) <= _SHOWN else f"{name[:_SHOWN]}...", why)

    def add(self, name: str, size: int) -> None:
        self.total += size
        if self.total > self.limits.max_mib * MIB:
            msg = f"{self.label} expands to more than {self.limits.max_mib:g} MiB (reached at {name!r})"
            tip = "check archive_url; for a larger tree raise ORTSTACK_ARCHIVE_MAX_MIB"
            raise UnsafeArchiveError(msg, tip=tip)
        if self.total > self.limits.max_ratio * max(self.size, 1):
            msg = (
                f"{self.label} expands to more than {self.limits.max_ratio:g} times its "
                f"{self.size / MIB:.1f} MiB (reached at {name!r}): a compression bomb, not a source archive"
            )
            tip = "check archive_url; for a tree that compresses better raise ORTSTACK_ARCHIVE_MAX_RATIO"
            raise UnsafeArchiveError(msg, tip=tip)


def suffix_of(name: str) -> str:
    """The archive suffix of a file name or URL path, e.g. ``.tar.gz``."""
    lowered = name.lower().split("?", 1)[0]
    for suffix in SUFFIXES:
        if lowered.endswith(suffix):
            return suffix
    msg = f"{name}: not a supported archive (expected one of {', '.join(SUFFIXES)})"
    raise FetchError(msg, tip="point archive_url at a .tar.gz or .zip of the source")


def _unsafe(label: str, member: str, why: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(f"{label}: refusing member {member!r}: {why}", tip=_UNSAFE_TIP)


def _check_name(label: str, name: str) -> None:
    if not name:
        raise _unsafe(label, name, "an empty name")
    if name.startswith(("/", "\\")) or PureWindowsPath(name).drive:
        raise _unsafe(label, name, "absolute path")
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        raise _unsafe(label, name, "'..' climbs out of the destination")


def _check_link(label: str, name: str, target: str) -> None:
    """A symlink ``name`` -> ``target`` must resolve inside the destination."""
    if target.startswith(("/", "\\")) or PureWindowsPath(target).drive:
        raise _unsafe(label, name, f"symlink to the absolute path {target!r}")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if resolved == ".." or resolved.startswith("../"):
        raise _unsafe(label, name, f"symlink to {target!r} points outside the destination")


def _check_not_named_like_a_folder(label: str, name: str) -> None:
    """A file or link must not be named as a folder: ``out/`` is checked from inside ``out`` and written
    beside it; ``a/.`` is ``a`` itself, and as a link to itself over a folder ``a`` it sends tarfile's
    fallback copy round and round (a RecursionError, not a refusal)."""
    if name.endswith(("/", "\\")):
        raise _unsafe(label, name, "a file or link named like a folder (a trailing /)")
    if name.replace("\\", "/").rsplit("/", 1)[-1] == ".":
        raise _unsafe(label, name, "a file or link named like a folder (a trailing /.)")


def _check_unique(label: str, seen: set[str], name: str) -> None:
    key = posixpath.normpath(name.replace("\\", "/"))
    if key in seen:
        raise _unsafe(label, name, "the archive holds this name twice")
    seen.add(key)


def _inside(label: str, dest: Path, name: str, path: str) -> None:
    """``path`` resolved with the links already extracted must stay inside ``dest``."""
    root = os.path.realpath(dest)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise _unsafe(label, name, "it leads outside the destination through a link extracted before it")


def _check_links_land_inside(label: str, dest: Path, links: list[tuple[str, str]]) -> None:
    """Every extracted link (member name, name under ``dest``) must resolve inside ``dest`` with all of
    them in place: a link is checked when it is made, and one made before a link it passes through
    (``x -> a/a/..``, then ``a -> .``) read as inside then."""
    root = os.path.realpath(dest)
    for member, name in links:
        path = os.path.join(dest, name)  # noqa: PTH118 - resolved as text, links and all
        if not os.path.islink(path):  # noqa: PTH114 - the same path as text
            continue
        try:
            resolved = os.path.realpath(path, strict=True)
        except (FileNotFoundError, NotADirectoryError):  # dangling: judged by where it points
            resolved = os.path.realpath(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a loop of links leads nowhere
                continue
            raise
        if os.path.commonpath([root, resolved]) != root:
            raise _unsafe(label, member, "it leads outside the destination through a link extracted after it")


@contextmanager
def _writing(label: str) -> Iterator[None]:
    """Turn a file system refusal while extracting into one line (a full disk into a disk-space error)."""
    try:
        yield
    except _CORRUPT:
        raise
    except OSError as exc:
        if exc.errno is None and exc.filename is None:  # a decompressor's complaint (bz2), not the disk's
            raise _broken(label, exc) from None
        where = os.path.basename(exc.filename) if exc.filename else ""  # noqa: PTH119 - str from OSError
        if exc.errno == errno.ENOSPC:
            msg = f"the disk is full while extracting {label}"
            raise DiskSpaceError(msg, tip="free some space and run again") from None
        msg = f"{label}: cannot extract {where[:80]!r}: {exc.strerror or exc}"
        raise FetchError(msg, tip="this file system cannot hold a path the archive has; " + _UNSAFE_TIP) from None


def _top_folder(names: Iterable[str]) -> str | None:
    """The single top-level folder all names live in, if there is one."""
    parts = [PurePosixPath(name).parts for name in names]
    tops = {p[0] for p in parts if p}
    if len(tops) != 1 or not any(len(p) > 1 for p in parts):
        return None
    return tops.pop()


def _strip(name: str, top: str | None) -> str:
    if top is None:
        return name
    return PurePosixPath(*PurePosixPath(name).parts[1:]).as_posix() if name != top else ""


def extract(archive: Path, dest: Path, *, label: str = "", limits: Limits | None = None) -> str | None:
    """Extract ``archive`` into the existing folder ``dest``; raise before writing if a member is unsafe.

    ``label`` names the archive in errors (its URL; the file name by default); ``limits`` bound what
    it may expand to (the defaults when not given).
    Returns the commit id the archive says it was made from, when it says so: ``git archive`` (and
    so GitHub) writes it into the tar's global pax header and the zip's comment.
    """
    tally = _Tally(label=label or archive.name, size=archive.stat().st_size, limits=limits or Limits())
    if suffix_of(archive.name) == ".zip":
        return _extract_zip(archive, dest, tally)
    return _extract_tar(archive, dest, tally)


def _commit_in(comment: str | bytes | None) -> str | None:
    text = comment.decode(errors="replace") if isinstance(comment, bytes) else comment or ""
    return text if re.fullmatch(r"[0-9a-f]{40}", text) else None


def _broken(label: str, exc: BaseException) -> FetchError:
    said = str(exc).strip()
    # tarfile lists what each decompressor said, one per line: the line keeps the first.
    summary = said.splitlines()[0].rstrip(":") if said else type(exc).__name__
    return FetchError(
        f"{label} is truncated or corrupt ({summary})",
        tip="the download is incomplete or not an archive; check archive_url and fetch again",
        detail=said,
    )


def _read_members(tar: tarfile.TarFile, tally: _Tally) -> list[tarfile.TarInfo]:
    """Every header, counting declared sizes as it goes (a bomb stops here, early, not on disk)."""
    members = []
    for member in tar:  # reads header after header: a truncated stream fails here
        tally.check_depth(member.name)
        if member.isfile():
            tally.add(member.name, member.size)
        members.append(member)
    return members


def _check_tar_member(label: str, member: tarfile.TarInfo, seen: set[str], files: set[str]) -> None:
    """Refuse ``member`` before anything is written; ``seen`` and ``files`` gather the names so far."""
    _check_name(label, member.name)
    if not member.isdir():
        _check_not_named_like_a_folder(label, member.name)
        _check_unique(label, seen, member.name)
    if member.ischr() or member.isblk() or member.isfifo():
        raise _unsafe(label, member.name, "device file or FIFO")
    if member.issym():
        _check_link(label, member.name, member.linkname)
    if member.islnk():
        _check_name(label, member.linkname)
        if posixpath.normpath(member.linkname) not in files:
            raise _unsafe(label, member.name, f"hard link to {member.linkname!r}, no file before it")
    if member.isfile():
        files.add(posixpath.normpath(member.name))


def _extract_tar(archive: Path, dest: Path, tally: _Tally) -> str | None:
    label = tally.label
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = _read_members(tar, tally)
            top = _top_folder(m.name for m in members)
            selected: list[tarfile.TarInfo] = []
            seen: set[str] = set()
            files: set[str] = set()  # regular files so far: what a hard link may name
            links: list[tuple[str, str]] = []  # each symlink's member name and its name under dest
            for member in members:
                _check_tar_member(label, member, seen, files)
                name = _strip(member.name, top)
                if not name:
                    continue
                stripped = copy.copy(member)
                stripped.name = name
                if member.islnk():
                    stripped.linkname = _strip(member.linkname, top)
                selected.append(stripped)
                if member.issym():
                    links.append((member.name, name))
            try:
                with _writing(label):
                    tar.extractall(dest, members=selected, filter="data")
                    _check_links_land_inside(label, dest, links)
            except tarfile.FilterError as exc:
                raise _unsafe(label, exc.tarinfo.name, str(exc)) from None
            except RecursionError:
                # Where a link cannot be made (a folder is in its place), tarfile copies its target instead;
                # a link to itself makes that copy endless.
                msg = f"{label}: refusing its links: one leads round to itself where a folder stands"
                raise UnsafeArchiveError(msg, tip=_UNSAFE_TIP) from None
            return _commit_in(tar.pax_headers.get("comment"))
    except _CORRUPT as exc:
        raise _broken(label, exc) from None


def _extract_zip(archive: Path, dest: Path, tally: _Tally) -> str | None:
    label = tally.label
    try:
        with zipfile.ZipFile(archive) as bundle:
            infos = bundle.infolist()
            for info in infos:  # zipfile never reads past a member's declared size
                tally.check_depth(info.filename)
                tally.add(info.filename, info.file_size)
            top = _top_folder(info.filename for info in infos)
            seen: set[str] = set()
            for info in infos:
                _check_name(label, info.filename)
                if not info.is_dir():
                    _check_not_named_like_a_folder(label, info.filename)
                    _check_unique(label, seen, info.filename)
                if stat.S_ISLNK(info.external_attr >> 16):
                    _check_link(label, info.filename, _link_text(label, info.filename, bundle.read(info)))
            with _writing(label):
                for info in infos:
                    _write_zip_member(bundle, info, dest, _strip(info.filename, top), label)
                links = [
                    (info.filename, _strip(info.filename, top))
                    for info in infos
                    if stat.S_ISLNK(info.external_attr >> 16) and _strip(info.filename, top)
                ]
                _check_links_land_inside(label, dest, links)
            return _commit_in(bundle.comment)
    except _CORRUPT as exc:
        raise _broken(label, exc) from None
    except (NotImplementedError, RuntimeError) as exc:  # an unsupported compression method, an encrypted member
        msg = f"{label} holds a member ortstack cannot read ({exc})"
        raise FetchError(
            msg, tip="a source archive is plain (stored or deflated, not encrypted); " + _UNSAFE_TIP
        ) from None


def _link_text(label: str, name: str, data: bytes) -> str:
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise _unsafe(label, name, "a symlink whose target is not UTF-8 text") from None
    if not text or "\0" in text:
        raise _unsafe(label, name, "a symlink with an empty or NUL-holding target")
    return text


def _write_zip_member(bundle: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, name: str, label: str) -> None:
    if not name:
        return
    target = dest / name
    mode = info.external_attr >> 16
    if info.is_dir():
        _inside(label, dest, info.filename, str(target))
        target.mkdir(parents=True, exist_ok=True)
        return
    _inside(label, dest, info.filename, str(target.parent))
    target.parent.mkdir(parents=True, exist_ok=True)
    data = bundle.read(info)  # checks the CRC
    if stat.S_ISLNK(mode):
        link = _link_text(label, info.filename, data)
        _inside(label, dest, info.filename, os.path.join(target.parent, link))  # noqa: PTH118 - link text
        os.symlink(link, target)  # noqa: PTH211 - target is a link text, not a path
        return
    target.write_bytes(data)
    if mode & stat.S_IXUSR:
        target.chmod(0o755)
