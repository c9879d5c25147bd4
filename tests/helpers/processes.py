"""Finding every process a test run started, and a test that holds a started Gym open until pytest is killed.

Every process of a test run carries ``PYTEST_GYM_TEST_MARK`` in its environment: ``marked`` finds them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

import pytest

MARK = "PYTEST_GYM_TEST_MARK"


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _state(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return b"X"


def marked(token: str) -> dict[int, str]:
    """Live (not zombie) processes whose environment carries ``MARK=token``: pid -> command line."""
    needle = f"{MARK}={token}".encode() + b"\0"
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        if needle in _environ(pid) and _state(pid) not in (b"Z", b"X"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    found[pid] = fh.read().replace(b"\0", b" ").decode(errors="replace")[:200]
            except OSError:
                continue
    return found


def wait_gone(token: str, timeout: float) -> tuple[dict[int, str], float]:
    """Poll until no marked process is alive (bounded); what is still alive, and the seconds it took."""
    start = time.monotonic()
    alive = marked(token)
    while alive and time.monotonic() - start < timeout:
        time.sleep(0.1)
        alive = marked(token)
    return alive, time.monotonic() - start


def kill_all(pids: Iterable[int]) -> None:
    """Clean up after a failed test: SIGKILL what is left, by pid."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


HOLD_TEST = """
import os, time
from pathlib import Path

def test_hold(gym_server):
    Path("ready").write_text(gym_server.url)
    time.sleep(120)
"""


def wait_ready(pytester: pytest.Pytester, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (pytester.path / "ready").exists():
            return
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"pytest ended before the test held Gym:\n{out}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the hold test did not start within {timeout} s")


def dead_pid() -> int:
    """The pid of a process that has ended (no live process has it, until the pid is reused)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid
