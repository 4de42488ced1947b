"""The step logger: announces and times each stage, folds output on CI, ends with a summary.

One module-level console so every part of ortstack writes through the same place. Colour follows
rich's rules, which honour ``NO_COLOR`` and ``FORCE_COLOR``.
"""

from __future__ import annotations

import os
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

console = Console(stderr=True, highlight=False)
"""Progress, logs and errors: stderr, so data on stdout pipes (``| less``, ``| grep``)."""
data_console = Console(highlight=False)
"""Tables (``status``, ``build --plan``, the suites' summary): stdout."""

# C0 and C1 controls but tab and newline, and the marks that reorder text (bidi overrides).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with control characters shown as ``\\x1b``: a name from a user file never reaches the
    terminal as an escape sequence (retitling or clearing it)."""
    return _CONTROLS.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def _one_line(text: str) -> str:
    """``printable`` text on one line, a newline shown as ``\\n``."""
    return printable(text).replace("\n", "\\n")


def _on_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


@dataclass
class _Timings:
    steps: list[tuple[str, float]] = field(default_factory=list)


_timings = _Timings()


@contextmanager
def step(title: str) -> Iterator[None]:
    """Announce ``title``, time it, and fold its output on GitHub Actions."""
    title = _one_line(title)
    if _on_github_actions():
        sys.stderr.write(f"::group::{title}\n")
    console.print(f"[bold cyan]==>[/] [bold]{escape(title)}[/]")
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        _timings.steps.append((title, elapsed))
        if _on_github_actions():
            sys.stderr.write("::endgroup::\n")
        console.print(f"[dim]    {escape(title)}: {elapsed:.1f} s[/]")


def info(message: str) -> None:
    console.print(f"    {printable(message)}", markup=False)


def success(message: str) -> None:
    """The one-line summary a verb ends with."""
    console.print(f"[bold green]ok:[/] {escape(_one_line(message))}", soft_wrap=True, highlight=False)


def warn(message: str) -> None:
    console.print(f"[bold yellow]warning:[/] {escape(_one_line(message))}", soft_wrap=True)


def loud(message: str) -> None:
    """Something the user must not miss (trust-on-first-use, an upstreamed patch)."""
    console.rule("[bold yellow]attention")
    console.print(f"[bold yellow]{escape(printable(message))}[/]")
    console.rule()


def command(cmdline: str, *, cwd: Path | None = None) -> None:
    where = f" [dim](in {escape(printable(str(cwd)))})[/]" if cwd is not None else ""
    console.print(f"[dim]+ {escape(_one_line(cmdline))}[/]{where}", soft_wrap=True, markup=True)


def error(message: str, tip: str | None = None) -> None:
    # soft_wrap: the error stays one line however narrow the terminal, so logs and tests can grep it.
    console.print(f"[bold red]ortstack: error:[/] {escape(_one_line(message))}", highlight=False, soft_wrap=True)
    if tip:
        console.print(f"[bold]tip:[/] {escape(_one_line(tip))}", highlight=False, soft_wrap=True)


@contextmanager
def waiting(message: str) -> Iterator[None]:
    """A spinner while a long step without its own progress runs (a silent line when not a terminal)."""
    with console.status(escape(_one_line(message))):
        yield


def download_progress() -> Progress:
    """A progress bar for byte transfers; silent when stderr is not a terminal."""
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


# Where even the longest words do not fit, the widest columns give way first, down to this; the words
# then fold inside their cell rather than a column being dropped.
NARROWEST_COLUMN = 8


def _fit_floors(floor: list[int], available: int) -> list[int]:
    """``floor`` narrowed, widest first, until the columns fit ``available`` (or each is at its narrowest)."""
    fitted = list(floor)
    while sum(fitted) > available:
        widest = max(range(len(fitted)), key=fitted.__getitem__)
        if fitted[widest] <= NARROWEST_COLUMN:
            break
        fitted[widest] -= 1
    return fitted


def _column_widths(columns: list[str], rows: list[list[str]], available: int) -> list[int]:
    """Each column at least as wide as its longest word (an id, a path stays whole) where they all fit,
    the rest of the width shared by how much more each column would take unwrapped."""
    cells = [[name, *(row[i] for row in rows)] for i, name in enumerate(columns)]
    longest_word = [max((len(w) for cell in column for w in cell.split()), default=1) for column in cells]
    floor = _fit_floors(longest_word, available)
    # Unwrapped, with a space before the next column's rule where the width allows it.
    natural = [max(len(cell) for cell in column) + (i < len(cells) - 1) for i, column in enumerate(cells)]
    spare = max(0, available - sum(floor))
    extra = [n - f for n, f in zip(natural, floor, strict=True)]
    wanted = sum(extra)
    if wanted <= spare:
        return natural
    return [f + e * spare // wanted for f, e in zip(floor, extra, strict=True)]


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """Rows under a title, wrapped between words to fit the terminal (ids and paths are never split)."""
    # Columns apart by a rule and one space, no outer frame: two characters per column boundary.
    out = Table(title=title, title_justify="left", box=box.MINIMAL, show_edge=False, padding=(0, 0, 0, 1))
    out.pad_edge = False
    shown = [[printable(cell) for cell in row] for row in rows]
    widths = _column_widths(columns, shown, console.width - 2 * (len(columns) - 1))
    for name, width in zip(columns, widths, strict=True):
        out.add_column(name, width=width, overflow="fold")
    for row in shown:
        out.add_row(*(escape(cell) for cell in row))
    data_console.print(out)


def step_times() -> list[tuple[str, float]]:
    return list(_timings.steps)
