"""Several datasets in one run: each dataset's tasks get their own ``_ng_task_index`` range (Gym's tools key a
run folder by task and rollout index), recorded in the run info, the same with xdist, in every shard, and for a
resumed older folder whose records restarted the index with every dataset.

A stand-in Gym (tests/helpers/standin.py) answers the rollouts; Gym's own tools reading a two-dataset folder are
tests/gym/test_trajectories.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.jsonl import read_jsonl
from tests.helpers.standin import StandinGym, serving

AGENT = "fake_agent"


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:
        yield server


def write_datasets(folder: Path) -> dict[str, tuple[str, int]]:
    """a.jsonl (3 rows, one repeated) and b.jsonl (4 rows); task hash -> (dataset, the index it must get)."""
    expected: dict[str, tuple[str, int]] = {}
    start = 0
    for name, contents in (("a", ["x", "y", "x", "z"]), ("b", ["p", "q", "r", "s"])):
        rows = [{"responses_create_params": {"input": [{"role": "user", "content": f"{name}-{c}"}]}} for c in contents]
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        distinct = list(dict.fromkeys(task_hash(r) for r in rows))
        for position, digest in enumerate(distinct):
            expected[digest] = (f"{name}.jsonl", start + position)
        start += len(rows)  # a range is the dataset's rows: the duplicate's index stays unused
    return expected


def run(pytester: pytest.Pytester, gym: StandinGym, run_dir: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "a.jsonl", "--gym-dataset", "b.jsonl",
        "--gym-repeats", "2", "--gym-run-dir", run_dir, "-p", "no:cacheprovider", "-p", "no:randomly", *args,
    )  # fmt: skip


def indices(run_dir: Path, name: str = "rollouts.jsonl") -> dict[tuple[str, int], int]:
    """(task hash, repeat) -> _ng_task_index of every record; each key once."""
    found: dict[tuple[str, int], int] = {}
    for record in read_jsonl(run_dir / name):
        key = (record["_pytest_gym_task_hash"], record["_ng_rollout_index"])
        assert key not in found, key
        found[key] = record["_ng_task_index"]
    return found


def check(found: dict[tuple[str, int], int], expected: dict[str, tuple[str, int]]) -> None:
    assert found, "no records"
    for (digest, _), index in found.items():
        assert index == expected[digest][1], (digest, index)
    assert len(set(found.items())) == len({(i, r) for (_, r), i in found.items()})  # (task, rollout) unique


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_each_dataset_gets_its_own_task_index_range(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    expected = write_datasets(pytester.path)
    run(pytester, gym, "run", *xdist).assert_outcomes(passed=14)
    found = indices(pytester.path / "run")
    assert len(found) == 14
    check(found, expected)
    keys = {(i, r) for (_, r), i in found.items()}
    inputs = read_jsonl(pytester.path / "run" / "rollouts_materialized_inputs.jsonl")
    assert len(inputs) == 14
    assert {(b["_ng_task_index"], b["_ng_rollout_index"]) for b in inputs} == keys
    sent = [r.json() for r in gym.log if r.route == "/run"]
    assert len(sent) == 14
    assert {(b["_ng_task_index"], b["_ng_rollout_index"]) for b in sent} == keys
    info = json.loads((pytester.path / "run" / "pytest_gym_run.json").read_text())
    assert info["task_ranges"] == [
        {"path": "a.jsonl", "start": 0, "rows": 4},
        {"path": "b.jsonl", "start": 4, "rows": 4},
    ]
    assert "digest" in info  # the settings are there too, whichever process wrote first


def test_shards_and_their_merge_give_a_task_the_same_index(pytester: pytest.Pytester, gym: StandinGym) -> None:
    pytester.makeini("[pytest]\n")
    expected = write_datasets(pytester.path)
    for shard in ("1/2", "2/2"):
        run(pytester, gym, f"shard{shard[0]}", "--gym-shard", shard)
    parts = [indices(pytester.path / f"shard{n}") for n in (1, 2)]
    assert all(parts)
    assert not set(parts[0]) & set(parts[1])
    for part in parts:
        check(part, expected)
    result = pytester.runpytest(
        "--gym-merge", "shard1", "--gym-merge", "shard2", "--gym-run-dir", "merged", "-p", "no:cacheprovider",
    )  # fmt: skip
    result.assert_outcomes(passed=14)
    merged = indices(pytester.path / "merged")
    assert merged == {**parts[0], **parts[1]}
    check(merged, expected)


def older_folder(folder: Path) -> None:
    """Make a run folder look like one written before the ranges: every dataset's indices start at 0."""
    for name in ("rollouts.jsonl", "rollouts_materialized_inputs.jsonl"):
        records: list[dict[str, Any]] = read_jsonl(folder / name)
        for record in records:
            if record["_ng_task_index"] >= 4:  # b.jsonl's
                record["_ng_task_index"] -= 4
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    info = json.loads((folder / "pytest_gym_run.json").read_text())
    del info["task_ranges"]
    (folder / "pytest_gym_run.json").write_text(json.dumps(info))


def test_resuming_an_older_folder_gives_its_records_this_runs_indices(
    pytester: pytest.Pytester, gym: StandinGym
) -> None:
    pytester.makeini("[pytest]\n")
    expected = write_datasets(pytester.path)
    run(pytester, gym, "old").assert_outcomes(passed=14)
    older_folder(pytester.path / "old")
    assert len(set(indices(pytester.path / "old").values())) == 4  # a: 0..2, b: 0..3
    runs_before = gym.calls.get("/run", 0)
    result = run(pytester, gym, "new", "--gym-resume", "old")
    result.assert_outcomes(passed=14)
    assert gym.calls.get("/run", 0) == runs_before  # everything reused
    check(indices(pytester.path / "new"), expected)
