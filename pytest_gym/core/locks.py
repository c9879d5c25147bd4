"""Exclusive locks between the processes of a run (xdist workers, concurrent runs): ``flock``, bounded waits.

One helper for every lock the plugin takes, so each is released on every path and none waits forever
unless asked to.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path


class LockTimeout(TimeoutError):
    """Another process held the lock for longer than the caller would wait."""


@contextlib.contextmanager
def held(fd: int) -> Iterator[None]:
    """An exclusive ``flock`` on an open descriptor, for as long as the block runs."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def locked(path: Path, timeout: float | None = None) -> Iterator[None]:
    """An exclusive lock on ``path`` (a file, created if missing, or a folder); ``LockTimeout`` after ``timeout`` s.

    Without a timeout it waits as long as the holder holds it (holders are other processes of the same run).
    """
    if path.is_dir():
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout(f"{path} was held by another process for {timeout:g} s") from None
                    time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # closing releases the lock
