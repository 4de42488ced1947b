"""The edit loop: apply, commit by hand in the prepared tree, export, apply again; and status."""

from __future__ import annotations

import tomllib
from typing import TYPE_CHECKING

import pytest

from ortstack import _git, config
from ortstack.errors import UsageError
from ortstack.lockfile import Lock
from ortstack.patches import export, patch_status, patchfile, prepare
from series_kit import (
    EMPTY_WEIGHTS,
    MATMUL,
    PAGED,
    QK_NORM,
    TELEMETRY_SKIP,
    Project,
    commit_edits,
    extract,
    format_patch,
)

if TYPE_CHECKING:
    from pathlib import Path

    from upstream import Upstream

HAND_MESSAGE = """Guard empty LoRA adapters

The fused kernel reads the adapter rank from the weight shape; an empty
adapter must take the base-only path.

Bug: https://example.invalid/issues/7
Forwarded: no
"""


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    return Project(root=tmp_path / "project", repository=upstream.url, commit=upstream.commit)


def run_prepare(project: Project, source: Path, tmp_path: Path, env: dict[str, str]) -> prepare.Prepared:
    stack = config.load(project.stack_file)
    target = prepare.tree_path(tmp_path / "work", "webgpu")
    return prepare.prepare(
        stack,
        Lock.load(project.stack_file.with_suffix(".lock")),
        source=source,
        target=target,
        platform="linux",
        env=env,
    )


def test_export_round_trips(upstream: Upstream, project: Project, tmp_path: Path, base_env: dict[str, str]) -> None:
    first = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    project.write([project.entry("empty-weights", "0001-empty-weights.patch", format_patch(upstream, first))])
    source = extract(upstream, upstream.commit, tmp_path / "source")
    tree = run_prepare(project, source, tmp_path, base_env).path

    # By hand: edit two files and a new one, commit with a DEP-3 style message.
    (tree / PAGED).write_text((tree / PAGED).read_text().replace("q * k", "q * k * 0.5"))
    (tree / "onnxruntime" / "lora_guard.h").write_text("#pragma once\n")
    _git.git(["add", "-A"], cwd=tree, env=base_env)
    hand_env = _git.environment(base_env, author="Ada Dev <ada@example.invalid>", date="2026-11-01T12:00:00+0000")
    _git.git(["commit", "-q", "-m", HAND_MESSAGE], cwd=tree, env=hand_env)
    hand_tree = _git.out(["rev-parse", "HEAD^{tree}"], cwd=tree, env=base_env)

    stack = config.load(project.stack_file)
    assert export.export(stack, tree, base_env) == export.Exported(new=["guard-empty-lora-adapters"], amended=[])

    exported = project.root / "patches" / "0002-guard-empty-lora-adapters.patch"
    entry = tomllib.loads(project.stack_file.read_text())["patch"][1]
    assert entry == {
        "id": "guard-empty-lora-adapters",
        "file": "patches/0002-guard-empty-lora-adapters.patch",
        "sha256": patchfile.sha256_hex(exported.read_bytes()),
        "description": "Guard empty LoRA adapters",
    }
    header = patchfile.split(exported.read_text(), exported.name).header
    assert header.author == "Ada Dev <ada@example.invalid>"
    assert header.fields["Bug"] == "https://example.invalid/issues/7"
    assert "empty\nadapter must take the base-only path." in header.why

    # Hand commits there start no background gc that could race the next swap of the tree.
    assert _git.out(["config", "--local", "--get", "gc.auto"], cwd=tree, env=base_env) == "0"
    assert _git.out(["config", "--local", "--get", "maintenance.auto"], cwd=tree, env=base_env) == "false"

    # Apply again from the series alone: the same tree, the same message.
    again = run_prepare(project, source, tmp_path, base_env)
    assert [o.state for o in again.outcomes] == ["applied", "applied"]
    assert _git.out(["rev-parse", "HEAD^{tree}"], cwd=tree, env=base_env) == hand_tree
    message = _git.out(["log", "-1", "--format=%B"], cwd=tree, env=base_env)
    assert message.startswith(HAND_MESSAGE.strip())
    assert export.export(config.load(project.stack_file), tree, base_env) == export.Exported(new=[], amended=[])
    # Exporting the same commit again writes the same file (headers kept, nothing added).
    assert patchfile.split(exported.read_text(), exported.name).header.fields == header.fields


