"""A kept Gym's folder as its runs and supervisors share it: its lock, its lease, its last use.

``pytest_gym.gym.kept`` leases a kept Gym to one run at a time and marks each use; the supervisors of its
processes (``--idle``) stop them once it has been unused for long enough. Both take the folder's lock, so a
run never attaches to a Gym that is being stopped: the supervisor that decides to stop removes the Gym's
record first. Standard library and ``core`` only (the supervisor imports it).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from pytest_gym.core.locks import LockTimeout, locked
from pytest_gym.core.pids import pid_alive
from pytest_gym.runfolder.layout import STATE_FILE

LEASE_FILE = "lease.json"
#: Touched when a run takes or gives back the lease: the idle time counts from it.
USED_FILE = "used"


def lock_path(entry: Path) -> Path:
    return entry.parent / f".{entry.name}.lock"


def lease_holder(entry: Path) -> dict[str, Any] | None:
    """The live run holding ``entry``'s lease, or None (the lease of a run that is gone is void)."""
    try:
        lease = json.loads((entry / LEASE_FILE).read_text(encoding="utf-8"))
        if pid_alive(int(lease["pid"]), lease.get("start_time")):
            return dict(lease)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def mark_used(entry: Path) -> None:
    (entry / USED_FILE).touch()
    os.utime(entry / USED_FILE)


def claim_if_idle(entry: Path, seconds: float) -> bool:
    """True once ``entry`` has had no lease and no use for ``seconds``: then its record is gone (under its lock),
    so no run attaches while its processes stop. False while in use, or when the lock is busy (try again)."""
    with contextlib.suppress(LockTimeout, OSError), locked(lock_path(entry), timeout=1.0):
        if lease_holder(entry) is not None:
            return False
        try:
            used = (entry / USED_FILE).stat().st_mtime
        except FileNotFoundError:
            return False  # not used yet: the run that starts it marks it
        if time.time() - used < seconds:
            return False
        (entry / STATE_FILE).unlink(missing_ok=True)
        return True
    return False
