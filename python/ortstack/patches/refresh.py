"""Vendoring: download pull-request and commit patches at their pinned commits.

Two transports give the same diff, with full blob ids (which ``git apply --3way`` needs to find
pre-images): GitHub's ``.diff`` endpoints over HTTP (``/pull/N.diff``, ``/commit/SHA.diff``,
``/compare/A...B.diff``, each with ``?full_index=1``), or git itself (``git fetch <repo>
pull/N/head`` and ``git diff --full-index``). Git's ``url.<base>.insteadOf`` configuration
redirects the git transport to a mirror.

Only ``refresh-patches`` rewrites vendored files and their digests in ``stack.toml``; a build
vendors a missing file once (trust-on-first-use, recorded in the lock) and never downloads again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import tomlkit

from ortstack import _git, log
from ortstack.errors import FetchError, PatchError
from ortstack.lockfile import write_atomic
from ortstack.patches import patchfile, series

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from ortstack.config import Origin, PatchEntry, Stack
    from ortstack.lockfile import Lock

Transport = Literal["http", "git"]
FULL_ID = series.FULL_ID
_TIMEOUT_S = 120


@dataclass(frozen=True, kw_only=True)
class Fetched:
    head: str
    """The full commit id the diff was taken at."""
    diff: str


def _http_get(url: str) -> str:
    log.info(f"GET {url}")
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:  # noqa: S310 - URLs come from stack.toml
            data: bytes = response.read()
    except (urllib.error.URLError, TimeoutError) as exc:
        msg = f"could not download {url}: {exc}"
        raise FetchError(msg, tip="check the network, or use --via git") from None
    return data.decode("utf-8")


def _branch(origin: Origin) -> str:
    return origin.base or "main"


def _pr_head_by_git(origin: Origin, env: Mapping[str, str], cwd: Path) -> str:
    ref = f"refs/pull/{origin.pr}/head"
    listed = _git.out(["ls-remote", origin.repository, ref], cwd=cwd, env=env, error=FetchError).split()
    if not listed:
        msg = f"{origin.repository} has no {ref}"
        raise FetchError(msg, tip=f"check the pull-request number ({origin.pr})")
    return listed[0]


def _full_head_by_http(origin: Origin, short: str) -> str:
    # GitHub's .patch of a commit starts with the mbox line "From <full id> Mon Sep 17 ...".
    first = _http_get(f"{origin.repository}/commit/{short}.patch").split("\n", 1)[0]
    match = re.match(r"From ([0-9a-f]{40}) ", first)
    if match is None or not match.group(1).startswith(short):
        msg = f"could not resolve {short} to a full commit id at {origin.repository}"
        raise FetchError(msg, tip="write the full 40-hex head into stack.toml")
    return match.group(1)


def fetch_by_http(origin: Origin, head: str, *, update: bool, env: Mapping[str, str], cwd: Path) -> Fetched:
    repo = origin.repository.removesuffix(".git").rstrip("/")
    if origin.kind == "pr" and (update or not head):
        head = _pr_head_by_git(origin, env, cwd)
        url = f"{repo}/pull/{origin.pr}.diff?full_index=1"
    else:
        if len(head) != FULL_ID:
            if not head:
                msg = f"a {origin.kind} origin needs its head commit"
                raise PatchError(msg, tip="set origin.head in stack.toml")
            head = _full_head_by_http(origin, head)
        if origin.kind == "commit":
            url = f"{repo}/commit/{head}.diff?full_index=1"
        else:
            url = f"{repo}/compare/{_branch(origin)}...{head}.diff?full_index=1"
    return Fetched(head=head, diff=_http_get(url))


def fetch_by_git(origin: Origin, head: str, *, update: bool, env: Mapping[str, str], cache_dir: Path) -> Fetched:
    repo_dir = cache_dir / "patch-sources" / hashlib.sha256(origin.repository.encode()).hexdigest()[:16]
    if not (repo_dir / "HEAD").is_file():
        repo_dir.mkdir(parents=True, exist_ok=True)
        _git.git(["init", "-q", "--bare"], cwd=repo_dir, env=env, capture=True)

    def fetch(ref: str) -> str:
        _git.git(["fetch", "--quiet", "--no-tags", origin.repository, ref], cwd=repo_dir, env=env, error=FetchError)
        return _git.out(["rev-parse", "FETCH_HEAD"], cwd=repo_dir, env=env)

    if origin.kind == "pr" and (update or len(head) != FULL_ID):
        tip = fetch(f"refs/pull/{origin.pr}/head")
        # A short pin names a commit in the pull request's history.
        head = (
            tip
            if update or not head
            else _git.out(["rev-parse", "--verify", f"{head}^{{commit}}"], cwd=repo_dir, env=env)
        )
    elif len(head) == FULL_ID:
        head = fetch(head)
    else:
        msg = f"a {origin.kind} origin needs its full head commit to be fetched by git, got {head!r}"
        raise PatchError(msg, tip="write the full 40-hex id into stack.toml, or use --via http (it resolves short ids)")
    commits = [f"{head}^", head] if origin.kind == "commit" else [f"{fetch(_branch(origin))}...{head}"]
    diff = _git.git(["diff", "--full-index", "--binary", *commits], cwd=repo_dir, env=env, capture=True).stdout
    return Fetched(head=head, diff=diff)


def _origin_url(origin: Origin, head: str) -> str:
    repo = origin.repository.removesuffix(".git").rstrip("/")
    if origin.kind == "pr":
        return f"{repo}/pull/{origin.pr}"
    if origin.kind == "commit":
        return f"{repo}/commit/{head}"
    return f"{repo}/compare/{origin.base}...{head}"


def render(entry: PatchEntry, fetched: Fetched, previous: patchfile.PatchFile | None) -> str:
    """The vendored file: the previous header kept (or a new DEP-3 header), the fresh diff."""
    if previous is not None and previous.diff == fetched.diff:
        return previous.render()
    old = previous.header if previous is not None else patchfile.Header(subject="")
    fields = {
        "Origin": f"upstream, {_origin_url(entry.origin, fetched.head)}, commit {fetched.head}",
        **({"Bug": f"{entry.origin.repository.rstrip('/')}/pull/{entry.origin.pr}"} if entry.origin.pr else {}),
        "Forwarded": "not-needed",
        "Applied-Upstream": "no",
        **{k: v for k, v in old.fields.items() if k not in ("Origin", "Bug", "Last-Update")},
        "Last-Update": dt.datetime.now(tz=dt.UTC).date().isoformat(),
    }
    title, _, why = entry.description.partition("\n")
    header = patchfile.Header(
        subject=old.subject or title.strip() or entry.id,
        why=old.why or why.strip(),
        fields=fields,
        author=old.author,
        date=old.date,
        commit=fetched.head,
    )
    return patchfile.PatchFile(header=header, diff=fetched.diff).render()


def download(
    stack: Stack,
    entry: PatchEntry,
    lock: Lock,
    *,
    via: Transport,
    update: bool,
    env: Mapping[str, str],
    cache_dir: Path,
) -> tuple[str, str]:
    """Write ``entry``'s vendored file fresh from its origin; return (full head, sha256)."""
    if entry.origin.kind == "local":
        msg = f"patch {entry.id} is local: there is nothing to download"
        raise PatchError(msg, tip="edit it in a prepared tree and export it (ortstack patch --export)")
    head = series.pinned_head(entry, lock)
    if via == "git":
        fetched = fetch_by_git(entry.origin, head, update=update, env=env, cache_dir=cache_dir)
    else:
        fetched = fetch_by_http(entry.origin, head, update=update, env=env, cwd=stack.root)
    short = patchfile.abbreviated_blob_ids(fetched.diff)
    if short:
        msg = f"the diff of {entry.id} has abbreviated blob ids ({', '.join(short[:3])}), so it could not merge 3-way"
        raise FetchError(msg, tip="refresh with --via git, which always writes full blob ids")
    path = series.patch_path(stack, entry)
    previous = patchfile.split(path.read_text(encoding="utf-8"), path.name) if path.is_file() else None
    text = render(entry, fetched, previous)
    patchfile.validate(patchfile.split(text, path.name), path.name, text=text, env=env, tip=series.fix_tip(entry))
    data = text.encode("utf-8")
    write_atomic(path, data)
    return fetched.head, patchfile.sha256_hex(data)


