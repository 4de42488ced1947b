"""``ortstack fetch``: the pinned onnxruntime source into the cache (thin; the work is in ortstack.source.fetch)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import config, log
from ortstack.errors import ConfigError
from ortstack.patches import series
from ortstack.source import dawn, dep_sources, deps, fetch, ort_tree, wgsl

if TYPE_CHECKING:
    import argparse

    from ortstack.settings import Settings

HELP = (
    "Fetch onnxruntime at the pinned commit into the cache: by git (a shallow fetch of exactly that commit) "
    "or by archive URL + sha256 (resumed, verified, safely extracted). A cached tree is reused without "
    "network access."
)

EXAMPLES = """examples:
  ortstack fetch --deps                     the pinned source and every cmake/deps.txt entry, for offline builds
  ortstack fetch --source-dir ../onnxruntime   a local checkout at the pinned commit instead of a download"""
COMMON = ("--stack", "--cache-dir", "--locked", "--no-wait")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--via",
        choices=["auto", "git", "archive"],
        default="auto",
        help="how to fetch: the archive when [ort] archive_url is set, else git (default: auto)",
    )
    parser.add_argument(
        "--source-dir",
        type=Path,
        metavar="PATH",
        help="use this existing onnxruntime checkout instead; it must be at the pinned commit",
    )
    parser.add_argument(
        "--deps",
        action="store_true",
        help="also mirror the cmake/deps.txt entries the variants' configures need (parallel, sha1-checked) "
        "and fetch the third-party sources their Dawn builds use (at the commits in Dawn's DEPS)",
    )
    parser.add_argument(
        "--dep-source",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="with --deps: NAME comes from a local source dir, so it is not mirrored (repeatable)",
    )


def main(args: argparse.Namespace, settings: Settings) -> int:
    stack = config.load(settings.stack_file, settings.bounds)
    with log.step("fetch onnxruntime source"):
        result = fetch.ensure_source(stack, settings, method=args.via, source_dir=args.source_dir)
    log.success(result.summary())
    if args.deps:
        with log.step("mirror cmake/deps.txt"):
            local = dep_sources.declared_sources(stack, dep_sources.parse_cli(args.dep_source))
            mirrored = dep_sources.mirror_for(settings, result.source_dir, stack, local)
            npm = wgsl.fill_cache(result.source_dir, settings)
        log.success(mirrored)
        if npm:
            log.success(npm)
        with log.step("fetch Dawn's third-party sources"):
            log.success(_dawn_sources(settings, stack, result.source_dir, local.get("dawn")))
    return 0


def _dawn_sources(settings: Settings, stack: config.Stack, source_dir: Path, local: Path | None) -> str:
    """What each variant's Dawn build uses on this host, read from its prepared tree (else the pin's)."""
    platform = series.host_platform()
    builds: list[tuple[Path, dict[str, str]]] = []
    for variant in stack.variants:
        prepared = settings.work_dir / "prepared" / variant.name
        tree = prepared if (prepared / deps.DEPS_FILE).is_file() else source_dir
        try:
            builds.append((tree, ort_tree.plan(tree, variant, platform).defines))
        except ConfigError as exc:
            log.warn(f"no Dawn sources for {exc.message} (`ortstack build` refuses it)")
    return dawn.fetch_for(
        builds=builds,
        platform=platform,
        mirror=deps.mirror_path(settings),
        local=local,
        cache=fetch.cache_for(settings),
        env=settings.env,
    )
