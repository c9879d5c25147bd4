"""Where a run's folder is, and whether a folder may hold a new run."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

from pytest_gym.runfolder.layout import (
    BENCHMARKS_LOCK,
    BOARD_DIR,
    CONCURRENCY_STATE,
    DEPLOYMENT_LOCK,
    GYM_LOG,
    LEDGER_FILE,
    ROLLOUTS_FILE,
    RUN_INFO_FILE,
    RUN_INFO_LOCK,
    RUN_STARTED_FILE,
    STATE_FILE,
    UNAVAILABLE_REPORTED,
)

RUNS_DIR = Path(".pytest_gym") / "runs"
#: Names only pytest-gym writes in a run folder: a folder holding one was a run folder (an attempt that ran nothing).
_RUN_FOLDER_MARKS = (
    DEPLOYMENT_LOCK, RUN_INFO_FILE, RUN_INFO_LOCK, GYM_LOG, BOARD_DIR, LEDGER_FILE, CONCURRENCY_STATE,
    UNAVAILABLE_REPORTED, BENCHMARKS_LOCK, RUN_STARTED_FILE,
)  # fmt: skip


def new_run_dir(rootdir: Path) -> Path:
    """A fresh run folder path (nothing is created until the run writes to it)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return rootdir / RUNS_DIR / f"{stamp}-{secrets.token_hex(3)}"


def check_run_dir_unused(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot hold this run, or None. A folder is never reused."""
    for name in (STATE_FILE, ROLLOUTS_FILE):
        if (run_dir / name).exists():
            return (
                f"run folder {run_dir} already holds a run ({name}); pass a new --gym-run-dir "
                "or leave it out for a fresh folder under .pytest_gym/runs"
            )
    if run_dir.exists() and not run_dir.is_dir():
        return f"run folder {run_dir} is a file; pass a new --gym-run-dir, or leave it out for one under {RUNS_DIR}"
    # The run masks secrets in place in every file of its folder when it ends: never in a folder of the user's.
    if run_dir.is_dir() and not any((run_dir / name).exists() for name in _RUN_FOLDER_MARKS):
        found = sorted(entry.name for entry in run_dir.iterdir())
        if found:
            shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
            return (
                f"run folder {run_dir} is not empty ({shown}) and is no pytest-gym run folder: a run writes Gym's "
                "files there and masks secrets in place in every file of it at the end; pass a new or empty "
                f"--gym-run-dir, or leave it out for a fresh folder under {RUNS_DIR}"
            )
    return None
