"""A kept Gym's folder as its runs and supervisors share it: its lock, its lease, its last use.

``pytest_gym.gym.kept`` leases a kept Gym to one run at a time and marks each use; the supervisors of its
processes (``--idle``) stop them once it has been unused for long enough. Both take the folder's lock, so a
run never attaches to a Gym that is being stopped: the supervisor that decides to stop removes the Gym's
record first. Standard library and ``core`` only (the supervisor imports it).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.locks import LockTimeout, locked
from pytest_gym.core.numbers import is_int
from pytest_gym.core.pids import pid_alive, process_start_time
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
        pid = lease["pid"]
        # A pid is a whole number: ``true`` is not pid 1 (init, alive for ever), Infinity no error.
        if is_int(pid) and pid_alive(pid, lease.get("start_time")):
            return dict(lease)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def take_lease(entry: Path, run_owner: int, run_dir: Path) -> None:
    """``run_owner``'s run holds ``entry`` from now on (the caller holds its lock and found no live lease)."""
    lease = {"pid": run_owner, "start_time": process_start_time(run_owner), "run_dir": str(run_dir)}
    write_atomically(entry / LEASE_FILE, json.dumps(lease).encode(), fsync=False)
    (entry / USED_FILE).touch()


def give_back(entry: Path, run_dir: Path) -> None:
    """The run of ``run_dir`` is done with ``entry``: its lease (or a void one) freed, the idle time counting."""
    with locked(lock_path(entry)):
        holder = lease_holder(entry)
        if holder is None or holder.get("run_dir") == str(run_dir):
            (entry / LEASE_FILE).unlink(missing_ok=True)
            (entry / USED_FILE).touch()


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
