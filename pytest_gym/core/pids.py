"""Whether a local process still runs: one zombie-aware check for every caller."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie: a killed child stays a zombie until its parent reaps it, maybe for long."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass  # no procfs: fall back to a signal-0 probe
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
