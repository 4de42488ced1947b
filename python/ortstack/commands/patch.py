"""``ortstack patch``: the prepared tree of each variant, or ``--export`` of commits made there."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import config, log
from ortstack.lockfile import Lock
from ortstack.patches import export, prepare, refresh, series
from ortstack.source import fetch

if TYPE_CHECKING:
    import argparse

    from ortstack.settings import Settings

HELP = "Apply the patch series to the pinned source: one prepared tree per variant, one git commit per patch."

EXAMPLES = """examples:
  ortstack patch                            the prepared tree of every variant, one commit per patch
  ortstack patch --variant webgpu --export  turn commits made by hand in build/prepared/webgpu into patches
                                            (and write back series commits changed with fixup/autosquash)"""
COMMON = ("--stack", "--cache-dir", "--work-dir", "--locked", "--no-wait")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variant", action="append", help="variant to prepare (repeatable; default: all)")
    parser.add_argument(
        "--platform",
        choices=config.PLATFORMS,
        help="target platform that selects patches (default: this machine's)",
    )
    parser.add_argument("--source-dir", type=Path, help="use this checkout of the pinned commit instead of the cache")
    parser.add_argument("--force", action="store_true", help="rebuild even when the prepared tree holds unsaved work")
    parser.add_argument(
        "--export",
        action="store_true",
        help=(
            "turn commits made by hand in the prepared tree into patch files and [[patch]] entries, and write "
            "series commits changed in place (fixup, amend, reword) back over their own files"
        ),
    )


def main(args: argparse.Namespace, settings: Settings) -> int:
    stack = config.load(settings.stack_file, settings.bounds)
    lock = Lock.load(settings.lock_file, locked=settings.locked, bounds=settings.bounds)
    variants = args.variant or [v.name for v in stack.variants] or ["default"]
    for name in variants:
        if stack.variants:
            stack.variant(name)  # an unknown name fails with "did you mean"
    if args.export:
        exported = export.export(stack, prepare.tree_path(settings.work_dir, variants[0]), settings.env)
        written_back = (
            f"; wrote back {len(exported.amended)} changed in the series: {', '.join(exported.amended)}"
            if exported.amended
            else ""
        )
        new = ", ".join(exported.new) or "none"
        log.success(f"exported {len(exported.new)} commits as patches: {new}{written_back}")
        return 0
    platform = args.platform or series.host_platform()
    refresh.vendor_missing(stack, lock, platform=platform, env=settings.env, cache_dir=settings.cache_dir)
    source = fetch.ensure_source(stack, settings, source_dir=args.source_dir).source_dir
    for name in variants:
        prepared = prepare.prepare(
            stack,
            lock,
            source=source,
            target=prepare.tree_path(settings.work_dir, name),
            platform=platform,
            env=settings.env,
            wait=settings.wait_for_lock,
            force=args.force,
        )
        log.success(f"prepared {name}: {prepared.path} ({len(prepared.outcomes)} series entries)")
    return 0
