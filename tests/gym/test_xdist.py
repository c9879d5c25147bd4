"""Throughput and xdist against a real Gym (mcqa): one budget, every trial rolled out exactly once.

The scripted policy counts its calls (one per trial for mcqa) and the most it
served at once, so "exactly once" and "at most C in flight" are checked on the
paid side, whatever the plugin believes it did.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.rollout.claims import ClaimBoard
from pytest_gym.runfolder.layout import BOARD_DIR
from tests.helpers.paths import EXAMPLE
from tests.helpers.realgym import RealGym, attach

HASHES = [task_hash(json.loads(line))[:12] for line in EXAMPLE.read_text().splitlines() if line.strip()]
MODES = [(), ("-n", "0"), ("-n", "2"), ("-p", "no:xdist")]
MODE_IDS = ["plain", "n0", "n2", "no-xdist"]


def stats(gym: RealGym) -> dict[str, Any]:
    result: dict[str, Any] = httpx.get(f"{gym.policy_url}/_stats", timeout=10, trust_env=False).json()
    return result


def rollout_records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines() if line.strip()]


def assert_outcomes(result: pytest.RunResult, mode: tuple[str, ...], passed: int, failed: int, deselected: int) -> None:
    """``assert_outcomes``, except that the xdist controller does not count deselected items."""
    xdist = mode == ("-n", "2")
    result.assert_outcomes(passed=passed, failed=failed, deselected=0 if xdist else deselected)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_every_trial_is_rolled_out_and_recorded_exactly_once(
    pytester: pytest.Pytester, example: Path, gym: RealGym, mode: tuple[str, ...]
) -> None:
    run_dir = pytester.path / "run"
    result = pytester.runpytest(
        *attach(gym, "--gym-repeats", "4", "--gym-concurrency", "4", f"--gym-run-dir={run_dir}"), *mode
    )
    result.assert_outcomes(passed=8, failed=12)
    assert gym.policy_calls() == 20
    keys = sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rollout_records(run_dir))
    assert keys == [(t, r) for t in range(5) for r in range(4)]
    assert not (run_dir / BOARD_DIR).exists()  # the claims are cleaned up at the end
    # Gym's aggregate covers all 20 rollouts (under xdist it is asked for as soon as the last trial reported).
    (entry,) = json.loads((run_dir / "rollouts_aggregate_metrics.json").read_text())
    assert entry["agent_ref"] == {"name": "mcqa_simple_agent"}
    assert entry["agent_metrics"]["mean/reward"] == pytest.approx(0.4)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_deselected_trials_are_not_dispatched(
    pytester: pytest.Pytester, example: Path, gym: RealGym, mode: tuple[str, ...]
) -> None:
    result = pytester.runpytest(*attach(gym, "--gym-repeats", "2"), "-k", HASHES[3], *mode)
    assert_outcomes(result, mode, passed=2, failed=0, deselected=8)
    assert gym.policy_calls() == 2


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_collect_only_dispatches_nothing(
    pytester: pytest.Pytester, example: Path, gym: RealGym, mode: tuple[str, ...]
) -> None:
    result = pytester.runpytest(*attach(gym, "--gym-repeats", "3"), "--co", "-q", *mode)
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"example.jsonl::{HASHES[0]}[r0]", "15 tests collected*"])
    time.sleep(0.3)
    assert gym.policy_calls() == 0


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_exitfirst_starts_no_new_rollouts_and_cancels_those_in_flight(
    pytester: pytest.Pytester, example: Path, gym: RealGym, mode: tuple[str, ...]
) -> None:
    # 40 trials of 1 s each; the very first one fails (row 1 expects B, the policy answers E). Under xdist a worker
    # prefetches from its start, before the controller hands it items: 1 s (not 0.3 s) per rollout leaves room for
    # the other worker starting up to 2 s later on a busy machine without a third wave of rollouts.
    gym.script(latency_ms=1000)
    result = pytester.runpytest(*attach(gym, "--gym-repeats", "8", "--gym-concurrency", "4"), "-x", *mode)
    # xdist reports a run it stopped after -x as interrupted.
    assert result.ret == (pytest.ExitCode.INTERRUPTED if mode == ("-n", "2") else pytest.ExitCode.TESTS_FAILED)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1
    time.sleep(0.5)  # a cancelled call still reaches the policy if it was sent: let the counters settle
    calls = gym.policy_calls()
    assert calls <= 12, f"{calls} of 40 trials were rolled out (4 run at once; 8 expected)"
    assert stats(gym)["max_in_flight"] <= 4


@pytest.mark.parametrize("mode", [(), ("-n", "2")], ids=["plain", "n2"])
def test_concurrency_bounds_the_whole_run(
    pytester: pytest.Pytester, example: Path, gym: RealGym, mode: tuple[str, ...]
) -> None:
    """15 trials with C=4, never more than 4 at once: at 300 ms four rounds (about 1.2 s); with -n 2 at 1 s."""
    # Under -n 2 a worker prefetches from its start, before the controller hands it items: at 1 s a rollout, the
    # first worker's 2 slots take 8 s for all 15, room for the other worker starting seconds later to join in.
    gym.script(latency_ms=1000 if mode else 300)
    started = time.monotonic()
    result = pytester.runpytest(*attach(gym, "--gym-repeats", "4", "--gym-concurrency", "4"), "-k", "not r0", *mode)
    elapsed = time.monotonic() - started
    assert_outcomes(result, mode, passed=6, failed=9, deselected=5)
    seen = stats(gym)
    assert seen["calls"] == 15
    assert seen["max_in_flight"] <= 4
    assert seen["max_in_flight"] >= 3  # the budget is used, not just respected
    # 15 trials: 4 rounds of 300 ms when 4 run at once (both workers busy: at least 3 at once with -n 2,
    # where each has 2 slots); one at a time the rollouts alone would take 4.5 s.
    if not mode:
        assert elapsed < 4.2, f"took {elapsed:.1f} s"


def test_fewer_slots_than_workers_still_bound_the_run(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    gym.script(latency_ms=200)
    result = pytester.runpytest(*attach(gym, "--gym-repeats", "2", "--gym-concurrency", "1"), "-n", "2")
    result.assert_outcomes(passed=4, failed=6)
    seen = stats(gym)
    assert seen["calls"] == 10
    assert seen["max_in_flight"] == 1


def test_a_crashed_workers_claim_is_taken_over(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    """A claim whose process is gone does not block the run: one worker takes the trial over."""
    run_dir = pytester.path / "run"
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    ClaimBoard(run_dir / BOARD_DIR, pid=proc.pid).claim(f"example.jsonl::{HASHES[2]}[r0]")
    result = pytester.runpytest(*attach(gym, f"--gym-run-dir={run_dir}"), "-n", "2")
    result.assert_outcomes(passed=2, failed=3)
    assert gym.policy_calls() == 5
