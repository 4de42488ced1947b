"""``ortstack build``: wheels for the variants from their prepared trees (thin; the work is in ortstack.build.build)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import config, log
from ortstack.build import build, native_tests
from ortstack.source import dep_sources

if TYPE_CHECKING:
    from ortstack.settings import Settings

HELP = (
    "Build the wheel of each variant (all by default) from its prepared tree: incremental in a stable "
    "build dir, with ccache/sccache when present; a build with nothing changed returns the wheels in dist/ at once."
)

EXAMPLES = """examples:
  ortstack build                            every variant's wheel into dist/ (after fetch --deps and patch)
  ortstack build --variant webgpu -j 8 --native-tests
                                            one variant, at most 8 compile jobs, then the gtests the
                                            stack's patches add, built and run in its build dir"""
COMMON = ("--stack", "--cache-dir", "--work-dir", "--dist-dir", "--locked", "--no-wait")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variant", action="append", metavar="NAME", help="build only this variant (repeatable)")
    parser.add_argument("-j", "--parallel", type=int, metavar="N", help="compile jobs (capped by memory and cores)")
    parser.add_argument("--build-dir", type=Path, metavar="PATH", help="build dir instead of <work>/cmake/<variant>")
    parser.add_argument(
        "--allow-dawn-fetch",
        action="store_true",
        help="use onnxruntime's own Dawn download and let Dawn clone its third-party sources while cmake "
        "configures (needs network; `fetch --deps` normally has them ready)",
    )
    parser.add_argument(
        "--native-tests",
        action="store_true",
        help="after each wheel, build onnxruntime's unit tests in the same build dir and run the gtests the "
        "stack's patches add (a failed or unbuilt one: exit 7)",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print the cmake options each variant would pass and where each dependency comes from; build nothing",
    )
    parser.add_argument(
        "--dep-source",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="take the deps.txt entry NAME from a local source dir (repeatable; wins over [deps.NAME])",
    )
    parser.add_argument(
        "--sccache-scheduler",
        metavar="URL",
        help="compile on the build servers of this sccache-dist scheduler (env ORTSTACK_SCCACHE_SCHEDULER; "
        "its token: env ORTSTACK_SCCACHE_SCHEDULER_TOKEN)",
    )
    parser.add_argument(
        "--sccache-local-fallback",
        action=argparse.BooleanOptionalAction,
        help="compile here when the scheduler cannot take compiles, instead of stopping (env "
        "ORTSTACK_SCCACHE_LOCAL_FALLBACK)",
    )


def main(args: argparse.Namespace, settings: Settings) -> int:
    stack = config.load(settings.stack_file, settings.bounds)
    chosen = [stack.variant(name) for name in args.variant] if args.variant else list(stack.variants)
    request = build.BuildRequest(
        jobs=args.parallel,
        build_dir=args.build_dir,
        allow_dawn_fetch=args.allow_dawn_fetch,
        sccache_scheduler=args.sccache_scheduler,
        sccache_local_fallback=args.sccache_local_fallback,
        dep_sources=dep_sources.parse_cli(args.dep_source),
    )
    if args.plan:
        for variant in chosen:
            log.table(
                f"plan of {variant.name}", ["what", "name", "value"], build.plan_rows(settings, stack, variant, request)
            )
        log.success(f"planned {len(chosen)} variant(s); nothing was built")
        return 0
    rows = []
    for variant in chosen:
        with log.step(f"build {variant.name}"):
            result = build.build_variant(settings, stack, variant, request)
        state = "up to date" if result.up_to_date else "built"
        rows += [[variant.name, w.name, state, f"{result.seconds:.1f} s"] for w in result.wheels]
    log.table("wheels", ["variant", "wheel", "state", "time"], rows)
    log.success(f"{len(rows)} wheels in {settings.dist_dir}")
    if args.native_tests:
        for variant in chosen:
            with log.step(f"native tests in {variant.name}'s build"):
                results = build.run_native_tests(settings, stack, variant, request)
            native_tests.report(results)
    return 0
