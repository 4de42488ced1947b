"""Running ``python -m ortstack`` in tests, and reading its one-line errors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import os
    import subprocess
    from collections.abc import Mapping
    from pathlib import Path


class RunOrtstack(Protocol):
    def __call__(
        self, *args: str | os.PathLike[str], cwd: Path | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]: ...


def error_lines(stderr: str) -> list[str]:
    """The ``ortstack: error:`` lines of a run's stderr."""
    return [line for line in stderr.splitlines() if line.startswith("ortstack: error:")]


def one_error(result: subprocess.CompletedProcess[str], exit_code: int, *, tip: bool = True) -> str:
    """Assert the run failed with ``exit_code``, one error line (plus a tip), no traceback; return the line."""
    assert result.returncode == exit_code, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert not tip or any(line.startswith("tip:") for line in result.stderr.splitlines()), result.stderr
    return lines[0]
