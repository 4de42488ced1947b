"""The patch series at a glance, for ``ortstack status``: what is vendored, applies, is upstreamed.

Status never applies anything: it reads the vendored files and the state the last ``patch`` run
left in a prepared tree, and says what to run when something is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortstack.errors import PatchError
from ortstack.lockfile import Lock
from ortstack.patches import patchfile, prepare, series
from ortstack.status import Section

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from ortstack.config import PatchEntry, Stack
    from ortstack.status import StatusContext

_OUTCOME_TEXT = {
    "applied": "applies",
    "upstreamed": "UPSTREAMED: drop it",
    "in-base": "in base",
    "skipped": "skipped on this platform",
}


def _origin(entry: PatchEntry, lock: Lock) -> str:
    origin = entry.origin
    head = series.pinned_head(entry, lock)
    at = f" @ {head[:12]}" if head else " (head not pinned yet)"
    if entry.mode == "in-base":
        at = " (merged upstream)"
    if origin.kind == "pr":
        return f"PR #{origin.pr}{at}"
    if origin.kind == "commit":
        return f"commit{at}"
    if origin.kind == "compare":
        return f"{origin.base[:12]}...{head[:12]}"
    return "local"


def _vendored(stack: Stack, entry: PatchEntry, lock: Lock, env: Mapping[str, str]) -> str:
    if entry.mode == "in-base":
        return "-"
    if not series.is_vendored(stack, entry):
        return "NOT VENDORED"
    try:
        if series.expected_sha256(entry, lock) is None:
            return "vendored (sha256 not pinned)"
        series.verify(stack, entry, lock, env)
    except PatchError as exc:
        return f"BROKEN: {exc.message}"
    return "vendored"


def _guard(entry: PatchEntry, tree: Path | None, platform: str) -> str:
    if entry.guard is None or not series.applies_on(entry, platform):
        return "-"
    if tree is None:
        return "not checked"
    return "GUARD FAILED" if prepare.guard_failure(entry, tree) else "guard ok"


def _fingerprint_now(stack: Stack, platform: str) -> str:
    """The fingerprint a run would compute from the files as they are (without verifying them)."""
    digests = {
        e.id: patchfile.sha256_hex(series.patch_path(stack, e).read_bytes())
        for e in stack.patches
        if e.mode == "apply" and series.is_vendored(stack, e)
    }
    return prepare.fingerprint(stack, digests, platform)


def _last_run(stack: Stack, work_dir: Path, platform: str) -> tuple[prepare.Prepared | None, dict[str, str] | None]:
    """The prepared tree and the failure record that match the series as it is now, if any."""
    now = _fingerprint_now(stack, platform)
    for name in [v.name for v in stack.variants] or ["default"]:
        target = prepare.tree_path(work_dir, name)
        failure = prepare.read_failure(target)
        if failure is not None and failure["fingerprint"] == now:
            return None, failure
        state = prepare.read_state(target)
        if state is not None and state.fingerprint == now:
            return state, None
    return None, None


def _after(stack: Stack, failed_id: str, entry: PatchEntry) -> bool:
    ids = [e.id for e in stack.patches]
    return ids.index(entry.id) > ids.index(failed_id)


def rows(stack: Stack, lock: Lock, work_dir: Path, platform: str, env: Mapping[str, str]) -> list[list[str]]:
    """One row per entry: id, origin, vendored, state on ``platform``, guard, platforms."""
    state, failure = _last_run(stack, work_dir, platform)
    table: list[list[str]] = []
    for entry in stack.patches:
        outcome = state.outcome(entry.id) if state is not None else None
        if not series.applies_on(entry, platform):
            result = f"skipped on {platform}"
        elif failure is not None and failure["id"] == entry.id:
            result = failure["state"].upper()
        elif outcome is not None:
            result = _OUTCOME_TEXT[outcome.state]
        elif entry.mode == "in-base":
            result = "in base (not checked: run ortstack patch)"
        else:
            result = "not applied yet (run ortstack patch)"
            if failure is not None:
                stopped_before = failure["state"] == "conflicts" and _after(stack, failure["id"], entry)
                result = "not reached (the run stopped earlier)" if stopped_before else "applies"
        tree = state.path if state is not None else None
        platforms = ", ".join(entry.platforms) or "all"
        row = [
            entry.id,
            _origin(entry, lock),
            _vendored(stack, entry, lock, env),
            result,
            _guard(entry, tree, platform),
        ]
        table.append([*row, platforms])
    return table


def section(context: StatusContext) -> Section | None:
    """The series on this machine's platform; says plainly what is not vendored and how to vendor it."""
    stack, settings = context.stack, context.settings
    if not stack.patches:
        return None
    platform = series.host_platform()
    lock = Lock.load(settings.lock_file, bounds=settings.bounds)
    columns = ["patch", "origin", "vendored", f"on {platform}", "guard", "platforms"]
    missing = [e.id for e in stack.patches if not series.is_vendored(stack, e)]
    notes: tuple[str, ...] = ()
    if missing:
        note = (
            f"{len(missing)} of {len(stack.patches)} patch entries are not vendored yet: {', '.join(missing)}. "
            f"Vendor them with: {series.REFRESH_COMMAND}. A networked `nox -s build` also vendors them once "
            "(trust-on-first-use, recorded in stack.lock); `--locked` builds refuse until they are vendored."
        )
        notes = (note,)
    headless = [
        e.id for e in stack.patches if e.id in missing and e.origin.kind in ("commit", "compare") and not e.origin.head
    ]
    if headless:
        notes += (f"{', '.join(headless)}: set origin.head in {stack.path.name} first (the commit is not known yet).",)
    _, failure = _last_run(stack, settings.work_dir, platform)
    if failure is not None:
        notes += (f"the last `ortstack patch` stopped: {failure['message']}",)
    title = f"patch series ({len(stack.patches)} entries, pin {stack.ort.commit[:12]})"
    return Section(
        title=title, columns=columns, rows=rows(stack, lock, settings.work_dir, platform, settings.env), notes=notes
    )
