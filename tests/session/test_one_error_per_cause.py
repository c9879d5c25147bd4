"""A Gym that cannot start is reported once: its cause (the first real error of its log), the fix, the log to
read; every other trial it leaves is one line saying it was not run because of it (issue 24 item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.fake_gym_cli import install, start_args

ROWS = 6
REPEATS = 3  # 18 trials


@pytest.fixture
def eighteen(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FAKE_GYM_RECORD", str(pytester.path / "record"))
    rows = [
        {"responses_create_params": {"input": [{"role": "user", "content": f"question {i}"}]}, "expected_answer": "A"}
        for i in range(ROWS)
    ]
    path = pytester.path / "six.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    pytester.makeini("[pytest]\n")
    return install(pytester.path / "bin")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_failed_start_of_18_trials_says_its_cause_once_and_one_line_per_trial(
    pytester: pytest.Pytester, eighteen: Path, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    monkeypatch.setenv("FAKE_GYM_FAIL", "uv")
    # A process of its own: the whole output is measured, and an in-process run under xdist adds pytest's
    # "already imported, cannot be rewritten" warning, which a user's run does not print.
    result = pytester.runpytest_subprocess(
        *start_args(eighteen), "--gym-dataset", "six.jsonl", "--gym-repeats", str(REPEATS), *workers
    )
    result.assert_outcomes(errors=ROWS * REPEATS)
    output = result.outlines + result.errlines
    text = "\n".join(output)
    assert len(output) < 100, text
    assert 1 <= text.count("uv: command not found") <= 2, text
    assert "During handling of the above exception" not in text
    assert text.count("Traceback") == 0, text  # Gym's own traceback is behind the cause: not quoted
    result.stdout.fnmatch_lines(
        [
            "*Gym exited with code 1 during start-up.",
            "first error in the log: (mcqa_environment_server) /bin/bash: line 1: uv: command not found",
            "fix: Gym builds one venv per server with `uv`, which is not on PATH: pass --gym-server-venv auto*",
            "log: */run/gym_env.log, last lines:",
        ]
    )
    # The errors' section: with CI set, pytest's short summary repeats each message whole.
    errors = text.split("short test summary info")[0]
    assert errors.count("not run: Gym is unavailable") == ROWS * REPEATS - 1, text


@pytest.mark.parametrize("dist", ["loadfile", "load"])
def test_the_cause_is_reported_whichever_worker_started_gym(
    pytester: pytest.Pytester, eighteen: Path, monkeypatch: pytest.MonkeyPatch, dist: str
) -> None:
    """Both workers try Gym as soon as they collected; one starts it, and the trials may all go to the other
    (--dist loadfile, or one trial): the cause is still reported once, by the first trial to claim it."""
    monkeypatch.setenv("FAKE_GYM_FAIL", "uv")
    result = pytester.runpytest_subprocess(
        *start_args(eighteen), "--gym-dataset", "six.jsonl", "-n", "2", "--dist", dist
    )
    result.assert_outcomes(errors=ROWS, deselected=0)
    # The errors' section: with CI set, pytest's short summary repeats each message whole.
    text = result.stdout.str().split("short test summary info")[0]
    assert text.count("first error in the log: (mcqa_environment_server) /bin/bash: line 1: uv: command not found") == 1
    assert text.count("not run: Gym is unavailable") == ROWS - 1
