"""``ortstack test``: run the wheel suites against built wheels, or the stock baselines."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import log, wheelfile
from ortstack.commands import add_genai_version_option, add_install_options, install_args
from ortstack.errors import UsageError
from ortstack.suites import preflight, suites

if TYPE_CHECKING:
    import argparse

    from ortstack.settings import Settings

HELP = "Run the wheel test suites in fresh venvs: the newest wheels in dist/, else the stock baselines."
EXAMPLES = """examples:
  ortstack test                             every lane of the newest wheels in dist/ (else the baselines)
  ortstack test --wheel dist/onnxruntime_webgpu-1.21.0+stack.ab12-cp312-cp312-linux_x86_64.whl --ep cpu \\
      --find-links wheelhouse --no-index -- -k matmul   one wheel's CPU lane, offline, tests named like matmul"""
COMMON = ("--cache-dir", "--dist-dir")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wheel",
        type=Path,
        action="append",
        default=[],
        help="a wheel under test (repeatable; default: the newest of each name and variant in dist/, else the stock "
        "baselines); an onnxruntime-ep-webgpu wheel joins each onnxruntime core wheel (the core variant), or "
        "else the stock onnxruntime: never onnxruntime-webgpu, which pip would overwrite with onnxruntime",
    )
    parser.add_argument(
        "--ep",
        action="append",
        choices=suites.EP_CHOICES,
        default=[],
        help="lane to test (repeatable; default: every EP the wheels provide, all three for the baselines); "
        "a lane asked for that cannot run fails the run",
    )
    parser.add_argument(
        "--genai",
        action="store_true",
        help="also run the onnxruntime-genai end-to-end suite (own venv with CPU torch and transformers)",
    )
    add_genai_version_option(parser)
    add_install_options(parser)
    parser.add_argument(
        "--preflight",
        action="store_true",
        help="only check, in seconds, what this run needs from the machine (the arguments, the wheels, "
        "a driver for each WebGPU lane), then stop; `nox -s test` does this first",
    )
    parser.add_argument(
        "--selftest-tools",
        action="store_true",
        help="with --preflight: also the system tools the orchestrator's own tests need (toolchain, Redis, "
        "bubblewrap), as `nox -s test` runs them; a machine that only tests wheels needs none of them",
    )
    parser.add_argument("pytest_args", nargs="*", help="pytest options for the wheel suites, after --")


def _check_pytest_args(pytest_args: list[str]) -> None:
    """The wheel suites run from an empty folder as ``--pyargs wheel_tests``: a path means another suite."""
    paths = [a for a in pytest_args if not a.startswith("-") and (a.endswith(".py") or Path(a).exists())]
    if paths:
        msg = f"`ortstack test` runs the wheel suites, which take pytest options, not paths: {' '.join(paths)}"
        raise UsageError(msg, tip=f"the orchestrator's own tests run with: nox -s selftest -- {' '.join(paths)}")


def main(args: argparse.Namespace, config: Settings) -> int:
    _check_pytest_args(args.pytest_args)
    if args.genai_version and not args.genai:
        msg = "--genai-version names the onnxruntime-genai of the genai suite, which runs with --genai"
        raise UsageError(msg, tip="add --genai")
    pip_args = install_args(args)
    wheels = [wheelfile.check(w).path for w in args.wheel] or suites.newest_wheels(config.dist_dir)
    if args.preflight:
        sets = suites.plan(wheels, args.ep)
        suites.check_lanes_can_run(sets, config.env)
        if args.selftest_tools:
            preflight.check_test_machine(config.env)
        lanes = sorted({ep for s in sets for ep in s.eps})
        log.success(f"ready to test {len(sets)} wheel sets on {', '.join(lanes)}")
        return 0
    suites.run_all(
        wheels,
        args.ep,
        cache_dir=config.cache_dir,
        env=config.env,
        pytest_args=args.pytest_args,
        genai=args.genai,
        genai_version=args.genai_version,
        pip_args=pip_args,
        system_site_packages=args.system_site_packages,
    )
    return 0
