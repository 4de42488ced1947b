"""The fault suite's catalogue and its tools: real ``python -m ortstack`` processes, real signals.

Every test of the suite carries ``@pytest.mark.fault(ID)`` with an ``ID`` from ``FAULTS``; each one
asserts the error line (or the clean outcome) and that nothing valid was lost. ``FOUNDATION_FAULTS``
lists the faults the fetch and config tests already cover, so the two together are the whole list.
Count them with ``pytest -m fault --collect-only -q``; ``test_faults_exit_codes.py`` checks that each
entry marks exactly one test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from ortstack.errors import INTERRUPTED, TERMINATED

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from series_kit import Project

FAULTS: dict[str, str] = {
    # Interrupted steps (test_faults_signals.py).
    "download-sigint": "Ctrl-C in the middle of a download: exit 130, the .part file kept, the next run resumes it",
    "download-sigterm": "SIGTERM in the middle of a download: exit 143, the next run resumes it",
    "extract-sigint": "Ctrl-C while extracting: the verified archive and the old tree kept, no half tree published",
    "extract-sigkill": "killed hard while extracting: the next run removes the leftovers and extracts again",
    "patch-sigint": "Ctrl-C while applying the series: the last good prepared tree byte for byte the same",
    "patch-sigterm": "SIGTERM while applying the series: the last good prepared tree byte for byte the same",
    "patch-sigkill": "killed hard while applying the series: the next run removes the half-made tree",
    "patch-two-runs": "two patch runs on one work dir: both succeed, one waits; the tree is whole",
    "patch-no-wait": "a patch run with --no-wait while another holds the tree: exit 8; without it, it waits, saying so",
    "build-sigint": "Ctrl-C while pip/cmake compile: dist/ byte for byte the same, no compiler left running",
    "build-sigterm": "SIGTERM while pip/cmake compile: dist/ byte for byte the same, no compiler left running",
    # Hostile archives (test_faults_inputs.py).
    "tar-hardlink-dotdot": "tar hard link to ../../x",
    "tar-hardlink-absolute": "tar hard link to /etc/passwd",
    "tar-fifo": "tar FIFO member",
    "tar-block-device": "tar block device member",
    "tar-backslash-dotdot": "tar member named top\\..\\..\\x (Windows separators)",
    "tar-drive-letter": "tar member named C:/x",
    "tar-symlink-chain": "tar links that each stay inside but lead outside together",
    "tar-symlink-trailing-slash": "tar symlink named out/ (checked from inside out/, written beside it) to ../../x",
    "tar-duplicate-through-link": "tar member written twice, the second time through a link planted by the first",
    "tar-symlink-dot-name": "tar symlink named a/. (the folder a itself) to ./.",
    "tar-symlink-out-through-a-later-link": "tar link x -> a/a/.., then a -> .: x leads outside once a is there",
    "tar-long-name": "tar member whose name is longer than the file system allows",
    "zip-symlink-escape": "zip symlink to ../../x",
    "zip-symlink-chain": "zip links that each stay inside but lead outside together",
    "zip-duplicate-through-link": "zip member written twice, the second time through a link planted by the first",
    "zip-absolute": "zip member named /x",
    "zip-dot-name": "zip file named a/. (the folder a itself)",
    "zip-symlink-out-through-a-later-link": "zip link x -> a/a/.., then a -> .: x leads outside once a is there",
    # Sources that are not a source tree, archives that expand without end (test_faults_sources.py).
    "archive-corrupt-pinned": "a corrupt archive with its own (matching) sha256: one line, dropped from the cache",
    "archive-empty-tar": "a valid, empty tar: refused as holding no files, nothing kept or locked",
    "archive-only-top-folder": "a tar holding only its top folder",
    "archive-gzip-of-zeros": "a gzip of zeros, which decodes to an empty tar",
    "archive-not-onnxruntime": "an archive of another project: refused naming VERSION_NUMBER and cmake/CMakeLists.txt",
    "archive-bomb-ratio": "a 1 MB archive expanding to 1 GiB: refused before anything is written",
    "archive-bomb-size": "an archive over ORTSTACK_ARCHIVE_MAX_MIB; a limit that is not a number",
    "source-dir-not-onnxruntime": "--source-dir of a checkout at the pinned commit that is not onnxruntime",
    "status-after-source-dir": "status after a --source-dir run: neither 'fetched by git' nor 'not fetched'",
    # Hostile downloads.
    "cache-archive-damaged": "a cached archive damaged on disk: found by its digest, downloaded again",
    "sha256-one-byte": "the archive with one byte flipped against its pinned sha256",
    "drop-always-ranged": "a server that always drops half way, with Range: exit 4, the .part kept and resumed",
    "drop-always-unranged": "a server that always drops half way, without Range: exit 4, the next run starts over",
    # Hostile patches.
    "patch-delete-outside": "a patch deleting ../x",
    "patch-absolute": "a patch writing /tmp/x",
    "patch-into-git-dir": "a patch writing .git/hooks/post-commit",
    "patch-through-symlink": "a patch adding a link out of the tree, the next one writing through it",
    # Patches git reads differently from a naive reader (test_faults_patches.py).
    "patch-link-quoted-path": 'a link out of the tree under git\'s quoted name form (diff --git "a/esc" "b/esc")',
    "patch-link-binary": "a link out of the tree in a GIT binary patch section",
    "patch-link-chain": "two links that each stay inside as text, one leading out through the other on disk",
    "patch-link-absolute": "a link to /etc",
    "patch-git-dir-upper-case": "a patch writing .GIT/hooks/post-commit (git's own folder in another letter case)",
    "patch-git-dir-short-name": "a patch writing git~1/config (.git's 8.3 short name on NTFS)",
    "patch-rename-quoted-outside": 'a rename to "../esc", quoted',
    "patch-diff-hidden-in-message": "a plain diff in the commit message, which git apply also applies",
    "patch-hunk-header-extra-at": "a hunk header @@ -1,1 +1,1 @@@",
    "patch-hunk-header-glued-text": "a hunk header @@ -1 +1 @@x",
    "patch-conflict-named-once": "a patch failing in two files: each file and hunk named once",
    "patch-beyond-link": "a patch writing through a link inside the tree: git's refusal as one line",
    "patch-local-tip": "a local patch that does not apply: the tip says to fix the file, not to refresh it",
    "patch-first-run-tip": "a patch that does not apply on a first run: no word of a previous tree",
    "build-compile-error": "a patch that breaks the compile: exit 6 naming the file, dist/ untouched",
    "build-two-runs": "two builds of one variant at once: one waits, saying so, then finds the other's wheel",
    "deps-two-runs": "three deps mirrors of one cache at once: all succeed, no torn or stray file",
    "deps-wrong-sha1": "a deps.txt entry whose sha1 is one digit off: exit 4, the good mirror untouched",
    # Broken stack files (test_faults_config.py).
    "config-unknown-key-no-match": "an unknown key with no close match: valid keys listed, the next error still shown",
    "config-key-prefix": "repo for repository: one problem, with a suggestion",
    "config-toml-syntax": "a TOML syntax error: file:line and a tip",
    "config-wrong-type-tip": "values of the wrong type: each with file:line and how to write it",
    "config-all-problems": "five problems in one file: all reported, in line order, each with a tip",
    # Untrusted values, inputs that cost without bound (test_faults_untrusted.py).
    "lock-digest-path": "a lock whose archive digest is ../../NAME: refused as not a sha256, the file outside kept",
    "lock-version-path": "a lock whose VERSION_NUMBER value is a path: refused as not a version",
    "lock-not-utf8": "a stack.lock that is not UTF-8",
    "lock-nested-deep": "a stack.lock of 50,000 nested arrays",
    "lock-is-folder": "a stack.lock that is a folder",
    "lock-too-large": "a stack.lock over ORTSTACK_LOCK_FILE_MAX_MIB: not read",
    "config-nested-arrays": "a stack file of 50,000 nested arrays",
    "config-nested-inline-tables": "a stack file of 20,000 nested inline tables",
    "config-nul-repository": "a NUL in [ort] repository: refused on its line",
    "config-nul-source-dir": "a NUL in a dependency's source_dir: refused on its line",
    "config-unknown-keys-linear": "20,000 unknown keys: refused in seconds, 50 shown and the rest counted",
    "config-two-problems-one-table": "two problems in one [[patch]] table: both reported by one run",
    "config-too-large": "a stack file over ORTSTACK_STACK_FILE_MAX_MIB: not read",
    "config-variant-path": "a variant named ../../escaped (it names folders under the work dir): refused",
    "config-guard-outside": "a guard file ../../etc/passwd: refused as not inside the source tree",
    "config-guard-regex": "a guard pattern that is not a regular expression: one line, not a traceback later",
    "name-escape-sequence": "a patch id holding terminal escape sequences: shown escaped, never sent raw",
    "buildinfo-not-utf8": "inspect: build info that is not UTF-8",
    "buildinfo-not-json": "inspect: build info that is not JSON",
    "buildinfo-json-list": "inspect: build info that is a JSON list",
    "buildinfo-unknown-key": "inspect: build info with a key ortstack never writes",
    "buildinfo-deep-nesting": "inspect: build info of 100,000 nested arrays",
    "buildinfo-symlink-member": "inspect: build info that is a symlink member",
    "buildinfo-too-large": "inspect: build info over ORTSTACK_BUILD_INFO_MAX_MIB: not read",
    "buildinfo-encrypted": "inspect: an encrypted build-info member",
    "buildinfo-compression": "inspect: a build-info member in a compression zipfile cannot read (deflate64)",
    "download-over-cap": "a download over ORTSTACK_DOWNLOAD_MAX_MIB: refused from its announced size, nothing kept",
    "source-dir-symlink-loop": "--source-dir on a loop of links",
    "stack-path-symlink-loop": "--stack on a loop of links",
    "wheel-path-symlink-loop": "inspect of a wheel path that is a loop of links",
    "source-dir-link-outside": "--source-dir holding a link to /etc: the checkout blamed, not the first patch",
    "wheel-other-platform": "a win_amd64 wheel given to `test` on Linux: refused before any venv, as pip would",
    "venv-key-tags": "one wheel's bytes under two platform tags: two venvs, not one",
    "tofu-refused-patch": "an unpinned patch refused when applied: no sha256 of it recorded in stack.lock",
    "tar-deep-folders": "a tar member 1,900 folders deep: refused before anything is written",
    "zip-deep-folders": "a zip member 1,900 folders deep: refused before anything is written",
    # Disk space.
    "disk-patch": "not enough free space to prepare a tree: exit 9 before any copy",
    "disk-deps": "not enough free space to mirror deps.txt: exit 9 before any download",
    "disk-build": "not enough free space to build: exit 9 before pip starts, dist/ untouched",
}

FOUNDATION_FAULTS: dict[str, str] = {
    "sha256-mismatch": "tests/test_fetch.py::test_sha256_mismatch",
    "wrong-bytes-locked": "tests/test_fetch.py::test_wrong_bytes_against_a_locked_digest",
    "truncated-archive": "tests/test_fetch.py::test_truncated_archive",
    "tar-dotdot": "tests/test_fetch.py::test_unsafe_archive_members[dotdot]",
    "tar-absolute": "tests/test_fetch.py::test_unsafe_archive_members[absolute]",
    "tar-symlink-escape": "tests/test_fetch.py::test_unsafe_archive_members[symlink]",
    "tar-char-device": "tests/test_fetch.py::test_unsafe_archive_members[device]",
    "zip-dotdot": "tests/test_fetch.py::test_zip_member_escaping",
    "archive-other-commit": "tests/test_fetch.py::test_archive_of_another_commit",
    "commit-not-found": "tests/test_fetch.py::test_commit_not_found",
    "checkout-other-commit": "tests/test_fetch.py::test_local_checkout",
    "unreachable-host": "tests/test_fetch.py::test_unreachable_host",
    "http-404-503": "tests/test_fetch.py::test_server_error_is_retried_not_found_is_not",
    "drop-once": "tests/test_fetch.py::test_resume_after_dropped_connection, test_restart_when_server_cannot_resume",
    "fetch-lock-busy": "tests/test_fetch.py::test_lock_held_by_another_process",
    "two-fetches": "tests/test_fetch.py::test_two_fetches_at_once",
    "disk-fetch": "tests/test_fetch.py::test_not_enough_disk_space",
    "crash-leftovers": "tests/test_fetch.py::test_resume_a_download_an_earlier_run_left",
    "stack-toml-malformed": "tests/test_config.py (unknown key, wrong type, short commit id)",
    "patch-corrupt": "tests/test_patches.py::test_corrupt_patch_is_rejected_before_anything_is_applied",
}


def fault(name: str) -> pytest.MarkDecorator:
    """The ``fault`` mark of a catalogued fault (an unknown name fails at collection)."""
    if name not in FAULTS:
        msg = f"{name!r} is not in faultkit.FAULTS"
        raise KeyError(msg)
    return pytest.mark.fault(name)


EXIT_CODE_OF_SIGNAL: dict[int, int] = {signal.SIGINT: INTERRUPTED, signal.SIGTERM: TERMINATED}
"""What ``ortstack`` returns when a signal interrupts it (a SIGKILL leaves no code of its own)."""

POSIX_SIGNALS = pytest.mark.skipif(
    sys.platform == "win32",
    reason="POSIX signals: Windows delivers Ctrl-C to a console group (CTRL_C_EVENT), not to one process by id",
)


def patch_args(project: Project, tmp_path: Path) -> list[str | os.PathLike[str]]:
    """``ortstack patch`` of ``project`` for Linux, with its cache and work dirs under ``tmp_path``."""
    return [
        "patch",
        "--platform",
        "linux",
        "--stack",
        project.stack_file,
        "--cache-dir",
        tmp_path / "cache",
        "--work-dir",
        tmp_path / "work",
    ]


class Process:
    """``python -m ortstack ARGS`` started in the background, its output (tables, then logs) in a file."""

    def __init__(self, args: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str], log: Path) -> None:
        self.log = log
        self._stderr = log.open("w", encoding="utf-8")
        argv = [sys.executable, "-m", "ortstack", *(os.fspath(a) for a in args)]
        self.popen = subprocess.Popen(argv, env=dict(env), stdout=self._stderr, stderr=self._stderr)

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8")

    def wait_for(self, condition: Callable[[], bool], what: str, *, timeout: float = 60.0) -> None:
        """Poll ``condition`` until it holds; fail if the process ends or time runs out first."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.popen.poll() is None, f"ended before {what}:\n{self.stderr()}"
            assert time.monotonic() < deadline, f"no {what} after {timeout} s:\n{self.stderr()}"
            time.sleep(0.005)

    def finish(self, *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        self.popen.wait(timeout=timeout)
        self._stderr.close()
        return subprocess.CompletedProcess(self.popen.args, self.popen.returncode, "", self.stderr())

    def signal(self, signum: int) -> subprocess.CompletedProcess[str]:
        """Deliver ``signum`` now and wait for the process to end."""
        self.popen.send_signal(signum)
        return self.finish()
