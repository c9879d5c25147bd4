"""The run's Gym state file read back to stop what the run started: only processes recorded as this plugin records
them are signalled. A hand-edited pid of ``true``, 0 or 1 would reach init's process group or pytest's own."""

from __future__ import annotations

import json
import os
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


def test_why_reuse_did_not_keep_the_gym_is_still_said_when_its_state_file_was_hand_edited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    signalled: list[Supervised] = []
    monkeypatch.setattr(groups, "stop_supervised", lambda items: signalled.extend(items) or [])
    write_state(tmp_path, {"started": "gym", "reuse_note": "--gym-reuse: every kept Gym with these settings is in use"})
    notes = release(GymSettings(resources_server="mcqa"), tmp_path)
    assert signalled == []
    assert notes[0] == "--gym-reuse: every kept Gym with these settings is in use"
    assert "stop what it started by hand" in notes[1]


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


def test_a_shutdown_grace_of_infinity_as_recorded_reads_back() -> None:
    """``--gym-shutdown-grace inf`` is a valid setting: JSON writes it as Infinity, and it reads back."""
    recorded = json.loads(json.dumps({**RECORDED, "grace": float("inf")}))
    assert Supervised.from_json(recorded).grace == float("inf")


@pytest.mark.parametrize("own", ["pid", "group"])
def test_this_pytest_process_or_its_group_is_never_stopped_on_a_files_word(own: str) -> None:
    pid = os.getpid() if own == "pid" else os.getpgrp()
    with pytest.raises(ValueError, match="this pytest process or its group"):
        Supervised.from_json({**RECORDED, "pid": pid})


@pytest.mark.parametrize("content", ["[]", '"ended"', "[" * 5000, "{torn"])
def test_a_supervisor_state_that_is_not_an_object_says_nothing_about_how_it_ended(tmp_path: Path, content: str) -> None:
    state = tmp_path / "gym.state"
    state.write_text(content, encoding="utf-8")
    assert groups._ended(Supervised("gym", 4242, 4243, str(state))) is None  # read on the stop path: no traceback


@pytest.mark.parametrize(
    "kept_record",
    [
        "gone",
        {"offsets": {}},
        {"entry": "ENTRY", "offsets": [1]},
        {"entry": "ENTRY", "offsets": {"gym.log": True}},
        {"entry": "ENTRY", "offsets": {"gym.log": float("inf")}},
        {"entry": "ENTRY", "offsets": {"../../outside.log": 0}},
    ],
    ids=["text", "no-entry", "offsets-list", "offset-true", "offset-infinity", "log-outside"],
)
def test_giving_back_a_kept_gym_recorded_by_hand_copies_nothing_and_says_so(tmp_path: Path, kept_record: Any) -> None:
    entry, run_dir = tmp_path / "pool" / "0123abcd", tmp_path / "runs" / "run"
    entry.mkdir(parents=True)
    run_dir.mkdir(parents=True)
    (entry / "gym.log").write_text("the kept Gym's log\n", encoding="utf-8")
    (tmp_path / "runs" / "outside.log").write_text("not the run's\n", encoding="utf-8")
    if isinstance(kept_record, dict) and "entry" in kept_record:
        kept_record = {**kept_record, "entry": str(entry)}
    write_state(run_dir, {"kept": json.loads(json.dumps(kept_record))})
    notes = release(GymSettings(resources_server="mcqa"), run_dir)
    assert len(notes) == 1
    assert str(run_dir / STATE_FILE) in notes[0]
    assert "does not record the kept Gym as pytest-gym records it" in notes[0]
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".log")]  # no log copied in
    assert (tmp_path / "runs" / "outside.log").read_text(encoding="utf-8") == "not the run's\n"
