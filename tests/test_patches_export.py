"""The edit loop: apply, commit by hand in the prepared tree, export, apply again; and status."""

from __future__ import annotations

import tomllib
from typing import TYPE_CHECKING

import pytest

from ortstack import _git, config
from ortstack.errors import UsageError
from ortstack.lockfile import Lock
from ortstack.patches import export, patch_status, patchfile, prepare
from series_kit import EMPTY_WEIGHTS, PAGED, QK_NORM, TELEMETRY_SKIP, Project, commit_edits, extract, format_patch

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
    assert export.export(stack, tree, base_env) == ["guard-empty-lora-adapters"]

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

    # Apply again from the series alone: the same tree, the same message.
    again = run_prepare(project, source, tmp_path, base_env)
    assert [o.state for o in again.outcomes] == ["applied", "applied"]
    assert _git.out(["rev-parse", "HEAD^{tree}"], cwd=tree, env=base_env) == hand_tree
    message = _git.out(["log", "-1", "--format=%B"], cwd=tree, env=base_env)
    assert message.startswith(HAND_MESSAGE.strip())
    assert export.export(config.load(project.stack_file), tree, base_env) == []
    # Exporting the same commit again writes the same file (headers kept, nothing added).
    assert patchfile.split(exported.read_text(), exported.name).header.fields == header.fields


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
