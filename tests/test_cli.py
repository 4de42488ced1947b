"""The command line: help texts with options and exit codes, status output."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from clirun import one_error
from ortstack.cli import VERBS
from ortstack.errors import EXIT_CODES, NotAWheelError
from upstream import Upstream, stack_toml

if TYPE_CHECKING:
    from clirun import RunOrtstack

ROOT = Path(__file__).resolve().parent.parent


def test_top_level_help_lists_verbs_and_exit_codes(run_ortstack: RunOrtstack) -> None:
    result = run_ortstack("--help")
    assert result.returncode == 0
    for verb in VERBS:
        assert verb.replace("_", "-") in result.stdout
    assert "exit codes:" in result.stdout
    for code, meaning in EXIT_CODES.items():
        assert f"{code:>3}  {meaning}" in result.stdout


COMMON = ("--stack", "--cache-dir", "--work-dir", "--dist-dir", "--locked", "--no-wait")
# What each verb reads of the common options (the settings it passes on); the rest would do nothing.
USES = {
    "fetch": {"--stack", "--cache-dir", "--locked", "--no-wait"},
    "patch": {"--stack", "--cache-dir", "--work-dir", "--locked", "--no-wait"},
    "rebase": {"--stack", "--cache-dir", "--work-dir", "--locked", "--no-wait"},
    "build": set(COMMON),
    "status": {"--stack", "--cache-dir", "--work-dir", "--dist-dir"},
    "inspect": set(),
    "refresh-patches": {"--stack", "--cache-dir", "--locked"},
    "test": {"--cache-dir", "--dist-dir"},
    "bench": {"--cache-dir", "--work-dir"},
}
ENV_OF = {"--stack": "ORTSTACK_STACK", "--cache-dir": "ORTSTACK_CACHE_DIR", "--work-dir": "ORTSTACK_WORK_DIR"}
ENV_OF |= {"--dist-dir": "ORTSTACK_DIST_DIR", "--locked": "ORTSTACK_LOCKED=1"}


def _help_entry(text: str, option: str) -> str:
    """The help text of ``option`` in argparse's output, on one line."""
    found = re.search(rf"^  {re.escape(option)}\b.*?(?=^  -|^\S|\Z)", text, re.MULTILINE | re.DOTALL)
    assert found is not None, f"{option} not in the help"
    return " ".join(found.group(0).split())


@pytest.mark.parametrize("verb", [v.replace("_", "-") for v in VERBS])
def test_each_verb_help_has_its_options_defaults_examples_and_exit_codes(run_ortstack: RunOrtstack, verb: str) -> None:
    assert set(USES) == {v.replace("_", "-") for v in VERBS}
    result = run_ortstack(verb, "--help")
    assert result.returncode == 0
    out = result.stdout
    for option in COMMON:
        assert (re.search(rf"^  {option}\b", out, re.MULTILINE) is not None) == (option in USES[verb]), option
    for option in USES[verb] & set(ENV_OF):  # --no-wait is a switch with no setting behind it
        entry = _help_entry(out, option)
        assert f"env {ENV_OF[option]}" in entry, entry
        if option != "--locked":
            assert "default:" in entry, entry
    assert "--debug-traceback" in out
    lines = out.split("examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    examples = [line for line in lines if not line.startswith("      ")]  # a long one continues indented
    assert 1 <= len(examples) <= 2, examples
    assert all(line.strip().startswith(f"ortstack {verb}") for line in examples), examples
    assert "exit codes:" in out
    assert "8  lock held by another ortstack process" in out


def test_the_readme_and_the_helps_agree(run_ortstack: RunOrtstack) -> None:
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    refresh = " ".join(run_ortstack("refresh-patches", "--help").stdout.split())
    assert "pin their sha256 (and head) in stack.toml itself" in refresh
    assert "`nox -s refresh-patches` downloads them and pins head and sha256 in `stack.toml` itself" in readme
    defaults = {"--cache-dir": "~/.cache/ortstack", "--work-dir": "./build", "--dist-dir": "./dist"}
    build = run_ortstack("build", "--help").stdout
    for option, env in ENV_OF.items():
        assert f"`{option}`, `{env.removesuffix('=1')}`" in readme or option == "--locked", option
        if option in defaults:
            assert defaults[option] in readme, option
            assert f"env {env}" in _help_entry(build, option)
    assert "| 2 | usage error (a bad option or argument; a file given as a wheel that is not one" in readme


@pytest.mark.parametrize(
    ("argv", "nearest"),
    [
        (("fetch", "--cach-dir", "x"), "--cache-dir"),
        (("test", "--wheels"), "--wheel?"),
        (("status", "--lockd"), ""),
    ],
)
def test_a_misspelled_option_gets_the_verbs_own_usage(
    run_ortstack: RunOrtstack, argv: tuple[str, ...], nearest: str
) -> None:
    result = run_ortstack(*argv)
    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: ortstack {argv[0]} ")
    assert f"ortstack {argv[0]}: error: unrecognized arguments: {' '.join(argv[1:])}" in result.stderr
    assert (f"did you mean {nearest}" in result.stderr) if nearest else ("did you mean" not in result.stderr)


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
    assert upstream.commit in before.stdout  # the tables are data: stdout, so they pipe
    assert "not fetched" in before.stdout
    assert "│" not in before.stderr
    assert run_ortstack("fetch", "--stack", stack, "--cache-dir", cache).returncode == 0
    after = run_ortstack("status", "--stack", stack, "--cache-dir", cache)
    assert "not fetched" not in after.stdout
    assert f"(git, {len(upstream.tree_files(upstream.commit))} files)" in after.stdout


@pytest.mark.parametrize("content", [b"plain text", b""], ids=["text", "empty"])
@pytest.mark.parametrize("name", ["fake.whl", "onnxruntime-1.21.0-cp311-cp311-linux_x86_64.whl"])
@pytest.mark.parametrize("verb", [("inspect",), ("test", "--wheel"), ("bench", "--wheel")], ids=lambda v: v[0])
def test_a_file_that_is_not_a_wheel_is_one_code_for_every_verb(
    run_ortstack: RunOrtstack, tmp_path: Path, verb: tuple[str, ...], name: str, content: bytes
) -> None:
    fake = tmp_path / name
    fake.write_bytes(content)
    cache = () if verb == ("inspect",) else ("--cache-dir", str(tmp_path / "cache"))
    line = one_error(run_ortstack(*verb, fake, *cache), 2)
    assert NotAWheelError.exit_code == 2
    assert str(fake) in line
    assert "wheel" in line


def test_status_is_readable_at_80_columns(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    """The pull-request stack (the widest: long ids, a platforms column): tables fit 80 columns, and
    no patch id is broken across lines."""
    stack_file = ROOT / "stacks" / "pr-06f88ea6" / "stack.toml"
    result = run_ortstack("status", "--stack", stack_file, "--cache-dir", tmp_path / "c", env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    table_lines = [line for line in result.stdout.splitlines() if "│" in line or "┼" in line]
    assert table_lines
    assert all(len(line) <= 80 for line in table_lines), max(table_lines, key=len)
    firsts = {line.split("│")[0].strip() for line in table_lines}
    ids = re.findall(r'^id = "([^"]+)"', stack_file.read_text(encoding="utf-8"), re.MULTILINE)
    assert ids
    assert set(ids) <= firsts, sorted(set(ids) - firsts)
    assert "platforms" in result.stdout, "no column is cut off"
    assert result.stderr.rstrip().splitlines()[-1].startswith("ok: status of ")
