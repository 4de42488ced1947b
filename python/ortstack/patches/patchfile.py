"""One vendored patch file: a git format-patch style message with DEP-3 fields, then a diff.

The file is what ``git format-patch --full-index`` writes, so ``git am`` and ``git apply`` read it
as is. The commit message carries the DEP-3 fields (https://dep-team.pages.debian.net/deps/dep3/)
as its last paragraph, so a patch applied as a commit and exported again keeps its header::

    From <commit> Mon Sep 17 00:00:00 2001
    From: Author <mail>
    Date: Thu, 1 Oct 2026 00:00:00 +0000
    Subject: [PATCH] Short subject

    Why the patch is carried.

    Origin: upstream, https://github.com/OWNER/REPO/pull/N
    Forwarded: yes
    Last-Update: 2026-11-30
    ---
    diff --git a/... b/...

The diff is validated (exact hunk headers, hunk lengths, paths inside the tree as git reads them) before
any patch is applied; links are checked in the tree git wrote (``patchpaths``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet

from ortstack.errors import PatchError
from ortstack.patches import patchpaths

if TYPE_CHECKING:
    from collections.abc import Mapping

# The DEP-3 fields ortstack writes, in this order; other fields found in a header are kept after them.
DEP3_FIELDS = ("Origin", "Bug", "Forwarded", "Applied-Upstream", "Last-Update")
NO_COMMIT = "0" * 40
_MBOX_FROM = re.compile(r"^From ([0-9a-f]{40}) Mon Sep 17 00:00:00 2001$")
_FIELD = re.compile(r"^([A-Z][A-Za-z0-9-]*): ?(.*)$")
# Exactly git's form: "@@ -l[,n] +l[,n] @@", then nothing or a space and the section heading.
_HUNK_HEADER = re.compile(r"@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@(?: .*)?")
_PATCH_PREFIX = re.compile(r"^\[PATCH[^\]]*\]\s*")


@dataclass(frozen=True, kw_only=True)
class Header:
    """The message part of a patch file."""

    subject: str
    """One line; becomes the commit subject in the prepared tree."""
    why: str = ""
    """Free text: why the patch is carried."""
    fields: dict[str, str] = field(default_factory=dict)
    """DEP-3 fields (Origin, Bug, Forwarded, Applied-Upstream, Last-Update, ...)."""
    author: str = ""
    """``Name <mail>`` of the change's author; empty when unknown."""
    date: str = ""
    """The author date as git prints it (RFC 2822); empty when unknown."""
    commit: str = NO_COMMIT
    """The commit the patch was taken from, when known."""

    def message(self) -> str:
        """The commit message: subject, why, then the DEP-3 paragraph."""
        paragraphs = [self.subject]
        if self.why.strip():
            paragraphs.append(self.why.strip())
        ordered = [k for k in DEP3_FIELDS if k in self.fields] + [k for k in self.fields if k not in DEP3_FIELDS]
        if ordered:
            paragraphs.append("\n".join(f"{key}: {self.fields[key]}" for key in ordered))
        return "\n\n".join(paragraphs) + "\n"


def parse_message(message: str) -> Header:
    """Split a commit message into subject, why and the trailing paragraph of DEP-3 fields."""
    lines = message.strip("\n").splitlines()
    subject = lines[0].strip() if lines else ""
    paragraphs = "\n".join(lines[1:]).strip("\n").split("\n\n")
    fields: dict[str, str] = {}
    last = paragraphs[-1].splitlines() if paragraphs else []
    if last and all(_FIELD.match(line) for line in last):
        for line in last:
            match = _FIELD.match(line)
            if match:
                fields[match.group(1)] = match.group(2).strip()
        paragraphs = paragraphs[:-1]
    return Header(subject=subject, why="\n\n".join(p for p in paragraphs if p.strip()).strip(), fields=fields)


@dataclass(frozen=True, kw_only=True)
class PatchFile:
    header: Header
    diff: str
    """Everything from the first ``diff --git`` line on."""

    def render(self) -> str:
        h = self.header
        head = [f"From {h.commit} Mon Sep 17 00:00:00 2001"]
        if h.author:
            head.append(f"From: {h.author}")
        if h.date:
            head.append(f"Date: {h.date}")
        head.append(f"Subject: [PATCH] {h.subject}")
        return "\n".join(head) + "\n\n" + h.message().split("\n", 1)[1].lstrip("\n") + "---\n" + self.diff


