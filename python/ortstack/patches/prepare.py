"""The prepared tree: the cached source plus the patch series, one git commit per patch.

Built in a temporary directory next to its stable path (``<work>/prepared/<variant>``) and swapped
in only when every patch applied and every guard held, so a failing run leaves the previous tree
exactly as it was. A fingerprint (source commit, patch digests, platform) lets an unchanged tree
be reused without rework. In the tree, ``git log`` shows the base and one commit per patch, so
``git bisect`` works and commits made by hand can be exported back into the series.

Checks come first: every file's sha256, diff syntax and paths before any git work; then, per patch,
``git apply --check`` before applying. A patch that does not apply forward but reverse-applies is
already in the tree (upstreamed) and skipped; otherwise ``git apply --3way`` merges it, using the
full blob ids of the patch to find each pre-image. A 3-way check alone cannot see conflicts (git
reports success), so the merge runs for real, in the temporary tree that a failure throws away.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ortstack import _git, diskspace, locks, log
from ortstack.cache import remove_tree
from ortstack.errors import PatchError, UnsafePatchError
from ortstack.patches import patchfile, patchpaths, series

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from ortstack.config import PatchEntry, Stack
    from ortstack.lockfile import Lock

STATE_FILE = "ortstack-prepared.json"
"""Kept inside the tree's ``.git`` folder, so it moves with the tree when it is swapped in."""
FORMAT = 1
State = Literal["applied", "upstreamed", "in-base", "skipped"]
_FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$", re.MULTILINE)
_FAILED_FILE = re.compile(
    r"^error: (.+?): (does not exist in index|already exists in index|does not match index|No such file.*)$",
    re.MULTILINE,
)
_BEYOND_LINK = re.compile(r"^error: affected file '(.+)' is beyond a symbolic link$", re.MULTILINE)
_INVALID_PATH = re.compile(r"^error: invalid path '(.+)'$", re.MULTILINE)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    id: str
    state: State
    commit: str = ""
    """The tree's commit for an applied patch."""
    merged: bool = False
    """Applied by a 3-way merge, not as written."""


@dataclass(frozen=True, kw_only=True)
class Prepared:
    path: Path
    fingerprint: str
    platform: str
    base: str
    """The commit holding the unpatched source."""
    tip: str
    """The last commit the series made; later commits were made by hand."""
    outcomes: tuple[Outcome, ...]

    def outcome(self, patch_id: str) -> Outcome | None:
        return next((o for o in self.outcomes if o.id == patch_id), None)


def tree_path(work_dir: Path, variant: str) -> Path:
    return work_dir / "prepared" / variant


