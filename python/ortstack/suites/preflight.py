"""What `nox -s test` needs from the machine, checked in seconds before anything is installed or run.

The orchestrator's own tests build the miniature upstream with real tools and run a real Redis
server and a real sccache-dist build server (bubblewrap); the wheel suites' WebGPU lanes need a
Vulkan driver (see ``ortstack.vulkan``). Each missing piece is named at once, with the one command
that installs them all on Debian and Ubuntu.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ortstack import _run, log
from ortstack.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

# Tool on PATH -> the Debian/Ubuntu package ci/install-system-deps.sh installs it from.
TEST_TOOLS = {
    "git": "git",
    "cmake": "cmake",
    "ninja": "ninja-build",
    "c++": "g++",
    "redis-server": "redis-server",
    "bwrap": "bubblewrap",  # the sandbox of the distributed-compile test's sccache-dist build server
}
INSTALL_TIP = (
    "sudo bash ci/install-system-deps.sh (or as root: bash ci/install-system-deps.sh) installs them and "
    "Mesa's lavapipe (Debian, Ubuntu); elsewhere install the tools named, then run again"
)


def missing_test_tools(env: Mapping[str, str]) -> list[str]:
    """The tools the orchestrator's tests need that are not on PATH (nothing is checked off Linux)."""
    if not sys.platform.startswith("linux"):
        return []
    return [f"{tool} ({package})" for tool, package in TEST_TOOLS.items() if _run.which(tool, env) is None]


def check_test_machine(env: Mapping[str, str]) -> None:
    """Stop with every missing system package named, or say that the machine is ready.

    Only for the orchestrator's own tests (``ortstack test --preflight --selftest-tools``, as ``nox -s test``
    runs it): testing wheels needs none of these tools.
    """
    missing = missing_test_tools(env)
    if missing:
        msg = f"the orchestrator's tests need system packages that are missing: {', '.join(missing)}"
        raise ConfigError(msg, tip=INSTALL_TIP)
    log.info(f"system tools for the orchestrator's tests: {', '.join(TEST_TOOLS)} found")
