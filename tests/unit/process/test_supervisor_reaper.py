"""A supervised child never outlives its supervisor: killing the owner and the supervisor together (a CI runner's
``kill -9``, the OOM killer) still stops the recorder, the scripted policy and a Gym-like process group.

Every process started here carries a marker in its environment, so none is missed by the check.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

MARK = "PYTEST_GYM_REAPER_MARK"
#: The issue's bound: nothing of the run is alive this many seconds after the kill.
GONE_S = 10.0

OWNER = r"""
import json, sys
from pathlib import Path
from pytest_gym.core.settings import GymSettings
from pytest_gym.process.groups import spawn_supervised
from pytest_gym.standins.launch import start_policy, start_recorder

kind, run_dir = sys.argv[1], Path(sys.argv[2])
if kind == "policy":
    process, _ = start_policy(GymSettings(), run_dir)
elif kind == "recorder":
    (run_dir / "empty.jsonl").parent.mkdir(parents=True, exist_ok=True)
    (run_dir / "empty.jsonl").touch()
    process, _ = start_recorder("replay", run_dir, cassette=run_dir / "empty.jsonl")
else:  # a Gym-like group: a leader that ignores nothing, and a child that ignores SIGINT
    script = "import signal, subprocess, sys, time; subprocess.Popen([sys.executable, '-c', " \
        "'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)']); time.sleep(600)"
    process = spawn_supervised("gym", [sys.executable, "-c", script], run_dir, run_dir / "gym.log", grace=2.0)
print(json.dumps({"supervisor": process.supervisor_pid, "pid": process.pid}), flush=True)
sys.stdin.read()  # hold until killed
"""


def _marked(token: str) -> list[int]:
    needle = f"{MARK}={token}".encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read()
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("kind", ["policy", "recorder", "gym-like"])
def test_killing_owner_and_supervisor_together_leaves_nothing_running(tmp_path: Path, kind: str) -> None:
    token = uuid.uuid4().hex
    env = {**os.environ, MARK: token, "PYTHONPATH": str(ROOT)}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, kind, str(tmp_path / "run")],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line, f"the owner did not start its {kind}"
        started = json.loads(line)
        assert len(_marked(token)) >= 3  # owner, supervisor, the command (and for gym-like, its child)
        for pid in (owner.pid, started["supervisor"]):  # at once, as a runner's kill -9 does
            os.kill(pid, signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + GONE_S
        while _marked(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _marked(token)
        assert not left, f"alive {GONE_S:g} s after owner and supervisor were killed: {left}"
    finally:
        for pid in _marked(token):
            os.kill(pid, signal.SIGKILL)
