"""``patch --export``: commits made by hand in a prepared tree become patch files and series entries.

The edit loop: ``ortstack patch``, change files in the prepared tree, ``git commit``, then
``ortstack patch --export``. Each commit after the series' last commit becomes
``patches/NNNN-<subject>.patch`` (its message kept as the header) and a ``[[patch]]`` entry
appended to ``stack.toml``. Applying the series again gives the same tree.

A series commit changed in place (``git commit --fixup`` and ``git rebase -i --autosquash``, or a
reworded message) is written back over its own file, sha256 re-pinned, as ``git rebase`` users
expect: the series keeps its order and numbers. Only local entries can change so; a pull-request or
commit entry is upstream's file, and the export says to make it local first.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import tomlkit

from ortstack import _git, log
from ortstack.errors import UsageError
from ortstack.lockfile import write_atomic
from ortstack.patches import patchfile, prepare

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from tomlkit.items import AoT, Table

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


@dataclass(frozen=True)
class Exported:
    new: list[str]
    """Ids of the entries appended for commits after the series."""
    amended: list[str]
    """Ids of series entries whose commits were changed in place and written back."""


def export(stack: Stack, tree: Path, env: Mapping[str, str]) -> Exported:
    """Export the commits after the series in ``tree`` and the series commits changed in place."""
    state = prepare.read_state(tree)
    if state is None:
        msg = f"no prepared tree at {tree}: an earlier step has not run"
        raise UsageError(msg, tip="run `ortstack patch` first, commit your changes there, then export")
    if _git.out(["status", "--porcelain"], cwd=tree, env=env):
        log.warn(f"{tree} has uncommitted changes: only commits are exported (git commit them first)")
    document = tomlkit.parse(stack.path.read_text(encoding="utf-8"))
    today = dt.datetime.now(tz=dt.UTC).date().isoformat()
    if _is_ancestor(state.tip, tree, env):
        amended: list[str] = []
        commits = _git.out(["rev-list", "--reverse", "--no-merges", f"{state.tip}..HEAD"], cwd=tree, env=env).split()
    else:
        amended, commits = _write_back_amended(stack, state, document, tree=tree, env=env, today=today)
    if not commits and not amended:
        log.info(f"no commits after the series in {tree} and none changed in it: nothing to export")
        return Exported(new=[], amended=[])
    entries = document.setdefault("patch", tomlkit.aot())
    taken = {e.id for e in stack.patches}
    number = _next_number(stack)
    exported: list[str] = []
    for commit in commits:
        header, data = _render(commit, tree, env, today=today, new=True)
        relative = f"patches/{number:04d}-{patchfile.slug(header.subject)}.patch"
        write_atomic(stack.root / relative, data)
        patch_id = _unique_id(header.subject, taken)
        taken.add(patch_id)
        entry = tomlkit.table()
        entry.update({"id": patch_id, "file": relative, "sha256": patchfile.sha256_hex(data)})
        entry["description"] = header.subject
        _append_entry(entries, entry)
        exported.append(patch_id)
        log.info(f"exported {commit[:12]} as {relative} (id {patch_id})")
        number += 1
    write_atomic(stack.path, tomlkit.dumps(document).encode("utf-8"))
    # The commits are in the series now: the tree holds no unsaved work (its fingerprint is stale,
    # so the next `patch` rebuilds it from the series, to the same content).
    head = _git.out(["rev-parse", "HEAD"], cwd=tree, env=env)
    prepare.write_state(replace(state, tip=head, fingerprint=""), tree)
    return Exported(new=exported, amended=amended)


def _append_entry(entries: AoT, entry: Table) -> None:
    """Append ``entry`` after the last entry's own keys, a blank line between them.

    tomlkit reads the comments and blank lines after an array-of-tables entry as part of it, though in
    a stack file they introduce the table that follows (``# the onnxruntime-webgpu shape`` above
    ``[variant.webgpu]``): they move to the end of the new entry, so they stay above that table.
    """
    if entries:
        body = entries[-1].value.body
        keys_end = len(body)
        while keys_end and body[keys_end - 1][0] is None:
            keys_end -= 1
        trailing = body[keys_end:]
        del body[keys_end:]
        body.append((None, tomlkit.ws("\n")))
        entry.value.body.extend(trailing)
    entries.append(entry)


def _is_ancestor(commit: str, tree: Path, env: Mapping[str, str]) -> bool:
    done = _git.git(["merge-base", "--is-ancestor", commit, "HEAD"], cwd=tree, env=env, check=False, capture=True)
    return done.returncode == 0


def _render(
    commit: str, tree: Path, env: Mapping[str, str], *, today: str, new: bool
) -> tuple[patchfile.Header, bytes]:
    """The patch file of ``commit``: its message as the header (DEP-3 fields kept), its diff with full blob ids.
    A new entry is ``Forwarded: no`` unless it says otherwise; a rewritten one gets today's ``Last-Update``."""
    info = _git.out(["log", "-1", "--format=%an <%ae>%n%aD%n%B", commit], cwd=tree, env=env)
    author, date, message = info.split("\n", 2)
    header = patchfile.parse_message(message)
    fields = dict(header.fields)
    if new:
        fields = {"Forwarded": "no", **fields}
        fields.setdefault("Last-Update", today)
    else:
        fields["Last-Update"] = today
    header = replace(header, fields=fields, author=author, date=date, commit=commit)
    return header, patchfile.PatchFile(header=header, diff=_diff(commit, tree, env)).render().encode("utf-8")


