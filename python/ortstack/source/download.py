"""HTTP downloads: into a ``.part`` file, resumed with ``Range``, retried with backoff, with progress.

Connection errors, dropped transfers and 5xx answers are retried (resuming where the server allows
it); 4xx answers are not, since asking again will not change them. Verifying the bytes is the
caller's job: this module only moves them.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import re
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from ortstack import __version__, log
from ortstack.bounds import Bounds, size_limit
from ortstack.errors import DiskSpaceError, FetchError

if TYPE_CHECKING:
    from pathlib import Path

CHUNK = 1 << 16
DEFAULT_MAX_BYTES = size_limit(Bounds().download_mib)


class _IncompleteError(OSError):
    """The server closed the connection before sending everything it announced."""


def digest_of(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file (``sha256``; ``sha1`` for the pins in ORT's ``cmake/deps.txt``)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def download(
    url: str,
    part: Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    attempts: int = 4,
    backoff: float = 0.5,
    timeout: float = 60.0,
) -> None:
    """Fill ``part`` with the body of ``url``, continuing from what ``part`` already holds; a body
    larger than ``max_bytes`` is refused (before a byte is read when the server announces its size)."""
    part.parent.mkdir(parents=True, exist_ok=True)
    reason = ""
    for attempt in range(1, attempts + 1):
        try:
            _transfer(url, part, timeout, max_bytes)
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code < 500:  # noqa: PLR2004 - 4xx: the request itself is wrong
                msg = f"download of {url} failed: HTTP {exc.code} {exc.reason}"
                raise FetchError(msg, tip="check the URL in stack.toml (archive_url)") from None
            reason = f"HTTP {exc.code} {exc.reason}"
        except urllib.error.URLError as exc:
            reason = str(exc.reason)
        except (http.client.HTTPException, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                msg = f"the disk holding {part.parent} is full ({part.stat().st_size} bytes of {url} saved)"
                raise DiskSpaceError(msg, tip="free some space and run again: the download resumes") from None
            reason = str(exc) or type(exc).__name__
        else:
            return
        if attempt < attempts:
            delay = backoff * 2 ** (attempt - 1)
            log.warn(f"download of {url} interrupted ({reason}); retry {attempt}/{attempts - 1} in {delay:.1f} s")
            time.sleep(delay)
    msg = f"could not download {url}: {reason} (tried {attempts} times)"
    raise FetchError(msg, tip="check the network and the URL, or fetch by git, or pass --source-dir")


def _too_large(url: str, part: Path, max_bytes: int) -> FetchError:
    part.unlink(missing_ok=True)
    msg = f"{url} is larger than {max_bytes / 2**20:g} MiB: refused before its digest is checked"
    return FetchError(msg, tip="check the URL; for a larger download raise ORTSTACK_DOWNLOAD_MAX_MIB")


def _transfer(url: str, part: Path, timeout: float, max_bytes: int) -> None:
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": f"ortstack/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - the pinned URL
    try:
        response = urllib.request.urlopen(request, timeout=timeout)  # noqa: S310
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # noqa: PLR2004 - what we hold does not fit the file: start over
            exc.close()
            part.unlink()
            _transfer(url, part, timeout, max_bytes)
            return
        raise
    with response:
        start = _resume_offset(response, have)
        if start is None:
            part.unlink()
            msg = f"the server resumed at an unexpected offset ({response.headers.get('Content-Range')!r})"
            raise _IncompleteError(msg)
        length = response.headers.get("Content-Length")
        total = start + int(length) if length is not None and length.isdigit() else None
        if total is not None and total > max_bytes:
            raise _too_large(url, part, max_bytes)
        received = _receive(response, part, start, total, max_bytes)
    if received > max_bytes:  # a server that announced no size, or a smaller one
        raise _too_large(url, part, max_bytes)
    if total is not None and received < total:
        msg = f"connection closed after {received} of {total} bytes"
        raise _IncompleteError(msg)
    if have and start == 0:
        log.info(f"{url}: the server does not resume downloads; started again from the beginning")


def _receive(response: http.client.HTTPResponse, part: Path, start: int, total: int | None, limit: int) -> int:
    """Write the body into ``part`` from ``start``, no further than ``limit``; returns where it ended
    (past ``limit`` when the server has more to send)."""
    received = start
    with log.download_progress() as progress, part.open("r+b" if start else "wb") as out:
        out.seek(start)
        out.truncate()
        task = progress.add_task(response.url.rsplit("/", 1)[-1], total=total, completed=start)
        while chunk := response.read1(CHUNK):  # what has arrived: an interrupt keeps it
            received += len(chunk)
            if received > limit:
                break
            out.write(chunk)
            progress.advance(task, len(chunk))
    return received


def _resume_offset(response: http.client.HTTPResponse, have: int) -> int | None:
    """Where the body starts in the file: ``have`` for a matching 206, 0 for a full body, else None."""
    if response.status != 206:  # noqa: PLR2004 - Partial Content
        return 0
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return have if match is not None and int(match.group(1)) == have else None
