"""Record once, replay in CI: --gym-policy record|replay through pytest, against a real Gym.

The shared Gym's scripted policy (answering E) stands in for the "real" model behind the recording
proxy; the replays run with no model at all, and must give the same JUnit outcomes with zero calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from tests.helpers.junit import outcomes_by_test
from tests.helpers.realgym import RealGym
from tests.helpers.standin import answer_text

MODEL = "pytest-gym-scripted"


def _start(gym_cli: str, run_dir: str, *args: str) -> tuple[str, ...]:
    return (
        "--gym-dataset", "example.jsonl", "--gym-resources-server", "mcqa", f"--gym-cli={gym_cli}",
        "--gym-server-venv", "auto", "--gym-agent", "mcqa_simple_agent", "--gym-model", MODEL,
        "--gym-repeats", "2", f"--gym-run-dir={run_dir}", "--junitxml", f"{run_dir}.xml", *args,
    )  # fmt: skip


@pytest.fixture
def recorded(pytester: pytest.Pytester, example: Path, gym: RealGym, gym_cli: str) -> Path:
    """A recording of the example (2 repeats) made through the proxy in front of the scripted policy."""
    result = pytester.runpytest_subprocess(
        *_start(gym_cli, "rec", "--gym-policy", "record", f"--gym-model-url={gym.policy_url}")
    )
    result.assert_outcomes(passed=4, failed=6)
    assert gym.policy_calls() == 10
    lines = (pytester.path / "rec" / "cassette.jsonl").read_text(encoding="utf-8").splitlines()
    assert sum(json.loads(line)["method"] == "POST" for line in lines) == 10  # and Gym's GET /models probe
    return pytester.path / "rec"


def test_a_replay_gives_the_recorded_outcomes_with_no_model_call_and_a_changed_prompt_errors_that_task(
    pytester: pytest.Pytester, gym: RealGym, gym_cli: str, recorded: Path
) -> None:
    """One recording (a Gym start each costs half a minute), replayed twice with the model gone: unchanged
    under -n 2 (one replay server for the run), then with one prompt changed, without xdist."""
    gym.reset()
    result = pytester.runpytest_subprocess(
        *_start(gym_cli, "rep", "--gym-policy", "replay", f"--gym-cassette={recorded}"), "-n", "2"
    )
    result.assert_outcomes(passed=4, failed=6)
    assert gym.policy_calls() == 0
    assert outcomes_by_test(pytester.path / "rep.xml") == outcomes_by_test(pytester.path / "rec.xml")
    log = (pytester.path / "rep" / "recorder.log").read_text(encoding="utf-8")
    assert '"hits": 10' in log
    assert '"misses": 0' in log

    rows = [json.loads(line) for line in (pytester.path / "example.jsonl").read_text().splitlines() if line.strip()]
    rows[1]["responses_create_params"]["input"][0]["content"] += " Think twice."
    (pytester.path / "changed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = list(_start(gym_cli, "changed", "--gym-policy", "replay", f"--gym-cassette={recorded}"))
    args[args.index("example.jsonl")] = "changed.jsonl"
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=4, failed=4, errors=2)
    assert gym.policy_calls() == 0
    result.stdout.fnmatch_lines(["*no recorded answer for request*input[[]0[]].content*"])
    changed = task_hash(rows[1])[:12]
    outcome = outcomes_by_test(pytester.path / "changed.xml")
    assert {name for name, kind in outcome.items() if kind == "error"} == {f"{changed}[r0]", f"{changed}[r1]"}


def test_prompts_and_answers_that_look_like_credentials_replay_as_hits_with_identical_answers(
    pytester: pytest.Pytester, example: Path, gym: RealGym, gym_cli: str
) -> None:
    """Issue 20: the end-of-run scrub masked the cassette as text, so a prompt holding ``?token=...`` replayed as
    a miss and a recorded ``password='...'`` answer was altered. Record, let the run end, replay: all hits, the
    same answers, the cassette holding prompts and answers as they were sent (the run folder's records mask a
    ``password=`` value as they do for any source)."""
    rows = [json.loads(line) for line in example.read_text().splitlines() if line.strip()]
    for row in rows:
        row["responses_create_params"]["input"][0]["content"] += (
            " See https://docs.example/q?token=abc123def456 and HTTP Basic authentication."
        )
    (pytester.path / "creds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gym.script(answer="password='hunter2x' Bearer: none. \\boxed{E}", reset_stats=True)
    try:
        rec = list(_start(gym_cli, "rec", "--gym-policy", "record", f"--gym-model-url={gym.policy_url}"))
        rec[rec.index("example.jsonl")] = "creds.jsonl"
        pytester.runpytest_subprocess(*rec).assert_outcomes(passed=4, failed=6)
    finally:
        gym.reset()
    rep = list(_start(gym_cli, "rep", "--gym-policy", "replay", "--gym-cassette=rec"))
    rep[rep.index("example.jsonl")] = "creds.jsonl"
    pytester.runpytest_subprocess(*rep).assert_outcomes(passed=4, failed=6)
    assert gym.policy_calls() == 0
    log = (pytester.path / "rep" / "recorder.log").read_text(encoding="utf-8")
    assert '"hits": 10' in log
    assert '"misses": 0' in log

    def answers(run: str) -> dict[tuple[int, int], str]:
        records = [json.loads(line) for line in (pytester.path / run / "rollouts.jsonl").read_text().splitlines()]
        return {(r["_ng_task_index"], r["_ng_rollout_index"]): answer_text(r) for r in records}

    recorded, replayed = answers("rec"), answers("rep")
    assert len(recorded) == 10
    assert replayed == recorded
    assert len(set(recorded.values())) == 1
    cassette = (pytester.path / "rec" / "cassette.jsonl").read_text(encoding="utf-8")
    assert cassette.count("?token=abc123def456") >= 10  # the prompts, stored as sent
    assert cassette.count("password='hunter2x' Bearer: none.") == 10  # the answers, as the model gave them
    assert "***" not in cassette
