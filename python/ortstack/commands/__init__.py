"""One module per CLI verb: ``HELP``, ``EXAMPLES``, ``add_arguments(parser)`` and ``main(args, settings)``.

Options that several verbs share in the same sense live here, so they read the same everywhere.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ortstack.errors import UsageError
from ortstack.suites import genai_choice


def add_install_options(parser: argparse.ArgumentParser) -> None:
    """``--find-links DIR`` and ``--no-index`` for the venvs a verb makes (``test``, ``bench``)."""
    parser.add_argument(
        "--find-links",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="also install the venvs' packages from this folder of wheels (repeatable)",
    )
    parser.add_argument(
        "--no-index",
        action="store_true",
        help="install from the --find-links folders only, never from a package index (hosts without one)",
    )
    parser.add_argument(
        "--system-site-packages",
        action="store_true",
        help="the venvs see this interpreter's packages, and a requirement they already meet is not installed "
        "again (offline hosts that have torch and transformers)",
    )


def install_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The pip/uv arguments the install options ask for, each folder checked first."""
    for folder in args.find_links:
        if not folder.is_dir():
            msg = f"--find-links {folder}: no such folder"
            raise UsageError(msg, tip="give a folder of .whl files, e.g. one filled with `pip download -d DIR ...`")
    if args.no_index and not args.find_links:
        msg = "--no-index needs a --find-links DIR to install from"
        raise UsageError(msg, tip="add --find-links DIR holding the wheels the venvs need")
    links = [f"--find-links={folder.resolve()}" for folder in args.find_links]
    return (*(["--no-index"] if args.no_index else []), *links)


def _genai_version(text: str) -> str:
    try:
        return str(Version(text))
    except InvalidVersion:
        msg = f"expected a version such as 0.17.1, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None


def add_genai_version_option(parser: argparse.ArgumentParser) -> None:
    """The user's onnxruntime-genai, instead of the one chosen from the wheel under test (``test``, ``bench``)."""
    parser.add_argument(
        genai_choice.OVERRIDE_OPTION,
        type=_genai_version,
        metavar="VERSION",
        help="install this onnxruntime-genai (default: the newest whose onnxruntime requirement the wheel "
        "under test meets, from the same package sources)",
    )
