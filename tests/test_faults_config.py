"""Broken stack files through the CLI: every problem of the file at once, each one line with its line and a tip."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clirun import RunOrtstack, errors_and_tips, one_error
from faultkit import fault

if TYPE_CHECKING:
    from pathlib import Path

COMMIT = "c971ca2f8a1b2c3d4e5f60718293a4b5c6d7e8f9"
OTHER_FOLDER = "elsewhere/0002-b.patch"


def fetch_with(run_ortstack: RunOrtstack, tmp_path: Path, text: str) -> tuple[Path, list[tuple[str, str]]]:
    stack = tmp_path / "stack.toml"
    stack.write_text(text, encoding="utf-8")
    return stack, errors_and_tips(run_ortstack("fetch", "--stack", stack, "--cache-dir", tmp_path / "cache"), 3)


@fault("config-unknown-key-no-match")
def test_unknown_key_without_a_close_match_lists_the_valid_keys_and_hides_nothing(
    run_ortstack: RunOrtstack, tmp_path: Path
) -> None:
    text = f'[ort]\nrepository = "https://example.invalid/ort"\ncommit = "{COMMIT}"\ncolour = "blue"\narchive_url = 5\n'
    stack, problems = fetch_with(run_ortstack, tmp_path, text)
    assert problems == [
        (
            f"ortstack: error: {stack}:4: ort.colour: unknown key",
            "tip: valid keys here: repository, commit, archive_url, archive_sha256, version",
        ),
        (
            f"ortstack: error: {stack}:5: ort.archive_url: expected str, got int 5",
            'tip: write a string in double quotes, e.g. key = "value"',
        ),
    ]


@fault("config-key-prefix")
def test_a_shortened_key_is_one_problem_with_a_suggestion(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    stack, problems = fetch_with(
        run_ortstack, tmp_path, f'[ort]\nrepo = "https://example.invalid/ort"\ncommit = "{COMMIT}"\n'
    )
    assert problems == [(f"ortstack: error: {stack}:2: ort.repo: unknown key", "tip: did you mean 'repository'?")]


@fault("config-toml-syntax")
def test_toml_syntax_error_names_the_line_and_says_how_to_write_it(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    stack = tmp_path / "stack.toml"
    stack.write_text(f'[ort]\ncommit = "{COMMIT}"\nrepository = https://example.invalid/ort\n', encoding="utf-8")
    result = run_ortstack("fetch", "--stack", stack)
    line = one_error(result, 3)
    assert line == f"ortstack: error: {stack}:3: not valid TOML: Invalid value (column 14)"
    assert "tip: TOML wants key = value, strings in double quotes" in result.stderr


@fault("config-wrong-type-tip")
def test_wrong_types_say_how_to_write_the_value(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    text = (
        f'[ort]\nrepository = "https://example.invalid/ort"\ncommit = "{COMMIT}"\n\n'
        '[[patch]]\nid = "a"\nfile = "patches/0001-a.patch"\nplatforms = "linux"\n\n'
        '[build]\njobs = "8"\nsystem_libraries = "yes"\n'
    )
    stack, problems = fetch_with(run_ortstack, tmp_path, text)
    assert problems == [
        (
            f"ortstack: error: {stack}:8: patch[0].platforms: expected an array, got str",
            'tip: write an array in square brackets, e.g. key = ["a", "b"]',
        ),
        (
            f"ortstack: error: {stack}:11: build.jobs: expected int, got str '8'",
            "tip: write a whole number without quotes, e.g. key = 4",
        ),
        (
            f"ortstack: error: {stack}:12: build.system_libraries: expected bool, got str 'yes'",
            "tip: write true or false, without quotes",
        ),
    ]


@fault("config-all-problems")
def test_every_problem_of_the_file_is_reported_in_file_order(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    text = (
        '[ort]\nrepository = "https://example.invalid/ort"\ncommit = "c971ca2"\n\n'
        '[[patch]]\nid = "a"\nfile = "patches/0001-a.patch"\nplatforms = ["linux", "windoes"]\n\n'
        f'[[patch]]\nid = "a"\nfile = "{OTHER_FOLDER}"\n\n'
        '[variants.webgpu]\nkind = "webgpu"\n'
    )
    stack, problems = fetch_with(run_ortstack, tmp_path, text)
    assert [line for line, _ in problems] == [
        f"ortstack: error: {stack}:3: ort.commit: must be a full 40-hex commit id, got a short commit id",
        f"ortstack: error: {stack}:8: patch[0].platforms: unknown platform 'windoes'",
        f"ortstack: error: {stack}:11: patch[1].id: duplicate patch id 'a'",
        f"ortstack: error: {stack}:12: patch[1].file: patch files live directly under patches/, got '{OTHER_FOLDER}'",
        f"ortstack: error: {stack}:14: variants: unknown table",
    ]
    assert all(tip.startswith("tip: ") for _, tip in problems)
    assert problems[-1][1] == "tip: did you mean 'variant'?"
