"""``ortstack refresh-patches``: download pull-request and commit patches again and re-pin them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortstack import config, log
from ortstack.errors import OrtstackError, PatchError
from ortstack.lockfile import Lock
from ortstack.patches import patchfile, refresh, series

if TYPE_CHECKING:
    import argparse

    from ortstack.settings import Settings

HELP = (
    "Vendor pr/commit/compare patches from their pinned commits (or --update to a PR's current head) "
    "and pin their sha256 (and head) in stack.toml itself; --rehash records the digests of edited local patches."
)

EXAMPLES = """examples:
  ortstack refresh-patches                  re-download every pr/commit entry at its pinned head, re-pin its sha256
  ortstack refresh-patches matmulnbits-qlora --update   move that entry to its pull request's current head"""
COMMON = ("--stack", "--cache-dir", "--locked")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="*", help="entries to refresh (default: every pr/commit/compare entry)")
    parser.add_argument(
        "--via", choices=["http", "git"], default="http", help="GitHub's .diff endpoints (default) or git fetch"
    )
    parser.add_argument("--update", action="store_true", help="move pr entries to the pull request's current head")
    parser.add_argument(
        "--rehash", action="store_true", help="only record the sha256 of the vendored files as they are"
    )


def main(args: argparse.Namespace, settings: Settings) -> int:
    stack = config.load(settings.stack_file, settings.bounds)
    lock = Lock.load(settings.lock_file, locked=settings.locked, bounds=settings.bounds)
    known = {e.id for e in stack.patches}
    unknown = [i for i in args.ids if i not in known]
    if unknown:
        msg = f"no patch named {', '.join(unknown)} in {stack.path.name}"
        raise PatchError(msg, tip=f"known: {', '.join(sorted(known))}")
    chosen = [e for e in stack.patches if e.mode == "apply" and (not args.ids or e.id in args.ids)]
    pins: dict[str, dict[str, str]] = {}
    failed: list[tuple[str, OrtstackError]] = []
    for entry in chosen:
        if args.rehash:
            if series.is_vendored(stack, entry):
                pins[entry.id] = {"sha256": patchfile.sha256_hex(series.patch_path(stack, entry).read_bytes())}
            continue
        if entry.origin.kind == "local":
            continue
        try:
            with log.step(f"refreshing {entry.id} from {entry.origin.repository}"):
                head, sha256 = refresh.download(
                    stack, entry, lock, via=args.via, update=args.update, env=settings.env, cache_dir=settings.cache_dir
                )
        except OrtstackError as exc:
            log.error(f"{entry.id}: {exc.message}", exc.tip)
            failed.append((entry.id, exc))
            continue
        pins[entry.id] = {"sha256": sha256, "head": head}
        changed = "unchanged" if sha256 == entry.sha256 else f"sha256 {entry.sha256 or '(none)'} -> {sha256}"
        log.info(f"{entry.id}: {entry.file} at {head[:12]}, {changed}")
    refresh.record_in_stack(stack, pins)
    if pins:
        log.info(f"recorded {', '.join(pins)} in {stack.path}")
    if failed:
        names = ", ".join(name for name, _ in failed)
        msg = f"{len(failed)} entries could not be refreshed: {names} ({len(pins)} recorded)"
        raise PatchError(msg, tip=failed[0][1].tip)
    log.success(f"{len(pins)} entries pinned in {stack.path.name}" if pins else "nothing to refresh")
    return 0
