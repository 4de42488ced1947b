"""``ortstack rebase``: carry the patch series to a newer onnxruntime commit and write the new stack."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import _git, config, log
from ortstack.cache import remove_tree
from ortstack.errors import UsageError
from ortstack.lockfile import Lock, write_atomic
from ortstack.patches import rebase
from ortstack.source import fetch

if TYPE_CHECKING:
    import argparse

    from ortstack.settings import Settings

HELP = "Carry the patch series to a newer onnxruntime commit and write the new stack, as git rebase does."

EXAMPLES = """examples:
  ortstack rebase --onto COMMIT --into stacks/new   carry the series to COMMIT; the new stack goes to stacks/new
  ortstack rebase --continue                        go on after a conflict was resolved and committed"""
COMMON = ("--stack", "--cache-dir", "--work-dir", "--locked", "--no-wait")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--onto", metavar="COMMIT", help="the onnxruntime commit to carry the series to")
    parser.add_argument(
        "--into",
        type=Path,
        metavar="DIR",
        help="folder for the new stack.toml and patches/ (default: rewrite the stack in place)",
    )
    parser.add_argument(
        "--source-dir",
        type=Path,
        help="a checkout of the new commit instead of fetching it; with its history, upstreamed patches are traced",
    )
    parser.add_argument("--report", type=Path, metavar="FILE", help="also write the summary as Markdown to FILE")
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="go on after the conflict was resolved and committed in the rebase tree",
    )
    actions.add_argument("--skip", action="store_true", help="drop the patch that stopped on a conflict and go on")
    actions.add_argument("--abort", action="store_true", help="give the rebase up and remove its tree")


def _full_commit(onto: str, source_dir: Path | None, settings: Settings) -> str:
    """``onto`` as a full id: as given, or a prefix resolved in ``--source-dir``."""
    if not _COMMIT.fullmatch(onto):
        msg = f"--onto {onto!r} is not a commit id"
        raise UsageError(msg, tip="give the new commit as 40 hex digits")
    if config.HEX40.fullmatch(onto):
        return onto
    if source_dir is None:
        msg = f"--onto {onto} is a short commit id"
        raise UsageError(msg, tip="give all 40 hex digits, or --source-dir with a checkout that resolves it")
    return _git.out(["rev-parse", "--verify", f"{onto}^{{commit}}"], cwd=source_dir, env=settings.env, error=UsageError)


def _has_commit(checkout: Path, commit: str, settings: Settings) -> bool:
    found = _git.git(
        ["cat-file", "-e", f"{commit}^{{commit}}"], cwd=checkout, env=settings.env, check=False, capture=True
    )
    return found.returncode == 0


def _old_pin(stack: config.Stack, settings: Settings, source_dir: Path | None) -> rebase.OldPin:
    """The old pin from the history of ``--source-dir`` when it holds the old commit (nothing fetched
    or copied), else the way ``ortstack fetch`` gets it (the cache first)."""
    commit = stack.ort.commit
    if source_dir is not None and _has_commit(source_dir, commit, settings):
        return rebase.OldPin(commit=commit, history=source_dir)
    return rebase.OldPin(commit=commit, folder=lambda: fetch.ensure_source(stack, settings).source_dir)


def main(args: argparse.Namespace, settings: Settings) -> int:
    stack = config.load(settings.stack_file, settings.bounds)
    lock = Lock.load(settings.lock_file, locked=settings.locked, bounds=settings.bounds)
    tree = rebase.tree_path(settings.work_dir)
    if args.abort:
        state = rebase.abort(settings.work_dir)
        log.success(f"rebase onto {state.onto[:12]} given up; {stack.path.name} is as it was")
        return 0
    if args.resume or args.skip:
        state = rebase.resume(
            stack, lock, action="continue" if args.resume else "skip", work_dir=settings.work_dir, env=settings.env
        )
    else:
        if not args.onto:
            msg = "say where to rebase to"
            raise UsageError(msg, tip="run `ortstack rebase --onto COMMIT`, or --continue / --skip / --abort")
        onto = _full_commit(args.onto, args.source_dir, settings)
        pin = stack.ort
        archive_url = rebase.moved_archive_url(pin.archive_url, pin.commit, onto)
        new_pin = replace(pin, commit=onto, archive_url=archive_url, archive_sha256="")
        source = fetch.ensure_source(replace(stack, ort=new_pin), settings, source_dir=args.source_dir)
        state = rebase.start(
            stack,
            lock,
            onto=onto,
            source=source.source_dir,
            old=_old_pin(stack, settings, args.source_dir),
            into=args.into or stack.root,
            work_dir=settings.work_dir,
            env=settings.env,
            wait=settings.wait_for_lock,
        )
    written = rebase.write_stack(state, stack, lock, tree, settings.env)
    summary = rebase.report(state, written)
    if args.report:
        write_atomic(args.report, summary.encode("utf-8"))
    sys.stdout.write(summary)  # data on stdout, so it pipes into a README
    remove_tree(tree)
    log.success(f"wrote {written.stack_file}" + (f" (Dawn {written.dawn})" if written.dawn else ""))
    return 0
