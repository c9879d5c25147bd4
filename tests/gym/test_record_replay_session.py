"""Record once, replay in CI: --gym-policy record|replay through pytest, against a real Gym.

The shared Gym's scripted policy (answering E) stands in for the "real" model behind the recording
proxy; the replays run with no model at all, and must give the same JUnit outcomes with zero calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.jsonl import read_jsonl
from tests.helpers.junit import outcomes_by_test
from tests.helpers.realgym import RealGym, reuse
from tests.helpers.standin import answer_text

MODEL = "pytest-gym-scripted"


def _start(gym_cli: str, pool: Path, run_dir: str, *args: str) -> tuple[str, ...]:
    """Start-mode arguments; kept in ``pool``: the recording starts the Gym, its replays attach (its recorder leased
    to each run)."""
    return (
        "--gym-dataset", "example.jsonl", "--gym-resources-server", "mcqa", f"--gym-cli={gym_cli}",
        "--gym-server-venv", "auto", "--gym-agent", "mcqa_simple_agent", "--gym-model", MODEL,
        "--gym-repeats", "2", f"--gym-run-dir={run_dir}", "--junitxml", f"{run_dir}.xml", *reuse(pool), *args,
    )  # fmt: skip


#: The model's answer: right for the rows expecting E, and holding text of a credential's shape (issue 20).
ANSWER = "password='hunter2x' Bearer: none. \\boxed{E}"


@pytest.fixture
def recorded(pytester: pytest.Pytester, example: Path, gym: RealGym, gym_cli: str, kept_pool: Path) -> Path:
    """A recording of the example (2 repeats) made through the proxy in front of the scripted policy, every prompt
    holding a URL token and "HTTP Basic authentication", every answer ``password='...'`` (issue 20: the end-of-run
    scrub once masked the cassette as text, so such a prompt replayed as a miss and such an answer was altered)."""
    rows = [json.loads(line) for line in example.read_text().splitlines() if line.strip()]
    for row in rows:
        row["responses_create_params"]["input"][0]["content"] += (
            " See https://docs.example/q?token=abc123def456 and HTTP Basic authentication."
        )
    example.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gym.script(answer=ANSWER, reset_stats=True)
    try:
        result = pytester.runpytest_subprocess(
            *_start(gym_cli, kept_pool, "rec", "--gym-policy", "record", f"--gym-model-url={gym.policy_url}")
        )
        calls = gym.policy_calls()
    finally:
        gym.reset()
    result.assert_outcomes(passed=4, failed=6)
    assert calls == 10
    lines = (pytester.path / "rec" / "cassette.jsonl").read_text(encoding="utf-8").splitlines()
    assert sum(json.loads(line)["method"] == "POST" for line in lines) == 10  # and Gym's GET /models probe
    return pytester.path / "rec"


def answers(run: Path) -> dict[tuple[int, int], str]:
    return {(r["_ng_task_index"], r["_ng_rollout_index"]): answer_text(r) for r in read_jsonl(run / "rollouts.jsonl")}


def test_a_replay_gives_the_recorded_outcomes_with_no_model_call_and_a_changed_prompt_errors_that_task(
    pytester: pytest.Pytester, gym: RealGym, gym_cli: str, recorded: Path, kept_pool: Path
) -> None:
    """One recording (a Gym start each costs half a minute), replayed twice with the model gone: unchanged
    under -n 2 (one replay server for the run; compared with the recording run, no answer changed: all hits, the
    same answers, the cassette holding prompts and answers as they were sent), then with one prompt changed,
    without xdist."""
    result = pytester.runpytest_subprocess(
        *_start(
            gym_cli, kept_pool, "rep", "--gym-policy", "replay", f"--gym-cassette={recorded}", "--gym-baseline-run=rec"
        ),
        "-n",
        "2",
    )
    result.assert_outcomes(passed=4, failed=6)
    # Compared answer by answer with the recording run: the replay gave every answer back, nothing changed.
    result.stdout.fnmatch_lines(
        ["  changes against the baseline run */rec: 0 new failures, 0 fixed, 0 moved (of 5 tasks both runs measured)"]
    )
    assert gym.policy_calls() == 0
    assert outcomes_by_test(pytester.path / "rep.xml") == outcomes_by_test(pytester.path / "rec.xml")
    log = (pytester.path / "rep" / "recorder.log").read_text(encoding="utf-8")
    assert '"hits": 10' in log
    assert '"misses": 0' in log
    before, after = answers(recorded), answers(pytester.path / "rep")
    assert len(before) == 10
    assert after == before
    assert len(set(before.values())) == 1  # the records mask the password= value, as for any source
    cassette = (recorded / "cassette.jsonl").read_text(encoding="utf-8")
    assert cassette.count("?token=abc123def456") >= 10  # the prompts, stored as sent
    assert cassette.count("password='hunter2x' Bearer: none.") == 10  # the answers, as the model gave them
    assert "***" not in cassette

    rows = [json.loads(line) for line in (pytester.path / "example.jsonl").read_text().splitlines() if line.strip()]
    rows[1]["responses_create_params"]["input"][0]["content"] += " Think twice."
    (pytester.path / "changed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = list(_start(gym_cli, kept_pool, "changed", "--gym-policy", "replay", f"--gym-cassette={recorded}"))
    args[args.index("example.jsonl")] = "changed.jsonl"
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=4, failed=4, errors=2)
    assert gym.policy_calls() == 0
    result.stdout.fnmatch_lines(["*no recorded answer for request*input[[]0[]].content*"])
    changed = task_hash(rows[1])[:12]
    outcome = outcomes_by_test(pytester.path / "changed.xml")
    assert {name for name, kind in outcome.items() if kind == "error"} == {f"{changed}[r0]", f"{changed}[r1]"}
