"""One exception hierarchy; each class carries the process exit code the CLI returns.

Exit codes (also documented in README.md and ``ortstack --help``):

==  ===========================================================
0   success
1   unexpected internal error (a bug: please report it)
2   usage error (bad command line, a file given as a wheel that is not one)
3   configuration error (``stack.toml``, lock file, environment)
4   fetch error (download, checksum, archive, git)
5   patch error (check, apply, guard, refresh, export)
6   build error (configure, compile, wheel, repair)
7   test or benchmark suite error
8   another ortstack process holds the lock (``--no-wait``)
9   not enough disk space for the step
130 interrupted (Ctrl-C, SIGINT)
143 terminated (SIGTERM)
==  ===========================================================

An interrupted step keeps what it finished (verified downloads, the previous prepared tree and
``dist/``) and removes its temporary work; running the same command again resumes or redoes it.
"""

from __future__ import annotations


class OrtstackError(Exception):
    """Base class for every error that should reach the user as one clear line."""

    exit_code = 1

    def __init__(self, message: str, *, tip: str | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.tip = tip
        # A tool's own words (git's, tarfile's), summarised in ``message``; shown with --debug-traceback.
        self.detail = detail

    def problems(self) -> tuple[OrtstackError, ...]:
        """The errors to report: this one, or each of several found at once."""
        return (self,)

    def __str__(self) -> str:
        return self.message


class UsageError(OrtstackError):
    """The command line asks for something that cannot be: the same code argparse gives a bad option."""

    exit_code = 2


class NotAWheelError(UsageError):
    """A path given as a wheel is missing, is not named like a wheel, or is not a zip archive."""


class WheelNotForThisMachineError(UsageError):
    """A wheel whose platform tags this machine does not support: pip would refuse to install it."""


class ConfigError(OrtstackError):
    """``stack.toml``, the lock file or the environment is invalid."""

    exit_code = 3


class ConfigProblemsError(ConfigError):
    """Several problems found in one file, each reported on its own line."""

    def __init__(self, problems: tuple[ConfigError, ...]) -> None:
        super().__init__(problems[0].message, tip=problems[0].tip)
        self._problems = problems

    def problems(self) -> tuple[OrtstackError, ...]:
        return self._problems


class FetchError(OrtstackError):
    """A source could not be fetched or failed verification."""

    exit_code = 4


class ChecksumError(FetchError):
    """Downloaded bytes do not match the pinned digest."""


class UnsafeArchiveError(FetchError):
    """An archive member would land outside the extraction directory."""


class PatchError(OrtstackError):
    """A patch could not be checked, applied, guarded, refreshed or exported."""

    exit_code = 5


class UnsafePatchError(PatchError):
    """A patch names a path outside the tree or in ``.git``, or makes a link that leads out of it."""


class BuildError(OrtstackError):
    """Configuring, compiling or packaging a wheel failed."""

    exit_code = 6


class SuiteError(OrtstackError):
    """A test or benchmark suite failed or could not run."""

    exit_code = 7


class LockBusyError(OrtstackError):
    """Another ortstack process holds a lock and we were asked not to wait."""

    exit_code = 8


class DiskSpaceError(OrtstackError):
    """Not enough free disk space for the next step."""

    exit_code = 9


INTERRUPTED = 130
"""128 + SIGINT, the shell's code for Ctrl-C."""
TERMINATED = 143
"""128 + SIGTERM."""


class Terminated(BaseException):
    """SIGTERM arrived; raised like ``KeyboardInterrupt`` so ``finally`` blocks clean up."""


EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "unexpected internal error",
    UsageError.exit_code: "usage error (bad command line, a file or folder that is not a wheel, a step run too early)",
    ConfigError.exit_code: "configuration error (stack.toml, lock file, environment, no driver for a lane)",
    FetchError.exit_code: "fetch error (download, checksum, archive, git)",
    PatchError.exit_code: "patch error (check, apply, guard, refresh, export)",
    BuildError.exit_code: "build error (configure, compile, wheel, repair)",
    SuiteError.exit_code: "test or benchmark suite failed (it ran)",
    LockBusyError.exit_code: "lock held by another ortstack process",
    DiskSpaceError.exit_code: "not enough disk space",
    INTERRUPTED: "interrupted (Ctrl-C, SIGINT)",
    TERMINATED: "terminated (SIGTERM)",
}
