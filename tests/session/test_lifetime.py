"""Nothing a run starts outlives it: Gym and the scripted policy end with pytest, however pytest ends.

A fake slow-stopping ``gym`` (it takes seconds to stop on SIGINT and leaves a child that ignores SIGINT)
is started through the plugin; pytest is then killed with SIGKILL, SIGHUP or a CI's cancel sequence
(SIGINT, SIGTERM a few seconds later, SIGKILL shortly after) and no process of the run may be alive a
few seconds later. Every process of a run carries a marker in its environment, so none is missed.
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

from tests.helpers.fake_gym_cli import install
from tests.helpers.processes import HOLD_TEST, MARK, kill_all, marked, wait_gone, wait_ready

#: The fake Gym takes this long to stop after SIGINT; its child ignores SIGINT until the grace ends.
STOP_S = 1.0
GRACE_S = 2.0
#: Seconds within which every process of the run must be gone: the fake Gym's grace plus SIGTERM, with margin.
GONE_S = GRACE_S + 12.0


def _start(
    pytester: pytest.Pytester, token: str, *args: str, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """pytest running the hold test against the fake Gym, in its own session like a CI job's step."""
    pytester.makepyfile(test_hold=HOLD_TEST)
    pytester.makeini("[pytest]\n")
    fake = install(pytester.path / "bin")
    env = dict(
        os.environ,
        **{MARK: token, "FAKE_GYM_RECORD": str(pytester.path / "record"), "FAKE_GYM_STOP_S": str(STOP_S)},
        FAKE_GYM_ORPHAN="1",
        **(extra_env or {}),
    )
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "test_hold.py",
        "--gym-resources-server", "fake", "--gym-policy", "scripted", "--gym-cli", str(fake),
        "--gym-run-dir", "run", "--gym-shutdown-grace", str(GRACE_S), *args,
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=pytester.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )


def _wait_for_line(log: Path, line: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Poll ``log`` until it holds ``line`` (bounded; fails at once if pytest ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.is_file() and line in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"pytest ended before {log.name} said {line!r}")
        time.sleep(0.02)
    raise AssertionError(f"{log.name} did not say {line!r} within {timeout} s")


def _run_and_kill(
    pytester: pytest.Pytester, kill: str, *args: str, extra_env: dict[str, str] | None = None
) -> tuple[dict[int, str], float, str]:
    token = uuid.uuid4().hex
    proc = _start(pytester, token, *args, extra_env=extra_env)
    try:
        wait_ready(pytester, proc)
        before = marked(token)
        # pytest, two supervisors, the fake Gym, its child, the policy (and xdist's workers).
        assert len(before) >= 6, before
        pids = json.loads((pytester.path / "record" / "pids.json").read_text())
        assert {pids["gym"], pids["child"]} <= set(before)
        start = time.monotonic()
        if kill == "SIGKILL":
            proc.send_signal(signal.SIGKILL)
        elif kill == "SIGHUP":
            os.killpg(proc.pid, signal.SIGHUP)  # a closed terminal: its whole process group
        else:  # a CI cancel: SIGINT, SIGTERM a few seconds later, SIGKILL shortly after
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGTERM)
            time.sleep(0.3)
            os.killpg(proc.pid, signal.SIGKILL)  # Gym's stop is half-way: its child waits for the grace
        out, _ = proc.communicate(timeout=60)
        alive, _ = wait_gone(token, GONE_S)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_all(marked(token))
    return alive, took, out.decode(errors="replace")


@pytest.mark.parametrize("kill", ["SIGKILL", "SIGHUP", "ci-cancel"])
def test_nothing_outlives_a_killed_pytest(pytester: pytest.Pytester, kill: str) -> None:
    begun = time.monotonic()
    alive, took, out = _run_and_kill(pytester, kill)
    print(f"{kill}: all gone {took:.1f} s after the first signal; {time.monotonic() - begun:.1f} s in all")
    assert alive == {}, f"alive {took:.1f} s after {kill}: {alive}\n{out}"
    log = (pytester.path / "run" / "gym_env.log").read_text()
    assert "pytest-gym supervisor: " in log
    assert "fake gym: SIGINT, stopping slowly" in log  # Gym's own stop protocol: SIGINT first


def test_nothing_outlives_a_killed_xdist_controller(pytester: pytest.Pytester) -> None:
    # A worker starts Gym; the controller owns the run: Gym ends with the controller, not the worker.
    alive, took, out = _run_and_kill(pytester, "SIGKILL", "-n", "1")
    assert alive == {}, f"alive {took:.1f} s after SIGKILL: {alive}\n{out}"


def test_a_pytest_run_from_an_xdist_workers_test_still_owns_its_gym(pytester: pytest.Pytester) -> None:
    # It inherits PYTEST_XDIST_WORKER from the worker, but it is no worker: its own end ends its Gym.
    alive, took, out = _run_and_kill(pytester, "SIGKILL", extra_env={"PYTEST_XDIST_WORKER": "gw0"})
    assert alive == {}, f"alive {took:.1f} s after SIGKILL: {alive}\n{out}"


def test_a_second_signal_does_not_cut_the_stop_short(pytester: pytest.Pytester) -> None:
    token = uuid.uuid4().hex
    proc = _start(pytester, token)
    try:
        wait_ready(pytester, proc)
        os.killpg(proc.pid, signal.SIGINT)
        # The SIGTERM must land while Gym is stopping (from its SIGINT: STOP_S, then GRACE_S for its child):
        # wait until Gym got its SIGINT, not a fixed time that a loaded machine overruns or undercuts.
        try:
            _wait_for_line(pytester.path / "run" / "gym_env.log", "fake gym: SIGINT, stopping slowly", proc)
        except AssertionError as exc:  # say what pytest printed meanwhile
            proc.kill()
            said = proc.communicate(timeout=10)[0].decode(errors="replace")
            raise AssertionError(f"{exc}; pytest printed:\n{said}") from None
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        alive, _ = wait_gone(token, 5.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_all(marked(token))
    text = out.decode(errors="replace")
    assert alive == {}, text
    state = json.loads((pytester.path / "run" / "deployment.json").read_text())
    assert "started" not in state, text
    assert state["stopped"][0] == "gym: stopped by SIGTERM", state  # the child ignored SIGINT: grace, then SIGTERM
    assert state["stopped"][1] == "policy: stopped by SIGTERM", state
    assert "SIGTERM arrived while Gym was stopping: the stop was finished first" in state["stopped"], state
    assert "pytest-gym: stopping gym and policy first" in text, text
