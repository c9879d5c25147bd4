"""Stopping supervised process groups: in parallel, and what left its group but not its session stopped too."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from pytest_gym.core.pids import pid_alive
from pytest_gym.process.groups import Supervised, spawn_supervised, stop_supervised
from tests.helpers.processes import kill_all

#: Stops 2 s after SIGINT; writes when it was ready, and when its stop began and ended (CLOCK_MONOTONIC: one clock
#: for every process of the machine), so that the test reads the overlap however slowly a loaded machine runs it.
SLOW_STOPPER = """
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def stop(*_):
    began = time.monotonic()
    time.sleep(2.0)
    out.with_suffix(".stop").write_text(f"{began} {time.monotonic()}")
    sys.exit(0)
signal.signal(signal.SIGINT, stop)
out.with_suffix(".ready").write_text("")
time.sleep(600)
"""


def test_gym_and_the_policy_stop_in_parallel(tmp_path: Path) -> None:
    """Each stop began before the other ended (not one after the other), however slowly a loaded machine ran them."""
    items: list[Supervised] = []
    try:
        for name in ("gym", "policy"):
            command = [sys.executable, "-c", SLOW_STOPPER, str(tmp_path / name)]
            items.append(spawn_supervised(name, command, tmp_path, tmp_path / f"{name}.log"))
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"{n}.ready").exists() for n in ("gym", "policy")) and time.monotonic() < deadline:
            time.sleep(0.05)  # both have their handler
        start = time.monotonic()
        notes = stop_supervised(items)
        took = time.monotonic() - start
    finally:
        kill_all([i.pid for i in items] + [i.supervisor_pid for i in items])
    assert notes == ["gym: stopped by SIGINT", "policy: stopped by SIGINT"]
    stops = [tuple(map(float, (tmp_path / f"{n}.stop").read_text().split())) for n in ("gym", "policy")]
    assert max(began for began, _ in stops) < min(ended for _, ended in stops), f"one stop after the other: {stops}"
    assert took >= 2.0, f"the stop returned after {took:.1f} s, before the 2 s stops ended"


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
