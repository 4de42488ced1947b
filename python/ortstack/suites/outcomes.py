"""The words the wheel suites count their tests in, shared by their pytest plugin and ``ortstack test``.

A test **passed** only when the feature it is about was present and its numbers checked; a feature the
wheel lacks is **absent**, a check that could not run here (no device buffers) is **not checked**, and
a test of an EP lane that cannot run is **not run**. The last three are pytest skips told apart by the
start of their reason (``absent: …``, ``not checked: …``), which JUnit XML keeps as the skip's message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

PASSED = "passed"
FAILED = "failed"
ERROR = "error"
ABSENT = "absent"
NOT_CHECKED = "not checked"
NOT_RUN = "not run"
ALWAYS_SHOWN = (PASSED, FAILED, ABSENT, NOT_CHECKED)


def of_skip(reason: str) -> str:
    """absent, not checked or not run, from a skip's reason (pytest's ``Skipped: `` prefix allowed)."""
    reason = reason.removeprefix("Skipped: ")
    return next((kind for kind in (ABSENT, NOT_CHECKED) if reason.startswith(f"{kind}:")), NOT_RUN)


def counts_line(counts: Mapping[str, int]) -> str:
    """``N passed, N failed, N absent, N not checked``, then ``N not run`` and ``N error`` where there are any."""
    shown = [*ALWAYS_SHOWN, *(kind for kind in (NOT_RUN, ERROR) if counts.get(kind, 0))]
    return ", ".join(f"{counts.get(kind, 0)} {kind}" for kind in shown)
