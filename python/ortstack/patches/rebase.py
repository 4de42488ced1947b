"""``ortstack rebase``: carry a stack's patch series to a newer onnxruntime commit, as ``git rebase`` does.

The series is applied, in order, to a rebase tree (``<work>/rebase``): the new pin's source plus one
commit per carried patch. Each patch ends in one of these outcomes:

- ``applies``: ``git apply`` takes it as written (its lines may have moved); its file is kept as it is;
- ``merged``: a 3-way merge took it (the tree holds the old pin's source as the commit before the new
  one, so every pre-image the patch names is there); the file is re-exported from the merged commit;
- ``upstreamed``: its change is already in the new base (it reverse-applies, or merges to no change).
  An entry with a guard that holds becomes an ``in-base`` entry, one without is dropped. When the new
  source is a git checkout that has history, the commit that brought the change is named;
- ``conflict``: the run stops with the tree left at that patch, conflict markers in its files. The user
  resolves, commits, and runs ``ortstack rebase --continue`` (the outcome becomes ``resolved``, or
  ``upstreamed`` when the resolution is no change at all), or
  ``--skip`` drops the patch (``dropped``), or ``--abort`` gives the rebase up.

Nothing of the stack is written until every patch is through, so an abandoned rebase leaves the old
stack as it was. The state is saved after each patch (``.git/ortstack-rebase.json`` in the tree): a
run that was interrupted or killed resumes where it stopped when the same command runs again.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

import tomlkit

from ortstack import _git, log
from ortstack.cache import remove_tree
from ortstack.errors import PatchError, UnsafePatchError, UsageError
from ortstack.lockfile import write_atomic
from ortstack.patches import patchfile, prepare, series
from ortstack.source import deps

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ortstack.config import Stack
    from ortstack.lockfile import Lock

STATE_FILE = "ortstack-rebase.json"
FORMAT = 1
RebaseState = Literal["applies", "merged", "resolved", "upstreamed", "dropped", "in-base"]
CONTINUE = "ortstack rebase --continue"


@dataclass(frozen=True, kw_only=True)
class Carried:
    """What became of one series entry."""

    id: str
    state: RebaseState
    commit: str = ""
    """The rebase tree's commit holding the patch (applies, merged, resolved)."""
    before: str = ""
    """The tree's commit before the patch: its diff to ``commit`` is the carried patch."""
    detail: str = ""
    """One line for the report: the upstream commit, the guard, a skip."""
    kept: bool = True
    """Whether the entry stays in the new stack (an upstreamed one as ``in-base``)."""
    seconds: float = 0.0


@dataclass(kw_only=True)
class Rebase:
    """The saved state of a rebase in progress."""

    stack: str
    """The stack file being rebased (resolved path)."""
    into: str
    """Where the new stack is written."""
    old_commit: str
    onto: str
    series: str
    """Digest of the series' ids, modes and file digests: a rebase only continues over the same series."""
    base: str
    """The rebase tree's commit holding the new source, unpatched."""
    source: str = ""
    """The new source's folder, searched for upstream commits when it is a git checkout."""
    carried: list[Carried] = field(default_factory=list)
    stopped: str = ""
    """The id of the patch that stopped on a conflict; empty while none has."""
    stopped_before: str = ""
    stopped_seconds: float = 0.0
    """How long the patch that stopped took to try: its time in the report, once it is through."""


def tree_path(work_dir: Path) -> Path:
    return work_dir / "rebase"


def _state_file(tree: Path) -> Path:
    return tree / ".git" / STATE_FILE


def read_state(tree: Path) -> Rebase | None:
    path = _state_file(tree)
    if not path.is_file():
        return None
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if raw.pop("format", None) != FORMAT:
        return None
    carried = [Carried(**c) for c in raw.pop("carried")]
    return Rebase(**raw, carried=carried)


def _save(state: Rebase, tree: Path) -> None:
    raw = {"format": FORMAT, **asdict(state)}
    write_atomic(_state_file(tree), (json.dumps(raw, indent=2) + "\n").encode())


def series_digest(stack: Stack, verified: list[series.Verified]) -> str:
    """The prepared tree's fingerprint of the whole series (every platform's entries, as carried)."""
    return prepare.fingerprint(stack, {v.entry.id: v.sha256 for v in verified}, platform="all")


# --------------------------------------------------------------------------------------------------
# Starting, resuming, continuing.