def test_an_exported_entry_leaves_the_next_tables_comment_above_it(
    upstream: Upstream, project: Project, tmp_path: Path, base_env: dict[str, str]
) -> None:
    """A comment that introduces the table after the series stays with that table, not above the new entry."""
    first = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    project.write([project.entry("empty-weights", "0001-empty-weights.patch", format_patch(upstream, first))])
    variant = '# the onnxruntime-webgpu shape\n[variant.webgpu]\nkind = "webgpu"\ndawn = "static"\n'
    with project.stack_file.open("a", encoding="utf-8") as stack_file:
        stack_file.write("\n" + variant)
    source = extract(upstream, upstream.commit, tmp_path / "source")
    tree = run_prepare(project, source, tmp_path, base_env).path
    (tree / PAGED).write_text((tree / PAGED).read_text().replace("q * k", "q * k * 0.5"))
    _git.git(["commit", "-q", "-am", HAND_MESSAGE], cwd=tree, env=base_env)

    export.export(config.load(project.stack_file), tree, base_env)

    text = project.stack_file.read_text(encoding="utf-8")
    first_entry, second_entry = text.split("[[patch]]\n")[1:]
    assert first_entry.endswith('"\n\n'), first_entry
    assert second_entry.startswith('id = "guard-empty-lora-adapters"\n')
    assert second_entry.endswith('description = "Guard empty LoRA adapters"\n\n' + variant)
    assert [e["id"] for e in tomllib.loads(text)["patch"]] == ["empty-weights", "guard-empty-lora-adapters"]


def _autosquash(tree: Path, base: str, env: dict[str, str]) -> None:
    _git.git(["rebase", "-q", "-i", "--autosquash", base], cwd=tree, env={**env, "GIT_SEQUENCE_EDITOR": "true"})


def _two_patch_tree(
    upstream: Upstream, project: Project, tmp_path: Path, env: dict[str, str], **second: object
) -> tuple[Path, prepare.Prepared, Path]:
    first = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    norm = commit_edits(upstream, [QK_NORM], "Normalize Q and K per head", first)
    project.write(
        [
            project.entry("empty-weights", "0001-empty-weights.patch", format_patch(upstream, first)),
            project.entry("qk-norm", "0002-qk-norm.patch", format_patch(upstream, norm), **second),
        ]
    )
    source = extract(upstream, upstream.commit, tmp_path / "source")
    prepared = run_prepare(project, source, tmp_path, env)
    return prepared.path, prepared, source


def test_a_series_commit_changed_in_place_is_written_back_over_its_own_file(
    upstream: Upstream, project: Project, tmp_path: Path, base_env: dict[str, str]
) -> None:
    tree, prepared, source = _two_patch_tree(upstream, project, tmp_path, base_env)
    first_file = (project.root / "patches" / "0001-empty-weights.patch").read_bytes()
    # git rebase's own loop: a fixup of the first patch, squashed into it, and a new commit on top.
    (tree / MATMUL).write_text((tree / MATMUL).read_text() + "// reviewed\n")
    _git.git(
        ["commit", "-q", "-am", f"fixup! {_git.out(['log', '-1', '--format=%s', 'HEAD~1'], cwd=tree, env=base_env)}"],
        cwd=tree,
        env=base_env,
    )
    _autosquash(tree, prepared.base, base_env)
    (tree / "onnxruntime" / "lora_guard.h").write_text("#pragma once\n")
    _git.git(["add", "-A"], cwd=tree, env=base_env)
    _git.git(["commit", "-q", "-m", HAND_MESSAGE], cwd=tree, env=base_env)
    hand_tree = _git.out(["rev-parse", "HEAD^{tree}"], cwd=tree, env=base_env)

    done = export.export(config.load(project.stack_file), tree, base_env)

    assert done == export.Exported(new=["guard-empty-lora-adapters"], amended=["empty-weights"])
    written = project.root / "patches" / "0001-empty-weights.patch"
    assert written.read_bytes() != first_file
    assert "+// reviewed" in written.read_text()
    entries = {e["id"]: e for e in tomllib.loads(project.stack_file.read_text())["patch"]}
    assert entries["empty-weights"]["sha256"] == patchfile.sha256_hex(written.read_bytes())
    assert entries["qk-norm"]["sha256"] == patchfile.sha256_hex(
        (project.root / "patches" / "0002-qk-norm.patch").read_bytes()
    )
    assert "Last-Update" in patchfile.split(written.read_text(), written.name).header.fields
    # The series alone gives the same tree again.
    again = run_prepare(project, source, tmp_path, base_env)
    assert [o.state for o in again.outcomes] == ["applied", "applied", "applied"]
    assert _git.out(["rev-parse", "HEAD^{tree}"], cwd=tree, env=base_env) == hand_tree


