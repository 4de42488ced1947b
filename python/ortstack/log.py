"""The step logger: announces and times each stage, folds output on CI, ends with a summary.

One module-level console so every part of ortstack writes through the same place. Colour follows
rich's rules, which honour ``NO_COLOR`` and ``FORCE_COLOR``.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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


def _on_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


@dataclass
class _Timings:
    steps: list[tuple[str, float]] = field(default_factory=list)


_timings = _Timings()


@contextmanager
def step(title: str) -> Iterator[None]:
    """Announce ``title``, time it, and fold its output on GitHub Actions."""
    if _on_github_actions():
        sys.stderr.write(f"::group::{title}\n")
    console.print(f"[bold cyan]==>[/] [bold]{title}[/]")
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        _timings.steps.append((title, elapsed))
        if _on_github_actions():
            sys.stderr.write("::endgroup::\n")
        console.print(f"[dim]    {title}: {elapsed:.1f} s[/]")


def info(message: str) -> None:
    console.print(f"    {message}", markup=False)


def success(message: str) -> None:
    """The one-line summary a verb ends with."""
    console.print(f"[bold green]ok:[/] {escape(message)}", soft_wrap=True, highlight=False)


def warn(message: str) -> None:
    console.print(f"[bold yellow]warning:[/] {escape(message)}", soft_wrap=True)


def loud(message: str) -> None:
    """Something the user must not miss (trust-on-first-use, an upstreamed patch)."""
    console.rule("[bold yellow]attention")
    console.print(f"[bold yellow]{escape(message)}[/]")
    console.rule()


def command(cmdline: str, *, cwd: Path | None = None) -> None:
    where = f" [dim](in {cwd})[/]" if cwd is not None else ""
    console.print(f"[dim]+ {cmdline}[/]{where}", soft_wrap=True, markup=True)


def error(message: str, tip: str | None = None) -> None:
    # soft_wrap: the error stays one line however narrow the terminal, so logs and tests can grep it.
    console.print(f"[bold red]ortstack: error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    if tip:
        console.print(f"[bold]tip:[/] {escape(tip)}", highlight=False, soft_wrap=True)


@contextmanager
def waiting(message: str) -> Iterator[None]:
    """A spinner while a long step without its own progress runs (a silent line when not a terminal)."""
    with console.status(escape(message)):
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


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    out = Table(title=title, title_justify="left")
    for name in columns:
        out.add_column(name, overflow="fold")
    for row in rows:
        out.add_row(*row)
    console.print(out)


def step_times() -> list[tuple[str, float]]:
    return list(_timings.steps)
