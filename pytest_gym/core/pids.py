"""Whether a local process still runs: one zombie-aware check for every caller."""

from __future__ import annotations

import os


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3, the state, first); None if gone.

    Raises OSError when there is no procfs.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except FileNotFoundError:
        return None


def process_start_time(pid: int) -> int | None:
    """When a process started, in clock ticks since boot (field 22 of ``/proc/<pid>/stat``); None if unknown.

    A pid is reused once its process is gone; the pair (pid, start time) names one process.
    """
    try:
        fields = _stat_fields(pid)
        return int(fields[19]) if fields is not None else None
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: int, start_time: int | None = None) -> bool:
    """Alive and not a zombie: a killed child stays a zombie until its parent reaps it, maybe for long.

    With ``start_time`` (from ``process_start_time``) a process that took over the pid later is not it.
    """
    try:
        fields = _stat_fields(pid)
        if fields is None:
            return False
        if fields[0] in (b"Z", b"X"):
            return False
        return start_time is None or int(fields[19]) == start_time
    except (OSError, IndexError, ValueError):
        pass  # no procfs: fall back to a signal-0 probe
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def parent_pid(pid: int) -> int | None:
    """The parent of a live process (field 4 of ``/proc/<pid>/stat``); None when unknown."""
    if pid == os.getpid():
        return os.getppid()
    try:
        fields = _stat_fields(pid)
        return int(fields[1]) if fields is not None else None
    except (OSError, IndexError, ValueError):
        return None
