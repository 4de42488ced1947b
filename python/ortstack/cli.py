"""``ortstack`` / ``python -m ortstack``: one verb per nox session, errors caught only here."""

from __future__ import annotations

import argparse
import difflib
import importlib
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Protocol, cast

import platformdirs

from ortstack import __version__, log, settings
from ortstack.errors import EXIT_CODES, INTERRUPTED, TERMINATED, OrtstackError, Terminated

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType


class Verb(Protocol):
    """What each module in ``ortstack.commands`` provides."""

    HELP: str
    EXAMPLES: str
    """One or two example command lines, each with what it does, shown at the end of ``--help``."""
    COMMON: tuple[str, ...]
    """The common options (``--stack`` …) the verb reads; ``--debug-traceback`` is every verb's."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def main(self, args: argparse.Namespace, config: settings.Settings) -> int: ...


# Module names under ortstack.commands; the verb is the name with "_" spelled "-".
VERBS: tuple[str, ...] = (
    "fetch",
    "patch",
    "rebase",
    "build",
    "status",
    "inspect",
    "refresh_patches",
    "test",
    "bench",
)


def _exit_code_epilog() -> str:
    rows = "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES.items())
    return f"exit codes:\n{rows}"


def _common_help() -> dict[str, dict[str, object]]:
    """The common options with their defaults and environment variables, as ``settings.resolve`` reads them."""
    cache = platformdirs.user_cache_dir("ortstack")
    return {
        "--stack": {"type": Path, "help": "stack file (default: ./stack.toml; env ORTSTACK_STACK)"},
        "--cache-dir": {
            "type": Path,
            "help": f"downloads, sources, dependency mirror, venvs (default: {cache}; env ORTSTACK_CACHE_DIR)",
        },
        "--work-dir": {
            "type": Path,
            "help": "prepared trees and build dirs (default: build/ beside the stack file; env ORTSTACK_WORK_DIR)",
        },
        "--dist-dir": {
            "type": Path,
            "help": "where wheels land (default: dist/ beside the stack file; env ORTSTACK_DIST_DIR)",
        },
        "--locked": {
            "action": "store_true",
            "default": None,
            "help": "refuse to resolve anything not already in stack.lock (for CI; env ORTSTACK_LOCKED=1)",
        },
        "--no-wait": {"action": "store_true", "help": "fail instead of waiting for a lock held by another run"},
    }


def _common_options(parser: argparse.ArgumentParser, used: Sequence[str]) -> None:
    """The common options the verb reads, in its help; the others are accepted unlisted (they change
    nothing for it), so a script may pass the same directories to every verb."""
    group = parser.add_argument_group("common options")
    for name, spec in _common_help().items():
        shown = spec if name in used else {**spec, "help": argparse.SUPPRESS}
        group.add_argument(name, **shown)  # type: ignore[arg-type]
    group.add_argument("--debug-traceback", action="store_true", help="show the Python traceback on errors")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Verb], dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="ortstack",
        description="Build patched onnxruntime WebGPU wheels from a pinned source and a patch stack, then prove them.",
        epilog=_exit_code_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ortstack {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs: dict[str, Verb] = {}
    parsers: dict[str, argparse.ArgumentParser] = {}
    for module_name in VERBS:
        module: ModuleType = importlib.import_module(f"ortstack.commands.{module_name}")
        verb = cast("Verb", module)
        name = module_name.replace("_", "-")
        verb_parser = sub.add_parser(
            name,
            help=verb.HELP,
            description=verb.HELP,
            epilog=f"{verb.EXAMPLES}\n\n{_exit_code_epilog()}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        verb.add_arguments(verb_parser)
        _common_options(verb_parser, verb.COMMON)
        verbs[name] = verb
        parsers[name] = verb_parser
    return parser, verbs, parsers


def _unknown_options(verb_parser: argparse.ArgumentParser, unknown: Sequence[str]) -> NoReturn:
    """A misspelled option gets the verb's own usage, with the nearest options it has."""
    shown = [a for a in verb_parser._actions if a.help != argparse.SUPPRESS]  # noqa: SLF001 - no public list
    known = [o for action in shown for o in action.option_strings if o not in {"-h", "--help"}]
    close = sorted({m for arg in unknown for m in difflib.get_close_matches(arg.split("=")[0], known, n=2)})
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    verb_parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")


def _common_options_after_the_verb(argv: Sequence[str]) -> list[str]:
    """``ortstack --stack X build`` read as ``ortstack build --stack X``: the common options belong to each verb,
    and given before it they mean the same."""
    specs = _common_help()
    valued = {name for name, spec in specs.items() if "action" not in spec}
    flags = {name for name, spec in specs.items() if "action" in spec} | {"--debug-traceback"}
    index = 0
    while index < len(argv) and (name := argv[index].split("=", 1)[0]) in valued | flags:
        index += 2 if name in valued and "=" not in argv[index] else 1
    if index == 0:
        return list(argv)
    if index >= len(argv):  # options and no verb: argparse says a verb is required
        return []
    return [argv[index], *argv[:index], *argv[index + 1 :]]


def main_inner(argv: Sequence[str] | None) -> int:
    parser, verbs, parsers = build_parser()
    args, unknown = parser.parse_known_args(_common_options_after_the_verb(sys.argv[1:] if argv is None else argv))
    if unknown:
        _unknown_options(parsers[args.verb], unknown)
    config = settings.resolve(
        settings.current_env(),
        stack_file=getattr(args, "stack", None),
        cache_dir=getattr(args, "cache_dir", None),
        work_dir=getattr(args, "work_dir", None),
        dist_dir=getattr(args, "dist_dir", None),
        locked=getattr(args, "locked", None),
        wait_for_lock=not getattr(args, "no_wait", False),
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
        for problem in exc.problems():
            if debug and problem.detail:
                sys.stderr.write(problem.detail.rstrip("\n") + "\n")
            log.error(problem.message, problem.tip)
        return exc.exit_code
    except KeyboardInterrupt:
        log.error("interrupted", _RESUME_TIP)
        return INTERRUPTED
    except Terminated:
        log.error("terminated", _RESUME_TIP)
        return TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)
