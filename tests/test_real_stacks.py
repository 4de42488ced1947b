"""The real stacks kept in the repository: each loads, and every patch is vendored, matches its pin and parses.

Building one needs its onnxruntime tree, fetched from GitHub; this catches a stale pin or a broken
patch file without it, as `ortstack patch` would before touching a tree.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ortstack import config
from ortstack.lockfile import Lock
from ortstack.patches import series

ROOT = Path(__file__).parents[1]
# Every stack whose patches are the project's own (vendored here); stacks/pr-06f88ea6 vendors its
# pull-request patches only from the network (tests/test_patches_cli.py checks its status).
STACKS = [
    ROOT / "stack.toml",
    *sorted(p for p in (ROOT / "stacks").glob("*/stack.toml") if p.parent.name != "pr-06f88ea6"),
]


@pytest.mark.parametrize("stack_file", STACKS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_patch_of_a_real_stack_matches_its_pin_and_parses(stack_file: Path, tmp_path: Path) -> None:
    stack = config.load(stack_file)
    # Locked: a pin missing from the stack file is an error, not something to record.
    lock = Lock(path=tmp_path / "stack.lock", locked=True)
    verified = series.verify_series(stack, lock, series.host_platform(), os.environ)
    assert [v.entry.id for v in verified] == [entry.id for entry in stack.patches]
    assert all(v.hunks for v in verified)


def test_there_is_a_real_stack() -> None:
    assert [path.relative_to(ROOT).as_posix() for path in STACKS] == [
        "stack.toml",
        "stacks/main-735e69a3/stack.toml",
        "stacks/upstream-89b01b40/stack.toml",
    ]
    # The control stack is the default stack's pin and variants without its patches.
    default, control = config.load(ROOT / "stack.toml"), config.load(STACKS[2])
    assert control.ort.commit == default.ort.commit
    assert control.variants == default.variants
    assert not control.patches
    assert (ROOT / "stacks" / "pr-06f88ea6" / "stack.toml").is_file()
