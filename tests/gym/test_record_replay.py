"""Record and replay through a real Gym: its policy URL points at the recorder, in front of the scripted policy.

One deployment for the module: Gym's ``policy_base_url`` is fixed when it starts, so the replay
server takes over the recorder's port, as a second session's recorder would sit behind its own Gym.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.endpoint import GymEndpoint
from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.deployment import start_deployment, stop_started
from pytest_gym.gym.rescore import rescore
from pytest_gym.gym.startargs import free_port
from pytest_gym.process.groups import Supervised, stop_supervised
from pytest_gym.rollout.http import fetch
from pytest_gym.rollout.transport import TrialFault, build_request
from pytest_gym.runfolder.layout import RESCORED_FILE, ROLLOUTS_FILE
from pytest_gym.runfolder.rollouts import RunFolderWriter
from pytest_gym.runner.server import GymServer
from pytest_gym.standins.cassette import iter_recordings, misses_for_row, read_misses
from pytest_gym.standins.launch import start_policy, start_recorder
from pytest_gym.standins.policy import Script, responses_object
from tests.helpers.paths import EXAMPLE

AGENT = "mcqa_simple_agent"
ROWS = [json.loads(line) for line in EXAMPLE.read_text().splitlines() if line.strip()]  # expect B, C, I, E, E
#: The policy answers these in turn, so repeats of a row differ (and so can their rewards).
ANSWERS = ["\\boxed{B}", "\\boxed{C}", "\\boxed{E}"]


def policy_calls(stack: Stack) -> int | None:
    """The scripted policy's call count; None once a replay replaced the model (the other test, any order)."""
    if stack.policy is None:
        return None
    return int(stats(stack.policy_url)["calls"])


def stats(url: str) -> dict[str, Any]:
    status, data = fetch("GET", url.removesuffix("/v1") + "/_stats")
    assert status == 200
    result: dict[str, Any] = json.loads(data)
    return result


@dataclass
class Stack:
    """Gym, pointed at a fixed port where first the recorder (before the scripted policy), then a replay, listens."""

    root: Path
    endpoint: GymEndpoint
    server: GymServer
    port: int
    recorder: Supervised | None = None
    policy: Supervised | None = None
    policy_url: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop_model(self) -> None:
        for proc in (self.recorder, self.policy):
            if proc is not None:
                stop_supervised([proc])
        self.recorder = self.policy = None

    def replay(self, name: str, row: dict[str, Any] | None = None) -> Path:
        """Replace whatever listens on the model port by a replay of the recording; its run folder."""
        self.stop_model()
        self.recorder, url = start_recorder("replay", self.root / name, cassette=self.root / "recorded", port=self.port)
        assert url == self.url
        return self.root / name

    def run(self, task: int, repeat: int, row: dict[str, Any] | None = None) -> float | str:
        try:
            answer = self.server.run(row or ROWS[task], agent=AGENT, task_index=task, repeat=repeat, timeout=120)
            return float(answer["reward"])
        except TrialFault as fault:
            return f"fault: {fault.message}"


