"""The GitHub Actions workflow users copy: actionlint passes, and it only calls sessions that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "ci" / "github" / "ortstack.yml"


@pytest.fixture(scope="module")
def actionlint() -> str:
    found = shutil.which("actionlint")
    assert found is not None, "actionlint is missing: it comes with the 'test' dependency group"
    return found


def test_actionlint_passes(actionlint: str) -> None:
    result = subprocess.run([actionlint, str(WORKFLOW)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_broken_copy(actionlint: str, tmp_path: Path) -> None:
    # Guards the test above against passing because actionlint checked nothing.
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("${{ matrix.variant }}", "${{ matrix.flavour }}", 1))
    result = subprocess.run([actionlint, str(broken)], capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "flavour" in result.stdout


def test_workflow_calls_only_existing_sessions() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "--list", "-f", str(ROOT / "noxfile.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    # `nox -l` marks every session, selected or not, with "* " or "- ".
    sessions = set(re.findall(r"^[*-] ([\w-]+)", listed.stdout, flags=re.MULTILINE))
    assert {"build", "test", "lint"} <= sessions, listed.stdout
    called = set(re.findall(r"nox -s ([\w-]+)", WORKFLOW.read_text()))
    assert called, "the workflow should run nox sessions"
    assert called <= sessions, f"unknown sessions: {sorted(called - sessions)}"
