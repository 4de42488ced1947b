"""Patches that git reads differently from a naive reader, and patch errors that must be one fitting line.

Each hostile patch is refused with one line before the prepared tree changes: the last good tree is
byte for byte the same, and no link that leaves the tree exists anywhere.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from typing import TYPE_CHECKING

import pytest

from clirun import RunOrtstack, one_error
from faultkit import fault, patch_args
from series_kit import EMPTY_WEIGHTS, commit_edits, format_patch, snapshot

if TYPE_CHECKING:
    from pathlib import Path

    from series_kit import Project
    from upstream import Upstream

pytestmark = pytest.mark.network

NO_NEWLINE = "\\ No newline at end of file\n"


def git_binary_literal(data: bytes) -> str:
    """``data`` as a ``GIT binary patch`` literal: zlib, then git's base85 lines of up to 52 bytes."""
    packed = zlib.compress(data)
    lines = []
    for start in range(0, len(packed), 52):
        chunk = packed[start : start + 52]
        length = chr(ord("A") + len(chunk) - 1) if len(chunk) <= 26 else chr(ord("a") + len(chunk) - 27)
        lines.append(length + base64.b85encode(chunk, pad=True).decode())
    return f"literal {len(data)}\n" + "\n".join(lines) + "\n"


def new_link(path: str, target: str, *, quoted: bool = False) -> str:
    a, b = (f'"a/{path}"', f'"b/{path}"') if quoted else (f"a/{path}", f"b/{path}")
    return f"diff --git {a} {b}\nnew file mode 120000\n--- /dev/null\n+++ {b}\n@@ -0,0 +1 @@\n+{target}\n{NO_NEWLINE}"


def binary_link(path: str, target: str) -> str:
    blob = hashlib.sha1(b"blob %d\0%s" % (len(target), target.encode())).hexdigest()
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 120000\nindex {'0' * 40}..{blob}\nGIT binary patch\n"
        f"{git_binary_literal(target.encode())}\n{git_binary_literal(b'')}\n"
    )


@pytest.fixture
def prepared(run_ortstack: RunOrtstack, upstream: Upstream, project: Project, tmp_path: Path) -> dict[str, bytes]:
    """A good prepared tree (one patch applied); returns its snapshot."""
    good = format_patch(upstream, commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit))
    project.write([project.entry("empty", "0001-empty.patch", good)])
    result = run_ortstack(*patch_args(project, tmp_path))
    assert result.returncode == 0, result.stderr
    return snapshot(tmp_path / "work" / "prepared" / "default")


def run_hostile(run_ortstack: RunOrtstack, project: Project, tmp_path: Path, diff: str) -> str:
    """Add ``diff`` as the second patch and run ``ortstack patch``; return its one error line."""
    first = project.entry("empty", "0001-empty.patch", (project.root / "patches" / "0001-empty.patch").read_text())
    project.write([first, project.entry("hostile", "0002-hostile.patch", diff)])
    return one_error(run_ortstack(*patch_args(project, tmp_path)), 5)


def assert_untouched(tmp_path: Path, before: dict[str, bytes]) -> None:
    tree = tmp_path / "work" / "prepared" / "default"
    assert snapshot(tree) == before
    assert sorted(p.name for p in tree.parent.iterdir()) == ["default", "default.lock"]
    assert not [p for p in tmp_path.rglob("*") if p.is_symlink()]


@pytest.mark.parametrize(
    ("diff", "message"),
    [
        pytest.param(
            new_link("esc", "../../outside", quoted=True),
            "makes 'esc' a link to '../../outside', outside the source tree",
            marks=fault("patch-link-quoted-path"),
            id="quoted",
        ),
        pytest.param(
            binary_link("esc", "../../outside"),
            "makes 'esc' a link to '../../outside', outside the source tree",
            marks=fault("patch-link-binary"),
            id="binary",
        ),
        pytest.param(
            # Each stays inside as text; on disk "here" is the root, so "here/.." is above it.
            new_link("onnxruntime/here", "..") + new_link("onnxruntime/up", "here/.."),
            "makes 'onnxruntime/up' a link to 'here/..', outside the source tree",
            marks=fault("patch-link-chain"),
            id="chain",
        ),
        pytest.param(
            new_link("abs", "/etc"),
            "makes 'abs' a link to '/etc', outside the source tree",
            marks=fault("patch-link-absolute"),
            id="absolute",
        ),
    ],
)
def test_patch_making_a_link_out_of_the_tree_is_refused(
    diff: str,
    message: str,
    run_ortstack: RunOrtstack,
    project: Project,
    prepared: dict[str, bytes],
    tmp_path: Path,
) -> None:
    line = run_hostile(run_ortstack, project, tmp_path, diff)
    assert f"ortstack: error: patch 0002-hostile.patch {message}" == line
    assert_untouched(tmp_path, prepared)


