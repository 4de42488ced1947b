"""``ortstack inspect WHEEL``: print the provenance a wheel carries."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path, PurePosixPath
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


def _carries_build_info(wheel: Path) -> bool:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return any(PurePosixPath(name).name == buildinfo.BUILD_INFO_NAME for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return True  # reading it below names what is wrong with the wheel


def main(args: argparse.Namespace, settings: Settings) -> int:
    wheel = wheelfile.check(args.wheel)
    if not _carries_build_info(wheel.path):
        # A stock or third-party wheel: that is the answer, not an error.
        print(json.dumps({"distribution": wheel.name, "version": wheel.version, "built_by_ortstack": False}, indent=2))
        log.info(f"{wheel.label} carries no {buildinfo.BUILD_INFO_NAME}: it was not built by ortstack")
        return 0
    print(buildinfo.read_from_wheel(wheel.path, settings.bounds).to_json(), end="")
    log.success(f"build info of {wheel.label}")
    return 0
