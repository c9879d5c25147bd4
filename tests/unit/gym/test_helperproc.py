"""The run's helper for Gym's steps: one process in Gym's interpreter runs the trajectory step, then the health
checks on the finalized folder. A stand-in ``nemo_gym`` package (Gym's four collector functions and its health
checks, recording each process that imports it) plays Gym; the real one: tests/gym/test_trajectories.py."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.endpoint import AGENT_TYPE, ENVIRONMENT_TYPE, GymEndpoint, ServerInstance
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym import trajectories
from pytest_gym.gym.helperproc import GymHelper
from pytest_gym.gym.trajectories import Finalizer
from pytest_gym.runfolder.layout import MATERIALIZED_FILE, ROLLOUTS_FILE, STATE_FILE
from pytest_gym.runner.run import EARLY_TRAJECTORIES_S, GymRun

FAKE_GYM = {
    "__init__.py": "import os\nwith open(os.environ['FAKE_GYM_PIDS'], 'a') as fh:\n    fh.write(f'{os.getpid()}\\n')\n",
    "base_responses_api_model.py": (
        "import os, time\n"
        "def merge_model_call_capture_into_record(result, dirs, include_payloads):\n"
        "    if os.environ.get('FAKE_GYM_STARTED'):\n"
        "        open(os.environ['FAKE_GYM_STARTED'], 'a').close()\n"
        "    time.sleep(result.get('sleep', 0))\n"
        "    if result.get('boom'):\n"
        "        raise ValueError('x' * int(os.environ.get('FAKE_GYM_NOISE', '10')))\n"
        "    result['ng_model_call_capture'] = {'dirs': [str(d) for d in dirs]}\n"
    ),
    "rollout_collection.py": (
        "def _has_observation_gap(result, name):\n    return False\n"
        "def _attach_trajectory_record(row, result):\n    result['ng_trajectory'] = {'row': row['_ng_task_index']}\n"
        "def _attach_ng_perf(result, observability_enabled, rollout_latency_ms):\n"
        "    result['ng_perf'] = {'observed': observability_enabled}\n"
    ),
    "rollout_health.py": (
        "import json, types\n"
        "def run_health_checks(path, output_dir, workers):\n"
        "    records = [json.loads(line) for line in path.read_text().splitlines()]\n"
        "    healthy = sum('ng_model_call_capture' in r for r in records)  # finalized first\n"
        "    verdicts = {'healthy': healthy, 'unhealthy': len(records) - healthy, 'unobserved': 0}\n"
        "    return types.SimpleNamespace(summary={'run': {'verdicts': verdicts}})\n"
    ),
}


@pytest.fixture
def gym_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Gym install's bin/ (``gym`` and ``python``) whose interpreter imports the stand-in ``nemo_gym``."""
    package = tmp_path / "site" / "nemo_gym"
    package.mkdir(parents=True)
    for name, text in FAKE_GYM.items():
        (package / name).write_text(text)
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "gym").write_text("#!/bin/sh\n")
    (bin_dir / "gym").chmod(0o755)
    os.symlink(sys.executable, bin_dir / "python")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("FAKE_GYM_PIDS", str(tmp_path / "pids"))
    return bin_dir / "python"


def helper_processes(tmp_path: Path) -> int:
    path = tmp_path / "pids"
    return len(path.read_text().splitlines()) if path.exists() else 0


def write_run(run_dir: Path, records: int, **extra: Any) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"reward": 1.0, "agent_ref": {"name": "a"}, "_ng_task_index": n, "_ng_rollout_index": 0, **extra})
        for n in range(records)
    ]
    (run_dir / ROLLOUTS_FILE).write_text("".join(line + "\n" for line in lines))
    servers = [
        ServerInstance("a", AGENT_TYPE, "simple_agent", "http://127.0.0.1:1"),
        ServerInstance("a_env", ENVIRONMENT_TYPE, "legacy_agent", "http://127.0.0.1:2"),
    ]
    endpoint = GymEndpoint(
        "http://127.0.0.1:3", servers, {"a": "http://127.0.0.1:2/run"}, local_pids=True,
        capture_dir=str(run_dir / "model_calls"),
    )  # fmt: skip
    (run_dir / STATE_FILE).write_text(json.dumps({"endpoint": endpoint.to_json()}))


