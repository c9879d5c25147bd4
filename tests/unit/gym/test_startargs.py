"""The ``gym env start`` command line and the policy's, built directly: an answer starting with a dash, credentials
refused by the settings, the trajectory capture, binding a composable agent. Through pytest with a fake ``gym``:
tests/session/test_start_command.py; read back by Gym's own parser: tests/gym/test_gym_reads_our_hydra_overrides.py.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.startargs import bind_override, gym_command
from pytest_gym.process.groups import stop_supervised
from pytest_gym.standins.launch import start_policy

MARKER = "sk-pytestgym-MARKER-5e1d"


@pytest.mark.parametrize("answer", ["-x", "--boxed", "-", "--answer"])
def test_policy_answer_starting_with_a_dash_starts_the_policy(tmp_path: Path, answer: str) -> None:
    policy, url = start_policy(GymSettings(policy="scripted", policy_answer=answer, model="-m"), tmp_path)
    try:
        with urllib.request.urlopen(url + "/_script", timeout=10) as reply:
            script = json.load(reply)
    finally:
        notes = stop_supervised([policy])
    assert script["answer"] == answer
    assert script["model"] == "-m"
    assert notes == ["policy: stopped by SIGTERM"]


@pytest.mark.parametrize(
    "item",
    [
        "responses_create_params.max_output_tokens=64",
        "tokenizer=gpt2",
        "judge_api_key=${oc.env:JUDGE_API_KEY}",
        "+judge_api_key='${oc.env:JUDGE_API_KEY}'",
        "judge_base_url=https://judge.example/v1",
    ],
)
def test_settings_that_hold_no_secret_are_accepted(item: str) -> None:
    assert GymSettings(set=(item,)).set == (item,)


def test_settings_refuse_credentials_when_built_directly() -> None:
    with pytest.raises(ValueError, match="GYM_POLICY_API_KEY"):
        GymSettings(model_url=f"https://u:{MARKER}@h/v1")
    with pytest.raises(ValueError, match="setting 'api_key'"):
        GymSettings(set=(f"api_key={MARKER}",))


def test_trajectories_capture_into_the_run_folder_and_a_users_set_comes_after(tmp_path: Path) -> None:
    on = gym_command(
        GymSettings(resources_server="mcqa", set=("observability_enabled=false",)), "gym", None, 1, tmp_path
    )
    capture = f"++model_call_capture_dir={tmp_path.resolve() / 'model_calls'}"
    assert on.index("++observability_enabled=true") < on.index(capture) < on.index("+observability_enabled=false")
    off = gym_command(GymSettings(resources_server="mcqa", trajectories="off"), "gym", None, 1, tmp_path)
    assert not [arg for arg in off if "observability" in arg or "model_call_capture" in arg]


def test_a_composable_agent_is_bound_to_the_only_resources_server(tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text(
        "my_agent:\n  responses_api_agents:\n    simple_agent:\n      resources_server:\n"
        "        type: resources_servers\n        name: ???\n"
    )
    (tmp_path / "rs.yaml").write_text("my_rs:\n  resources_servers:\n    mcqa: {entrypoint: app.py}\n")
    configs = (str(tmp_path / "agent.yaml"), str(tmp_path / "rs.yaml"))
    expected = "++my_agent.responses_api_agents.simple_agent.resources_server.name=my_rs"
    assert bind_override(GymSettings(config=configs), "gym", tmp_path) == expected
    assert expected in gym_command(GymSettings(config=configs), "gym", None, 1, tmp_path)
    assert bind_override(GymSettings(config=configs, bind_resources_server="off"), "gym", tmp_path) is None
    named = bind_override(GymSettings(config=configs, bind_resources_server="other"), "gym", tmp_path)
    assert named == "++my_agent.responses_api_agents.simple_agent.resources_server.name=other"
    (tmp_path / "rs2.yaml").write_text("rs2:\n  resources_servers:\n    mcqa: {entrypoint: app.py}\n")
    two = (*configs, str(tmp_path / "rs2.yaml"))
    assert bind_override(GymSettings(config=two), "gym", tmp_path) is None  # which one? Gym's error says
