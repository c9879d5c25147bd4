"""Where a run's folder is, and whether a folder may hold a new run."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

from pytest_gym.runfolder.layout import ROLLOUTS_FILE, STATE_FILE

RUNS_DIR = Path(".pytest_gym") / "runs"


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
    return None
