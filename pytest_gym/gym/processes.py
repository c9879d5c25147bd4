"""Start and stop process groups, and read the tail of their logs.

Gym shuts down on SIGINT only, and its children (servers, Ray) share its process
group, so a whole deployment is stopped by signalling that group: SIGINT, a
grace period, then SIGTERM and SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from pytest_gym.core.masking import mask_secrets


def _restore_sigint() -> None:
    # A background job of a non-interactive shell starts with SIGINT ignored, and
    # ignored signals survive exec: Gym would then never see our SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn_group(
    args: Sequence[str], cwd: Path, log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``args`` as the leader of a new session and process group, output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(args),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_restore_sigint,
            env=env,
        )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _reap(pid: int, popen: subprocess.Popen[bytes] | None) -> None:
    """Reap the leader if it is our child, so a zombie does not keep the group 'alive'."""
    if popen is not None:
        popen.poll()
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _wait_group(pgid: int, deadline: float, popen: subprocess.Popen[bytes] | None) -> bool:
    while time.monotonic() < deadline:
        _reap(pgid, popen)
        if not group_alive(pgid):
            return True
        time.sleep(0.1)
    return not group_alive(pgid)


def stop_group(
    pgid: int, grace: float, popen: subprocess.Popen[bytes] | None = None, first: signal.Signals = signal.SIGINT
) -> str:
    """Stop every process of a group; returns how it ended (for the log)."""
    _reap(pgid, popen)
    if not group_alive(pgid):
        return "already stopped"
    _signal_group(pgid, first)
    if _wait_group(pgid, time.monotonic() + grace, popen):
        return f"stopped by {first.name}"
    _signal_group(pgid, signal.SIGTERM)
    if _wait_group(pgid, time.monotonic() + 5.0, popen):
        return "stopped by SIGTERM"
    _signal_group(pgid, signal.SIGKILL)
    _wait_group(pgid, time.monotonic() + 5.0, popen)
    return "killed (SIGKILL)"


def log_tail(path: Path, lines: int = 20, max_bytes: int = 64 * 1024) -> str:
    """The last lines of a log, secrets masked; empty when there is no log."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    tail = "\n".join(data.splitlines()[-lines:])
    return mask_secrets(tail)
