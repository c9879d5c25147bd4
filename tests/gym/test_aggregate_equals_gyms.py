"""Gym's aggregate as pytest-gym recomputes it for a merged run folder equals Gym's own computation, run in
Gym's interpreter on the same records."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.runfolder.aggregate import aggregate_metrics, pass_majority
from tests.helpers.paths import ROOT

_GYM_SCRIPT = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from nemo_gym.reward_profile import compute_aggregate_metrics, compute_pass_majority_metrics
out = []
for vrs in json.load(sys.stdin):
    aggregate = compute_aggregate_metrics(vrs).model_dump(mode="json")
    tasks = {}
    for vr in vrs:
        if not vr.get("mask_sample"):
            tasks.setdefault(vr.get("_ng_task_index", 0), []).append(vr)
    aggregate["pass"] = compute_pass_majority_metrics([tasks[t] for t in sorted(tasks)])[0] if tasks else {}
    out.append(aggregate)
print(json.dumps(out))
"""


def _record_sets() -> list[list[dict[str, Any]]]:
    """Binary and continuous rewards, unequal and single repeats, sparse fields, masks, ng_perf; sorted by
    (task, repeat) as ``aggregate_request_from_records`` sends them."""
    import random

    rnd = random.Random(7)
    sets = []
    for case in range(12):
        records = []
        for task in range(rnd.randint(1, 6)):
            repeats = rnd.randint(1, 4) if case % 3 == 0 else (3 if case % 3 == 1 else 1)
            for repeat in range(repeats):
                usage = {"input_tokens": rnd.randint(5, 50), "output_tokens": rnd.randint(1, 9), "total_tokens": 1}
                record: dict[str, Any] = {
                    "_ng_task_index": task,
                    "_ng_rollout_index": repeat,
                    "reward": rnd.choice([0.0, 1.0]) if case % 2 else rnd.choice([0.0, 0.5, 1.0, 0.25]),
                    "response": {"usage": usage},
                    "extracted_answer": "E",
                    "agent_ref": {"name": "a"},
                    "_pytest_gym_attempts": 1,
                }
                if rnd.random() < 0.3:
                    record["extra_score"] = rnd.random()
                if rnd.random() < 0.2:
                    record["flag"] = rnd.random() < 0.5
                if case == 5 and rnd.random() < 0.3:
                    record["mask_sample"] = True
                if case == 7:
                    record["ng_perf"] = {"prompt_tokens": rnd.randint(1, 9), "num_turns": rnd.randint(1, 3)}
                    record["ng_perf"].update(completion_tokens=4, total_latency_ms=rnd.random() * 100)
                records.append(record)
        sets.append(records)
    return sets


def _gym_python() -> Path | None:
    configured = os.environ.get("PYTEST_GYM_PYTHON")
    candidates = [Path(configured)] if configured else []
    candidates.append(ROOT / ".venvs" / "gym" / "bin" / "python")
    cli_path = os.environ.get("PYTEST_GYM_CLI")
    if cli_path:
        candidates.append(Path(cli_path).parent / "python")
    return next((p for p in candidates if p.exists()), None)


def _close(ours: Any, gym: Any, where: str) -> None:
    if isinstance(gym, dict):
        assert isinstance(ours, dict), where
        assert set(ours) == set(gym), f"{where}: keys differ: {sorted(set(ours) ^ set(gym))}"
        for key in gym:
            _close(ours[key], gym[key], f"{where}.{key}")
    elif isinstance(gym, list):
        assert isinstance(ours, list), where
        assert len(ours) == len(gym), where
        for i, (a, b) in enumerate(zip(ours, gym, strict=True)):
            _close(a, b, f"{where}[{i}]")
    elif isinstance(gym, (int, float)) and not isinstance(gym, bool):
        assert math.isclose(ours, gym, rel_tol=1e-9, abs_tol=1e-12), f"{where}: ours {ours}, Gym's {gym}"
    else:
        assert ours == gym, where


def test_aggregate_equals_gyms_own_computation() -> None:
    python = _gym_python()
    if python is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("no NeMo Gym interpreter: set PYTEST_GYM_PYTHON or create .venvs/gym")
        pytest.skip("no NeMo Gym interpreter: set PYTEST_GYM_PYTHON or create .venvs/gym")
    sets = _record_sets()
    proc = subprocess.run(
        [str(python), "-c", _GYM_SCRIPT], input=json.dumps(sets), capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for number, (records, gym) in enumerate(zip(sets, json.loads(proc.stdout), strict=True)):
        gym_pass = gym.pop("pass")
        _close(aggregate_metrics(records), gym, f"set {number}")
        tasks: dict[int, list[dict[str, Any]]] = {}
        for record in records:
            if not record.get("mask_sample"):
                tasks.setdefault(record["_ng_task_index"], []).append(record)
        _close(pass_majority([tasks[t] for t in sorted(tasks)]), gym_pass, f"set {number} pass@k")
