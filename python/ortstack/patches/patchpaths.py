"""What a patch touches, read the way ``git apply`` reads it.

The names come from git itself: ``git apply --numstat -z`` run on the patch file outside any
repository (it applies nothing there). git lists one name per file (the new one of a rename or
copy), so the diff's own name lines (``diff --git``, ``---``/``+++``, ``rename``/``copy from``/``to``)
are read too, unquoted the way git quotes them; every name git reports must be among them, so a
patch that git and ortstack read differently is refused instead of half checked.

Links are checked in the tree git wrote: after a patch is applied, every index entry of mode
120000 is a link whose target is its blob, and each must resolve inside the tree (a binary
section or a quoted name changes nothing here, since git has already decoded them).
"""

from __future__ import annotations

import os
import posixpath
import re
import tempfile
from pathlib import Path, PureWindowsPath
from typing import TYPE_CHECKING

from ortstack import _git
from ortstack.errors import PatchError, UnsafePatchError

if TYPE_CHECKING:
    from collections.abc import Mapping

_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_LINK_MODE = "120000"
_OUTSIDE_TIP = "a patch may only name relative paths inside the tree"
_GIT_DIR_TIP = "a patch may not write into git's own folder (.git, in any letter case)"


def unquote(name: str) -> str:
    """A name as git writes it (C-style quoted when it holds odd bytes) -> the name itself."""
    match = _QUOTED.fullmatch(name)
    if match is None:
        return name
    out = bytearray()
    body = match.group(1)
    index = 0
    while index < len(body):
        char = body[index]
        if char != "\\":
            out += char.encode("utf-8", "surrogateescape")
            index += 1
        elif body[index + 1 : index + 4].isdigit() and len(body[index + 1 : index + 4]) == 3:  # noqa: PLR2004 - \ooo
            out.append(int(body[index + 1 : index + 4], 8) & 0xFF)
            index += 4
        else:
            out.append(_ESCAPES.get(body[index + 1], ord(body[index + 1])))
            index += 2
    return out.decode("utf-8", "surrogateescape")


def _strip_prefix(name: str) -> str:
    # git strips one leading component (-p1); the a/ and b/ of git's own diffs are that component.
    return name[2:] if name[:2] in ("a/", "b/") else name


def _git_line_names(rest: str) -> list[str]:
    """The two names of a ``diff --git`` line, quoted or not."""
    quoted = [m.group(0) for m in _QUOTED.finditer(rest)]
    if len(quoted) == 2:  # noqa: PLR2004 - old and new name
        return [_strip_prefix(unquote(q)) for q in quoted]
    if rest.startswith('"'):  # "a/x" b/y
        first = _QUOTED.match(rest)
        if first is not None:
            return [_strip_prefix(unquote(first.group(0))), _strip_prefix(rest[first.end() :].strip())]
    if rest.endswith('"') and quoted:  # a/x "b/y"
        return [_strip_prefix(rest[: rest.rfind(quoted[-1])].strip()), _strip_prefix(unquote(quoted[-1]))]
    # Unquoted: "a/NAME b/NAME" splits where both halves are equal, as git does; otherwise every split.
    middle = (len(rest) - 1) // 2
    if rest[middle : middle + 1] == " " and rest[:middle][2:] == rest[middle + 1 :][2:]:
        return [_strip_prefix(rest[:middle]), _strip_prefix(rest[middle + 1 :])]
    return [_strip_prefix(rest)] + [_strip_prefix(part) for part in rest.split(" ") if part]


def diff_names(diff: str) -> set[str]:
    """Every name the diff's header lines give, unquoted."""
    names: set[str] = set()
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            names.update(_git_line_names(line[len("diff --git ") :]))
        elif line.startswith(("--- ", "+++ ")):
            name = line[4:].rstrip("\t")
            name = name if name.startswith('"') else name.split("\t")[0]
            if name != "/dev/null":
                names.add(_strip_prefix(unquote(name)))
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            names.add(unquote(line.split(" ", 2)[2]))
        elif line.startswith("Binary files ") and line.endswith(" differ"):
            names.update(_strip_prefix(part) for part in line[len("Binary files ") : -len(" differ")].split(" and "))
    return names