def start(
    stack: Stack,
    lock: Lock,
    *,
    onto: str,
    source: Path,
    old: OldPin,
    into: Path,
    work_dir: Path,
    env: Mapping[str, str],
    wait: bool = True,
) -> Rebase:
    """Rebase ``stack`` onto ``onto`` (whose source is ``source``; ``old`` says where the old pin's
    objects come from, used only when a new rebase starts);
    resume an interrupted run of the same."""
    verified = _verify_all(stack, lock, env)
    digest = series_digest(stack, verified)
    tree = tree_path(work_dir)
    with prepare.locked(tree, wait=wait, what="rebasing in"):
        state = read_state(tree)
        if state is not None:
            _check_same(state, stack, onto, digest, tree)
            if state.stopped:
                msg = f"the rebase stopped at patch {state.stopped} on a conflict"
                raise UsageError(msg, tip=_resolve_tip(tree))
            log.info(f"resuming the rebase onto {onto[:12]} after {len(state.carried)} of the series")
            _reset_to(tree, _last_commit(state), env)
        else:
            if tree.exists():  # a run killed before its first state was saved
                remove_tree(tree)
            tree.mkdir(parents=True)
            base = _base_commits(tree, old=old, verified=verified, source=source, onto=onto, env=env)
            state = Rebase(
                stack=str(stack.path.resolve()),
                into=str(into.resolve()),
                old_commit=stack.ort.commit,
                onto=onto,
                series=digest,
                base=base,
                source=str(source),
            )
            _save(state, tree)
        return _carry_rest(state, stack, verified, tree, env)


@dataclass(frozen=True, kw_only=True)
class OldPin:
    """Where the old pin's objects come from: the history of a checkout, or a source folder."""

    commit: str
    history: Path | None = None
    """A git checkout whose history holds ``commit``: its objects are borrowed, nothing is copied."""
    folder: Callable[[], Path] | None = None
    """Gives the old source tree (from the cache), committed into the rebase tree."""


def _base_commits(
    tree: Path, *, old: OldPin, verified: list[series.Verified], source: Path, onto: str, env: Mapping[str, str]
) -> str:
    """Commit the new pin's source in ``tree`` and return the commit. Before it, the tree's object
    store gets every pre-image blob a patch names (the old pin's files, and those the series makes of
    them on the old pin), so that ``git apply --3way`` can merge each patch."""
    _git.git(["init", "-q"], cwd=tree, env=env, capture=True)
    if old.history is not None:
        objects = _git.out(["rev-parse", "--path-format=absolute", "--git-path", "objects"], cwd=old.history, env=env)
        alternates = tree / ".git" / "objects" / "info" / "alternates"
        alternates.write_text(objects + "\n", encoding="utf-8")
        old_commit = old.commit
    else:
        assert old.folder is not None
        with log.step(f"copying the source of {old.commit[:12]} into {tree}"):
            prepare.copy_source(old.folder(), tree)
        _git.git(["add", "--all", "--force", "."], cwd=tree, env=env, capture=True)
        old_commit = prepare.make_commit(tree, f"onnxruntime {old.commit}\n\nThe old pin's source, unpatched.\n", env)
        for child in tree.iterdir():
            if child.name != ".git":
                remove_tree(child)
    _preimages(tree, old_commit, verified, env)
    with log.step(f"copying the source of {onto[:12]} into {tree}"):
        prepare.copy_source(source, tree)
    _git.git(["add", "--all", "--force", "."], cwd=tree, env=env, capture=True)
    return prepare.make_commit(tree, f"onnxruntime {onto}\n\nThe new pin's source, unpatched.\n", env)


def _preimages(tree: Path, old_commit: str, verified: list[series.Verified], env: Mapping[str, str]) -> None:
    """Apply the series to the old pin in a scratch index only: its blobs land in the object store."""
    index = tree / ".git" / "ortstack-preimages.index"
    scratch = {**env, "GIT_INDEX_FILE": str(index)}
    _git.git(["read-tree", old_commit], cwd=tree, env=scratch, capture=True)
    for patch in verified:
        applied = _git.git(
            ["apply", "--cached", "--whitespace=nowarn", str(patch.path)],
            cwd=tree,
            env=scratch,
            capture=True,
            check=False,
        )
        if applied.returncode != 0:
            log.warn(f"{patch.name} does not apply to its own pin {old_commit[:12]}: later patches may not merge")
    index.unlink(missing_ok=True)


