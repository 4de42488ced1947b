"""``patch --export``: commits made by hand in a prepared tree become patch files and series entries.

The edit loop: ``ortstack patch``, change files in the prepared tree, ``git commit``, then
``ortstack patch --export``. Each commit after the series' last commit becomes
``patches/NNNN-<subject>.patch`` (its message kept as the header) and a ``[[patch]]`` entry
appended to ``stack.toml``. Applying the series again gives the same tree.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from typing import TYPE_CHECKING

import tomlkit

from ortstack import _git, log
from ortstack.errors import UsageError
from ortstack.lockfile import write_atomic
from ortstack.patches import patchfile, prepare

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from ortstack.config import Stack


def _next_number(stack: Stack) -> int:
    numbers = [int(m.group(1)) for e in stack.patches if (m := re.match(r"patches/(\d{4})-", e.file))]
    return max(numbers, default=0) + 1


def _unique_id(subject: str, taken: set[str]) -> str:
    base = patchfile.slug(subject, limit=40)
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}-{n}", n + 1
    return candidate


def export(stack: Stack, tree: Path, env: Mapping[str, str]) -> list[str]:
    """Export the commits after the series in ``tree``; returns the new entries' ids."""
    state = prepare.read_state(tree)
    if state is None:
        msg = f"no prepared tree at {tree}: an earlier step has not run"
        raise UsageError(msg, tip="run `ortstack patch` first, commit your changes there, then export")
    if _git.out(["status", "--porcelain"], cwd=tree, env=env):
        log.warn(f"{tree} has uncommitted changes: only commits are exported (git commit them first)")
    commits = _git.out(["rev-list", "--reverse", "--no-merges", f"{state.tip}..HEAD"], cwd=tree, env=env).split()
    if not commits:
        log.info(f"no commits after the series in {tree}: nothing to export")
        return []
    document = tomlkit.parse(stack.path.read_text(encoding="utf-8"))
    entries = document.setdefault("patch", tomlkit.aot())
    taken = {e.id for e in stack.patches}
    number = _next_number(stack)
    exported: list[str] = []
    today = dt.datetime.now(tz=dt.UTC).date().isoformat()
    for commit in commits:
        info = _git.out(["log", "-1", "--format=%an <%ae>%n%aD%n%B", commit], cwd=tree, env=env)
        author, date, message = info.split("\n", 2)
        header = patchfile.parse_message(message)
        fields = {"Forwarded": "no", **header.fields}
        fields.setdefault("Last-Update", today)
        header = replace(header, fields=fields, author=author, date=date, commit=commit)
        diff = _git.git(["diff", "--full-index", "--binary", f"{commit}^", commit], cwd=tree, env=env, capture=True)
        text = patchfile.PatchFile(header=header, diff=diff.stdout).render()
        relative = f"patches/{number:04d}-{patchfile.slug(header.subject)}.patch"
        data = text.encode("utf-8")
        write_atomic(stack.root / relative, data)
        patch_id = _unique_id(header.subject, taken)
        taken.add(patch_id)
        entry = tomlkit.table()
        entry.update({"id": patch_id, "file": relative, "sha256": patchfile.sha256_hex(data)})
        entry["description"] = header.subject
        entries.append(entry)
        exported.append(patch_id)
        log.info(f"exported {commit[:12]} as {relative} (id {patch_id})")
        number += 1
    write_atomic(stack.path, tomlkit.dumps(document).encode("utf-8"))
    # The commits are in the series now: the tree holds no unsaved work (its fingerprint is stale,
    # so the next `patch` rebuilds it from the series, to the same content).
    head = _git.out(["rev-parse", "HEAD"], cwd=tree, env=env)
    prepare.write_state(replace(state, tip=head, fingerprint=""), tree)
    return exported
