"""No secret anywhere a real start-mode run writes or prints, even when the model echoes the key back.

The scripted policy answers with the policy key (and a credential no environment variable names) in its
text, as a model that leaks its prompt or headers would. Then every output is searched: stdout, stderr,
JUnit, every file in the run folder (recursively, Gym's log and Hydra's outputs included), the summary,
the ``summary`` exporter's file, and under xdist a copy of the claim files the workers published
outcomes in (taken before the end of the run removes them).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.helpers.realgym import start_mode

MARKER = "sk-pytestgym-MARKER-7f3a9c"
#: In ``api_key=...`` text: masked by its key's name, not by its value.
UNNAMED = "unnamed-cred-5d1e8b"
ANSWER = f"\\boxed{{E}} my key is {MARKER}, api_key={UNNAMED}"

#: Under xdist, copies the claim board before the controller's end of run removes it.
CLAIM_COPY = """
import shutil
from pathlib import Path


def pytest_sessionfinish(session):
    workerinput = getattr(session.config, "workerinput", None)
    board = Path("run") / ".xdist-trials"
    if workerinput is not None and board.is_dir():
        shutil.copytree(board, Path("claims-" + workerinput["workerid"]))
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_no_secret_in_any_output(
    pytester: pytest.Pytester, example: Path, gym_cli: str, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)
    pytester.makeconftest(CLAIM_COPY)
    exported = pytester.path / "exported"
    result = pytester.runpytest_subprocess(
        *start_mode(gym_cli),
        "--gym-policy-answer", ANSWER,
        "--gym-gate", "mean_reward>=0.4",
        "--gym-summary", "summary.json",
        "--gym-export", "summary", "--gym-export-opt", f"summary.dir={exported}",
        "--junitxml", "report.xml",
        "-rA",
        *workers,
        timeout=600,
    )  # fmt: skip
    result.assert_outcomes(passed=3, failed=3)  # 2 trials and the gate pass
    files = [p for p in pytester.path.rglob("*") if p.is_file() and not p.is_symlink()]
    names = {p.name for p in files}
    assert {"rollouts.jsonl", "gym_env.log", "report.xml", "summary.json", "pytest_gym_run.json"} <= names
    assert any(p.parent == exported for p in files)  # the exporter wrote its file
    if workers:
        assert any(p.suffix == ".trial" and p.parent.name.startswith("claims-") for p in files)
    for secret in (MARKER, UNNAMED):
        assert secret not in result.stdout.str() + result.stderr.str()
        assert [str(p) for p in files if secret.encode() in p.read_bytes()] == []
    # The answer did come back, masked: the rollouts hold its text.
    assert b"my key is ***, api_key=***" in (pytester.path / "run" / "rollouts.jsonl").read_bytes()
    # ... and the key did reach the model, through Gym: the policy logs digests of what it received.
    used = hashlib.sha256(f"Bearer {MARKER}".encode()).hexdigest()
    assert used in (pytester.path / "run" / "policy.log").read_text()