def resume(
    stack: Stack, lock: Lock, *, action: Literal["continue", "skip"], work_dir: Path, env: Mapping[str, str]
) -> Rebase:
    """``--continue`` after the user committed a resolution, or ``--skip`` the patch that stopped."""
    verified = _verify_all(stack, lock, env)
    tree = tree_path(work_dir)
    with prepare.locked(tree, wait=True, what="rebasing in"):
        state = _existing(tree)
        _check_same(state, stack, state.onto, series_digest(stack, verified), tree)
        if not state.stopped:
            msg = "no patch is waiting for a resolution"
            raise UsageError(msg, tip=f"run `ortstack rebase --onto {state.onto}` to go on with the rebase")
        stopped, before, seconds = state.stopped, state.stopped_before, state.stopped_seconds
        if action == "skip":
            _reset_to(tree, before, env)
            state.carried.append(
                Carried(
                    id=stopped,
                    state="dropped",
                    before=before,
                    detail="skipped on a conflict",
                    kept=False,
                    seconds=seconds,
                )
            )
        else:
            unmerged = _git.out(["diff", "--name-only", "--diff-filter=U"], cwd=tree, env=env).split()
            if unmerged:
                msg = f"{len(unmerged)} file(s) still have conflicts: {', '.join(unmerged[:5])}"
                raise PatchError(msg, tip=_resolve_tip(tree))
            if _git.out(["status", "--porcelain"], cwd=tree, env=env):
                msg = f"{tree} has uncommitted changes"
                raise PatchError(msg, tip=_resolve_tip(tree))
            head = _git.out(["rev-parse", "HEAD"], cwd=tree, env=env)
            if head == before:  # resolved to no change: the base already does what the patch did
                patch = next(v for v in verified if v.entry.id == stopped)
                upstreamed = _upstreamed(state, patch, tree, env, how="resolved to no change")
                state.carried.append(replace(upstreamed, seconds=seconds))
            else:
                state.carried.append(
                    Carried(
                        id=stopped,
                        state="resolved",
                        commit=head,
                        before=before,
                        detail="conflict resolved by hand",
                        seconds=seconds,
                    )
                )
        state.stopped, state.stopped_before, state.stopped_seconds = "", "", 0.0
        _save(state, tree)
        return _carry_rest(state, stack, verified, tree, env)


def abort(work_dir: Path) -> Rebase:
    """Give up the rebase in progress: its tree goes; the stack was never touched."""
    tree = tree_path(work_dir)
    with prepare.locked(tree, wait=True, what="rebasing in"):
        state = _existing(tree)
        remove_tree(tree)
    return state


def _existing(tree: Path) -> Rebase:
    state = read_state(tree)
    if state is None:
        msg = f"no rebase in progress in {tree}"
        raise UsageError(msg, tip="start one with `ortstack rebase --onto COMMIT`")
    return state


def _check_same(state: Rebase, stack: Stack, onto: str, digest: str, tree: Path) -> None:
    if state.stack != str(stack.path.resolve()) or state.onto != onto:
        msg = f"a rebase of {state.stack} onto {state.onto[:12]} is in progress in {tree}"
        raise UsageError(msg, tip="finish it (`ortstack rebase --continue`) or give it up (`ortstack rebase --abort`)")
    if state.series != digest:
        msg = f"the series of {stack.path.name} changed since the rebase started"
        raise UsageError(msg, tip="give the rebase up with `ortstack rebase --abort` and start it again")


def _resolve_tip(tree: Path) -> str:
    return (
        f"resolve the conflicts in {tree} (`git status` lists them), `git add` and `git commit` there, then "
        f"`{CONTINUE}`; `ortstack rebase --skip` drops the patch, `ortstack rebase --abort` gives the rebase up"
    )


def _last_commit(state: Rebase) -> str:
    return next((c.commit for c in reversed(state.carried) if c.commit), state.base)


def _reset_to(tree: Path, commit: str, env: Mapping[str, str]) -> None:
    _git.git(["reset", "-q", "--hard", commit], cwd=tree, env=env, capture=True)
    _git.git(["clean", "-q", "-fdx"], cwd=tree, env=env, capture=True)


def _verify_all(stack: Stack, lock: Lock, env: Mapping[str, str]) -> list[series.Verified]:
    """Every patch file of the series, on every platform: a rebase carries the whole stack."""
    return [series.verify(stack, e, lock, env) for e in stack.patches if e.mode == "apply"]


# --------------------------------------------------------------------------------------------------
# Carrying the series.


