"""No process of a real started Gym (Ray, servers, the policy, supervisors) outlives a pytest killed with SIGKILL."""

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

from tests.helpers.processes import HOLD_TEST, MARK, kill_all, marked, wait_gone, wait_ready
from tests.helpers.realgym import start_mode


@pytest.mark.usefixtures("own_ray")
def test_no_real_gym_process_outlives_a_killed_pytest(pytester: pytest.Pytester, example: Path, gym_cli: str) -> None:
    pytester.makepyfile(test_hold=HOLD_TEST)
    token = uuid.uuid4().hex
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "test_hold.py",
        *start_mode(gym_cli), "--gym-shutdown-grace", "20",
    ]  # fmt: skip
    proc = subprocess.Popen(
        command,
        cwd=pytester.path,
        env=dict(os.environ, **{MARK: token}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_ready(pytester, proc, timeout=240)
        before = marked(token)
        state = json.loads((pytester.path / "run" / "deployment.json").read_text())
        server_pids = {s["pid"] for s in state["endpoint"]["servers"] if s["pid"]}
        assert server_pids <= set(before), (server_pids, before)
        proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        proc.communicate(timeout=60)
        alive, _ = wait_gone(token, 30.0)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_all(marked(token))
    assert alive == {}, f"{len(alive)} of {len(before)} processes alive {took:.1f} s after SIGKILL: {alive}"
    print(f"{len(before)} processes (Gym, Ray, servers, policy, supervisors) gone {took:.1f} s after SIGKILL")
    assert "stopped by SIGINT" in (pytester.path / "run" / "gym_env.log").read_text()
