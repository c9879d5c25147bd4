"""The run's Gym state file read back to stop what the run started: only processes recorded as this plugin records
them are signalled. A hand-edited pid of ``true``, 0 or 1 would reach init's process group or pytest's own."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.acquire import release
from pytest_gym.gym.deployment import Started, stop_started, write_state
from pytest_gym.gym.kept import stop_kept
from pytest_gym.process import groups
from pytest_gym.process.groups import Supervised
from pytest_gym.runfolder.layout import STATE_FILE

RECORDED = asdict(Supervised("gym", 4242, 4243, "/tmp/run/gym.state", "INT", 30.0))


def test_a_process_as_recorded_reads_back_as_it_was() -> None:
    assert Supervised.from_json(RECORDED) == Supervised("gym", 4242, 4243, "/tmp/run/gym.state", "INT", 30.0)
    assert Supervised.from_json(json.loads(json.dumps(RECORDED))) == Supervised.from_json(RECORDED)


@pytest.mark.parametrize(
    "changes",
    [
        {"pid": True},
        {"pid": 0},
        {"pid": 1},
        {"pid": -7},
        {"pid": "4242"},
        {"pid": 10**30},
        {"supervisor_pid": 1},
        {"first": "KILL"},
        {"grace": float("nan")},
        {"grace": -1},
        {"name": None},
    ],
    ids=lambda changes: "-".join(f"{k}={v!r}"[:20] for k, v in changes.items()),
)
def test_a_process_not_recorded_as_this_plugin_records_it_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"no process id|not one recorded|no number of seconds"):
        Supervised.from_json({**RECORDED, **changes})


def test_stopping_signals_only_the_processes_recorded_as_this_plugin_records_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    signalled: list[Supervised] = []
    monkeypatch.setattr(groups, "stop_supervised", lambda items: signalled.extend(items) or ["gym: stopped"])
    started = Started(supervised=[RECORDED, {**RECORDED, "name": "policy", "pid": True}, ["not", "a", "record"]])
    notes = stop_started(started, grace=5.0)
    assert [(item.name, item.pid, item.grace) for item in signalled] == [("gym", 4242, 5.0)]
    assert notes[0] == "gym: stopped"
    assert len(notes) == 3
    assert all("was not stopped" in note for note in notes[1:])


@pytest.mark.parametrize("started", [[], "gym", {"gym_pid": 1, "bogus": 2}, {"supervised": {"pid": 1}}])
def test_a_hand_edited_state_file_ends_the_run_with_a_note_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: Any
) -> None:
    signalled: list[Supervised] = []
    monkeypatch.setattr(groups, "stop_supervised", lambda items: signalled.extend(items) or [])
    write_state(tmp_path, {"started": started})
    notes = release(GymSettings(resources_server="mcqa"), tmp_path)
    assert signalled == []
    assert len(notes) == 1
    assert str(tmp_path / STATE_FILE) in notes[0]
    assert "stop what it started by hand" in notes[0]


def test_stopping_a_kept_gym_whose_state_file_was_hand_edited_says_so_and_signals_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    signalled: list[Supervised] = []
    monkeypatch.setattr(groups, "stop_supervised", lambda items: signalled.extend(items) or [])
    entry = tmp_path / "pool" / "0123abcd"
    entry.mkdir(parents=True)
    write_state(entry, {"started": {"supervised": [{**RECORDED, "pid": 0}], "bogus": True}})
    notes = stop_kept(tmp_path / "pool", grace=1.0)
    assert signalled == []
    assert len(notes) == 1
    assert notes[0].startswith("0123abcd: the kept Gym's state file")
    assert "stop what it started by hand" in notes[0]
