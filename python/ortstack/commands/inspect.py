"""``ortstack inspect WHEEL``: print the provenance a wheel carries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import buildinfo, wheelfile

if TYPE_CHECKING:
    import argparse

    from ortstack.settings import Settings

HELP = "Print the build info inside a wheel built by ortstack (ORT commit, Dawn, patches, options, compiler)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheel", type=Path, metavar="WHEEL", help="the .whl file")


def main(args: argparse.Namespace, settings: Settings) -> int:  # noqa: ARG001 - the verb interface
    print(buildinfo.read_from_wheel(wheelfile.check(args.wheel).path).to_json(), end="")
    return 0