def git_names(text: str, name: str, env: Mapping[str, str]) -> list[str]:
    """The names ``git apply`` reads from the patch file ``text`` (one per file), or a one-line error."""
    with tempfile.TemporaryDirectory(prefix="ortstack-numstat-") as scratch:
        patch_file = Path(scratch) / "read.patch"
        patch_file.write_bytes(text.encode("utf-8", "surrogateescape"))
        # Outside any repository: git then parses the patch as it is, with no index or prefix involved.
        outside = {**env, "GIT_CEILING_DIRECTORIES": str(Path(scratch).parent)}
        result = _git.git(
            ["apply", "--numstat", "-z", str(patch_file)],
            cwd=Path(scratch),
            env=outside,
            capture=True,
            check=False,
        )
    if result.returncode != 0:
        said = [line for line in result.stderr.splitlines() if line.strip()]
        reason = said[-1].removeprefix("error: ") if said else f"exit status {result.returncode}"
        msg = f"patch {name} is corrupt: git apply says: {reason}"
        raise PatchError(msg, tip="fix the patch file, or make it again with git format-patch", detail=result.stderr)
    records = result.stdout.split("\0")
    return [record.split("\t", 2)[2] for record in records if record.count("\t") >= 2]  # noqa: PLR2004 - a\td\tpath


def why_unsafe(path: str) -> str:
    """Why ``path`` may not be named by a patch; empty when it is a plain path inside the tree."""
    if not path or path.startswith(("/", "\\")) or PureWindowsPath(path).drive:
        return "outside"
    parts = path.split("/")
    if "\\" in path or ":" in path or "\0" in path or any(part in ("", ".", "..") for part in parts):
        return "outside"
    # NTFS and HFS+ ignore trailing dots, spaces and letter case; git~1 is .git's 8.3 short name.
    if any(part.rstrip(". ").casefold() in (".git", "git~1") for part in parts):
        return "git-dir"
    return ""


def _refuse(name: str, path: str, why: str) -> UnsafePatchError:
    msg = f"patch {name} touches {path!r}, outside the source tree"
    return UnsafePatchError(msg, tip=_GIT_DIR_TIP if why == "git-dir" else _OUTSIDE_TIP)


def check(text: str, diff: str, name: str, env: Mapping[str, str]) -> None:
    """Refuse a patch naming a path outside the tree or in ``.git``, as ortstack or git reads it.

    ``text`` is the whole file, as ``git apply`` gets it; ``diff`` the part from the first ``diff --git``.
    """
    ours = diff_names(diff)
    for path in sorted(ours):
        if why := why_unsafe(path):
            raise _refuse(name, path, why)
    theirs = git_names(text, name, env)
    for path in theirs:
        if why := why_unsafe(path):
            raise _refuse(name, path, why)
    unread = [path for path in theirs if path not in ours]
    sections = len(re.findall(r"^diff --git ", diff, flags=re.MULTILINE))
    if unread or len(theirs) != sections:
        what = f"{unread[0]!r}" if unread else f"{len(theirs)} files where its diff has {sections} sections"
        msg = f"patch {name}: git reads {what}, not what ortstack reads (text before the diff, or an odd name form)"
        raise PatchError(msg, tip="make the patch again with git format-patch --full-index")


def _leaves(tree: Path, path: str, target: str) -> bool:
    if not target or target.startswith(("/", "\\")) or PureWindowsPath(target).drive or "\\" in target:
        return True
    lexical = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if lexical == ".." or lexical.startswith("../"):
        return True
    # On disk, with every link already there followed (a link to "." makes "x/.." climb out).
    root = os.path.realpath(tree)
    return os.path.commonpath([root, os.path.realpath(tree / path)]) != root


def check_links(tree: Path, name: str, env: Mapping[str, str]) -> None:
    """After ``name`` was applied in ``tree`` (with --index): every link in the index must resolve inside."""
    listing = _git.git(["ls-files", "--stage", "-z"], cwd=tree, env=env, capture=True).stdout
    for record in listing.split("\0"):
        meta, _, path = record.partition("\t")
        if not meta.startswith(_LINK_MODE + " "):
            continue
        blob = meta.split(" ")[1]
        target = _git.git(["cat-file", "blob", blob], cwd=tree, env=env, capture=True).stdout
        if _leaves(tree, path, target):
            msg = f"patch {name} makes {path!r} a link to {target!r}, outside the source tree"
            raise UnsafePatchError(msg, tip="a patch may only add links that point inside the tree")
