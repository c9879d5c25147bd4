"""The run folder is evidence: prose that only looks like a credential's context is stored as it came (issue 20).

Rows and the model's answers say "Basic authentication", "The secret: ...", "Token: a unit of text" and hold
https URLs, while the environment has what GitHub Actions and Google's SDKs set: the OIDC request URL and a
service-account path, both "secret-named". Through a real Gym (the scripted policy stands in for the LLM),
alone and under xdist: every row, prompt and answer is in the run folder byte for byte, the terminal shows
the run folder's path whole, and a re-score of the folder moves no reward.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.runfolder.layout import MATERIALIZED_FILE, ROLLOUTS_FILE
from tests.helpers.paths import EXAMPLE
from tests.helpers.realgym import RealGym, attach

pytestmark = pytest.mark.gym

PROSE = (
    " (Explain HTTP Basic authentication. The secret: the butler did it. Token: a unit of text. "
    "Docs: https://pipelines.actions.githubusercontent.com/docs and https://example.com/a?b=1)"
)
#: What the model answers: the same prose, a URL, a path like the run folder's, and the letter.
ANSWER = (
    "Basic authentication sends user:password base64-encoded. The secret: the butler did it. "
    "Token: a unit of text. See https://pipelines.actions.githubusercontent.com/x and /work/proj0/run. \\boxed{E}"
)
FIELDS = {
    "note": "The secret: the butler did it",
    "source": "https://pipelines.actions.githubusercontent.com/source",
    "glossary": {"Token": "a unit of text", "secret": "the butler did it", "auth": "Basic authentication"},
}


def prose_rows(folder: Path) -> list[dict[str, Any]]:
    """The mcqa example's rows with the prose in each prompt and the fields beside them."""
    rows = []
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        row["responses_create_params"]["input"][0]["content"] += PROSE
        rows.append({**row, **FIELDS})
    (folder / "prose.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def answer_text(record: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in record["response"]["output"]
        if item.get("type") == "message"
        for part in item["content"]
        if part.get("type") == "output_text"
    )


@pytest.fixture
def ci_environment(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """What GitHub Actions (``id-token: write``) and a Google service account put in the environment."""
    monkeypatch.setenv(
        "ACTIONS_ID_TOKEN_REQUEST_URL", "https://pipelines.actions.githubusercontent.com/abc123/idtoken/x?api-version=2"
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(pytester.path / "gcp-sa.json"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/work/proj0/.aws/credentials")
    pytester.makeini("[pytest]\n")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_prose_rows_and_answers_are_stored_byte_for_byte(
    pytester: pytest.Pytester, gym: RealGym, ci_environment: None, workers: list[str]
) -> None:
    rows = prose_rows(pytester.path)
    gym.script(answer=ANSWER)
    run_dir = pytester.path / "run"
    result = pytester.runpytest_subprocess(
        *attach(gym, "--gym-run-dir", "run", "--junitxml", "report.xml", *workers, dataset="prose.jsonl")
    )
    result.assert_outcomes(passed=2, failed=3)
    assert f"run folder: {run_dir}" in result.stdout.str()

    inputs = read_jsonl(run_dir / MATERIALIZED_FILE)
    assert len(inputs) == 5
    for record in inputs:
        row = rows[record["_ng_task_index"]]
        assert {key: record[key] for key in row} == row  # every field, prompt included, as in the dataset
    raw = (run_dir / MATERIALIZED_FILE).read_text(encoding="utf-8") + (run_dir / ROLLOUTS_FILE).read_text("utf-8")
    for text in ("Explain HTTP Basic authentication.", "The secret: the butler did it", "Token: a unit of text"):
        assert text in raw
    assert "***" not in raw
    records = read_jsonl(run_dir / ROLLOUTS_FILE)
    assert len(records) == 5
    for record in records:
        assert answer_text(record) == ANSWER
        row = rows[record["_ng_task_index"]]
        assert (
            record["responses_create_params"]["input"][0]["content"]
            == row["responses_create_params"]["input"][0]["content"]
        )
    summary = json.loads((run_dir / "pytest_gym_summary.json").read_text(encoding="utf-8"))
    assert summary["run_dir"] == str(run_dir)
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "The secret: the butler did it" in page
    assert "Explain HTTP Basic authentication" in page
    assert "***" not in page


def test_a_rescore_of_prose_answers_moves_no_reward(
    pytester: pytest.Pytester, gym: RealGym, ci_environment: None
) -> None:
    prose_rows(pytester.path)
    gym.script(answer=ANSWER)
    first = pytester.runpytest_subprocess(*attach(gym, "--gym-run-dir", "earlier", dataset="prose.jsonl"))
    first.assert_outcomes(passed=2, failed=3)
    calls = gym.policy_calls()
    result = pytester.runpytest_subprocess(
        *attach(gym, "--gym-rescore", "earlier", "--gym-run-dir", "run", dataset="prose.jsonl")
    )
    result.assert_outcomes(passed=2, failed=3)
    assert gym.policy_calls() == calls
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text(encoding="utf-8"))
    assert summary["rescore"]["moved"] == []
    before = {r["_ng_task_index"]: answer_text(r) for r in read_jsonl(pytester.path / "earlier" / ROLLOUTS_FILE)}
    after = {r["_ng_task_index"]: answer_text(r) for r in read_jsonl(pytester.path / "run" / ROLLOUTS_FILE)}
    assert before == after == dict.fromkeys(range(5), ANSWER)
    shutil.rmtree(pytester.path / "earlier")
