"""jsonl files: appended to by several processes at once, read back whole-line by whole-line.

Every append is one ``write`` of whole lines on an ``O_APPEND`` descriptor under ``flock``, cut back if it
fails, so no line tears or interleaves; a crash leaves at most one torn last line, which a reader skips
and a later writer ends before appending.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_gym.core.locks import held


def json_line(data: Any) -> bytes:
    """One compact JSON line; text with lone surrogates (bytes that were not UTF-8) is escaped, still valid JSON."""
    try:
        return (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(data, ensure_ascii=True, separators=(",", ":")) + "\n").encode()


class AppendLog:
    """A jsonl file this process appends to while other processes may append to it too."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = path
        self._fsync = fsync
        self._lock = threading.Lock()  # flock does not separate threads that share a descriptor
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        self._end_torn_line()

    def _end_torn_line(self) -> None:
        """After a crash mid-line, start on a fresh line: the torn one stays alone and is skipped."""
        assert self._fd is not None
        with held(self._fd):
            size = os.lseek(self._fd, 0, os.SEEK_END)
            if size and os.pread(self._fd, 1, size - 1) != b"\n":
                os.write(self._fd, b"\n")

    def append(self, data: Mapping[str, Any]) -> None:
        self.append_bytes(json_line(data))

    def append_bytes(self, data: bytes) -> None:
        """Write whole lines under the file's lock; a failed write is cut back so no torn line remains."""
        with self._lock:
            fd = self._fd
            if fd is None:
                raise ValueError(f"{self.path} is closed")
            with held(fd):
                written = 0
                try:
                    view = memoryview(data)
                    while view:
                        count = os.write(fd, view)
                        written += count
                        view = view[count:]
                except BaseException:
                    # Under the lock no other writer appended meanwhile: the file grew by ``written`` bytes.
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, os.fstat(fd).st_size - written)
                    raise
                if self._fsync:
                    os.fsync(fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class AppendedLines:
    """The whole lines appended to a file (by any process) since the last call; a line still being written is
    read once it ends. Not thread-safe: its caller keeps one reader at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def read(self) -> list[bytes]:
        """The new whole lines, each with its newline; none when the file does not exist (yet)."""
        try:
            if self.path.stat().st_size <= self._offset:
                return []
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        whole = data[: data.rfind(b"\n") + 1]
        self._offset += len(whole)
        return whole.splitlines(keepends=True)


def iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for every non-blank line; nothing when the file does not exist."""
    try:
        with open(path, "rb") as fh:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    yield number, line
    except FileNotFoundError:
        return


def read_jsonl_numbered(path: Path) -> tuple[list[tuple[int, Any]], int]:
    """(line number, value) for every whole JSON line, and how many lines were torn or not JSON."""
    items: list[tuple[int, Any]] = []
    bad = 0
    for number, line in iter_lines(path):
        try:
            items.append((number, json.loads(line)))
        except (ValueError, RecursionError):
            bad += 1
    return items, bad


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a jsonl file (none if it does not exist); a torn or non-JSON line is skipped."""
    return [value for _, value in read_jsonl_numbered(path)[0] if isinstance(value, dict)]
