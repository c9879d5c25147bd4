"""Faults against a real Gym: retries, the error budget, resume, hangs, dead servers and SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_gym.process.groups import group_alive
from tests.helpers.paths import EXAMPLE
from tests.helpers.realgym import RealGym, attach, start_mode


def attempts(pytester: pytest.Pytester) -> list[int]:
    (run_dir,) = (pytester.path / ".pytest_gym" / "runs").iterdir()
    return [r["_pytest_gym_attempts"] for r in map(json.loads, (run_dir / "rollouts.jsonl").read_text().splitlines())]


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_retries_recover_failed_policy_calls_and_count_attempts(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    gym.script(fault_every=3, fault_status=400, reset_stats=True)
    result = pytester.runpytest(
        *attach(gym, "--gym-repeats", "2", "--gym-retries", "3", "--gym-concurrency", "1"), *xdist
    )
    result.assert_outcomes(passed=4, failed=6)
    tries = attempts(pytester)
    assert len(tries) == 10
    assert sum(tries) - 10 == gym.policy_calls() - 10  # every extra policy call was one recorded retry
    assert max(tries) >= 2


def test_without_retries_faults_are_errors(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    gym.script(fault_every=3, fault_status=400)
    result = pytester.runpytest(*attach(gym, "--gym-repeats", "2", "--gym-concurrency", "1"))
    outcomes = result.parseoutcomes()
    assert outcomes["errors"] == 3
    result.stdout.fnmatch_lines(["*Gym infrastructure fault (http_status)*"])


def test_low_rewards_are_never_retried(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    result = pytester.runpytest(*attach(gym, "--gym-retries", "5"))
    result.assert_outcomes(passed=2, failed=3)
    assert gym.policy_calls() == 5


def test_error_budget_reports_the_rest_at_once(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    result = pytester.runpytest(
        *attach(
            gym, "--gym-repeats", "2", "--gym-reward-key", "nope", "--gym-max-errors", "2", "--gym-concurrency", "1"
        ),
        "-p",
        "no:xdist",
    )
    result.assert_outcomes(errors=10)
    result.stdout.fnmatch_lines(["*not run: 3 trials errored, more than --gym-max-errors allows (2 of 10)*"])
    assert sum(1 for line in result.stdout.lines if line.startswith("ERROR ") and "not run: " in line) == 7


def test_policy_hanging_past_the_trial_timeout_is_a_timeout_error(
    pytester: pytest.Pytester, example: Path, gym: RealGym
) -> None:
    gym.script(fault_every=1, fault_mode="hang", hang_s=8)
    started = time.monotonic()
    result = pytester.runpytest(*attach(gym, "--gym-trial-timeout", "2", "--gym-concurrency", "5"))
    result.assert_outcomes(errors=5)
    result.stdout.fnmatch_lines(["*fault (timeout)*no answer from * within 2 s (--gym-trial-timeout)*"])
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_resume_reruns_only_what_did_not_finish(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    # One rollout at a time, each 1 s, 50 trials: the first failure stops the run (-x) long before the last
    # rollout ends. Under xdist a worker prefetches from its start, before the controller hands it any item: a
    # busy CI machine once let all ten trials of 2 repeats (0.5 s each) finish before either worker's first trial
    # reported. Finishing all 50 here takes 50 s of such skew.
    gym.script(latency_ms=1000)
    first = pytester.runpytest(
        *attach(gym, "--gym-repeats", "10", "--gym-run-dir", "run1", "--gym-concurrency", "1"), "-x", *xdist
    )
    assert first.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED)  # xdist: "interrupted"
    finished = len((pytester.path / "run1" / "rollouts.jsonl").read_text().splitlines())
    assert 1 <= finished < 50
    gym.script(latency_ms=0, reset_stats=True)
    again = pytester.runpytest(*attach(gym, "--gym-repeats", "10", "--gym-resume", "run1"), *xdist)
    again.assert_outcomes(passed=20, failed=30)
    assert gym.policy_calls() == 50 - finished


def test_resume_with_other_settings_reuses_nothing_and_says_why(
    pytester: pytest.Pytester, example: Path, gym: RealGym
) -> None:
    pytester.runpytest(*attach(gym, "--gym-run-dir", "run1"))
    gym.script(reset_stats=True)
    again = pytester.runpytest(
        "--gym-url",
        gym.url,
        "--gym-dataset",
        "example.jsonl",
        "--gym-resume",
        "run1",
        "--gym-agent",
        "mcqa_simple_agent",
        "--gym-reward-key",
        "reward",
        "--gym-model",
        "other",
    )
    again.assert_outcomes(passed=2, failed=3)
    again.stdout.fnmatch_lines(["note: resume: */run1 was run with other settings (model differ); nothing reused"])
    assert gym.policy_calls() == 5


def test_resumed_trials_say_so_in_their_properties(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    pytester.runpytest(*attach(gym, "--gym-run-dir", "run1"))
    pytester.runpytest(*attach(gym, "--gym-resume", "run1", "--junitxml", "r.xml"))
    assert (pytester.path / "r.xml").read_text().count("[[PROPERTY|gym_reused=True]]") == 5


def _start_mode(pytester: pytest.Pytester, gym_cli: str, *extra: str) -> subprocess.Popen[bytes]:
    shutil.copy(EXAMPLE, pytester.path / "example.jsonl")
    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    with (pytester.path / "many.jsonl").open("w") as fh:
        for i in range(8):
            for row in rows:
                row = json.loads(json.dumps(row))
                row["responses_create_params"]["input"][0]["content"] += f" #{i}"
                fh.write(json.dumps(row) + "\n")
    pytester.makeini("[pytest]\n")
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        *start_mode(gym_cli, dataset="many.jsonl"),
        "--gym-policy-latency-ms",
        "400",
        "--gym-concurrency",
        "2",
        "--gym-shutdown-grace",
        "20",
        *extra,
    ]
    return subprocess.Popen(args, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_for_rollouts(run: Path, count: int, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        path = run / "rollouts.jsonl"
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"no {count} rollouts in {timeout} s")


def _assert_valid_jsonl(path: Path) -> int:
    lines = path.read_text().splitlines()
    for line in lines:
        json.loads(line)
    return len(lines)


def _assert_stopped(run: Path) -> None:
    state = json.loads((run / "deployment.json").read_text())
    assert "started" not in state
    pids = [s["pid"] for s in state["endpoint"]["servers"] if s["pid"]]
    assert pids
    assert not any(group_alive(pid) or _alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_gym_keeps_finished_trials_and_prints_the_summary(
    pytester: pytest.Pytester, gym_cli: str
) -> None:
    proc = _start_mode(pytester, gym_cli)
    run = pytester.path / "run"
    try:
        _wait_for_rollouts(run, 4, proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.decode()
    assert "stopped by signal 15" in text
    assert "= pytest-gym =" in text
    assert 4 <= _assert_valid_jsonl(run / "rollouts.jsonl") < 40
    _assert_stopped(run)


def test_a_gym_server_killed_mid_run_fails_the_rest_within_seconds(pytester: pytest.Pytester, gym_cli: str) -> None:
    proc = _start_mode(pytester, gym_cli, "--gym-trial-timeout", "60", "-v")
    run = pytester.path / "run"
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(
        target=lambda: lines.extend((time.monotonic(), raw.decode()) for raw in iter(proc.stdout.readline, b"")),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()
    try:
        _wait_for_rollouts(run, 4, proc)
        state = json.loads((run / "deployment.json").read_text())
        (mcqa,) = [s for s in state["endpoint"]["servers"] if s["process_name"] == "mcqa"]
        os.kill(mcqa["pid"], signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(timeout=150)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(line for _, line in lines)
    assert f"Gym server mcqa (pid {mcqa['pid']}) is no longer running; see {run}/gym_env.log" in text
    trial_lines = [t for t, line in lines if "many.jsonl::" in line and "%]" in line]
    # In-flight and later trials fail within seconds (the trial timeout is 60 s). The last line is left out:
    # pytest ends it only when the session finishes, after stopping the broken deployment.
    assert len(trial_lines) == 40
    assert max(trial_lines[:-1]) - killed < 10
    assert _assert_valid_jsonl(run / "rollouts.jsonl") >= 4
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED
    _assert_stopped(run)


def test_policy_stopped_mid_run_under_xdist_fails_the_rest_naming_it(pytester: pytest.Pytester, gym_cli: str) -> None:
    proc = _start_mode(pytester, gym_cli, "--gym-trial-timeout", "60", "-n", "2")
    run = pytester.path / "run"
    try:
        _wait_for_rollouts(run, 4, proc)
        state = json.loads((run / "deployment.json").read_text())
        (policy,) = [s for s in state["endpoint"]["servers"] if s["process_name"] == "scripted_policy"]
        os.kill(policy["pid"], signal.SIGKILL)
        out, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.decode()
    assert f"Gym server scripted_policy (pid {policy['pid']}) is no longer running" in text
    assert _assert_valid_jsonl(run / "rollouts.jsonl") >= 4
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED
    _assert_stopped(run)
