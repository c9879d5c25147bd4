"""Re-scoring a run folder (``gym.rescore``) against the stand-in Gym as head and resources server: changed
rewards reported, and servers that cannot be re-verified refused. (The real one: tests/gym/test_record_replay.py;
through pytest: tests/session/test_rescore.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.endpoint import GymEndpoint, ServerInstance
from pytest_gym.standins.policy import Script
from tests.helpers.standin import StandinGym

CONFIG = (
    "mcqa:\n  resources_servers:\n    mcqa: {}\nmy_agent:\n  responses_api_agents:\n"
    "    simple_agent:\n      resources_server: {name: mcqa}\n"
)


def endpoint(fake: StandinGym) -> GymEndpoint:
    return GymEndpoint(fake.url, [ServerInstance("mcqa", "resources_servers", "mcqa", fake.url)], {})


def verified(fake: StandinGym) -> list[dict[str, Any]]:
    """The bodies the stand-in's /verify was sent."""
    return [request.json() for request in fake.log if request.route == "/verify"]


def prompt(n: int, template: str = "Answer with \\boxed{X}, X one of the letters.") -> dict[str, Any]:
    """An mcqa-like Responses request: question n in a prompt template."""
    question = f"Question {n}: which option is the {n}th? A) one B) two C) three D) four E) five."
    return {"model": "m", "input": [{"role": "user", "content": f"{question}\n{template}"}], "temperature": 0.0}


def write_run(run_dir: Path, answers: list[str], rewards: list[float]) -> None:
    from pytest_gym.core.outcome import TrialOutcome
    from pytest_gym.rollout.transport import build_request
    from pytest_gym.runfolder.rollouts import RunFolderWriter
    from pytest_gym.standins.policy import responses_object

    with RunFolderWriter(run_dir) as writer:
        for task, (text, reward) in enumerate(zip(answers, rewards, strict=True)):
            row = {"responses_create_params": prompt(task), "expected_answer": "E"}
            answer = {"reward": reward, "response": responses_object(Script(answer=text), prompt(task))}
            writer.record(
                TrialOutcome(
                    nodeid=f"d.jsonl::t{task}[r0]",
                    task_hash=f"t{task}",
                    repeat=0,
                    line=task + 1,
                    dataset="d.jsonl",
                    reward=reward,
                    answer=answer,
                    request=build_request(row, "my_agent", task, 0),
                    agent="my_agent",
                )
            )


def test_rescore_reports_changed_rewards_and_refuses_servers_that_cannot_be_reverified(tmp_path: Path) -> None:
    from pytest_gym.core.endpoint import GymError
    from pytest_gym.core.jsonl import read_jsonl
    from pytest_gym.gym.rescore import rescore

    fake = StandinGym("my_agent")  # the head and the resources server in one
    fake.config_yaml = CONFIG
    try:
        write_run(tmp_path, ["\\boxed{E}", "\\boxed{B}", "\\boxed{E}"], [1.0, 1.0, 0.0])  # two verdicts now wrong
        result = rescore(tmp_path, endpoint(fake))
        assert (result.servers, result.modes) == ({"my_agent": "mcqa"}, {"mcqa": "stateless"})
        assert [(r.task_index, r.old_reward, r.new_reward) for r in result.changed] == [(1, 1.0, 0.0), (2, 0.0, 1.0)]
        assert verified(fake)[0]["expected_answer"] == "E"  # the dataset fields reach the verifier
        assert [line["_pytest_gym_old_reward"] for line in read_jsonl(tmp_path / "rescored.jsonl")] == [1.0, 1.0, 0.0]
        fake.reverify_mode = "unknown"
        with pytest.raises(GymError, match=r"mcqa cannot be re-verified safely \(reverify_mode unknown"):
            rescore(tmp_path, endpoint(fake))
        assert len(rescore(tmp_path, endpoint(fake), force=True).results) == 3
        with pytest.raises(GymError, match="nothing to re-score"):
            rescore(tmp_path / "empty", endpoint(fake))
    finally:
        fake.close()