@pytest.fixture(scope="module")
def stack(gym_cli: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("replay-gym")
    policy, policy_url = start_policy(GymSettings(), root / "policy")
    started = None
    port = free_port()
    recorder = None
    try:
        fetch("PUT", policy_url.removesuffix("/v1") + "/_script", json.dumps({"answers": ANSWERS}).encode())
        recorder, url = start_recorder("record", root / "recorded", upstream=policy_url, port=port)
        settings = GymSettings(
            resources_server="mcqa", model_url=url, model="pytest-gym-scripted", cli=gym_cli, server_venv="auto",
            shutdown_grace=20,
        )  # fmt: skip
        endpoint, started = start_deployment(settings, root / "gym")
        stack = Stack(root, endpoint, GymServer(endpoint, settings, AGENT), port, recorder, policy, policy_url)
        yield stack
        stack.stop_model()
    finally:
        for proc in (recorder, policy):
            if proc is not None:
                stop_supervised([proc])
        if started is not None:
            stop_started(started, 20)


def test_replay_gives_the_recorded_rewards_with_no_model_and_a_changed_prompt_fails_only_its_row(
    stack: Stack,
) -> None:
    jobs = [(task, repeat) for task in range(5) for repeat in range(4)]
    recorded = {job: stack.run(*job) for job in jobs}  # one after another: each repeat its own answer
    assert all(isinstance(reward, float) for reward in recorded.values()), recorded
    assert len(set(recorded.values())) == 2  # the cycling answers make some repeats right, some wrong
    assert stats(stack.policy_url)["calls"] == 20
    assert stats(stack.url)["recorded"] == 21  # 20 calls and Gym's start-up probe of /models
    assert len(list(iter_recordings(stack.root / "recorded"))) == 21

    # Replay one after another, the scripted policy stopped: the same reward for every trial.
    stack.replay("replay-sequential")
    assert {job: stack.run(*job) for job in jobs} == recorded
    assert {k: stats(stack.url)[k] for k in ("calls", "hits", "misses", "upstream_calls")} == {
        "calls": 20, "hits": 20, "misses": 0, "upstream_calls": 0,
    }  # fmt: skip

    # Concurrently (as the dispatcher sends repeats): each row gets exactly its recorded answers, so each
    # row's rewards (mean, pass@k) are the recorded ones; which repeat gets which follows arrival order.
    stack.replay("replay-concurrent")
    with ThreadPoolExecutor(8) as pool:
        concurrent = dict(zip(jobs, pool.map(lambda job: stack.run(*job), jobs), strict=True))
    for task in range(5):
        assert sorted(concurrent[(task, r)] for r in range(4)) == sorted(recorded[(task, r)] for r in range(4))

    # A prompt-template change in one row: exactly that row fails, and the miss names the field.
    run_dir = stack.replay("replay-changed")
    changed = json.loads(json.dumps(ROWS[2]))
    message = changed["responses_create_params"]["input"][0]
    message["content"] = message["content"].replace("and nothing else", "and nothing more")
    results = {(task, 0): stack.run(task, 0, changed if task == 2 else None) for task in range(5)}
    assert [job for job, reward in results.items() if isinstance(reward, str)] == [(2, 0)]
    assert {job: reward for job, reward in results.items() if job != (2, 0)} == {
        job: recorded[job] for job in results if job != (2, 0)
    }
    assert "HTTP 500" in str(results[(2, 0)])  # Gym reports the model call's failure as the /run failing
    (miss,) = read_misses(run_dir)
    assert miss.differences == [
        "input[0].content differs: recorded '...boxed{} and nothing else You can first think step-by-step. I...' "
        "vs now '...boxed{} and nothing more You can first think step-by-step. I...'"
    ]
    requests = [build_request(changed if task == 2 else ROWS[task], AGENT, task, 0) for task in range(5)]
    assert [bool(misses_for_row([miss], request)) for request in requests] == [False, False, True, False, False]
    assert stats(stack.url)["misses"] == 1  # not retried by Gym: one call per miss


def test_rescore_verifies_saved_answers_again_without_calling_the_model(stack: Stack, tmp_path: Path) -> None:
    # The model stays up (the other test of this module, in any order, needs it): no call may reach it.
    calls_before = policy_calls(stack)
    run_dir = tmp_path / "run"
    expected = ["B", "C", "I", "E", "E"]
    with RunFolderWriter(run_dir) as writer:
        for task, row in enumerate(ROWS):
            request = build_request(row, AGENT, task, 0)
            response = responses_object(Script(answer="\\boxed{E}"), row["responses_create_params"])
            reward = 1.0 if expected[task] == "E" else 0.0
            writer.record(
                TrialOutcome(
                    nodeid=f"example.jsonl::t{task}[r0]",
                    task_hash=f"t{task}",
                    repeat=0,
                    line=task + 1,
                    dataset="example.jsonl",
                    reward=reward,
                    answer={"reward": reward, "response": response},
                    request=request,
                    agent=AGENT,
                )
            )

    result = rescore(run_dir, stack.endpoint)
    assert result.modes == {"mcqa": "stateless"}
    assert result.servers[AGENT] == "mcqa"
    assert [(r.task_index, r.old_reward, r.new_reward) for r in result.results] == [
        (0, 0.0, 0.0), (1, 0.0, 0.0), (2, 0.0, 0.0), (3, 1.0, 1.0), (4, 1.0, 1.0),
    ]  # fmt: skip
    assert result.changed == []
    assert result.errors == []

    # A changed verdict shows: row 0 expects B; make its saved answer B and re-score.
    records = read_jsonl(run_dir / ROLLOUTS_FILE)
    records[0]["response"]["output"][0]["content"][0]["text"] = "\\boxed{B}"
    assert records[0]["_ng_task_index"] == 0
    (run_dir / ROLLOUTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    result = rescore(run_dir, stack.endpoint)
    assert policy_calls(stack) == calls_before
    (flip,) = result.changed
    assert (flip.task_index, flip.old_reward, flip.new_reward, flip.nodeid) == (0, 0.0, 1.0, "example.jsonl::t0[r0]")
    rescored = read_jsonl(run_dir / RESCORED_FILE)
    assert len(rescored) == 5
    assert (rescored[0]["_ng_task_index"], rescored[0]["reward"], rescored[0]["_pytest_gym_old_reward"]) == (
        0,
        1.0,
        0.0,
    )
    assert rescored[0]["extracted_answer"] == "B"  # the verifier's whole answer is kept
