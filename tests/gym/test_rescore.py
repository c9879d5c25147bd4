"""Through a real Gym: --gym-rescore with a changed verifier setting, and a tool-calling environment recorded
and replayed (the multi-turn model calls replay in order)."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.settings import GymSettings
from pytest_gym.process.groups import stop_supervised
from pytest_gym.rollout.http import fetch
from pytest_gym.runfolder.layout import ROLLOUTS_FILE
from pytest_gym.standins.cassette import iter_recordings
from pytest_gym.standins.launch import start_policy
from tests.helpers.realgym import RealGym, attach, reuse, start_mode

#: mcqa's grading mode that reads "Answer: X" (the default, strict_single_letter_boxed, wants \\boxed{X}).
LENIENT = "++mcqa.resources_servers.mcqa.grading_mode=lenient_answer_colon"


def recorder_stats(log: Path) -> dict[str, Any]:
    """The stats the recorder/replay server prints when it stops, or when a kept one is released by the run."""
    found = re.findall(r"pytest-gym recorder (?:stopped|released); stats: (\{.*\})", log.read_text())
    assert found, log.read_text()[-2000:]
    result: dict[str, Any] = json.loads(found[-1])
    return result


def rewards(run_dir: Path) -> dict[tuple[int, int], float]:
    return {(r["_ng_task_index"], r["_ng_rollout_index"]): r["reward"] for r in read_jsonl(run_dir / ROLLOUTS_FILE)}


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "n2"])
def test_rescore_with_a_changed_grading_mode_moves_the_rewards_and_calls_no_model(
    pytester: pytest.Pytester, example: Path, gym: RealGym, gym_cli: str, xdist: bool, kept_pool: Path
) -> None:
    # The earlier run: the model answers "Answer: E", which the default strict grading scores 0.
    gym.script(answer="Answer: E", reset_stats=True)
    earlier = pytester.runpytest_subprocess(*attach(gym, "--gym-repeats", "2", "--gym-run-dir", "earlier"))
    earlier.assert_outcomes(failed=10)
    calls = gym.policy_calls()
    assert calls == 10

    # The verifier changes (lenient_answer_colon reads "Answer: E"); the rows expecting E (3 and 4) now pass.
    # Kept (the other case's run started it or attaches to it): a rescore's Gym is leased with its model recorder.
    args = start_mode(gym_cli, "--gym-repeats", "2", "--gym-rescore", "earlier", "--gym-set", LENIENT, "-rA",
                      *reuse(kept_pool))  # fmt: skip
    result = pytester.runpytest_subprocess(*args, *(["-n", "2"] if xdist else []))
    result.assert_outcomes(passed=4, failed=6)
    text = result.stdout.str()
    assert "4 rewards moved" in text, text
    assert re.search(r"tasks whose pass/fail flipped: .*fail -> pass", text)
    run = pytester.path / "run"
    assert rewards(run) == {(t, r): 1.0 if t in (3, 4) else 0.0 for t in range(5) for r in range(2)}
    assert all(r["extracted_answer"] == "E" for r in read_jsonl(run / ROLLOUTS_FILE))  # the verifier's own answer
    summary = json.loads((run / "pytest_gym_summary.json").read_text())
    assert sorted((m["task_index"], m["old"], m["new"]) for m in summary["rescore"]["moved"]) == [
        (3, 0.0, 1.0), (3, 0.0, 1.0), (4, 0.0, 1.0), (4, 0.0, 1.0),
    ]  # fmt: skip
    # No model call: the shared Gym's policy was not asked again, and the rescore's Gym had only a model that
    # refuses every call (a replay of nothing), which counted none.
    assert gym.policy_calls() == calls
    stats = recorder_stats(run / "recorder.log")
    assert (stats["mode"], stats["calls"], stats["misses"], stats["upstream_calls"]) == ("replay", 0, 0, 0)
    assert not (run / "policy.log").exists()  # no scripted policy was started


def gym_site_packages(gym_cli: str) -> Path:
    found = next(Path(gym_cli).resolve().parent.parent.glob("lib/python3*/site-packages/resources_servers"), None)
    if found is None:
        pytest.skip("cannot find Gym's installed resources_servers next to the gym CLI")
    return found.parent


def test_a_tool_calling_environment_records_and_replays_its_model_calls_in_order(
    pytester: pytest.Pytester, gym_cli: str, tmp_path: Path, kept_pool: Path
) -> None:
    site = gym_site_packages(gym_cli)
    server = site / "resources_servers" / "example_single_tool_call"
    rows = (server / "data" / "example.jsonl").read_text().splitlines()[:3]
    (pytester.path / "tools.jsonl").write_text("\n".join(rows) + "\n")
    pytester.makeini("[pytest]\n")
    # The scripted policy calls get_weather first, then answers with text once the tool's output is in.
    policy, policy_url = start_policy(GymSettings(), tmp_path / "policy")
    try:
        script = {"tool_name": "get_weather", "tool_arguments": '{"city": "sf"}', "answer": "It is cold in SF."}
        assert fetch("PUT", policy_url.removesuffix("/v1") + "/_script", json.dumps(script).encode())[0] == 200
        common = (
            "--gym-resources-server", "example_single_tool_call",
            f"--gym-cli={gym_cli}", "--gym-server-venv", "auto", "--gym-agent", "example_single_tool_call_simple_agent",
            "--gym-dataset", "tools.jsonl", "--gym-repeats", "2", "--gym-model", "pytest-gym-scripted",
            *reuse(kept_pool),  # the replay attaches to the Gym the recording started: its recorder leased anew
        )  # fmt: skip
        recorded = pytester.runpytest_subprocess(
            *common, "--gym-policy", "record", "--gym-model-url", policy_url, "--gym-run-dir", "rec"
        )
        recorded.assert_outcomes(passed=6)
        _, data = fetch("GET", policy_url.removesuffix("/v1") + "/_stats")
        assert json.loads(data)["calls"] == 12  # two model calls per trial: the tool call, then the answer
    finally:
        stop_supervised([policy])

    replayed = pytester.runpytest_subprocess(*common, "--gym-policy", "replay", "--gym-cassette", "rec",
                                             "--gym-run-dir", "rep")  # fmt: skip
    replayed.assert_outcomes(passed=6)
    assert (
        rewards(pytester.path / "rep")
        == rewards(pytester.path / "rec")
        == {(t, r): 1.0 for t in range(3) for r in range(2)}
    )
    stats = recorder_stats(pytester.path / "rep" / "recorder.log")
    assert (stats["calls"], stats["hits"], stats["misses"], stats["upstream_calls"]) == (12, 12, 0, 0)
    # The cassette: per trial, the first turn (no tool output yet) and then the second (with it), in order.
    turns: Counter[str] = Counter()
    order = []
    for recording in iter_recordings(pytester.path / "rec"):
        if recording.method != "POST":
            continue
        body = recording.request
        user = next(item["content"] for item in body["input"] if item.get("role") == "user")
        second = any(item.get("type") == "function_call_output" for item in body["input"])
        turns[user] += -1 if second else 1
        assert turns[user] >= 0, "a second turn was recorded before its first"
        order.append((user, second))
    assert len(order) == 12
    assert Counter(second for _, second in order) == {False: 6, True: 6}
    assert all(count == 0 for count in turns.values())
    shutil.rmtree(tmp_path / "policy", ignore_errors=True)
