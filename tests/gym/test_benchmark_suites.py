"""A Gym benchmark as a suite, against the real Gym: the test benchmark ``minibench`` (tests/data/gymroot, an
offline prepare script), started with ``gym env start --benchmark``, prepared with ``gym eval prepare``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.paths import GYMROOT


def _args(gym_cli: str, *args: str) -> tuple[str, ...]:
    return (
        "--gym-policy", "scripted", "--gym-policy-answer", "\\boxed{E}", f"--gym-cli={gym_cli}",
        "--gym-server-venv", "auto", "--gym-run-dir", "run", *args,
    )  # fmt: skip


def test_a_benchmark_runs_as_a_suite_with_gyms_metrics(pytester: pytest.Pytester, gym_cli: str) -> None:
    shutil.copytree(GYMROOT, pytester.path / "gymroot")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        test_probe="""
import json, urllib.request

def test_probe(gym_server):
    with urllib.request.urlopen(gym_server.url + "/global_config_dict_yaml", timeout=10) as answer:
        text = json.load(answer)
    assert "description: a, b [c] = 'd'" in text or 'description: "a, b [c] = \\'d\\'"' in text, text
"""
    )
    result = pytester.runpytest(
        *_args(gym_cli, "--gym-search-dir", "gymroot", "--gym-benchmark", "minibench", "--gym-hydra",
               "minibench_mcqa_resources_server.resources_servers.mcqa.description=\"a, b [c] = 'd'\""),
        "-n", "2", "-p", "no:randomly", ".",
    )  # fmt: skip
    result.assert_outcomes(passed=3, failed=4)  # rows expect B, C, E; 2 repeats (num_repeats); and the probe
    result.stdout.fnmatch_lines(
        ["minibench: 3 tasks, 6 trials, 0 errors, mean reward 0.333*", "minibench: Gym's metrics for benchmark *"]
    )
    run = pytester.path / "run"
    metrics = json.loads((run / "gym_benchmark_metrics.json").read_text())
    assert metrics["minibench"]["agent"] == "minibench_mcqa_simple_agent"
    assert metrics["minibench"]["key_metrics"]
    assert "Dataset prepared at" in (run / "gym_prepare.log").read_text()
    assert "--benchmark minibench" in (run / "gym_env.log").read_text()


def test_missing_benchmark_data_is_a_usage_error_naming_the_fix(pytester: pytest.Pytester, gym_cli: str) -> None:
    shutil.copytree(GYMROOT, pytester.path / "gymroot")
    prepare = pytester.path / "gymroot" / "benchmarks" / "minibench" / "prepare.py"
    prepare.write_text("def prepare():\n    raise OSError('no network here')\n")
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest(*_args(gym_cli, "--gym-search-dir", "gymroot", "--gym-benchmark", "minibench"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gym eval prepare --benchmark minibench* failed*--gym-benchmark-data PATH*"])


def test_a_composable_agent_is_bound_and_runs(pytester: pytest.Pytester, gym_cli: str, example: Path) -> None:
    (pytester.path / "rs.yaml").write_text(
        "my_mcqa:\n  resources_servers:\n    mcqa:\n      entrypoint: app.py\n      grading_mode: null\n"
        "      domain: knowledge\n      verified: false\n      description: d\n      value: v\n"
    )
    result = pytester.runpytest(
        *_args(gym_cli, "--gym-config", "responses_api_agents/simple_agent/configs/simple_agent.yaml",
               "--gym-config", "rs.yaml", "--gym-config", "responses_api_models/openai_model/configs/openai_model.yaml",
               "--gym-dataset", "example.jsonl"),
    )  # fmt: skip
    result.assert_outcomes(passed=2, failed=3)
    log = (pytester.path / "run" / "gym_env.log").read_text()
    assert "++simple_agent.responses_api_agents.simple_agent.resources_server.name=my_mcqa" in log
