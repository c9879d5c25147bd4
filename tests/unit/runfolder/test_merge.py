"""Merging shard run folders: records a hand-edited shard holds give a note, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.runfolder.layout import AGGREGATE_FILE, ROLLOUTS_FILE, RUN_INFO_FILE
from pytest_gym.runfolder.merge import index_shards, read_shard_folders, write_merged


def shard(folder: Path, *records: dict[str, Any]) -> Path:
    folder.mkdir()
    (folder / RUN_INFO_FILE).write_text(json.dumps({"shard": "1/1", "repeats": 1}), encoding="utf-8")
    lines = [json.dumps(record) for record in records]
    (folder / ROLLOUTS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def record(task: Any, **fields: Any) -> dict[str, Any]:
    return {
        "reward": 1.0,
        "agent_ref": {"name": "agent"},
        "_ng_task_index": task,
        "_ng_rollout_index": 0,
        "_pytest_gym_task_hash": f"{task}".zfill(64),
        **fields,
    }


def merged(tmp_path: Path, *records: dict[str, Any]) -> list[str]:
    folders = read_shard_folders([shard(tmp_path / "shard", *records)])
    shards = index_shards(folders)
    try:
        return write_merged(shards, tmp_path / "out").notes
    finally:
        shards.close()


@pytest.mark.parametrize(("index", "shown"), [("2", "'2'"), ([2], "[2]"), (True, "True"), (None, "None")])
def test_a_task_index_that_is_not_a_whole_number_is_a_note_not_a_type_error(
    tmp_path: Path, index: Any, shown: str
) -> None:
    """Text beside numbers failed the sort, a list the duplicate check (unhashable); ``true`` was task 1."""
    notes = merged(tmp_path, record(1), record(index), record(3))
    assert notes == [
        "merge: aggregate metrics of agent not computed: a task or repeat index that is not a whole number "
        f"({shown}, 0)"
    ]
    assert len((tmp_path / "out" / ROLLOUTS_FILE).read_text(encoding="utf-8").splitlines()) == 3


def test_a_response_that_is_not_an_object_is_measured_without_its_usage(tmp_path: Path) -> None:
    assert merged(tmp_path, record(1, response=[1, 2]), record(2, response="text")) == []
    entries = json.loads((tmp_path / "out" / AGGREGATE_FILE).read_text(encoding="utf-8"))
    assert entries[0]["agent_metrics"]["mean/reward"] == 1.0
