"""``ortstack test``: run the wheel suites against built wheels, or the stock baselines."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import suites

if TYPE_CHECKING:
    import argparse

    from ortstack.settings import Settings

HELP = "Run the wheel test suites in fresh venvs: the newest wheels in dist/, else the stock baselines."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wheel",
        type=Path,
        action="append",
        default=[],
        help="a wheel under test (repeatable; an onnxruntime-ep-webgpu wheel joins each core wheel)",
    )
    parser.add_argument(
        "--ep",
        action="append",
        choices=suites.EP_CHOICES,
        default=[],
        help="execution provider to test (repeatable; default all); missing ones are reported as not run",
    )
    parser.add_argument(
        "--genai",
        action="store_true",
        help="also run the onnxruntime-genai end-to-end suite (own venv with CPU torch and transformers)",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")


def main(args: argparse.Namespace, config: Settings) -> int:
    wheels = [w.resolve() for w in args.wheel] or suites.newest_wheels(config.dist_dir)
    suites.run_all(
        wheels, args.ep, cache_dir=config.cache_dir, env=config.env, pytest_args=args.pytest_args, genai=args.genai
    )
    return 0