def record_in_stack(stack: Stack, pins: dict[str, dict[str, str]]) -> None:
    """Set ``sha256`` / ``origin.head`` of the named entries in ``stack.toml``, comments kept."""
    if not pins:
        return
    document = tomlkit.parse(stack.path.read_text(encoding="utf-8"))
    for table in document.get("patch", []):
        values = pins.get(str(table["id"]))
        if values is None:
            continue
        if "sha256" in values:
            table["sha256"] = values["sha256"]
        if "head" in values:
            table.setdefault("origin", tomlkit.inline_table())["head"] = values["head"]
    write_atomic(stack.path, tomlkit.dumps(document).encode("utf-8"))


def vendor_missing(stack: Stack, lock: Lock, *, platform: str, env: Mapping[str, str], cache_dir: Path) -> None:
    """Vendor the missing entries ``platform`` needs, once (trust-on-first-use); refuse under ``--locked``."""
    for entry in stack.patches:
        if entry.mode != "apply" or entry.origin.kind == "local" or series.is_vendored(stack, entry):
            continue
        if not series.applies_on(entry, platform):
            continue
        if lock.locked:
            msg = f"patch {entry.id} is not vendored ({entry.file} is missing) and --locked forbids downloading it"
            raise PatchError(msg, tip=f"run {series.REFRESH_COMMAND} and commit patches/ and {stack.path.name}")
        log.loud(f"patch {entry.id} is not vendored: downloading it once from {entry.origin.repository}")
        head, _ = download(stack, entry, lock, via="http", update=False, env=env, cache_dir=cache_dir)
        lock.resolve(series.head_key(entry), head, what=f"head commit of {entry.id}")
        # Trusted only once it is read as a safe patch: a refused file leaves no digest in the lock.
        series.record_first_use([series.verify(stack, entry, lock, env)], lock)
