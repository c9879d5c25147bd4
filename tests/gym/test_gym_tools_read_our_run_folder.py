"""Gym's own tools read a run folder pytest-gym wrote (no Gym running, its install only).

The trajectory the tests write is what Gym's collector writes; ATIF export, profile and health-check accept
our records.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.runfolder.layout import ROLLOUTS_FILE
from pytest_gym.runfolder.rollouts import RunFolderWriter
from tests.helpers.gym_tools import (
    export_atif_args,
    health_args,
    health_report,
    profile_args,
    run_gym,
    run_gym_commands,
)
from tests.helpers.paths import ROOT
from tests.helpers.run_records import AGENT, SERVER, faulted, request_for, rewarded

DEFAULT_GYM_CLI = ROOT / ".venvs" / "gym" / "bin" / "gym"


def gym_cli() -> Path:
    cli = Path(os.environ.get("PYTEST_GYM_CLI") or DEFAULT_GYM_CLI)
    if not (cli.is_file() and os.access(cli, os.X_OK)):
        message = f"the gym CLI is not at {cli} (scripts/install-gym.sh, or set PYTEST_GYM_CLI)"
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(message + ": this test must run in CI")
        pytest.skip(message)
    return cli


def mcqa_data(cli: Path) -> Path:
    """Gym's bundled mcqa data, in the site-packages of the venv the CLI belongs to."""
    found = sorted(cli.parent.parent.glob("lib/python3*/site-packages/resources_servers/mcqa/data"))
    if not found:
        pytest.fail(f"no resources_servers/mcqa/data next to {cli}: is it a nemo-gym 0.7 install?")
    return found[0]


def gym_trajectory(answer: dict[str, Any], model: str = "policy_model") -> dict[str, Any]:
    """The ``ng_trajectory`` Gym writes for one simple_agent turn with observability on and a resolved verdict.

    Shaped as Gym's collector re-projects it (``_attach_trajectory_record``: the agent's trajectory joined
    with the captured model call, nulls spelled out); checked to be a fixed point of that projection.
    """
    params, response = answer["responses_create_params"], answer["response"]
    ref = {"type": "responses_api_models", "name": model}
    call_ref = {"model_call_id": None, "model_ref": ref, "response_id": response["id"]}
    conversation = [{**item, "phase": None} for item in (*params["input"], *response["output"])]
    started, usage = response["created_at"], response["usage"]
    return {
        "schema_version": "1.0",
        "task_id": "0",
        "rollout_id": "0-0",
        "invocations": [
            {
                "kind": "agent_invocation",
                "invocation_id": "root",
                "parent_invocation_id": None,
                "spawned_by_tool_call_id": None,
                "status": "completed",
                "duration_ms": None,
                "error_type": None,
                "model_calls": [call_ref],
                "conversation": conversation,
            }
        ],
        "turns": [
            {
                "invocation_id": "root",
                "task_id": "0",
                "rollout_id": "0-0",
                "turn_no": 1,
                "timestamp": started,
                "question": params["input"],
                "answer": response["output"],
                "reasoning_content": None,
                "resolved": answer["reward"] == 1.0,
                "step_count": 0,
                "model_calls": [call_ref],
            }
        ],
        "model_calls": [
            {
                "model_call_id": "mc-0",
                "started_at": started,
                "completed_at": started + 2.5,
                "duration_ms": 2500.0,
                "request": params,
                "response": response,
                "response_metadata": {
                    "response_id": response["id"],
                    "model_ref": ref,
                    "model": response["model"],
                    "dialect": "responses",
                    "status_code": 200,
                    "response_status": "completed",
                    "finish_reason": None,
                    "upstream_attempted": None,
                    "response_source": None,
                    "upstream_status_code": None,
                    "local_response_reason": None,
                    "error_category": None,
                    "latency_ttft_ms": None,
                },
                "token_stats": {
                    "prompt_tokens": usage["input_tokens"],
                    "completion_tokens": usage["output_tokens"],
                    "reasoning_tokens": usage["output_tokens_details"]["reasoning_tokens"],
                    "total_tokens": usage["total_tokens"],
                    "cached_tokens": usage["input_tokens_details"]["cached_tokens"],
                },
            }
        ],
        "tool_calls": [],
        "gaps": [],
    }


def mcqa_outcomes(data: Path) -> list[TrialOutcome]:
    """Gym's example mcqa rows with its example answers, two repeats each, the last one a fault."""
    rows = read_jsonl(data / "example.jsonl")
    answers = read_jsonl(data / "example_rollouts.jsonl")
    outcomes = []
    for task, (row, answer) in enumerate(zip(rows, answers, strict=True)):
        for repeat in range(2):
            request = request_for(row, task, repeat)
            if (task, repeat) == (len(rows) - 1, 1):
                outcomes.append(faulted(request, "http_status", 500, "HTTP 500 from http://127.0.0.1:1/run"))
            else:
                # The verifier echoes the dataset fields it was sent.
                extra = {k: v for k, v in row.items() if k != "responses_create_params"}
                outcomes.append(rewarded({**answer, **extra}, request))
    return outcomes


