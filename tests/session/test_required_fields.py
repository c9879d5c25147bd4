"""An mcqa row without ``expected_answer`` is named at collection, not silently scored 0 (issue 24 item 8)."""

from __future__ import annotations

import json

import pytest

NO_GYM = ("--gym-cli=/nonexistent/gym", "--gym-agent", "mcqa_simple_agent", "--gym-policy", "scripted")


def rows(*answers: str | None) -> str:
    out = []
    for i, answer in enumerate(answers):
        r: dict[str, object] = {"responses_create_params": {"input": f"question {i}"}}
        if answer is not None:
            r["expected_answer"] = answer
        out.append(json.dumps(r) + "\n")
    return "".join(out)


def test_mcqa_rows_without_expected_answer_are_named(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "d.jsonl").write_text(rows("B", None, "C", None))
    args = ("--gym-dataset", "d.jsonl", "--co", "-q", *NO_GYM)
    result = pytester.runpytest(*args, "--gym-resources-server", "mcqa")
    result.stdout.fnmatch_lines(
        ["*GymMissingFieldWarning: *d.jsonl: 2 rows without 'expected_answer'*would score 0. Lines: 2, 4.*"]
    )
    other = pytester.runpytest(*args, "--gym-resources-server", "equivalence_rule")
    assert "GymMissingFieldWarning" not in other.stdout.str()  # other environments score by other fields
    (pytester.path / "d.jsonl").write_text(rows("B", "C"))
    complete = pytester.runpytest(*args, "--gym-resources-server", "mcqa")
    assert "GymMissingFieldWarning" not in complete.stdout.str()
