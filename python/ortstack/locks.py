"""File locks between ortstack runs: wait with a message, or fail at once with ``--no-wait``."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from filelock import FileLock, Timeout

from ortstack import log
from ortstack.errors import LockBusyError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@contextmanager
def hold(lock_file: Path, *, wait: bool, what: str) -> Iterator[None]:
    """Hold ``lock_file``; ``what`` completes "another ortstack run is ..." in the messages."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_file)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if not wait:
            msg = f"another ortstack run is {what}"
            raise LockBusyError(msg, tip="wait for it to finish, or run again without --no-wait") from None
        log.info(f"waiting for another ortstack run {what}")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
