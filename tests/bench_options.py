"""``ortstack bench``'s options from a command line, read as the verb reads them; nothing is run."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ortstack.commands import bench as bench_command
from ortstack.settings import Settings

if TYPE_CHECKING:
    from pathlib import Path

    from ortstack.suites import bench


def bench_options(tmp_path: Path, *argv: str) -> bench.BenchOptions:
    parser = argparse.ArgumentParser()
    bench_command.add_arguments(parser)
    settings = Settings(
        stack_file=tmp_path / "stack.toml",
        cache_dir=tmp_path / "cache",
        work_dir=tmp_path / "work",
        dist_dir=tmp_path / "dist",
        env={},
    )
    return bench_command.options_from_args(parser.parse_args(argv), settings)
