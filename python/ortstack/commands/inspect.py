"""``ortstack inspect WHEEL``: print the provenance a wheel carries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import log, wheelfile
from ortstack.build import buildinfo

if TYPE_CHECKING:
    import argparse

    from ortstack.settings import Settings

HELP = "Print the build info inside a wheel built by ortstack (ORT commit, Dawn, patches, options, compiler)."

EXAMPLES = """examples:
  ortstack inspect dist/onnxruntime_webgpu-*.whl   where that wheel came from, as JSON on stdout"""
COMMON = ()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheel", type=Path, metavar="WHEEL", help="the .whl file")


def main(args: argparse.Namespace, settings: Settings) -> int:
    wheel = wheelfile.check(args.wheel)
    print(buildinfo.read_from_wheel(wheel.path, settings.bounds).to_json(), end="")
    log.success(f"build info of {wheel.label}")
    return 0