RENAME_OUT = (
    'diff --git "a/VERSION_NUMBER" "b/../esc"\nsimilarity index 100%\nrename from VERSION_NUMBER\nrename to "../esc"\n'
)
GIT_DIR_UPPER = (
    "diff --git a/.GIT/hooks/post-commit b/.GIT/hooks/post-commit\nnew file mode 100755\n"
    "--- /dev/null\n+++ b/.GIT/hooks/post-commit\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+touch ../escaped.txt\n"
)
GIT_DIR_NTFS = (
    "diff --git a/git~1/config b/git~1/config\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/git~1/config\n@@ -0,0 +1 @@\n+[core]\n"
)


GIT_DIR_TIP = ".git, in any letter case"


@pytest.mark.parametrize(
    ("diff", "named", "tip"),
    [
        pytest.param(
            GIT_DIR_UPPER, ".GIT/hooks/post-commit", GIT_DIR_TIP, marks=fault("patch-git-dir-upper-case"), id="upper"
        ),
        pytest.param(GIT_DIR_NTFS, "git~1/config", GIT_DIR_TIP, marks=fault("patch-git-dir-short-name"), id="ntfs"),
        pytest.param(
            RENAME_OUT,
            "../esc",
            "relative paths inside the tree",
            marks=fault("patch-rename-quoted-outside"),
            id="rename",
        ),
    ],
)
def test_patch_naming_a_path_git_refuses_gets_our_line(
    diff: str,
    named: str,
    tip: str,
    run_ortstack: RunOrtstack,
    project: Project,
    prepared: dict[str, bytes],
    tmp_path: Path,
) -> None:
    first = project.entry("empty", "0001-empty.patch", (project.root / "patches" / "0001-empty.patch").read_text())
    project.write([first, project.entry("hostile", "0002-hostile.patch", diff)])
    result = run_ortstack(*patch_args(project, tmp_path))
    line = one_error(result, 5)
    assert line == f"ortstack: error: patch 0002-hostile.patch touches {named!r}, outside the source tree"
    assert tip in result.stderr
    assert "invalid path" not in result.stderr  # refused by ortstack's check, not left to git
    assert_untouched(tmp_path, prepared)
    assert not list(tmp_path.rglob("escaped.txt"))


@fault("patch-diff-hidden-in-message")
def test_diff_hidden_in_the_message_is_refused(
    run_ortstack: RunOrtstack, project: Project, prepared: dict[str, bytes], tmp_path: Path
) -> None:
    """git apply reads a plain diff in the message too; ortstack's checks would not have seen it."""
    hidden = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: A <a@example.invalid>\n"
        "Subject: [PATCH] Looks harmless\n\nSee:\n--- a/VERSION_NUMBER\n+++ b/VERSION_NUMBER\n"
        "@@ -1 +1 @@\n-1.31.0\n+6.6.6\n---\n"
        "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# mini_ort\n+# mini ort\n"
    )
    line = run_hostile(run_ortstack, project, tmp_path, hidden)
    assert "patch 0002-hostile.patch: git reads 'VERSION_NUMBER', not what ortstack reads" in line
    assert_untouched(tmp_path, prepared)


