"""Without a Gym to use: an unreachable --gym-url, errors each trial once naming the cause; no ``gym`` on PATH
is a usage error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def test_unreachable_gym_url_errors_each_trial_once(pytester: pytest.Pytester, example: Path) -> None:
    from pytest_gym.gym.startargs import free_port

    result = pytester.runpytest("--gym-url", f"http://127.0.0.1:{free_port()}", "--gym-dataset", "example.jsonl")
    result.assert_outcomes(errors=5)
    result.stdout.fnmatch_lines(["*cannot read Gym's servers from http://127.0.0.1:*"])


def test_gym_not_on_path(pytester: pytest.Pytester, example: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert shutil.which("gym") is None
    result = pytester.runpytest(
        "--gym-dataset", "example.jsonl", "--gym-resources-server", "mcqa", "--gym-policy", "scripted"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # when pytest starts, not once per trial
    result.stderr.fnmatch_lines(["*--gym-cli: 'gym' was not found on PATH. Pass the `gym` of a NeMo Gym install*"])
