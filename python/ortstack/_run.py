"""The one subprocess runner: argv lists, no shell, the command echoed before it runs."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Literal, overload

from ortstack import log

STOP_WHEN_POLL_SECONDS = 2.0
"""How often a logged command's ``stop_when`` is asked."""

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path


def which(program: str, env: Mapping[str, str] | None = None) -> str | None:
    """Resolve ``program`` against the PATH of ``env`` (the current environment by default)."""
    path = (env if env is not None else os.environ).get("PATH")
    return shutil.which(program, path=path)


def _resolve(argv: Sequence[str | os.PathLike[str]], env: Mapping[str, str] | None) -> list[str]:
    args = [os.fspath(a) for a in argv]
    found = which(args[0], env)
    if found is None:
        msg = f"program not found: {args[0]}"
        raise FileNotFoundError(msg)
    return [found, *args[1:]]


@overload
def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = ...,
    env: Mapping[str, str] | None = ...,
    capture: Literal[False] = ...,
    check: bool = ...,
    quiet: bool = ...,
    timeout: float | None = ...,
    log_file: Path | None = ...,
    stop_when: Callable[[], bool] | None = ...,
) -> subprocess.CompletedProcess[None]: ...


@overload
def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = ...,
    env: Mapping[str, str] | None = ...,
    capture: Literal[True],
    check: bool = ...,
    quiet: bool = ...,
    timeout: float | None = ...,
) -> subprocess.CompletedProcess[str]: ...


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    capture: bool = False,
    check: bool = True,
    quiet: bool = False,
    timeout: float | None = None,
    log_file: Path | None = None,
    stop_when: Callable[[], bool] | None = None,
) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[None]:
    """Run ``argv`` without a shell.

    ``capture=True`` returns text stdout/stderr; otherwise output streams to the terminal, and with
    ``log_file`` also (stdout and stderr together) into that file; then ``stop_when`` is asked every
    few seconds, and when it says so the command is stopped (and counts as failed).
    ``CalledProcessError`` propagates: callers turn it into the error of their stage.
    """
    args = _resolve(argv, env)
    if not quiet:
        log.command(shlex.join([os.fspath(a) for a in argv]), cwd=cwd)
    if log_file is not None and not capture:
        return _run_logged(args, cwd=cwd, env=env, check=check, quiet=quiet, log_file=log_file, stop_when=stop_when)
    return subprocess.run(  # noqa: S603 - argv list, no shell
        args,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        check=check,
        text=True if capture else None,
        capture_output=capture,
        timeout=timeout,
    )


def _run_logged(
    args: list[str],
    *,
    cwd: Path | None,
    env: Mapping[str, str] | None,
    check: bool,
    quiet: bool,
    log_file: Path,
    stop_when: Callable[[], bool] | None,
) -> subprocess.CompletedProcess[None]:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with (
        log_file.open("w", encoding="utf-8") as sink,
        subprocess.Popen(  # noqa: S603 - argv list, no shell
            args,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            # Its own process group, so an interrupt can stop the compilers it starts as well.
            start_new_session=sys.platform != "win32",
        ) as process,
    ):

        def pump() -> None:
            assert process.stdout is not None  # set by stdout=PIPE
            with contextlib.suppress(ValueError, OSError):  # the pipe or the log closed under us
                for line in process.stdout:
                    sink.write(line)
                    if not quiet:
                        sys.stderr.write(line)

        # A daemon the command starts (a compiler-cache server) can keep the pipe open long after the
        # command exits: wait for the command, not for the end of its output.
        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            returncode = _wait(process, stop_when)
        except BaseException:  # Ctrl-C or SIGTERM: stop the command rather than wait an hour for it
            _stop(process)
            raise
        reader.join(timeout=2)
    if check and returncode:
        raise subprocess.CalledProcessError(returncode, args)
    return subprocess.CompletedProcess(args, returncode)


def _wait(process: subprocess.Popen[str], stop_when: Callable[[], bool] | None) -> int:
    """The command's exit code; stopped early (a failure) once ``stop_when`` says so."""
    while stop_when is not None:
        try:
            return process.wait(timeout=STOP_WHEN_POLL_SECONDS)
        except subprocess.TimeoutExpired:
            if stop_when():
                _stop(process)
                return process.returncode or 1
    return process.wait()


def _stop(process: subprocess.Popen[str]) -> None:
    """Terminate ``process`` and everything it started (its process group; on Windows the process)."""
    if sys.platform == "win32":
        process.terminate()
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