def test_a_reordered_series_is_refused_with_nothing_written(
    upstream: Upstream, project: Project, tmp_path: Path, base_env: dict[str, str]
) -> None:
    tree, prepared, _ = _two_patch_tree(upstream, project, tmp_path, base_env)
    before = project.stack_file.read_bytes()
    todo = "pick {second}\npick {first}\n"
    first, second = _git.out(["rev-list", "--reverse", f"{prepared.base}..HEAD"], cwd=tree, env=base_env).split()
    editor = tmp_path / "reorder.sh"
    editor.write_text(f"#!/bin/sh\nprintf '{todo.format(first=first, second=second)}' > \"$1\"\n")
    editor.chmod(0o755)
    _git.git(["rebase", "-q", "-i", prepared.base], cwd=tree, env={**base_env, "GIT_SEQUENCE_EDITOR": str(editor)})
    with pytest.raises(UsageError, match="reordered, dropped or renamed"):
        export.export(config.load(project.stack_file), tree, base_env)
    assert project.stack_file.read_bytes() == before


def test_an_upstream_entry_changed_in_place_must_become_local_first(
    upstream: Upstream, project: Project, tmp_path: Path, base_env: dict[str, str]
) -> None:
    pr = {"origin": {"kind": "pr", "repository": "https://example.invalid/ort", "pr": 9, "head": "0" * 40}}
    tree, prepared, _ = _two_patch_tree(upstream, project, tmp_path, base_env, **pr)
    # The local first entry changed too: nothing of it may be written when the export is refused.
    (tree / MATMUL).write_text((tree / MATMUL).read_text() + "// reviewed\n")
    first_subject = _git.out(["log", "-1", "--format=%s", "HEAD~1"], cwd=tree, env=base_env)
    _git.git(["commit", "-q", "-am", f"fixup! {first_subject}"], cwd=tree, env=base_env)
    _autosquash(tree, prepared.base, base_env)
    (tree / PAGED).write_text((tree / PAGED).read_text() + "// tweak\n")
    _git.git(["commit", "-q", "-a", "--amend", "--no-edit"], cwd=tree, env=base_env)
    before = {path: path.read_bytes() for path in (project.stack_file, *(project.root / "patches").iterdir())}
    with pytest.raises(UsageError, match="qk-norm changed in the prepared tree, but it is a pr entry") as refused:
        export.export(config.load(project.stack_file), tree, base_env)
    assert 'kind = "local"' in (refused.value.tip or "")
    assert {path: path.read_bytes() for path in before} == before


def test_export_without_a_prepared_tree_says_what_to_run(project: Project, tmp_path: Path) -> None:
    stack = project.write([])
    with pytest.raises(UsageError, match="no prepared tree") as failure:
        export.export(stack, tmp_path / "nowhere", {})
    assert failure.value.tip is not None
    assert "ortstack patch" in failure.value.tip


def test_status_rows_show_each_state(
    upstream: Upstream, project: Project, tmp_path: Path, base_env: dict[str, str]
) -> None:
    change = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    skip = commit_edits(upstream, [TELEMETRY_SKIP], "Skip telemetry teardown", upstream.commit)
    new_base = commit_edits(upstream, [QK_NORM], "Upstream: Q/K norm", upstream.commit)
    qk = format_patch(upstream, new_base)
    entries = [
        project.entry("empty-weights", "0001-empty-weights.patch", format_patch(upstream, change)),
        project.entry("qk-norm-patch", "0002-qk.patch", qk),
        project.entry("telemetry", "0003-telemetry.patch", format_patch(upstream, skip), platforms=["windows"]),
        {"id": "qk-norm", "mode": "in-base", "guard": {"files": [PAGED], "patterns": ["q_norm_weight"]}},
        {
            "id": "qlora",
            "file": "patches/0004-qlora.patch",
            "origin": {
                "kind": "pr",
                "repository": "https://github.com/microsoft/onnxruntime",
                "pr": 33370,
                "head": "507021fd21",
            },
        },
    ]
    stack = project.write(entries, commit=new_base)
    lock = Lock.load(project.stack_file.with_suffix(".lock"))
    before = patch_status.rows(stack, lock, tmp_path / "work", "linux", base_env)
    assert [row[2:4] for row in before] == [
        ["vendored", "not applied yet (run ortstack patch)"],
        ["vendored", "not applied yet (run ortstack patch)"],
        ["vendored", "skipped on linux"],
        ["-", "in base (not checked: run ortstack patch)"],
        ["NOT VENDORED", "not applied yet (run ortstack patch)"],
    ]
    assert before[4][1] == "PR #33370 @ 507021fd21"

    stack = project.write(entries[:4], commit=new_base)
    prepare.prepare(
        stack,
        lock,
        source=extract(upstream, new_base, tmp_path / "src"),
        target=prepare.tree_path(tmp_path / "work", "default"),
        platform="linux",
        env=base_env,
    )
    after = patch_status.rows(stack, lock, tmp_path / "work", "linux", base_env)
    assert [row[3:5] for row in after] == [
        ["applies", "-"],
        ["UPSTREAMED: drop it", "-"],
        ["skipped on linux", "-"],
        ["in base", "guard ok"],
    ]
