"""An installed ortstack (``pip install ./python``, not editable) builds any stack: the wheel project travels
inside the package, and a stack below the repository root finds the repository's own. Its suites run
with just its own packages on their path, not the site-packages they were installed into."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ortstack.build import wheel

ROOT = Path(__file__).parents[1]
WHEEL_PROJECT = ("pyproject.toml", "cpp_ext/CMakeLists.txt", "cpp_ext/plugin_package/__init__.py")


def test_a_stack_below_the_repository_root_finds_the_repositorys_wheel_project() -> None:
    assert wheel.project_template_root(ROOT / "stacks" / "main-735e69a3") == ROOT


@pytest.mark.slow
def test_a_non_editable_install_carries_the_wheel_project(tmp_path: Path, base_env: dict[str, str]) -> None:
    # As a release is made: the sdist, then the wheel built from it (the wheel project travels in both).
    subprocess.run([sys.executable, "-m", "build", "-q", "-o", tmp_path / "dist", ROOT / "python"], check=True)
    (built,) = (tmp_path / "dist").glob("ortstack-*.whl")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    target = tmp_path / "site"
    subprocess.run([*pip, "install", "-q", "--no-deps", "--target", target, built], check=True)
    elsewhere = tmp_path / "elsewhere"  # a stack folder outside any checkout
    elsewhere.mkdir()
    script = (
        "import pathlib, ortstack; from ortstack.build import wheel; from ortstack.suites import packages; "
        f"print(ortstack.__file__); print(wheel.project_template_root(pathlib.Path({str(elsewhere)!r}))); "
        f"print(packages.suite_pythonpath(pathlib.Path({str(tmp_path / 'cache')!r})))"
    )
    env = {k: v for k, v in base_env.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(target)}
    argv = [sys.executable, "-c", script]
    done = subprocess.run(argv, check=False, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    package, found, suite_path = done.stdout.splitlines()
    assert Path(package).is_relative_to(target), "the installed copy, not this checkout"
    assert Path(found) == target / "ortstack" / "wheel_project"
    for name in WHEEL_PROJECT:
        assert (Path(found) / name).read_bytes() == (ROOT / name).read_bytes(), name
    linked = sorted(Path(suite_path).iterdir())
    assert [p.name for p in linked] == ["ortstack", "wheel_bench", "wheel_tests"]
    assert all(p.resolve() == target / p.name for p in linked)