def _diff(commit: str, tree: Path, env: Mapping[str, str]) -> str:
    """What ``commit`` changes, with the full blob ids ``git apply --3way`` needs."""
    return _git.git(["diff", "--full-index", "--binary", f"{commit}^", commit], cwd=tree, env=env, capture=True).stdout


def _patch_of(commit: str, tree: Path, env: Mapping[str, str]) -> tuple[str, str]:
    return _git.out(["log", "-1", "--format=%B", commit], cwd=tree, env=env), _diff(commit, tree, env)


def _write_back_amended(
    stack: Stack,
    state: prepare.Prepared,
    document: tomlkit.TOMLDocument,
    *,
    tree: Path,
    env: Mapping[str, str],
    today: str,
) -> tuple[list[str], list[str]]:
    """The series was rewritten: write each series commit whose change or message differs back over its
    entry's file (sha256 re-pinned in ``document``); returns those ids and the commits after the series."""
    applied = [o for o in state.outcomes if o.commit]
    commits = _git.out(["rev-list", "--reverse", "--no-merges", f"{state.base}..HEAD"], cwd=tree, env=env).split()
    series = commits[: len(applied)]
    subjects = [_git.out(["log", "-1", "--format=%s", c], cwd=tree, env=env) for c in series]
    expected = [_git.out(["log", "-1", "--format=%s", o.commit], cwd=tree, env=env) for o in applied]
    if subjects != expected:
        msg = (
            f"the series in {tree} was reordered, dropped or renamed: export writes back commits changed in "
            "place (fixup, squash, reword of the body), keeping one commit per entry in series order"
        )
        tip = "edit the order or the entries in stack.toml itself, or `git rebase -i` again keeping every commit"
        raise UsageError(msg, tip=tip)
    by_id = {e.id: e for e in stack.patches}
    changed = [
        (by_id[outcome.id], commit)
        for outcome, commit in zip(applied, series, strict=True)
        if _patch_of(commit, tree, env) != _patch_of(outcome.commit, tree, env)
    ]
    # Refused before anything is written: a file rewritten without its sha256 would fail every later run.
    for entry, _ in changed:
        if entry.origin.kind != "local":
            msg = f"{entry.id} changed in the prepared tree, but it is a {entry.origin.kind} entry: upstream's file"
            tip = 'make it local (origin = { kind = "local" }) and export again, or carry the change as its own patch'
            raise UsageError(msg, tip=tip)
    tables = {str(table["id"]): table for table in document.get("patch", [])}
    for entry, commit in changed:
        _, data = _render(commit, tree, env, today=today, new=False)
        write_atomic(stack.root / entry.file, data)
        tables[entry.id]["sha256"] = patchfile.sha256_hex(data)
        log.info(f"wrote {commit[:12]} back over {entry.file} (id {entry.id})")
    return [entry.id for entry, _ in changed], commits[len(applied) :]
