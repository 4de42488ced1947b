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


def errors_and_tips(result: subprocess.CompletedProcess[str], exit_code: int) -> list[tuple[str, str]]:
    """Assert the run failed with ``exit_code`` and ended in error lines, each one line with one tip line.

    Returns (error line, tip line) pairs; the tip is empty where there is none. Nothing else may
    follow the first error line: a message or tip of several lines fails here.
    """
    assert result.returncode == exit_code, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("ortstack: error:")), None)
    assert first is not None, result.stderr
    pairs: list[tuple[str, str]] = []
    for line in lines[first:]:
        if line.startswith("ortstack: error:"):
            pairs.append((line, ""))
        else:
            assert line.startswith("tip: "), f"a line that is neither an error nor its tip: {line!r}\n{result.stderr}"
            assert pairs[-1][1] == "", f"a second tip line: {line!r}\n{result.stderr}"
            pairs[-1] = (pairs[-1][0], line)
    return pairs


def one_error(result: subprocess.CompletedProcess[str], exit_code: int, *, tip: bool = True) -> str:
    """Assert the run failed with ``exit_code``, one error line (plus one tip line), no traceback; return the line."""
    pairs = errors_and_tips(result, exit_code)
    assert len(pairs) == 1, result.stderr
    assert not tip or pairs[0][1], result.stderr
    return pairs[0][0]
