"""Finalizing trajectories without Gym: what is kept when Gym's step cannot run, and the attach-mode note."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pytest_gym.core.endpoint import AGENT_TYPE, ENVIRONMENT_TYPE, GymEndpoint, ServerInstance
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.trajectories import environment_servers
from pytest_gym.runfolder.layout import ATTACHED_FILE, ROLLOUTS_FILE, STATE_FILE
from pytest_gym.runfolder.records import EnvironmentServer
from pytest_gym.runner.run import GymRun

RECORD = {"reward": 0.0, "agent_ref": {"name": "a"}, "_ng_task_index": 0, "_ng_rollout_index": 0}


def endpoint(capture_dir: str | None, local: bool) -> GymEndpoint:
    servers = [
        ServerInstance("a", AGENT_TYPE, "simple_agent", "http://127.0.0.1:1"),
        ServerInstance("a_env", ENVIRONMENT_TYPE, "legacy_agent", "http://127.0.0.1:2"),
    ]
    return GymEndpoint(
        "http://127.0.0.1:3", servers, {"a": "http://127.0.0.1:2/run"}, local_pids=local, capture_dir=capture_dir
    )


def test_environment_servers_are_named_as_gym_stamps_them() -> None:
    assert environment_servers(endpoint(None, False)) == {"a": EnvironmentServer("a_env", "legacy_agent")}


def test_an_attached_gym_without_gyms_interpreter_here_keeps_the_records_and_says_why(tmp_path: Path) -> None:
    """Attached, Gym's collector step runs without captures (tests/gym/test_health.py, with a real Gym); with
    no Gym installed here it cannot, and the records stay as Gym answered them."""
    raw = json.dumps(RECORD) + "\n"
    (tmp_path / ROLLOUTS_FILE).write_text(raw)
    (tmp_path / ATTACHED_FILE).write_text(json.dumps(endpoint(str(tmp_path / "captures"), False).to_json()))
    run = GymRun(GymSettings(url="http://127.0.0.1:3", cli=str(tmp_path / "no-gym")), tmp_path, owner=True)
    run.start_gym_steps()
    assert run.gym_helper is None
    run.finalize_trajectories()
    assert (tmp_path / ROLLOUTS_FILE).read_text() == raw
    [note] = run.notes
    assert "Gym's interpreter was not found beside" in note
    assert "--gym-cli" in note


def test_when_gyms_step_fails_the_raw_records_stay_and_a_note_says_why(tmp_path: Path) -> None:
    """An interpreter without nemo_gym stands in for a broken Gym install."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "gym").write_text("#!/bin/sh\n")
    (bin_dir / "gym").chmod(0o755)
    os.symlink(sys.executable, bin_dir / "python")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    raw = json.dumps(RECORD) + "\n"
    (run_dir / ROLLOUTS_FILE).write_text(raw)
    state = {"endpoint": endpoint(str(run_dir / "model_calls"), True).to_json()}
    (run_dir / STATE_FILE).write_text(json.dumps(state))
    run = GymRun(GymSettings(cli=str(bin_dir / "gym")), run_dir, owner=True)
    run.start_gym_steps()
    assert run.gym_helper is not None
    run.finalize_trajectories()
    assert (run_dir / ROLLOUTS_FILE).read_text() == raw
    [note] = run.notes
    assert "returned 0 of 1 records; raw records kept" in note
    assert "nemo_gym" in note  # the helper's own error, for the reader
    assert run.gym_helper is None  # stopped
    run.finalize_trajectories()  # once only
    assert len(run.notes) == 1
