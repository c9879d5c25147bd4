"""--gym-run-timeout's deadline: every process of a run reads the owner's start from the run folder."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pytest_gym.core.settings import GymSettings
from pytest_gym.runfolder.layout import RUN_STARTED_FILE
from pytest_gym.runner.run import GymRun


def run_with_timeout(run_dir: Path, timeout: float | None = 60.0) -> GymRun:
    return GymRun(GymSettings(url="http://127.0.0.1:3", run_timeout=timeout), run_dir, owner=False)


def test_the_deadline_counts_from_the_start_the_owner_wrote(tmp_path: Path) -> None:
    (tmp_path / RUN_STARTED_FILE).write_text("1000.5", encoding="utf-8")
    assert run_with_timeout(tmp_path).deadline() == 1060.5


def test_no_timeout_is_no_deadline(tmp_path: Path) -> None:
    assert run_with_timeout(tmp_path, None).deadline() is None


@pytest.mark.parametrize("written", ["nan", "inf", "-inf", "soon", "\xff", ""])
def test_a_start_that_is_no_time_counts_from_now_and_never_turns_the_timeout_off(tmp_path: Path, written: str) -> None:
    (tmp_path / RUN_STARTED_FILE).write_bytes(written.encode("latin-1"))
    before = time.time()
    deadline = run_with_timeout(tmp_path).deadline()
    assert deadline is not None
    assert before + 60.0 <= deadline <= time.time() + 60.0