def _carry_rest(
    state: Rebase, stack: Stack, verified: list[series.Verified], tree: Path, env: Mapping[str, str]
) -> Rebase:
    done = {c.id for c in state.carried}
    by_id = {v.entry.id: v for v in verified}
    for entry in stack.patches:
        if entry.id in done:
            continue
        started = time.perf_counter()
        before = _git.out(["rev-parse", "HEAD"], cwd=tree, env=env)
        if entry.mode == "in-base":
            reason = prepare.guard_failure(entry, tree)
            carried = Carried(
                id=entry.id, state="in-base", detail=f"guard fails: {reason}" if reason else "guard holds"
            )
        else:
            try:
                carried = _carry_one(state, by_id[entry.id], before=before, tree=tree, env=env)
            except PatchError:
                if state.stopped == entry.id:
                    state.stopped_seconds = round(time.perf_counter() - started, 3)
                    _save(state, tree)
                raise
        state.carried.append(replace(carried, seconds=round(time.perf_counter() - started, 3)))
        _save(state, tree)
        log.info(f"{entry.id}: {carried.state}{f' ({carried.detail})' if carried.detail else ''}")
    return state


def _carry_one(state: Rebase, patch: series.Verified, *, before: str, tree: Path, env: Mapping[str, str]) -> Carried:
    entry = patch.entry
    try:
        outcome = prepare.apply_one(tree, patch, env)
    except UnsafePatchError:
        raise
    except PatchError as exc:
        state.stopped, state.stopped_before = entry.id, before
        _save(state, tree)
        msg = f"rebase stopped: {exc.message}"
        raise PatchError(msg, tip=_resolve_tip(tree), detail=exc.detail) from None
    if outcome.state == "upstreamed":
        return _upstreamed(state, patch, tree, env)
    return Carried(
        id=entry.id,
        state="merged" if outcome.merged else "applies",
        commit=outcome.commit,
        before=before,
    )


def _upstreamed(state: Rebase, patch: series.Verified, tree: Path, env: Mapping[str, str], *, how: str = "") -> Carried:
    """An entry whose change the new base holds: in-base when its guard says so there, else dropped."""
    entry = patch.entry
    found = upstream_commit(patch, Path(state.source), state.old_commit, state.onto, env)
    where = "; ".join(filter(None, [how, f"in {found[:12]}" if found else "commit not found"]))
    if entry.guard is not None and not prepare.guard_failure(entry, tree):
        return Carried(id=entry.id, state="upstreamed", detail=f"{where}; kept as in-base (its guard holds)")
    return Carried(id=entry.id, state="upstreamed", detail=f"{where}; dropped (no guard)", kept=False)


_MIN_DISTINCT = 12
"""Added lines shorter than this (braces, blank lines) say nothing about where a change came from."""


def upstream_commit(patch: series.Verified, source: Path, old: str, new: str, env: Mapping[str, str]) -> str:
    """The commit between ``old`` and ``new`` that added the patch's most distinctive line; empty when
    ``source`` is no git checkout holding both, or no commit matches."""
    if not (source / ".git").exists():
        return ""
    ancestry = _git.git(["merge-base", "--is-ancestor", old, new], cwd=source, env=env, capture=True, check=False)
    if ancestry.returncode != 0:
        return ""
    added = [
        (line.value.strip(), patched.path)
        for patched in patch.hunks
        for hunk in patched
        for line in hunk
        if line.is_added and len(line.value.strip()) >= _MIN_DISTINCT
    ]
    if not added:
        return ""
    text, path = max(added, key=lambda item: len(item[0]))
    found = _git.git(
        ["log", "--reverse", "--format=%H", f"-S{text}", f"{old}..{new}", "--", path],
        cwd=source,
        env=env,
        capture=True,
        check=False,
    )
    return found.stdout.split()[0] if found.returncode == 0 and found.stdout.split() else ""


# --------------------------------------------------------------------------------------------------
# Writing the new stack.


@dataclass(frozen=True, kw_only=True)
class Written:
    stack_file: Path
    patches: dict[str, str]
    """Patch id -> sha256 of the file the new stack pins."""
    rewritten: frozenset[str]
    """Ids whose file was re-exported (the others kept their bytes)."""
    dawn: str
    """The Dawn revision the new tree's cmake/deps.txt pins; empty when it pins none."""


def _rendered(original: series.Verified, diff: str, today: str) -> bytes:
    header = original.patch.header
    fields = dict(header.fields)
    if "Last-Update" in fields:
        fields["Last-Update"] = today
    return patchfile.PatchFile(header=replace(header, fields=fields), diff=diff).render().encode("utf-8")


