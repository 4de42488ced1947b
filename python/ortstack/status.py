"""``ortstack status``: one table per section (pin, cache, and the sections other stages add).

A section is a function ``(StatusContext) -> Section | None`` named in ``SECTIONS`` as
``"module:function"``; it is imported only when status runs, so stages add theirs with one line.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ortstack import _run
from ortstack.lockfile import Lock
from ortstack.source import fetch

if TYPE_CHECKING:
    from ortstack.cache import Cache
    from ortstack.config import Stack
    from ortstack.settings import Settings


@dataclass(frozen=True, kw_only=True)
class StatusContext:
    stack: Stack
    settings: Settings

    @property
    def cache(self) -> Cache:
        return fetch.cache_for(self.settings)


@dataclass(frozen=True, kw_only=True)
class Section:
    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: tuple[str, ...] = ()
    """Plain sentences printed under the table: what is missing and the command that fixes it."""


SectionFunction = Callable[[StatusContext], "Section | None"]

# Shown in this order; one line each.
SECTIONS: tuple[str, ...] = (
    "ortstack.status:pin_section",
    "ortstack.status:cache_section",
    "ortstack.patches.patch_status:section",
    "ortstack.build.build_status:section",
)


def sections(context: StatusContext) -> list[Section]:
    out: list[Section] = []
    for name in SECTIONS:
        module_name, function_name = name.split(":")
        function = cast("SectionFunction", getattr(importlib.import_module(module_name), function_name))
        section = function(context)
        if section is not None:
            out.append(section)
    return out


def pin_section(context: StatusContext) -> Section:
    ort = context.stack.ort
    lock = Lock.load(context.settings.lock_file, bounds=context.settings.bounds)
    if ort.archive_sha256:
        digest = f"{ort.archive_sha256} (stack.toml)"
    elif ort.archive_url and lock.get(ort.archive_url):
        digest = f"{lock.get(ort.archive_url)} ({lock.path.name})"
    else:
        digest = "resolved on first fetch" if ort.archive_url else "-"
    rows = [
        ["repository", ort.repository],
        ["commit", ort.commit],
        ["archive", ort.archive_url or f"- ({_how_without_archive(context)})"],
        ["archive sha256", digest],
        ["stack file", str(context.stack.path)],
    ]
    return Section(title="onnxruntime pin", columns=["what", "value"], rows=rows)


def _how_without_archive(context: StatusContext) -> str:
    commit = context.stack.ort.commit
    if context.cache.source_record(commit) is None and (local := fetch.local_source(context.settings, commit)):
        return f"the last run used --source-dir {local}"
    return "fetched by git"


def cache_section(context: StatusContext) -> Section:
    cache = context.cache
    commit = context.stack.ort.commit
    record = cache.source_record(commit)
    if record:
        source = f"{cache.source_dir(commit)} ({record['method']}, {record['files']} files)"
    elif local := fetch.local_source(context.settings, commit):
        source = f"not in the cache: the last run used --source-dir {local}"
    else:
        source = "not fetched"
    archives = sorted(p.name for p in cache.archives.glob("*") if not p.name.endswith(".part"))
    partial = sorted(p.name for p in cache.archives.glob("*.part"))
    others = [r["commit"][:12] for r in fetch.cached_sources(cache) if r["commit"] != commit]
    rows = [
        ["cache", str(cache.root)],
        ["pinned source", source],
        ["pinned commit in git cache", "yes" if _in_git_cache(cache, commit, context) else "no"],
        ["archives", ", ".join(archives) or "none"],
        ["partial downloads", ", ".join(partial) or "none"],
        ["other cached sources", ", ".join(others) or "none"],
    ]
    return Section(title="cache", columns=["what", "value"], rows=rows)


def _in_git_cache(cache: Cache, commit: str, context: StatusContext) -> bool:
    if not (cache.git_dir / "HEAD").is_file():
        return False
    probe = _run.run(
        ["git", f"--git-dir={cache.git_dir}", "cat-file", "-e", f"{commit}^{{commit}}"],
        env=fetch.git_env(context.settings.env),
        capture=True,
        check=False,
        quiet=True,
    )
    return probe.returncode == 0
