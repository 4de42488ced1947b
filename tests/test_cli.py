"""The command line: help texts with options and exit codes, status output."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from clirun import one_error
from ortstack.cli import VERBS
from ortstack.errors import EXIT_CODES, NotAWheelError
from upstream import Upstream, stack_toml

if TYPE_CHECKING:
    from pathlib import Path

    from clirun import RunOrtstack


def test_top_level_help_lists_verbs_and_exit_codes(run_ortstack: RunOrtstack) -> None:
    result = run_ortstack("--help")
    assert result.returncode == 0
    for verb in VERBS:
        assert verb.replace("_", "-") in result.stdout
    assert "exit codes:" in result.stdout
    for code, meaning in EXIT_CODES.items():
        assert f"{code:>3}  {meaning}" in result.stdout


@pytest.mark.parametrize("verb", [v.replace("_", "-") for v in VERBS])
def test_each_verb_help_has_options_and_exit_codes(run_ortstack: RunOrtstack, verb: str) -> None:
    result = run_ortstack(verb, "--help")
    assert result.returncode == 0
    for option in ("--stack", "--cache-dir", "--locked", "--no-wait", "--debug-traceback"):
        assert option in result.stdout
    assert "exit codes:" in result.stdout
    assert "8  lock held by another ortstack process" in result.stdout


def test_fetch_help_describes_its_options(run_ortstack: RunOrtstack) -> None:
    out = run_ortstack("fetch", "--help").stdout
    assert "--via {auto,git,archive}" in out
    assert "--source-dir PATH" in out


def test_usage_error_is_exit_code_2(run_ortstack: RunOrtstack) -> None:
    result = run_ortstack("fetch", "--via", "ftp")
    assert result.returncode == 2
    assert "invalid choice: 'ftp'" in result.stderr


def test_status_shows_pin_and_cache(run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path) -> None:
    stack = tmp_path / "stack.toml"
    stack.write_text(stack_toml(repository=upstream.url, commit=upstream.commit))
    cache = tmp_path / "cache"
    before = run_ortstack("status", "--stack", stack, "--cache-dir", cache)
    assert before.returncode == 0, before.stderr
    assert upstream.commit in before.stderr
    assert "not fetched" in before.stderr
    assert run_ortstack("fetch", "--stack", stack, "--cache-dir", cache).returncode == 0
    after = run_ortstack("status", "--stack", stack, "--cache-dir", cache)
    assert "not fetched" not in after.stderr
    assert f"(git, {len(upstream.tree_files(upstream.commit))} files)" in after.stderr


@pytest.mark.parametrize("content", [b"plain text", b""], ids=["text", "empty"])
@pytest.mark.parametrize("name", ["fake.whl", "onnxruntime-1.21.0-cp311-cp311-linux_x86_64.whl"])
@pytest.mark.parametrize("verb", [("inspect",), ("test", "--wheel"), ("bench", "--wheel")], ids=lambda v: v[0])
def test_a_file_that_is_not_a_wheel_is_one_code_for_every_verb(
    run_ortstack: RunOrtstack, tmp_path: Path, verb: tuple[str, ...], name: str, content: bytes
) -> None:
    fake = tmp_path / name
    fake.write_bytes(content)
    line = one_error(run_ortstack(*verb, fake, "--cache-dir", tmp_path / "cache"), 2)
    assert NotAWheelError.exit_code == 2
    assert str(fake) in line
    assert "wheel" in line
