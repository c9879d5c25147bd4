"""A kept Gym's folder as runs and supervisors share it: its lease, read back by every run and supervisor."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_gym.core.pids import process_start_time
from pytest_gym.process.keep import LEASE_FILE, lease_holder


def test_the_lease_of_a_live_run_holds(tmp_path: Path) -> None:
    lease = {"pid": os.getpid(), "start_time": process_start_time(os.getpid()), "run_dir": "run"}
    (tmp_path / LEASE_FILE).write_text(json.dumps(lease), encoding="utf-8")
    assert lease_holder(tmp_path) == lease


@pytest.mark.parametrize("pid", ["true", "Infinity", "-Infinity", "NaN", "1e999", '"1"', "[1]", "null"])
def test_a_lease_whose_pid_is_not_a_whole_number_is_void(tmp_path: Path, pid: str) -> None:
    """``true`` is not pid 1 (init: alive for ever, so the kept Gym would never be free again); Infinity no error."""
    (tmp_path / LEASE_FILE).write_text(f'{{"pid": {pid}, "run_dir": "run"}}', encoding="utf-8")
    assert lease_holder(tmp_path) is None


@pytest.mark.parametrize("text", ["[1]", '{"run_dir": "run"}', '{"pid": ', "\ufeff{}"])
def test_a_lease_that_is_not_one_a_run_wrote_is_void(tmp_path: Path, text: str) -> None:
    (tmp_path / LEASE_FILE).write_text(text, encoding="utf-8")
    assert lease_holder(tmp_path) is None


def test_a_lease_of_bytes_that_are_not_utf8_is_void(tmp_path: Path) -> None:
    (tmp_path / LEASE_FILE).write_bytes(b'{"pid": "\xff"}')
    assert lease_holder(tmp_path) is None
