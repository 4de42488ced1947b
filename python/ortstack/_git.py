"""git, run through ``_run`` with settings that make the prepared tree reproducible.

The user's own git configuration stays in force for remote access (credentials, ``insteadOf``
mirrors); the options that would change file contents or commit ids are pinned here.
"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING, Literal, overload

from ortstack import _run
from ortstack.errors import OrtstackError, PatchError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

# Commits ortstack makes carry this identity and date unless a patch names its author.
IDENTITY = ("ortstack", "ortstack@localhost")
FIXED_DATE = "2000-01-01T00:00:00+0000"

_PINNED_OPTIONS = (
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.fileMode=true",
    "commit.gpgSign=false",
    "gc.auto=0",
    "init.defaultBranch=main",
    "advice.detachedHead=false",
)


def environment(env: Mapping[str, str], *, author: str = "", date: str = "") -> dict[str, str]:
    """``env`` plus a fixed committer, and ``author``/``date`` (``Name <mail>``) when given."""
    name, mail = IDENTITY
    if author and "<" in author:
        author_name, _, rest = author.partition("<")
        author_name, author_mail = author_name.strip(), rest.rstrip(">").strip()
    else:
        author_name, author_mail = name, mail
    return {
        **env,
        "GIT_AUTHOR_NAME": author_name,
        "GIT_AUTHOR_EMAIL": author_mail,
        "GIT_AUTHOR_DATE": date or FIXED_DATE,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": mail,
        "GIT_COMMITTER_DATE": FIXED_DATE,
        "GIT_TERMINAL_PROMPT": "0",
    }


def _argv(args: Sequence[str]) -> list[str]:
    options = [item for option in _PINNED_OPTIONS for item in ("-c", option)]
    return ["git", *options, *args]


@overload
def git(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    capture: Literal[True],
    check: bool = ...,
    error: type[OrtstackError] = ...,
) -> subprocess.CompletedProcess[str]: ...


@overload
def git(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    capture: Literal[False] = ...,
    check: bool = ...,
    error: type[OrtstackError] = ...,
) -> subprocess.CompletedProcess[None]: ...


def git(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    capture: bool = False,
    check: bool = True,
    error: type[OrtstackError] = PatchError,
) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[None]:
    """Run ``git args`` in ``cwd``; ``capture=True`` returns text output and echoes nothing.

    A failure with ``check`` raises ``error`` naming the command and git's own last words.
    """
    try:
        if capture:
            return _run.run(_argv(args), cwd=cwd, env=env, capture=True, check=check, quiet=True)
        return _run.run(_argv(args), cwd=cwd, env=env, check=check)
    except subprocess.CalledProcessError as exc:
        # git says why on stderr, some commands (commit: "nothing to commit") on stdout.
        said = [line.strip() for line in f"{exc.stderr or ''}\n{exc.stdout or ''}".splitlines() if line.strip()]
        reason = said[0] if said else f"exit status {exc.returncode}"
        msg = f"git {' '.join(args)} failed: {reason}"
        tip = "check the repository URL and the network" if error is not PatchError else None
        raise error(msg, tip=tip, detail=f"{exc.stderr or ''}{exc.stdout or ''}") from None


def out(args: Sequence[str], *, cwd: Path, env: Mapping[str, str], error: type[OrtstackError] = PatchError) -> str:
    """The stripped standard output of a git command that must succeed."""
    return git(args, cwd=cwd, env=env, capture=True, error=error).stdout.strip()