def finalized_run(run_dir: Path, gym_python: Path) -> GymRun:
    """An owner's run of 3 rollouts, its trajectory step done (its helper kept for the health checks)."""
    write_run(run_dir, 3)
    run = GymRun(GymSettings(cli=str(gym_python.parent / "gym")), run_dir, owner=True)
    run.start_gym_steps()
    run.finalize_trajectories()
    return run


def test_one_process_finalizes_the_trajectories_then_checks_the_finalized_folder(
    tmp_path: Path, gym_python: Path
) -> None:
    run_dir = tmp_path / "run"
    run = finalized_run(run_dir, gym_python)
    records = [json.loads(line) for line in (run_dir / ROLLOUTS_FILE).read_text().splitlines()]
    assert [r["ng_trajectory"]["row"] for r in records] == [0, 1, 2]
    assert records[0]["ng_model_call_capture"] == {"dirs": [str(run_dir / "model_calls")]}
    assert run.gym_helper is not None  # kept for the health checks
    _, why = run.health_checks()
    assert why is None
    assert "Gym's health checks: 3 rollouts checked, 3 healthy, 0 unhealthy, 0 unobserved" in run.notes
    assert run.gym_helper is None
    assert helper_processes(tmp_path) == 1


def test_the_health_checks_wait_for_a_trajectory_step_under_way(
    tmp_path: Path, gym_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step runs in a thread of its own (Gym's aggregate metrics are asked in the background): the health
    checks, asked meanwhile, wait for it and check the finalized records."""
    started = tmp_path / "started"
    monkeypatch.setenv("FAKE_GYM_STARTED", str(started))
    run_dir = tmp_path / "run"
    write_run(run_dir, 3, sleep=0.3)
    run = GymRun(GymSettings(cli=str(gym_python.parent / "gym")), run_dir, owner=True)
    run.start_gym_steps()
    step = threading.Thread(target=run.finalize_trajectories)
    step.start()
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started.exists()
    assert run.health_checks()[1] is None
    step.join(timeout=30)
    assert "Gym's health checks: 3 rollouts checked, 3 healthy, 0 unhealthy, 0 unobserved" in run.notes
    assert helper_processes(tmp_path) == 1


def test_with_the_health_checks_off_the_helper_stops_after_the_trajectories(tmp_path: Path, gym_python: Path) -> None:
    run_dir = tmp_path / "run"
    write_run(run_dir, 2)
    run = GymRun(GymSettings(cli=str(gym_python.parent / "gym"), health_check="off"), run_dir, owner=True)
    run.start_gym_steps()
    assert run.gym_helper is not None
    assert run.gym_helper.steps == ("trajectories",)
    run.finalize_trajectories()
    assert run.gym_helper is None
    assert helper_processes(tmp_path) == 1


def test_the_health_checks_alone_start_their_helper_when_asked(tmp_path: Path, gym_python: Path) -> None:
    run_dir = tmp_path / "run"
    write_run(run_dir, 2)
    run = GymRun(GymSettings(cli=str(gym_python.parent / "gym"), trajectories="off"), run_dir, owner=True)
    assert run.health_checks()[1] is None
    assert "Gym's health checks: 2 rollouts checked, 0 healthy, 2 unhealthy, 0 unobserved" in run.notes
    assert helper_processes(tmp_path) == 1


def test_errors_past_a_pipes_size_neither_block_the_helper_nor_lose_the_answers(
    tmp_path: Path, gym_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each failing record writes 100 kB to stderr: a pipe nobody reads would stop the helper at the first."""
    monkeypatch.setenv("FAKE_GYM_NOISE", "100000")
    helper = GymHelper(gym_python, ["trajectories"], tmp_path, dict(os.environ))
    try:
        items = [{"n": n, "row": {"_ng_task_index": n}, "result": {"boom": True}, "last": n == 4} for n in range(5)]
        data = "".join(json.dumps(item) + "\n" for item in items).encode()
        answers = helper.request(data, 5, 60, "too slow")
        assert [json.loads(a)["boom"] for a in answers] == [True] * 5  # kept as sent, as Gym's collector does
        assert helper.errors().endswith("x" * 100)
    finally:
        helper.close()


def test_a_helper_that_does_not_answer_in_time_is_stopped(tmp_path: Path, gym_python: Path) -> None:
    helper = GymHelper(gym_python, ["trajectories"], tmp_path, dict(os.environ))
    try:
        item = {"n": 0, "row": {"_ng_task_index": 0}, "result": {"sleep": 30}, "last": True}
        with pytest.raises(RuntimeError, match="too slow"):
            helper.request((json.dumps(item) + "\n").encode(), 1, 2, "too slow")
        assert helper.proc is None
    finally:
        helper.close()


def test_unknown_steps_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected some of trajectories, health"):
        GymHelper(Path(sys.executable), ["trajectory"], tmp_path)


def test_an_interpreter_that_does_not_start_is_named_as_such_not_as_missing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "gym").write_text("#!/bin/sh\n")
    (bin_dir / "gym").chmod(0o755)
    (bin_dir / "python").write_text("not a program\n")  # there, but not executable
    run_dir = tmp_path / "run"
    write_run(run_dir, 1)
    raw = (run_dir / ROLLOUTS_FILE).read_text()
    run = GymRun(GymSettings(cli=str(bin_dir / "gym")), run_dir, owner=True)
    run.start_gym_steps()
    run.finalize_trajectories()
    _, why = run.health_checks()
    assert (run_dir / ROLLOUTS_FILE).read_text() == raw
    assert run.notes[0].startswith("Gym's interpreter did not start: ")
    assert run.notes[1].startswith("trajectories: PermissionError")
    assert why is not None
    assert why.startswith("Gym's health checks did not run: ")
    assert not any("not found" in note for note in run.notes), run.notes


def write_part(run_dir: Path, numbers: range, torn: str = "") -> None:
    """Rollouts ``numbers`` and their rows, appended as a run records them (the row first); ``torn``: the start of
    a next record, not ended yet."""
    with (run_dir / MATERIALIZED_FILE).open("a") as rows, (run_dir / ROLLOUTS_FILE).open("a") as rollouts:
        for n in numbers:
            rows.write(json.dumps({"q": f"row {n}", "_ng_task_index": n, "_ng_rollout_index": 0}) + "\n")
            rollouts.write(json.dumps({"reward": 1.0, "agent_ref": {"name": "a"}, "_ng_task_index": n,
                                       "_ng_rollout_index": 0}) + "\n")  # fmt: skip
        rollouts.write(torn)


def test_rollouts_finalized_while_the_trials_run_give_the_folder_finalizing_at_the_end_gives(
    tmp_path: Path, gym_python: Path
) -> None:
    early, late = tmp_path / "early", tmp_path / "late"
    for run_dir in (early, late):
        write_run(run_dir, 0)
        write_part(run_dir, range(3), torn='{"reward": 1.0, "_ng_ta')
    helpers = [GymHelper(gym_python, ["trajectories"], run_dir) for run_dir in (early, late)]
    try:
        finalizer = Finalizer(helpers[0], early / "model_calls")
        assert finalizer.finalize_new(early, {}) == 3
        assert finalizer.finalize_new(early, {}) == 0  # nothing new; the torn line waits for its end
        for run_dir in (early, late):
            with (run_dir / ROLLOUTS_FILE).open("a") as fh:
                fh.write('sk_index": 3, "_ng_rollout_index": 0}\n')
            write_part(run_dir, range(4, 6))
        assert finalizer.finalize_new(early, {}) == 2  # 4 and 5; 3, whose row was never written, is left for the end
        write_part(early, range(6, 7))
        write_part(late, range(6, 7))
        assert finalizer.finalize(early, {}).startswith("7 records finalized (5 while the trials ran)")
        assert Finalizer(helpers[1], late / "model_calls").finalize(late, {}).startswith("7 records finalized (0 ")
    finally:
        for helper in helpers:
            helper.close()
    records = [json.loads(line) for line in (early / ROLLOUTS_FILE).read_text().splitlines()]
    assert [r["ng_trajectory"]["row"] for r in records] == [0, 1, 2, 3, 4, 5, 6]
    assert (early / ROLLOUTS_FILE).read_text().replace("early", "late") == (late / ROLLOUTS_FILE).read_text()


def test_the_early_step_holds_only_the_rows_of_trials_not_back_yet(tmp_path: Path, gym_python: Path) -> None:
    """A long run's rows are not all kept in memory until its end: a row goes once its record is finalized."""
    write_run(tmp_path, 0)
    write_part(tmp_path, range(3))
    with (tmp_path / MATERIALIZED_FILE).open("a") as rows:  # trial 3 sent, its rollout not back yet
        rows.write(json.dumps({"q": "row 3", "_ng_task_index": 3, "_ng_rollout_index": 0}) + "\n")
    helper = GymHelper(gym_python, ["trajectories"], tmp_path)
    try:
        finalizer = Finalizer(helper, tmp_path / "model_calls")
        assert finalizer.finalize_new(tmp_path, {}) == 3
        assert [row["q"] for row in finalizer._rows.values()] == ["row 3"]
    finally:
        helper.close()


def test_the_run_finalizes_rollouts_while_the_trials_run_and_never_after_its_helper_closed(
    tmp_path: Path, gym_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = tmp_path / "started"
    monkeypatch.setenv("FAKE_GYM_STARTED", str(started))
    run_dir = tmp_path / "run"
    write_run(run_dir, 0)
    run = GymRun(GymSettings(cli=str(gym_python.parent / "gym"), health_check="off"), run_dir, owner=True)
    run.start_gym_steps()
    write_part(run_dir, range(2))
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:  # Gym's step ran on them: before the end
        time.sleep(0.05)
    assert started.exists()
    run.finish()  # a run that ends without judging (nothing to judge, or stopped): the helper closes
    assert run.gym_helper is None
    write_part(run_dir, range(2, 4))
    time.sleep(2.5 * EARLY_TRAJECTORIES_S)
    assert helper_processes(tmp_path) == 1  # none started again for the rollouts written after the end
    run.finalize_trajectories()  # had it been asked: what ran early is in the folder with the rest
    records = [json.loads(line) for line in (run_dir / ROLLOUTS_FILE).read_text().splitlines()]
    assert [r["ng_trajectory"]["row"] for r in records] == [0, 1, 2, 3]


def test_without_gyms_interpreter_no_trajectory_step_waits_for_rollouts(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_run(run_dir, 1)
    run = GymRun(GymSettings(cli=str(tmp_path / "nowhere" / "gym")), run_dir, owner=True)
    run.start_gym_steps()
    assert run.gym_helper is None
    assert "pytest-gym-trajectories" not in {thread.name for thread in threading.enumerate()}


def test_the_end_reads_no_record_again_that_was_finalized_while_the_trials_ran(
    tmp_path: Path, gym_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record finalized early is replaced by the step's answer: the end neither parses its line again nor reads
    the rows (each taken as it came); only what is left is read."""
    write_run(tmp_path, 0)
    write_part(tmp_path, range(3))
    helper = GymHelper(gym_python, ["trajectories"], tmp_path)
    parsed: list[str] = []
    read: list[str] = []
    real_parse, real_read = trajectories.parse_record, trajectories.read_records

    def counted_parse(path: Path, number: int, line: bytes) -> Any:
        parsed.append(f"{path.name}:{number}")
        return real_parse(path, number, line)

    def counted_read(path: Path) -> Any:
        read.append(path.name)
        return real_read(path)

    try:
        finalizer = Finalizer(helper, tmp_path / "model_calls")
        assert finalizer.finalize_new(tmp_path, {}) == 3
        write_part(tmp_path, range(3, 4))  # back after the early step last looked
        monkeypatch.setattr(trajectories, "parse_record", counted_parse)
        monkeypatch.setattr(trajectories, "read_records", counted_read)
        assert finalizer.finalize(tmp_path, {}).startswith("4 records finalized (3 while the trials ran)")
    finally:
        helper.close()
    assert parsed == [f"{ROLLOUTS_FILE}:4"]
    assert read == [MATERIALIZED_FILE]
    records = [json.loads(line) for line in (tmp_path / ROLLOUTS_FILE).read_text().splitlines()]
    assert [r["ng_trajectory"]["row"] for r in records] == [0, 1, 2, 3]
    assert finalizer.records == records


def test_the_health_checks_use_the_rollouts_the_trajectory_step_wrote_without_reading_them_again_until_the_end(
    tmp_path: Path, gym_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gym.runner import run as run_module

    run = finalized_run(tmp_path / "run", gym_python)
    read: list[str] = []
    real_read = run_module.read_records
    monkeypatch.setattr(run_module, "read_records", lambda path: read.append(path.name) or real_read(path))
    _, why = run.health_checks()
    assert why is None
    assert "Gym's health checks: 3 rollouts checked, 3 healthy, 0 unhealthy, 0 unobserved" in run.notes
    assert ROLLOUTS_FILE not in read
    assert run.rollouts_written == [json.loads(line) for line in (run.run_dir / ROLLOUTS_FILE).read_text().splitlines()]
    run.finish()  # the page has used them: the run lets them go
    assert run.rollouts_written is None


def test_without_a_trajectory_step_the_end_reads_the_rollouts_once_for_the_health_checks_metrics_and_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attached with no Gym interpreter here, nothing finalizes the records: the health checks and Gym's
    /aggregate_metrics (its own thread) share one read of ``rollouts.jsonl``, which the page then uses too."""
    from pytest_gym.runner import run as run_module

    run_dir = tmp_path / "run"
    write_run(run_dir, 4)
    run = GymRun(GymSettings(cli=str(tmp_path / "no-gym" / "gym")), run_dir, owner=True)
    read: list[str] = []
    real_read, real_jsonl = run_module.read_records, run_module.read_jsonl
    monkeypatch.setattr(run_module, "read_records", lambda path: read.append(path.name) or real_read(path))
    monkeypatch.setattr(run_module, "read_jsonl", lambda path: read.append(path.name) or real_jsonl(path))
    run.start_aggregate()
    _, why = run.health_checks()
    assert why is not None
    assert "Gym's interpreter was not found" in why
    assert run.aggregate_metrics() == []  # nothing serves the agent's port: a note, no entries
    assert any("/aggregate_metrics failed for a" in note for note in run.notes), run.notes
    assert read == [ROLLOUTS_FILE]
    assert run.rollouts_written == [json.loads(line) for line in (run_dir / ROLLOUTS_FILE).read_text().splitlines()]


def test_a_broken_rollouts_file_still_gives_gym_its_whole_lines_for_the_metrics(tmp_path: Path) -> None:
    """The owner's codec refuses a line that is not JSON; Gym's /aggregate_metrics is asked about the whole lines
    all the same (it fails here only because nothing serves the agent's port)."""
    run_dir = tmp_path / "run"
    write_run(run_dir, 2)
    with (run_dir / ROLLOUTS_FILE).open("a") as fh:
        fh.write("not json\n" + json.dumps({"reward": 0.0, "agent_ref": {"name": "a"}}) + "\n")
    run = GymRun(GymSettings(cli=str(tmp_path / "no-gym" / "gym")), run_dir, owner=True)
    assert run.aggregate_metrics() == []
    assert any("/aggregate_metrics failed for a" in note for note in run.notes), run.notes
    assert run.rollouts_written is None  # nothing read by the codec: the page reads the file and reports it
