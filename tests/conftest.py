"""Shared fixtures: one loopback HTTP server and one published miniature upstream per session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import real_ort
from series_kit import Project
from upstream import LoopbackServer, Upstream, publish_upstream

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from clirun import RunOrtstack

PYTHON_SRC = Path(__file__).parents[1] / "python"

# A process started in the background by a non-interactive shell (a CI runner's, `cmd &`) has SIGINT
# ignored, and its children inherit that: the interrupt tests' ortstack processes would then never
# see Ctrl-C. Python's own handler here makes each child start with the default disposition again.
if hasattr(signal, "SIGINT") and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# The modules that take longest (pytest --durations on 2 cores), started first: with one module per
# pytest-xdist worker (`--dist loadfile`), a long one left for the end would run alone.
LONGEST_FIRST = (
    "test_suites_old_ort.py",
    "test_bench.py",
    "test_real_tree.py",
    "test_build.py",
    "test_wheel_suites_cpu_only.py",
    "test_sccache_dist_loopback.py",
    "test_toolchain.py",
    "test_dawn.py",
    "test_faults_build.py",
    "test_dep_sources.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first, each module's tests in their own order."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_sessionstart(session: pytest.Session) -> None:
    """When the real-tree tests are selected, find their archive first, or stop naming the ways to give it."""
    config = session.config
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller found it, the variable says where
        return
    if not real_ort.selected(config.args, config.invocation_params.dir, Path(__file__).parent):
        return
    try:
        archive = real_ort.locate(os.environ)
    except real_ort.RealTreeUnavailableError as error:
        pytest.exit(f"the real-tree tests cannot run: {error}", returncode=pytest.ExitCode.USAGE_ERROR)
    os.environ[real_ort.ENV_ARCHIVE] = str(archive)


@pytest.fixture(scope="session")
def base_env() -> dict[str, str]:
    """The environment tests hand to ortstack and git: the process's, without ORTSTACK_* settings, and with
    the free space a build needs sized for the miniature (megabytes), not for onnxruntime (tens of GiB)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTSTACK_")}
    return {**env, "ORTSTACK_MIN_FREE_GIB_BUILD": "1"}


@pytest.fixture(scope="session")
def server() -> Iterator[LoopbackServer]:
    """A real HTTP server on 127.0.0.1 (port chosen by the OS)."""
    loopback = LoopbackServer()
    yield loopback
    loopback.close()


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory, server: LoopbackServer, base_env: dict[str, str]) -> Upstream:
    """mini_ort committed once and published by git (file://) and as a tarball on ``server``."""
    return publish_upstream(tmp_path_factory.mktemp("upstream"), server, base_env)


@pytest.fixture
def clean_server(server: LoopbackServer) -> Iterator[LoopbackServer]:
    """``server`` with zeroed counters and no faults, restored after the test."""
    server.reset_counts()
    server.clear_faults()
    yield server
    server.clear_faults()
    server.set_range_support(enabled=True)


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def cli_env(base_env: dict[str, str]) -> dict[str, str]:
    """The environment of ``python -m ortstack`` runs: this checkout's package, plain wide output."""
    python_path = os.pathsep.join(filter(None, [str(PYTHON_SRC), base_env.get("PYTHONPATH", "")]))
    return {**base_env, "PYTHONPATH": python_path, "NO_COLOR": "1", "COLUMNS": "250", "TERM": "dumb"}


@pytest.fixture
def run_ortstack(cli_env: dict[str, str], tmp_path: Path) -> RunOrtstack:
    """Run ``python -m ortstack ARGS`` as a real process (``env`` adds variables); returns code and output."""

    def run(
        *args: str | os.PathLike[str], cwd: Path | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "ortstack", *(os.fspath(a) for a in args)]
        full_env = {**cli_env, **(env or {})}
        where = cwd or tmp_path
        return subprocess.run(argv, check=False, cwd=where, env=full_env, capture_output=True, text=True, timeout=120)

    return run


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    """An empty stack.toml project pinned to ``upstream``'s commit, under ``tmp_path / "project"``."""
    return Project(root=tmp_path / "project", repository=upstream.url, commit=upstream.commit)
