"""``--gym-config`` with the real Gym: Gym's own relative config starts and runs trials (a typo is a usage
error before any start: tests/gym/test_first_start.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

LC = "resources_servers/equivalence_rule/configs/lc.yaml"
MODEL = "responses_api_models/openai_model/configs/openai_model.yaml"


def _gym_site(gym_cli: str) -> Path:
    site = next(Path(gym_cli).resolve().parent.parent.glob("lib/python3*/site-packages"))
    assert (site / LC).is_file(), f"{LC} is not in Gym's install root {site}"
    return site


def test_gyms_own_relative_config_starts_and_runs_trials(pytester: pytest.Pytester, gym_cli: str) -> None:
    # equivalence_rule's example rows name their agent; "exact" grading: the last two rows expect "6".
    site = _gym_site(gym_cli)
    shutil.copy(site / "resources_servers/equivalence_rule/data/example.jsonl", pytester.path / "lc.jsonl")
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(
        "--gym-dataset", "lc.jsonl", "--gym-config", LC, "--gym-config", MODEL, "--gym-policy", "scripted",
        "--gym-policy-answer", "6", "--gym-model", "lc,test 'model'", f"--gym-cli={gym_cli}",
        "--gym-server-venv", "auto", "--gym-run-dir", "run", "--gym-shutdown-grace", "20",
    )  # fmt: skip
    result.assert_outcomes(passed=2, failed=3)
    log = (pytester.path / "run" / "gym_env.log").read_text()
    assert f"--config {LC} --config {MODEL}" in log
    assert "++head_server.host=127.0.0.1" in log
    state = json.loads((pytester.path / "run" / "deployment.json").read_text())
    assert state["stopped"][0].startswith("gym: stopped")
    assert "lc_equivalence_rule_simple_agent" in {s["process_name"] for s in state["endpoint"]["servers"]}
