"""``ortstack status``: tables of the pin, the cache and what later stages add (see ortstack.status)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortstack import config, log, status

if TYPE_CHECKING:
    import argparse

    from ortstack.settings import Settings

HELP = "Show the onnxruntime pin, what is cached, and the state of the patch series, variants and wheels."

EXAMPLES = """examples:
  ortstack status                           the pin, the cache, the patch series, the variants and the wheels
  ortstack status --stack other/stack.toml  the same for another stack file"""
COMMON = ("--stack", "--cache-dir", "--work-dir", "--dist-dir")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options of its own beyond the common ones


def main(args: argparse.Namespace, settings: Settings) -> int:
    del args
    context = status.StatusContext(stack=config.load(settings.stack_file, settings.bounds), settings=settings)
    for section in status.sections(context):
        log.table(section.title, section.columns, section.rows)
        for note in section.notes:
            log.warn(note)
    log.success(f"status of {settings.stack_file}")
    return 0
