"""Safe extraction of source archives (``.tar.gz``, ``.tar.xz``, ``.tar.bz2``, ``.tar``, ``.zip``).

Every member is checked before anything is written: no absolute paths, no ``..``, no links that
point outside the destination, no device files or FIFOs, no name twice (a later member could
overwrite an earlier one through a link). While writing, each path is resolved again with the links
already on disk, so a chain of links that each look harmless cannot lead outside either: tarfile's
``data`` filter does this for tar, ``_inside`` for zip. GitHub archives hold one top folder
(``onnxruntime-<commit>/``); when an archive has exactly one, it is stripped.
"""

from __future__ import annotations

import copy
import errno
import os
import posixpath
import re
import stat
import tarfile
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from ortstack.errors import DiskSpaceError, FetchError, UnsafeArchiveError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar", ".zip")
_UNSAFE_TIP = "the archive is not a plain source archive; check the URL and where it comes from"


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


@contextmanager
def _writing(label: str) -> Iterator[None]:
    """Turn a file system refusal while extracting into one line (a full disk into a disk-space error)."""
    try:
        yield
    except OSError as exc:
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


def extract(archive: Path, dest: Path, *, label: str = "") -> str | None:
    """Extract ``archive`` into the existing folder ``dest``; raise before writing if a member is unsafe.

    ``label`` names the archive in errors (its URL; the file name by default).
    Returns the commit id the archive says it was made from, when it says so: ``git archive`` (and
    so GitHub) writes it into the tar's global pax header and the zip's comment.
    """
    name = label or archive.name
    if suffix_of(archive.name) == ".zip":
        return _extract_zip(archive, dest, name)
    return _extract_tar(archive, dest, name)


def _commit_in(comment: str | bytes | None) -> str | None:
    text = comment.decode(errors="replace") if isinstance(comment, bytes) else comment or ""
    return text if re.fullmatch(r"[0-9a-f]{40}", text) else None


def _broken(label: str, exc: BaseException) -> FetchError:
    return FetchError(
        f"{label} is truncated or corrupt ({str(exc) or type(exc).__name__})",
        tip="the download is incomplete or not an archive; check archive_url and fetch again",
    )


def _extract_tar(archive: Path, dest: Path, label: str) -> str | None:
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()  # reads every header: a truncated stream fails here
            top = _top_folder(m.name for m in members)
            selected: list[tarfile.TarInfo] = []
            seen: set[str] = set()
            for member in members:
                _check_name(label, member.name)
                if not member.isdir():
                    _check_unique(label, seen, member.name)
                if member.ischr() or member.isblk() or member.isfifo():
                    raise _unsafe(label, member.name, "device file or FIFO")
                if member.issym():
                    _check_link(label, member.name, member.linkname)
                if member.islnk():
                    _check_name(label, member.linkname)
                name = _strip(member.name, top)
                if not name:
                    continue
                stripped = copy.copy(member)
                stripped.name = name
                if member.islnk():
                    stripped.linkname = _strip(member.linkname, top)
                selected.append(stripped)
            try:
                with _writing(label):
                    tar.extractall(dest, members=selected, filter="data")
            except tarfile.FilterError as exc:
                raise _unsafe(label, exc.tarinfo.name, str(exc)) from None
            return _commit_in(tar.pax_headers.get("comment"))
    except (tarfile.ReadError, tarfile.CompressionError, EOFError, zlib.error) as exc:
        raise _broken(label, exc) from None


def _extract_zip(archive: Path, dest: Path, label: str) -> str | None:
    try:
        with zipfile.ZipFile(archive) as bundle:
            infos = bundle.infolist()
            top = _top_folder(info.filename for info in infos)
            seen: set[str] = set()
            for info in infos:
                _check_name(label, info.filename)
                if not info.is_dir():
                    _check_unique(label, seen, info.filename)
                if stat.S_ISLNK(info.external_attr >> 16):
                    _check_link(label, info.filename, bundle.read(info).decode())
            with _writing(label):
                for info in infos:
                    _write_zip_member(bundle, info, dest, _strip(info.filename, top), label)
            return _commit_in(bundle.comment)
    except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise _broken(label, exc) from None


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
        _inside(label, dest, info.filename, os.path.join(target.parent, data.decode()))  # noqa: PTH118 - link text
        os.symlink(data.decode(), target)  # noqa: PTH211 - target is a link text, not a path
        return
    target.write_bytes(data)
    if mode & stat.S_IXUSR:
        target.chmod(0o755)
