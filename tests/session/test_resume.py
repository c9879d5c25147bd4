"""--gym-resume through pytest without Gym: a run that reuses every trial starts and contacts no Gym; one trial
not reused does start it. (Which records are reusable: tests/unit/runfolder/test_runinfo_reuse.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.settings import GymSettings
from pytest_gym.runfolder.layout import ROLLOUTS_FILE
from pytest_gym.runfolder.runinfo import write_run_info
from tests.helpers.paths import EXAMPLE
from tests.helpers.realgym import start_mode
from tests.helpers.run_records import reused_rewards
from tests.helpers.standin import RawServer

#
# The earlier run folder is written here as a finished run would leave it (run info with the same rollout
# settings, one record per trial), so these run without Gym; the real-Gym tests resume real runs.

AGENT = "mcqa_simple_agent"
PASS = ("--gym-min-reward", "0.5")  # every reward the earlier run recorded passes


def finished_run(run_dir: Path, dataset: Path, settings: GymSettings, repeats: int) -> list[float]:
    """A finished run of ``dataset`` with ``settings``; returns the rewards in file order (all >= 0.5)."""
    run_dir.mkdir(parents=True)
    write_run_info(run_dir, settings)
    rewards = []
    with (run_dir / ROLLOUTS_FILE).open("w") as fh:
        for index, line in enumerate(dataset.read_text().splitlines()):
            row = json.loads(line)
            for repeat in range(repeats):
                reward = 1.0 if (index + repeat) % 2 else 0.5  # not what Gym's mcqa returns: reused, not rerun
                rewards.append(reward)
                record = {**row, "reward": reward, "_ng_task_index": index, "_ng_rollout_index": repeat}
                fh.write(json.dumps({**record, "_pytest_gym_task_hash": task_hash(row)}) + "\n")
    return rewards


@pytest.fixture
def dataset(pytester: pytest.Pytester) -> Path:
    path = pytester.path / "example.jsonl"
    shutil.copy(EXAMPLE, path)
    pytester.makeini("[pytest]\n")
    return path


def recording_gym(where: Path) -> tuple[Path, Path]:
    """A ``gym`` command (in a venv-shaped folder, for --gym-server-venv auto) that records each call and fails."""
    venv = where / "fake-venv"
    (venv / "lib" / "python3.13" / "site-packages").mkdir(parents=True)
    (venv / "bin").mkdir()
    called = where / "gym-called"
    fake_gym = venv / "bin" / "gym"
    fake_gym.write_text(f'#!/bin/sh\necho "$@" >> {called}\nexit 1\n')
    fake_gym.chmod(0o755)
    return fake_gym, called


XDIST = pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])


@XDIST
def test_all_reused_in_attach_mode_never_contacts_gym(
    pytester: pytest.Pytester, dataset: Path, listener: RawServer, xdist: tuple[str, ...]
) -> None:
    if xdist:
        pytest.importorskip("xdist")
    url = listener.base_url
    rewards = finished_run(pytester.path / "run1", dataset, GymSettings(agent=AGENT), repeats=2)
    args = ("--gym-url", url, "--gym-agent", AGENT, "--gym-dataset", "example.jsonl", "--gym-repeats", "2", *PASS)
    result = pytester.runpytest(*args, "--gym-resume", "run1", "--gym-run-dir", "run2", *xdist)
    result.assert_outcomes(passed=10)
    result.stdout.fnmatch_lines(["note: resume: 10 finished trials available from */run1"])
    assert listener.connections == 0, "a run that reused every trial contacted Gym"
    assert reused_rewards(pytester, "run2") == rewards


@XDIST
def test_all_reused_in_start_mode_never_starts_gym(
    pytester: pytest.Pytester, dataset: Path, xdist: tuple[str, ...]
) -> None:
    if xdist:
        pytest.importorskip("xdist")
    fake_gym, called = recording_gym(pytester.path)
    settings = GymSettings(agent=AGENT, resources_server="mcqa", policy="scripted", policy_answer="\\boxed{E}")
    rewards = finished_run(pytester.path / "run1", dataset, settings, repeats=1)
    result = pytester.runpytest(*start_mode(str(fake_gym), "--gym-resume", "run1", *PASS), *xdist)
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["note: resume: 5 finished trials available from */run1"])
    assert not called.exists(), f"the gym command was run: {called.read_text()}"
    assert reused_rewards(pytester, "run") == rewards


def test_one_trial_not_reused_does_start_gym(pytester: pytest.Pytester, dataset: Path) -> None:
    """The check above can fail: with one more repeat than the earlier run had, the gym command is run."""
    fake_gym, called = recording_gym(pytester.path)
    settings = GymSettings(agent=AGENT, resources_server="mcqa", policy="scripted", policy_answer="\\boxed{E}")
    finished_run(pytester.path / "run1", dataset, settings, repeats=1)
    result = pytester.runpytest(*start_mode(str(fake_gym), "--gym-resume", "run1", "--gym-repeats", "2", *PASS))
    result.assert_outcomes(passed=5, errors=5)
    assert called.exists()