@pytest.mark.parametrize(
    "header",
    [
        pytest.param("@@ -1,1 +1,1 @@@", marks=fault("patch-hunk-header-extra-at"), id="extra-at"),
        pytest.param("@@ -1 +1 @@x", marks=fault("patch-hunk-header-glued-text"), id="glued"),
    ],
)
def test_malformed_hunk_header_is_refused_before_applying(
    header: str, run_ortstack: RunOrtstack, project: Project, prepared: dict[str, bytes], tmp_path: Path
) -> None:
    diff = (
        "diff --git a/VERSION_NUMBER b/VERSION_NUMBER\n--- a/VERSION_NUMBER\n+++ b/VERSION_NUMBER\n"
        f"{header}\n-1.31.0\n+1.31.1\n"
    )
    line = run_hostile(run_ortstack, project, tmp_path, diff)
    assert (
        line == f"ortstack: error: patch 0002-hostile.patch is corrupt: broken hunk header at diff line 4: {header!r}"
    )
    assert_untouched(tmp_path, prepared)


STALE_TWO_FILES = (
    "diff --git a/VERSION_NUMBER b/VERSION_NUMBER\n--- a/VERSION_NUMBER\n+++ b/VERSION_NUMBER\n"
    "@@ -1 +1 @@\n-9.9.9\n+9.9.10\n"
    "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# not mini_ort\n+# x\n"
)


@fault("patch-conflict-named-once")
def test_conflict_names_each_file_and_hunk_once(
    run_ortstack: RunOrtstack, project: Project, prepared: dict[str, bytes], tmp_path: Path
) -> None:
    line = run_hostile(run_ortstack, project, tmp_path, STALE_TWO_FILES)
    where = line.split(" does not apply: ", 1)[1]
    assert where.split("; ") == ["VERSION_NUMBER: hunk #1 @@ -1,1 +1,1 @@", "README.md: hunk #1 @@ -1,1 +1,1 @@"]
    assert snapshot(tmp_path / "work" / "prepared" / "default") == prepared


@fault("patch-beyond-link")
def test_writing_through_a_link_inside_the_tree_is_one_line(
    run_ortstack: RunOrtstack, project: Project, tmp_path: Path
) -> None:
    through = (
        "diff --git a/onnxruntime/alias/x.txt b/onnxruntime/alias/x.txt\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/onnxruntime/alias/x.txt\n@@ -0,0 +1 @@\n+x\n"
    )
    project.write(
        [
            project.entry("alias", "0001-alias.patch", new_link("onnxruntime/alias", "core")),
            project.entry("through", "0002-through.patch", through),
        ]
    )
    result = run_ortstack(*patch_args(project, tmp_path))
    line = one_error(result, 5)
    assert line == (
        "ortstack: error: patch 0002-through.patch (through) does not apply: "
        "onnxruntime/alias/x.txt: is beyond a symbolic link"
    )
    assert "tip: a patch may not write through a link in the tree" in result.stderr
    assert not (tmp_path / "work" / "prepared" / "default").exists()


@fault("patch-local-tip")
def test_local_patch_that_does_not_apply_is_not_sent_to_refresh(
    run_ortstack: RunOrtstack, project: Project, prepared: dict[str, bytes], tmp_path: Path
) -> None:
    first = project.entry("empty", "0001-empty.patch", (project.root / "patches" / "0001-empty.patch").read_text())
    project.write([first, project.entry("stale", "0002-stale.patch", STALE_TWO_FILES)])
    result = run_ortstack(*patch_args(project, tmp_path))
    one_error(result, 5)
    tip = next(line for line in result.stderr.splitlines() if line.startswith("tip:"))
    assert "refresh" not in tip
    assert "stale is a local patch: fix patches/0002-stale.patch by hand" in tip
    assert tip.endswith("; the previous prepared tree is untouched")
    assert snapshot(tmp_path / "work" / "prepared" / "default") == prepared


@fault("patch-first-run-tip")
def test_first_run_does_not_speak_of_a_previous_tree(
    run_ortstack: RunOrtstack, project: Project, tmp_path: Path
) -> None:
    project.write([project.entry("stale", "0001-stale.patch", STALE_TWO_FILES)])
    result = run_ortstack(*patch_args(project, tmp_path))
    one_error(result, 5)
    assert "previous prepared tree" not in result.stderr
    assert not (tmp_path / "work" / "prepared" / "default").exists()