def moved_archive_url(url: str, old: str, new: str) -> str:
    """An archive URL naming the old commit, moved to the new one; empty for any other (it names
    only the old source)."""
    return url.replace(old, new) if old in url else ""


def _move_archive(ort: Any, old: str, new: str) -> None:
    url = str(ort.get("archive_url", ""))
    if not url:
        return
    ort.pop("archive_sha256", None)  # resolved again on first use
    if moved := moved_archive_url(url, old, new):
        ort["archive_url"] = moved
        return
    ort.pop("archive_url")
    log.loud(f"[ort] archive_url {url} was dropped: it names no commit, so it cannot hold the new pin's source")


def _carried_file(outcome: Carried, original: series.Verified, tree: Path, env: Mapping[str, str]) -> bytes | None:
    """The carried patch's new bytes; ``None`` when it applied as written: the reviewed file stays
    byte for byte (``git apply`` finds a hunk whose lines moved by itself)."""
    if outcome.state == "applies":
        return None
    diff = _git.git(
        ["diff", "--full-index", "--binary", outcome.before, outcome.commit], cwd=tree, env=env, capture=True
    ).stdout
    return _rendered(original, diff, dt.datetime.now(tz=dt.UTC).date().isoformat())


def write_stack(state: Rebase, stack: Stack, lock: Lock, tree: Path, env: Mapping[str, str]) -> Written:
    """Write the rebased stack into ``state.into``: the new pin, re-exported patches, new digests."""
    into = Path(state.into)
    verified = {v.entry.id: v for v in _verify_all(stack, lock, env)}
    carried = {c.id: c for c in state.carried}
    document = tomlkit.parse(stack.path.read_text(encoding="utf-8"))
    ort: Any = document["ort"]
    ort["commit"] = state.onto
    _move_archive(ort, state.old_commit, state.onto)
    files: dict[PurePosixPath, bytes] = {}
    pinned: dict[str, str] = {}
    rewritten: set[str] = set()
    kept = tomlkit.aot()
    tables: Any = document.get("patch", [])
    for table, entry in zip(tables, stack.patches, strict=True):
        outcome = carried[entry.id]
        if not outcome.kept:
            continue
        if outcome.state == "upstreamed":
            table["mode"] = "in-base"
            for key in ("file", "sha256"):
                table.pop(key, None)
        elif outcome.commit:
            original = verified[entry.id]
            data = _carried_file(outcome, original, tree, env)
            if data is None:
                data = original.path.read_bytes()
            else:
                rewritten.add(entry.id)
            files[PurePosixPath(entry.file)] = data
            table["sha256"] = pinned[entry.id] = patchfile.sha256_hex(data)
        kept.append(table)
    if "patch" in document:
        document["patch"] = kept
    _write_files(into, stack, files)
    stack_file = into / stack.path.name
    write_atomic(stack_file, tomlkit.dumps(document).encode("utf-8"))
    dependencies = deps.read(tree)
    dawn = deps.dawn_revision(dependencies) if any(d.name == "dawn" for d in dependencies) else ""
    return Written(stack_file=stack_file, patches=pinned, rewritten=frozenset(rewritten), dawn=dawn)


def _write_files(into: Path, stack: Stack, files: Mapping[PurePosixPath, bytes]) -> None:
    for relative, data in files.items():
        write_atomic(into / relative, data)
    if into.resolve() == stack.root.resolve():  # in place: the files of entries that left go too
        for entry in stack.patches:
            if entry.file and PurePosixPath(entry.file) not in files:
                (stack.root / entry.file).unlink(missing_ok=True)


def detail(carried: Carried, written: Written) -> str:
    if carried.id in written.rewritten:
        return "; ".join(filter(None, [carried.detail, "re-exported"]))
    if carried.id in written.patches:
        return "file unchanged"
    return carried.detail


def report(state: Rebase, written: Written) -> str:
    """The rebase as a Markdown table, for the stack's README."""
    rows = [
        f"| {c.id} | {c.state} | {detail(c, written)} | {written.patches.get(c.id, '')[:12]} | {c.seconds:.1f} s |"
        for c in state.carried
    ]
    head = [
        f"Rebased from {state.old_commit} onto {state.onto}"
        + (f" (Dawn {written.dawn})" if written.dawn else "")
        + ".",
        "",
        "| patch | outcome | detail | new sha256 | time |",
        "|---|---|---|---|---|",
    ]
    return "\n".join([*head, *rows]) + "\n"
