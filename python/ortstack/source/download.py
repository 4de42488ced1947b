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
from ortstack.errors import DiskSpaceError, FetchError

if TYPE_CHECKING:
    from pathlib import Path

CHUNK = 1 << 16


class _IncompleteError(OSError):
    """The server closed the connection before sending everything it announced."""


def digest_of(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file (``sha256``; ``sha1`` for the pins in ORT's ``cmake/deps.txt``)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def download(url: str, part: Path, *, attempts: int = 4, backoff: float = 0.5, timeout: float = 60.0) -> None:
    """Fill ``part`` with the body of ``url``, continuing from what ``part`` already holds."""
    part.parent.mkdir(parents=True, exist_ok=True)
    reason = ""
    for attempt in range(1, attempts + 1):
        try:
            _transfer(url, part, timeout)
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


def _transfer(url: str, part: Path, timeout: float) -> None:
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
            _transfer(url, part, timeout)
            return
        raise
    with response:
        start = _resume_offset(response, have)
        if start is None:
            part.unlink()
            msg = f"the server resumed at an unexpected offset ({response.headers.get('Content-Range')!r})"
            raise _IncompleteError(msg)
        length = response.headers.get("Content-Length")
        total = start + int(length) if length is not None else None
        received = start
        with log.download_progress() as progress, part.open("r+b" if start else "wb") as out:
            out.seek(start)
            out.truncate()
            task = progress.add_task(url.rsplit("/", 1)[-1], total=total, completed=start)
            while chunk := response.read1(CHUNK):  # what has arrived: an interrupt keeps it
                out.write(chunk)
                received += len(chunk)
                progress.advance(task, len(chunk))
    if total is not None and received < total:
        msg = f"connection closed after {received} of {total} bytes"
        raise _IncompleteError(msg)
    if have and start == 0:
        log.info(f"{url}: the server does not resume downloads; started again from the beginning")


def _resume_offset(response: http.client.HTTPResponse, have: int) -> int | None:
    """Where the body starts in the file: ``have`` for a matching 206, 0 for a full body, else None."""
    if response.status != 206:  # noqa: PLR2004 - Partial Content
        return 0
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return have if match is not None and int(match.group(1)) == have else None
