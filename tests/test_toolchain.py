"""Compiler cache selection, the shared sccache backend's settings, and the job cap."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from ortstack import toolchain
from ortstack.config import BuildOptions
from ortstack.errors import BuildError, ConfigError

if TYPE_CHECKING:
    from pathlib import Path


def test_jobs_are_capped_by_cores_and_memory() -> None:
    cores = os.cpu_count() or 1
    memory = toolchain.total_memory_bytes()
    assert memory is not None  # Linux reports it
    assert toolchain.parallel_jobs(BuildOptions(), 1000) <= cores
    assert toolchain.parallel_jobs(BuildOptions(jobs=1)) == 1
    # One job per memory_per_job_mb: asking for more than the machine holds leaves one job.
    huge = BuildOptions(memory_per_job_mb=memory // (1024 * 1024) + 1)
    assert toolchain.parallel_jobs(huge, cores) == 1
    half = BuildOptions(memory_per_job_mb=memory // (1024 * 1024) // 2)
    assert toolchain.parallel_jobs(half, cores) == min(cores, 2)


@pytest.mark.parametrize(
    ("options", "env", "expected"),
    [
        (BuildOptions(sccache_redis="redis://cache:6379"), {}, {"SCCACHE_REDIS_ENDPOINT": "redis://cache:6379"}),
        (BuildOptions(sccache_bucket="s3://team-cache"), {}, {"SCCACHE_BUCKET": "team-cache"}),
        (
            BuildOptions(sccache_bucket="gs://team-cache"),
            {},
            {"SCCACHE_GCS_BUCKET": "team-cache", "SCCACHE_GCS_RW_MODE": "READ_WRITE"},
        ),
        # The environment's backend wins over stack.toml.
        (BuildOptions(sccache_redis="redis://cache:6379"), {"SCCACHE_REDIS": "redis://mine:6379"}, {}),
        (BuildOptions(), {}, {}),
    ],
)
def test_sccache_backend(options: BuildOptions, env: dict[str, str], expected: dict[str, str]) -> None:
    assert toolchain._sccache_env(options, env) == expected


def test_a_bucket_without_a_scheme_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must start with s3:// or gs://"):
        toolchain._sccache_env(BuildOptions(sccache_bucket="team-cache"), {})


def test_cache_choice(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}
    assert toolchain._pick_cache(BuildOptions(), env) == ("", "")  # auto, none on PATH: no cache
    assert toolchain._pick_cache(BuildOptions(compiler_cache="none"), dict(os.environ)) == ("", "")
    with pytest.raises(BuildError, match="compiler_cache = 'ccache', but ccache is not on PATH"):
        toolchain._pick_cache(BuildOptions(compiler_cache="ccache"), env)


def test_a_tree_that_generates_wgsl_with_npm_needs_node(tmp_path: Path) -> None:
    toolchain.check_wgsl_generator(tmp_path, {"PATH": str(tmp_path)})  # no generator in the tree: fine
    templates = tmp_path / toolchain.WGSL_TEMPLATES
    templates.mkdir(parents=True)
    (templates / "package.json").write_text("{}")
    with pytest.raises(BuildError, match="node and npm not found"):
        toolchain.check_wgsl_generator(tmp_path, {"PATH": str(tmp_path / "empty")})