FIXED_POINT = """
import copy, json, sys
from nemo_gym.rollout_collection import _attach_trajectory_record

record = json.load(open(sys.argv[1]))
projected = copy.deepcopy(record)
_attach_trajectory_record({"_ng_task_index": 0, "_ng_rollout_index": 0}, projected)
print(json.dumps(projected) == json.dumps(record))
"""


def test_the_trajectory_we_test_with_is_what_gyms_collector_writes(tmp_path: Path) -> None:
    cli = gym_cli()
    answer = read_jsonl(mcqa_data(cli) / "example_rollouts.jsonl")[0]
    record = {**answer, "ng_trajectory": gym_trajectory(answer), "_ng_task_index": 0, "_ng_rollout_index": 0}
    (tmp_path / "record.json").write_text(json.dumps(record))
    python = cli.parent / "python"  # the interpreter of the venv Gym is installed in
    result = subprocess.run(
        [str(python), "-c", FIXED_POINT, str(tmp_path / "record.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "True"


def test_gym_exports_our_rollouts_as_atif(tmp_path: Path) -> None:
    cli = gym_cli()
    answer = read_jsonl(mcqa_data(cli) / "example_rollouts.jsonl")[0]
    answer["ng_trajectory"] = gym_trajectory(answer)
    row = {"responses_create_params": answer["responses_create_params"], "expected_answer": "I"}
    with RunFolderWriter(tmp_path / "run", servers={AGENT: SERVER}) as writer:
        writer.record(rewarded(answer, request_for(row, 0, 0)))

    result = run_gym(str(cli), *export_atif_args(tmp_path / "run" / ROLLOUTS_FILE, tmp_path / "atif"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    [manifest] = read_jsonl(tmp_path / "atif" / "manifest.jsonl")
    assert (manifest["_ng_task_index"], manifest["_ng_rollout_index"]) == (0, 0)
    trajectory = json.loads((tmp_path / "atif" / manifest["trajectory_path"]).read_text())
    assert trajectory["trajectory_id"] == "pytest-gym:0:0"
    assert trajectory["agent"]["name"] == AGENT
    assert "\\boxed{H}" in json.dumps(trajectory["steps"][-1])


def test_gym_export_rejects_a_rollout_without_trajectory_only_for_that(tmp_path: Path) -> None:
    """Gym's strict ATIF export needs ``ng_trajectory``, which /run answers carry only with observability on.

    Gym's own collector writes the same record for mcqa without it; the one complaint is the missing
    trajectory, so the indices and agent stamps we wrote passed Gym's checks.
    """
    cli = gym_cli()
    answer = read_jsonl(mcqa_data(cli) / "example_rollouts.jsonl")[0]
    with RunFolderWriter(tmp_path / "run") as writer:
        writer.record(rewarded(answer, request_for({"responses_create_params": {}}, 0, 0)))
    result = run_gym(
        str(cli),
        *("eval", "export", "--format", "atif", "--rollouts", str(tmp_path / "run" / ROLLOUTS_FILE)),
        *("--output-dir", str(tmp_path / "atif"), "--session-id", "s", "--agent-version", "v"),
        cwd=tmp_path,
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "rejected 1 row(s)" in output
    assert "line 1: ng_trajectory: missing or invalid v1.0 trajectory" in output


def test_gyms_profile_and_health_check_read_our_run_folder(tmp_path: Path) -> None:
    cli = gym_cli()
    outcomes = mcqa_outcomes(mcqa_data(cli))
    run = tmp_path / "run"
    with RunFolderWriter(run, servers={AGENT: SERVER}) as writer:
        for outcome in outcomes:
            writer.record(outcome)
    rewards = [o.reward for o in outcomes if o.reward is not None]

    profile, health = run_gym_commands(  # in turn, in one process: Gym's imports are most of each command's cost
        str(cli),
        [
            # The faulted rollout has an input and no result, as in Gym's own runs.
            (profile_args(run, "++allow_partial_rollouts=True"), tmp_path),
            (health_args(run), tmp_path),
        ],
    )
    assert profile.returncode == 0, profile.stdout + profile.stderr
    assert f"Reward profile completion: {len(rewards)}/{len(outcomes)} rollout rows" in profile.stdout
    [metrics] = json.loads((run / "rollouts_agent_metrics.json").read_text())
    assert metrics["agent_ref"] == {"name": AGENT}
    assert metrics["mean/reward"] == pytest.approx(sum(rewards) / len(rewards))

    assert health.returncode == 0, health.stdout + health.stderr
    report = health_report(health)
    assert report["artifacts"]["records"] == len(rewards)
    assert report["issues"]["record_unreadable"] == 0
    assert report["issues"]["rollout_duplicate_identity"] == 0
