"""Trial outcomes and Gym request bodies as the run-folder writer gets them, for tests that write run folders."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.runfolder.layout import ROLLOUTS_FILE
from pytest_gym.runfolder.records import EnvironmentServer

AGENT = "mcqa_simple_agent"
SERVER = EnvironmentServer("mcqa_environment_server", "legacy_agent")


def request_for(row: dict[str, Any], task: int, repeat: int, **extra: Any) -> dict[str, Any]:
    """The body pytest-gym POSTs (client.build_request): the row, its agent, then the two indices."""
    return {**row, "agent_ref": {"name": AGENT}, **extra, "_ng_task_index": task, "_ng_rollout_index": repeat}


def rewarded(answer: dict[str, Any], request: dict[str, Any]) -> TrialOutcome:
    return TrialOutcome(
        nodeid=f"data.jsonl::{request['_ng_task_index']:012x}[r{request['_ng_rollout_index']}]",
        task_hash="ab" * 32,
        repeat=request["_ng_rollout_index"],
        line=request["_ng_task_index"] + 1,
        dataset="data.jsonl",
        reward=float(answer["reward"]),
        answer=answer,
        request=request,
        latency_s=0.02,
        agent=AGENT,
    )


def faulted(
    request: dict[str, Any] | None, error_class: str, http_status: int | None, message: str = "it broke", **kw: Any
) -> TrialOutcome:
    return TrialOutcome(
        nodeid="data.jsonl::000000000003[r1]",
        task_hash="cd" * 32,
        repeat=1,
        line=4,
        dataset="data.jsonl",
        request=request,
        error=message,
        error_class=error_class,
        http_status=http_status,
        agent=AGENT,
        **kw,
    )


def reused_rewards(pytester: pytest.Pytester, run_dir: str) -> list[float]:
    records = read_jsonl(pytester.path / run_dir / ROLLOUTS_FILE)
    return [r["reward"] for r in sorted(records, key=lambda r: (r["_ng_task_index"], r["_ng_rollout_index"]))]
