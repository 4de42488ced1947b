"""``ortstack`` / ``python -m ortstack``: one verb per nox session, errors caught only here."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from ortstack import __version__, log, settings
from ortstack.errors import EXIT_CODES, INTERRUPTED, TERMINATED, OrtstackError, Terminated

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType


class Verb(Protocol):
    """What each module in ``ortstack.commands`` provides."""

    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def main(self, args: argparse.Namespace, config: settings.Settings) -> int: ...


# Module names under ortstack.commands; the verb is the name with "_" spelled "-".
VERBS: tuple[str, ...] = ("fetch", "patch", "build", "status", "inspect", "refresh_patches", "test", "bench")


def _exit_code_epilog() -> str:
    rows = "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES.items())
    return f"exit codes:\n{rows}"


def _common_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("common options")
    group.add_argument("--stack", type=Path, help="stack file (default: ./stack.toml; env ORTSTACK_STACK)")
    group.add_argument("--cache-dir", type=Path, help="download and source cache (env ORTSTACK_CACHE_DIR)")
    group.add_argument("--work-dir", type=Path, help="prepared trees and build dirs (default: ./build)")
    group.add_argument("--dist-dir", type=Path, help="where wheels land (default: ./dist)")
    group.add_argument(
        "--locked",
        action="store_true",
        default=None,
        help="refuse to resolve anything not already in stack.lock (for CI; env ORTSTACK_LOCKED=1)",
    )
    group.add_argument("--no-wait", action="store_true", help="fail instead of waiting for a lock held by another run")
    group.add_argument("--debug-traceback", action="store_true", help="show the Python traceback on errors")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Verb]]:
    parser = argparse.ArgumentParser(
        prog="ortstack",
        description="Build patched onnxruntime WebGPU wheels from a pinned source and a patch stack, then prove them.",
        epilog=_exit_code_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ortstack {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs: dict[str, Verb] = {}
    for module_name in VERBS:
        module: ModuleType = importlib.import_module(f"ortstack.commands.{module_name}")
        verb = cast("Verb", module)
        name = module_name.replace("_", "-")
        verb_parser = sub.add_parser(
            name,
            help=verb.HELP,
            description=verb.HELP,
            epilog=_exit_code_epilog(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        verb.add_arguments(verb_parser)
        _common_options(verb_parser)
        verbs[name] = verb
    return parser, verbs


def main_inner(argv: Sequence[str] | None) -> int:
    parser, verbs = build_parser()
    args = parser.parse_args(argv)
    config = settings.resolve(
        settings.current_env(),
        stack_file=args.stack,
        cache_dir=args.cache_dir,
        work_dir=args.work_dir,
        dist_dir=args.dist_dir,
        locked=args.locked,
        wait_for_lock=not args.no_wait,
    )
    return verbs[args.verb].main(args, config)


_RESUME_TIP = "run the same command again: finished work is kept and the step resumes"


def _raise_terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    debug = "--debug-traceback" in (sys.argv[1:] if argv is None else argv)
    # SIGTERM (CI cancelling a job) unwinds like Ctrl-C, so temporary work is removed on the way out.
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return main_inner(argv)
    except OrtstackError as exc:
        if debug:
            traceback.print_exc()
        log.error(exc.message, exc.tip)
        return exc.exit_code
    except KeyboardInterrupt:
        log.error("interrupted", _RESUME_TIP)
        return INTERRUPTED
    except Terminated:
        log.error("terminated", _RESUME_TIP)
        return TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)