def split(text: str, name: str) -> PatchFile:
    """Parse a patch file (format-patch style, a plain DEP-3 header, or a bare diff)."""
    start = re.search(r"^diff --git ", text, flags=re.MULTILINE)
    if start is None:
        msg = f"patch {name} holds no 'diff --git' section"
        raise PatchError(msg, tip="vendor a diff made by git (git format-patch --full-index, or a .diff URL)")
    preamble, diff = text[: start.start()], text[start.start() :]
    lines = preamble.splitlines()
    commit, author, date, subject = NO_COMMIT, "", "", ""
    mbox = bool(lines) and _MBOX_FROM.match(lines[0]) is not None
    if mbox:
        commit = lines.pop(0).split()[1]
        while lines and lines[0].strip():
            key, _, value = lines.pop(0).partition(":")
            if key == "From":
                author = value.strip()
            elif key == "Date":
                date = value.strip()
            elif key == "Subject":
                subject = _PATCH_PREFIX.sub("", value.strip())
            elif key.startswith((" ", "\t")) and subject:  # a folded Subject line
                subject += " " + key.strip()
    body = "\n".join(lines)
    # The diffstat after "---" is not part of the message.
    body = re.split(r"^---\s*$", body, maxsplit=1, flags=re.MULTILINE)[0]
    if not mbox:
        # A plain DEP-3 header: "Subject:" or "Description:" first, the rest as fields.
        header = parse_message("\n\n" + body)
        subject = header.fields.pop("Subject", "") or header.fields.pop("Description", "")
        return PatchFile(header=replace(header, subject=subject), diff=diff)
    header = parse_message(subject + "\n\n" + body)
    return PatchFile(header=replace(header, author=author, date=date, commit=commit), diff=diff)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def validate(patch: PatchFile, name: str, *, text: str, env: Mapping[str, str], tip: str) -> PatchSet:
    """Reject a diff that is malformed or reaches outside the tree; return its parsed hunks.

    ``text`` is the whole file (git reads it for the paths); ``tip`` says how to fix a corrupt one.
    """
    for number, line in enumerate(patch.diff.splitlines(), start=1):
        if line.startswith("@@") and not _HUNK_HEADER.fullmatch(line):
            msg = f"patch {name} is corrupt: broken hunk header at diff line {number}: {line[:80]!r}"
            raise PatchError(msg, tip=tip)
    try:
        parsed = PatchSet(patch.diff)
    except UnidiffParseError as exc:
        msg = f"patch {name} is corrupt: {' '.join(str(exc).split())}"
        raise PatchError(msg, tip=tip) from None
    patchpaths.check(text, patch.diff, name, env)
    if not len(parsed) and "GIT binary patch" not in patch.diff:
        msg = f"patch {name} changes no file"
        raise PatchError(msg, tip="check that the file holds a git diff")
    return parsed


def abbreviated_blob_ids(diff: str) -> list[str]:
    """Files whose ``index`` line has short blob ids (``git apply --3way`` needs full ones)."""
    found = []
    path = ""
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            path = line.rsplit(" b/", 1)[-1]
        elif line.startswith("index ") and not re.match(r"^index [0-9a-f]{40}\.\.[0-9a-f]{40}\b", line):
            found.append(path)
    return found


def hunk_at(parsed: PatchSet, path: str, line: int) -> str:
    """Describe the hunk of ``path`` that starts at old-file line ``line`` (git apply's report)."""
    for patched in parsed:
        if path not in (patched.path, patched.source_file[2:], patched.target_file[2:]):
            continue
        for number, hunk in enumerate(patched, start=1):
            if hunk.source_start == line or line in range(hunk.source_start, hunk.source_start + hunk.source_length):
                header = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
                section = f" {hunk.section_header}" if hunk.section_header else ""
                return f"hunk #{number} {header}{section}"
    return f"the hunk at line {line}"


def slug(subject: str, limit: int = 48) -> str:
    """``Support empty packed weights!`` -> ``support-empty-packed-weights`` (format-patch's file naming)."""
    words = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    return words[:limit].rstrip("-") or "patch"
