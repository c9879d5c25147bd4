"""No secret in anything a run writes: a whole start-mode run with a marker key, then a search."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.helpers.realgym import start_mode

MARKER = "sk-pytestgym-MARKER-7f3a9c"


def test_policy_key_appears_in_no_file_and_no_output(
    pytester: pytest.Pytester, example: Path, gym_cli: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)
    result = pytester.runpytest_subprocess(
        *start_mode(gym_cli),
        "--gym-gate",
        "mean_reward>=0.4",
        "--gym-summary",
        "summary.json",
        "--junitxml",
        "report.xml",
        "--gym-reward-key",
        "reward",
        "-rA",
    )
    result.assert_outcomes(passed=3, failed=3)
    files = [p for p in pytester.path.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.name == "rollouts.jsonl" for p in files)
    assert any(p.name == "gym_env.log" for p in files)
    leaks = [str(p) for p in files if MARKER.encode() in p.read_bytes()]
    assert leaks == []
    assert MARKER not in result.stdout.str() + result.stderr.str()
    # ... and yet the key did reach the model, through Gym: the policy logs digests of what it received.
    used = hashlib.sha256(f"Bearer {MARKER}".encode()).hexdigest()
    assert used in (pytester.path / "run" / "policy.log").read_text()