def fingerprint(stack: Stack, digests: Mapping[str, str], platform: str) -> str:
    """Identifies what a prepared tree is made of: the pinned source, the series and its files' digests."""
    payload = {
        "format": FORMAT,
        "source": stack.ort.commit,
        "platform": platform,
        "series": [[e.id, e.mode, digests.get(e.id, "")] for e in stack.patches],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def read_state(tree: Path) -> Prepared | None:
    state_file = tree / ".git" / STATE_FILE
    if not state_file.is_file():
        return None
    raw: dict[str, Any] = json.loads(state_file.read_text(encoding="utf-8"))
    if raw.get("format") != FORMAT:
        return None
    outcomes = tuple(Outcome(**o) for o in raw["outcomes"])
    return Prepared(
        path=tree,
        fingerprint=raw["fingerprint"],
        platform=raw["platform"],
        base=raw["base"],
        tip=raw["tip"],
        outcomes=outcomes,
    )


def write_state(prepared: Prepared, tree: Path) -> None:
    raw = {k: v for k, v in asdict(prepared).items() if k != "path"}
    raw["format"] = FORMAT
    (tree / ".git" / STATE_FILE).write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")


@contextmanager
def locked(path: Path, *, wait: bool, what: str = "preparing") -> Iterator[None]:
    """Hold ``<path>.lock``; say so while waiting for another run, or fail at once when ``wait`` is off."""
    with locks.hold(Path(f"{path}.lock"), wait=wait, what=f"{what} {path}"):
        yield


def unsaved_work(tree: Path, state: Prepared, env: Mapping[str, str]) -> str:
    """Describe edits in ``tree`` that a rebuild would throw away; empty when there are none."""
    changes = _git.out(["status", "--porcelain"], cwd=tree, env=env)
    if changes:
        return f"uncommitted changes ({len(changes.splitlines())} paths)"
    commits = _git.out(["rev-list", "--count", f"{state.tip}..HEAD"], cwd=tree, env=env)
    if commits != "0":
        return f"{commits} commit(s) made after the series"
    return ""


def guard_failure(entry: PatchEntry, tree: Path) -> str:
    """Why ``entry``'s guard does not hold in ``tree``; empty when it holds."""
    if entry.guard is None:
        return ""
    missing = [name for name in entry.guard.files if not (tree / name).is_file()]
    if missing:
        return f"guard of patch {entry.id} failed: {', '.join(missing)} missing from the prepared tree"
    texts = [(tree / name).read_text(encoding="utf-8", errors="replace") for name in entry.guard.files]
    for pattern in entry.guard.patterns:
        if not any(re.search(pattern, text, flags=re.MULTILINE) for text in texts):
            return f"guard of patch {entry.id} failed: /{pattern}/ not found in {', '.join(entry.guard.files)}"
    return ""


def check_guards(stack: Stack, tree: Path, platform: str) -> None:
    """Every guard of an entry for this platform must hold in ``tree``."""
    for entry in stack.patches:
        if series.applies_on(entry, platform) and (reason := guard_failure(entry, tree)):
            raise PatchError(reason, tip=_guard_tip(entry))


def _guard_tip(entry: PatchEntry) -> str:
    if entry.mode == "in-base":
        return f"the pinned source lacks {entry.id}: move the pin to a commit that has it, or vendor it as a patch"
    return f"the patch no longer makes the change its guard expects: refresh {entry.id} or fix its guard"


def _copy_writable(source: str, destination: str) -> None:
    # The cached source is read-only; the prepared tree is for editing.
    shutil.copy2(source, destination)
    Path(destination).chmod(stat.S_IMODE(Path(destination).stat().st_mode) | stat.S_IWUSR)


def copy_source(source: Path, destination: Path) -> None:
    shutil.copytree(
        source,
        destination,
        symlinks=True,
        dirs_exist_ok=True,
        copy_function=_copy_writable,
        ignore=lambda folder, _names: [".git"] if Path(folder) == source else [],
    )


def make_commit(tree: Path, message: str, env: Mapping[str, str], *, author: str = "", date: str = "") -> str:
    message_file = tree / ".git" / "ORTSTACK_MESSAGE"
    message_file.write_text(message, encoding="utf-8")
    commit_env = _git.environment(env, author=author, date=date)
    _git.git(["commit", "-q", "--no-verify", "-F", str(message_file)], cwd=tree, env=commit_env, capture=True)
    message_file.unlink()
    return _git.out(["rev-parse", "HEAD"], cwd=tree, env=env)


def _failures(patch: series.Verified, git_said: str, conflicted: list[str]) -> list[str]:
    """Each file (and hunk) git could not apply, once, in git's order."""
    failures = [(path, patchfile.hunk_at(patch.hunks, path, int(line))) for path, line in _FAILED_AT.findall(git_said)]
    failures += [(path, reason) for path, reason in _FAILED_FILE.findall(git_said)]
    failures += [(path, "is beyond a symbolic link") for path in _BEYOND_LINK.findall(git_said)]
    failures += [(path, "git refuses this path") for path in _INVALID_PATH.findall(git_said)]
    if conflicted:
        failures = [f for f in failures if f[0] in conflicted] or [(path, "conflicting hunks") for path in conflicted]
    return list(dict.fromkeys(f"{path}: {what}" for path, what in failures))


def _conflict(patch: series.Verified, git_said: str, conflicted: list[str]) -> PatchError:
    failures = _failures(patch, git_said, conflicted)
    said = [line.removeprefix("error: ") for line in git_said.splitlines() if line.startswith("error: ")]
    where = "; ".join(failures) or (said[0] if said else "git gave no reason")
    msg = f"patch {patch.name} ({patch.entry.id}) does not apply: {where}"
    if _BEYOND_LINK.search(git_said):
        tip = "a patch may not write through a link in the tree: name the path the link points to instead"
    else:
        tip = f"the source moved under the patch: {series.fix_tip(patch.entry)}"
    return PatchError(msg, tip=tip, detail=git_said)


def apply_one(tree: Path, patch: series.Verified, env: Mapping[str, str]) -> Outcome:
    """Check, then apply one patch as one commit; detect a change that is already in the tree."""
    apply = ["apply", "--whitespace=nowarn"]
    check = _git.git([*apply, "--check", str(patch.path)], cwd=tree, env=env, capture=True, check=False)
    if check.returncode == 0:
        _git.git([*apply, "--index", str(patch.path)], cwd=tree, env=env, capture=True)
    else:
        reverse = [*apply, "--reverse", "--check", str(patch.path)]
        if _git.git(reverse, cwd=tree, env=env, capture=True, check=False).returncode == 0:
            return Outcome(id=patch.entry.id, state="upstreamed")
        # Full blob ids let git find each pre-image and merge: a patch repeating an earlier one merges cleanly.
        merge = _git.git([*apply, "--3way", "--index", str(patch.path)], cwd=tree, env=env, capture=True, check=False)
        if merge.returncode != 0:
            unmerged = _git.out(["diff", "--name-only", "--diff-filter=U"], cwd=tree, env=env).splitlines()
            raise _conflict(patch, check.stderr + merge.stderr, unmerged)
        log.info(f"{patch.name}: applied with a 3-way merge")
    merged = check.returncode != 0
    patchpaths.check_links(tree, patch.name, env)
    if _git.git(["diff", "--cached", "--quiet"], cwd=tree, env=env, capture=True, check=False).returncode == 0:
        return Outcome(id=patch.entry.id, state="upstreamed")
    header = patch.patch.header
    subject = header.subject or patch.entry.description.split("\n")[0] or patch.entry.id
    message = patchfile.Header(subject=subject, why=header.why, fields=header.fields).message()
    commit = make_commit(tree, message, env, author=header.author, date=header.date)
    return Outcome(id=patch.entry.id, state="applied", commit=commit, merged=merged)


def _build(
    stack: Stack,
    *,
    source: Path,
    tree: Path,
    target: Path,
    wanted: str,
    verified: list[series.Verified],
    platform: str,
    env: Mapping[str, str],
) -> tuple[str, list[Outcome]]:
    with log.step(f"copying the source into {tree.name}"):
        copy_source(source, tree)
    _git.git(["init", "-q"], cwd=tree, env=env, capture=True)
    # Commits made here by hand must not start git's background gc: it would still be writing into .git
    # when the next `patch` moves this tree aside and removes it.
    _git.git(["config", "gc.auto", "0"], cwd=tree, env=env, capture=True)
    _git.git(["config", "maintenance.auto", "false"], cwd=tree, env=env, capture=True)
    _git.git(["add", "--all", "--force", "."], cwd=tree, env=env, capture=True)
    base = make_commit(tree, f"onnxruntime {stack.ort.commit}\n\nThe pinned source, unpatched.\n", env)
    by_id = {v.entry.id: v for v in verified}
    outcomes: list[Outcome] = []
    for entry in stack.patches:
        if not series.applies_on(entry, platform):
            log.info(f"{entry.id}: skipped on {platform} (platforms = {list(entry.platforms)})")
            outcomes.append(Outcome(id=entry.id, state="skipped"))
            continue
        if entry.mode == "in-base":
            outcomes.append(Outcome(id=entry.id, state="in-base"))
            continue
        try:
            outcome = apply_one(tree, by_id[entry.id], env)
        except UnsafePatchError:
            raise  # refused, not failed: nothing for status to record
        except PatchError as exc:
            if target.exists():
                exc.tip = f"{exc.tip}; the previous prepared tree is untouched"
            raise _failed(target, wanted, entry, "conflicts", exc) from None
        if outcome.state == "upstreamed":
            log.loud(
                f"patch {entry.id} ({entry.file}) is upstreamed: its change is already in the tree, so it "
                f"was skipped.\nDrop it from {stack.path.name}, or keep it as an in-base entry with a guard."
            )
        else:
            log.info(f"{entry.id}: applied as {outcome.commit[:12]}")
        outcomes.append(outcome)
    for entry in stack.patches:
        if series.applies_on(entry, platform) and (reason := guard_failure(entry, tree)):
            raise _failed(target, wanted, entry, "guard failed", PatchError(reason, tip=_guard_tip(entry)))
    return base, outcomes


def failure_file(target: Path) -> Path:
    """Where a failed run records which entry stopped it, for ``status``."""
    return target.with_name(f"{target.name}.failed.json")


def read_failure(target: Path) -> dict[str, str] | None:
    path = failure_file(target)
    if not path.is_file():
        return None
    record: dict[str, str] = json.loads(path.read_text(encoding="utf-8"))
    return record


def _failed(target: Path, wanted: str, entry: PatchEntry, state: str, error: PatchError) -> PatchError:
    record = {"fingerprint": wanted, "id": entry.id, "state": state, "message": error.message}
    failure_file(target).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return error


def _swap(new: Path, target: Path) -> None:
    """Put ``new`` at ``target``; the old tree is moved aside first and removed only afterwards."""
    old = target.with_name(f".{target.name}.old")
    if old.exists():
        remove_tree(old)
    if target.exists():
        target.rename(old)
    new.rename(target)
    if old.exists():
        remove_tree(old)


def prepare(
    stack: Stack,
    lock: Lock,
    *,
    source: Path,
    target: Path,
    platform: str,
    env: Mapping[str, str],
    wait: bool = True,
    force: bool = False,
) -> Prepared:
    """Make ``target`` hold ``source`` with the series applied for ``platform``, reusing it if unchanged."""
    verified = series.verify_series(stack, lock, platform, env)
    wanted = fingerprint(stack, {v.entry.id: v.sha256 for v in verified}, platform)
    with locked(target, wait=wait):
        current = read_state(target)
        if current is not None:
            unsaved = unsaved_work(target, current, env)
            if unsaved and not force:
                msg = f"the prepared tree {target} has {unsaved}; rebuilding it would lose them"
                tip = "export commits with `ortstack patch --export`, or pass --force to discard them"
                raise PatchError(msg, tip=tip)
            if not unsaved and current.fingerprint == wanted:
                check_guards(stack, target, platform)
                series.record_first_use(verified, lock)  # these very files made this tree
                log.info(f"prepared tree {target} is up to date (fingerprint {wanted[:12]})")
                return current
        for leftover in target.parent.glob(f".{target.name}.*"):  # from a run that was killed
            remove_tree(leftover)
        diskspace.check("patch", target.parent, env)
        new = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.new-"))
        try:
            base, outcomes = _build(
                stack,
                source=source,
                tree=new,
                target=target,
                wanted=wanted,
                verified=verified,
                platform=platform,
                env=env,
            )
            tip = _git.out(["rev-parse", "HEAD"], cwd=new, env=env)
            prepared = Prepared(
                path=target,
                fingerprint=wanted,
                platform=platform,
                base=base,
                tip=tip,
                outcomes=tuple(outcomes),
            )
            write_state(prepared, new)
            series.record_first_use(verified, lock)
            _swap(new, target)
            failure_file(target).unlink(missing_ok=True)
        except BaseException:
            try:
                remove_tree(new)
            except OSError as exc:  # a git the interrupt cut off may still be writing there
                log.warn(f"could not remove {new} ({exc}); the next run removes it")
            raise
    return prepared
