"""Stopping supervised process groups: in parallel, and what left its group but not its session stopped too."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from pytest_gym.core.pids import pid_alive
from pytest_gym.process.groups import Supervised, spawn_supervised, stop_supervised
from tests.helpers.processes import kill_all

SLOW_STOPPER = (
    "import signal, time\nsignal.signal(signal.SIGINT, lambda *_: (time.sleep(2.0), exit(0)))\ntime.sleep(600)\n"
)


def test_gym_and_the_policy_stop_in_parallel(tmp_path: Path) -> None:
    items: list[Supervised] = []
    try:
        for name in ("gym", "policy"):
            items.append(
                spawn_supervised(name, [sys.executable, "-c", SLOW_STOPPER], tmp_path, tmp_path / f"{name}.log")
            )
        time.sleep(0.3)  # let both install their handler
        start = time.monotonic()
        notes = stop_supervised(items)
        took = time.monotonic() - start
    finally:
        kill_all([i.pid for i in items] + [i.supervisor_pid for i in items])
    assert notes == ["gym: stopped by SIGINT", "policy: stopped by SIGINT"]
    assert 2.0 <= took < 3.5, f"two 2 s stops took {took:.1f} s: not in parallel"


ESCAPER = """
import os, subprocess, sys, time
code = "import os, sys, time\\nos.setpgid(0, 0)\\nopen(sys.argv[1], 'w').write(str(os.getpid()))\\ntime.sleep(600)"
subprocess.Popen([sys.executable, "-c", code, sys.argv[1]])
time.sleep(600)
"""


def test_what_left_the_group_but_not_the_session_is_stopped_too(tmp_path: Path) -> None:
    # Ray's workers move to process groups of their own: a signal to Gym's group misses them.
    pid_file = tmp_path / "escaped.pid"
    item = spawn_supervised("gym", [sys.executable, "-c", ESCAPER, str(pid_file)], tmp_path, tmp_path / "gym.log")
    try:
        deadline = time.monotonic() + 10
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        escaped = int(pid_file.read_text())
        assert os.getpgid(escaped) != item.pid
        notes = stop_supervised([item])
    finally:
        kill_all([item.pid, item.supervisor_pid])
    assert notes == ["gym: stopped by SIGINT; 1 process(es) that left its group stopped"]
    assert not pid_alive(escaped)
