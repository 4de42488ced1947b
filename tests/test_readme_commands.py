"""The README's two commands as a newcomer types them, and what CI runs: the same command.

The test session's first step runs here for real, through nox, on a machine state without
lavapipe: the Vulkan loader's search folders (the XDG ones, which hold /usr/share) point at empty
folders, so the loader would find no driver either. It must stop in seconds, before lint, with
the command that installs lavapipe.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from clirun import one_error
from ortstack.suites import vulkan

if TYPE_CHECKING:
    from clirun import RunOrtstack

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _commands(block_text: str) -> list[str]:
    """The ``$ `` lines of the first console block in ``block_text``, without their comments."""
    block = block_text.split("```console\n", 1)[1].split("```", 1)[0]
    return [line[2:].split("#", 1)[0].strip() for line in block.splitlines() if line.startswith("$ ")]


def test_the_two_commands_are_two() -> None:
    assert _commands(_section("The two commands")) == ["nox -s build", "nox -s test"]


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    test_command = _commands(_section("The two commands"))[1]
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [line.strip() for line in script.splitlines() if line.strip() and not line.startswith("#")]
    assert lines[-1] == test_command
    assert "eval" not in script, "lavapipe needs no exported environment"
    assert "bash ci/install-system-deps.sh" in lines


def test_the_development_commands_name_sessions_that_take_their_arguments() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "--list", "-f", str(ROOT / "noxfile.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    sessions = set(re.findall(r"^[*-] ([\w-]+)", listed, flags=re.MULTILINE))
    commands = _commands(_section("Development"))
    assert commands, "the README shows development commands"
    for command in commands:
        session = re.match(r"nox -s ([\w-]+)", command)
        assert session is not None, command
        assert session.group(1) in sessions, command
        if "tests/" in command:  # a path of the orchestrator's tests goes to pytest
            assert session.group(1) == "selftest", command


def _no_vulkan_env(tmp_path: Path, base_env: dict[str, str]) -> dict[str, str]:
    """The environment of a machine where the Vulkan loader finds no driver (lavapipe not installed)."""
    empty = tmp_path / "no-drivers"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in base_env.items() if k not in {*vulkan.ICD_ENV, "VIRTUAL_ENV", "PYTHONPATH"}}
    env |= {"XDG_DATA_DIRS": str(empty), "XDG_CONFIG_DIRS": str(empty), "XDG_DATA_HOME": str(empty)}
    env |= {"XDG_CONFIG_HOME": str(empty)}
    assert vulkan.missing_driver(env) is not None, "a driver manifest in /etc/vulkan/icd.d: not that machine state"
    return env


def test_lavapipe_is_used_as_installed_with_nothing_exported(tmp_path: Path, base_env: dict[str, str]) -> None:
    """Mesa's package as installed: lavapipe's manifest beside those of the hardware drivers."""
    env = _no_vulkan_env(tmp_path, base_env)
    icd = tmp_path / "share" / "vulkan" / "icd.d"
    icd.mkdir(parents=True)
    for name in ("lvp_icd.json", "radeon_icd.json", "intel_icd.json"):
        (icd / name).write_text('{"file_format_version": "1.0.0"}')
    env["XDG_DATA_DIRS"] = str(tmp_path / "share")
    webgpu = vulkan.webgpu_env(env, tmp_path / "shaders")
    if vulkan.gpu_present():  # a machine with a GPU: Dawn picks it, nothing is forced
        assert "VK_DRIVER_FILES" not in webgpu
        return
    assert webgpu["VK_DRIVER_FILES"] == str(icd / "lvp_icd.json")
    assert webgpu["ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER"] == "1"
    assert webgpu["MESA_SHADER_CACHE_DIR"] == str(tmp_path / "shaders")
    told = vulkan.webgpu_env({**env, "ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER": "0"}, tmp_path / "shaders")
    assert told["ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER"] == "0", "what the user exported wins"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("posargs", "expected"),
    [
        ((), ["the plugin and webgpu lanes cannot run: no Vulkan driver is installed", "sudo bash ci/lavapipe.sh"]),
        (("tests/test_fetch.py",), ["take pytest options, not paths", "nox -s selftest -- tests/test_fetch.py"]),
    ],
    ids=["no-lavapipe", "a-test-path"],
)
def test_the_readmes_test_command_stops_in_seconds_before_lint(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    base_env: dict[str, str],
    posargs: tuple[str, ...],
    expected: list[str],
) -> None:
    envdir = tmp_path_factory.getbasetemp() / "nox-envs"  # shared: the second run reuses the venv
    argv = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(envdir), "-r", "-s", "test"]
    argv += ["--", *posargs] if posargs else []
    env = _no_vulkan_env(tmp_path, base_env) | {"NO_COLOR": "1", "COLUMNS": "250"}
    start = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=600)
    seconds = time.monotonic() - start
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0, out[-3000:]
    for text in expected:
        assert text in out, out[-3000:]
    assert "ruff check" not in out, "the check comes before lint"
    assert "ortstack test --preflight" in out
    # The session's venv and ortstack's install take most of it; nothing of the minutes of lint and tests.
    assert seconds < 240, seconds


def test_a_missing_system_package_stops_the_first_step_with_the_install_command(
    run_ortstack: RunOrtstack, tmp_path: Path
) -> None:
    """A fresh machine without Redis: named at once, not as a test error minutes later."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("git", "cmake", "ninja", "c++"):
        found = shutil.which(name)
        assert found is not None, name
        (tools / name).symlink_to(found)
    argv = ("test", "--preflight", "--selftest-tools", "--ep", "cpu", "--cache-dir", tmp_path / "c")
    result = run_ortstack(*argv, env={"PATH": str(tools)})
    line = one_error(result, 3)
    assert "need system packages that are missing: redis-server (redis-server)" in line
    assert "sudo bash ci/install-system-deps.sh (or as root: bash ci/install-system-deps.sh)" in result.stderr
    # A machine that only tests wheels is asked for none of them: only for what the lanes need.
    wheels_only = run_ortstack(*(a for a in argv if a != "--selftest-tools"), env={"PATH": str(tools)})
    assert wheels_only.returncode == 0, wheels_only.stderr
    assert "redis" not in wheels_only.stderr
