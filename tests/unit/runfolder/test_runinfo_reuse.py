"""Which earlier trials --gym-resume may reuse (``runfolder.runinfo.load_reusable``), and why not when it may not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.settings import GymSettings
from pytest_gym.runfolder.layout import ROLLOUTS_FILE, RUN_INFO_FILE
from pytest_gym.runfolder.runinfo import load_reusable, write_run_info

SETTINGS = GymSettings(agent="mcqa_simple_agent", policy="scripted", policy_answer="\\boxed{E}")


def earlier_run(tmp_path: Path, settings: GymSettings = SETTINGS) -> Path:
    run = tmp_path / "earlier"
    write_run_info(run, settings)
    lines = [
        {"reward": 1.0, "_ng_task_index": 0, "_ng_rollout_index": 0, "_pytest_gym_task_hash": "a" * 64},
        {"reward": 0.0, "_ng_task_index": 0, "_ng_rollout_index": 1, "_pytest_gym_task_hash": "a" * 64},
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines) + '{"reward": 1.0, "_ng_ta'
    (run / ROLLOUTS_FILE).write_text(text)
    return run


def test_same_settings_reuse_every_complete_record(tmp_path: Path) -> None:
    reusable = load_reusable(earlier_run(tmp_path), SETTINGS)
    assert reusable.take("a" * 64, 0)["reward"] == 1.0  # type: ignore[index]
    assert reusable.take("a" * 64, 1)["reward"] == 0.0  # type: ignore[index]
    assert reusable.take("a" * 64, 2) is None
    assert "2 finished trials available" in reusable.note


def test_other_settings_reuse_nothing_and_say_which(tmp_path: Path) -> None:
    other = SETTINGS.model_copy(update={"policy_answer": "\\boxed{B}", "agent": "other_agent"})
    reusable = load_reusable(earlier_run(tmp_path), other)
    assert reusable.records == {}
    assert "agent, policy_answer differ" in reusable.note


def test_speed_settings_do_not_block_reuse(tmp_path: Path) -> None:
    faster = SETTINGS.model_copy(update={"concurrency": 64, "trial_timeout": 5.0, "repeats": 9})
    assert load_reusable(earlier_run(tmp_path), faster).records


def test_missing_pieces_are_explained(tmp_path: Path) -> None:
    assert "has no rollouts.jsonl" in load_reusable(tmp_path, SETTINGS).note
    (tmp_path / ROLLOUTS_FILE).write_text("{}\n")
    assert f"no readable {RUN_INFO_FILE}" in load_reusable(tmp_path, SETTINGS).note


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    assert len(read_jsonl(earlier_run(tmp_path) / ROLLOUTS_FILE)) == 2


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"hydra": ("mcqa.resources_servers.mcqa.grading_mode=lenient_answer_colon",)}, "hydra"),
        ({"bind_resources_server": "off"}, "bind_resources_server"),
        ({"benchmark": ("minibench",)}, "benchmark"),
    ],
)
def test_gym_config_changes_block_reuse(tmp_path: Path, change: dict[str, object], named: str) -> None:
    """A Gym config override changes the rewards (a grading mode): reusing the old rollouts would hide it."""
    reusable = load_reusable(earlier_run(tmp_path), SETTINGS.model_copy(update=change))
    assert reusable.records == {}
    assert f"({named} differ)" in reusable.note


def test_runner_environment_and_headers_do_not_block_reuse(tmp_path: Path) -> None:
    """Paths and caches for Gym's processes, and access headers for a remote Gym, change no reward."""
    elsewhere = SETTINGS.model_copy(update={"env": ("HF_HOME=/cache/hf",), "header": ("X-Team=TEAM_TOKEN",)})
    assert load_reusable(earlier_run(tmp_path), elsewhere).records
