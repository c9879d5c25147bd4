"""The dispatcher and the xdist claim board, against a stand-in ``/run`` server (no Gym needed).

The stand-in Gym (tests/helpers/standin.py) answers every ``/run`` with a reward after a configurable
latency and logs the calls and counts those in flight, so the bounds (concurrency, lookahead) and the
once-only guarantee (claims) can be checked exactly.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import RowReader, Task, read_tasks
from pytest_gym.core.endpoint import GymEndpoint
from pytest_gym.core.outcome import TrialOutcome, TrialSpec
from pytest_gym.rollout import dispatcher as dispatch
from pytest_gym.rollout.admission import Decision, NotAdmitted
from pytest_gym.rollout.claims import BoardClaims, ClaimBoard, GlobalSlots, alive, worker_share
from pytest_gym.rollout.dispatcher import Dispatcher
from pytest_gym.xdist_hooks import worker_slot
from tests.helpers.standin import StandinGym, serving


@pytest.fixture
def fake() -> Iterator[StandinGym]:
    with serving("agent") as server:
        yield server


def runs(fake: StandinGym) -> list[tuple[int, int]]:
    """The (task index, repeat) of each /run the stand-in got, in arrival order."""
    bodies = [request.json() for request in list(fake.log) if request.route == "/run"]
    return [(body["_ng_task_index"], body["_ng_rollout_index"]) for body in bodies]


def make_specs(tmp_path: Path, rows: int, repeats: int = 1) -> list[TrialSpec]:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"responses_create_params": {"input": f"q{i}"}}) + "\n" for i in range(rows)))
    return [
        TrialSpec(nodeid=f"data.jsonl::{task.short_hash}[r{r}]", task=task, task_index=i, repeat=r, agent="agent")
        for i, task in enumerate(read_tasks(data))
        for r in range(repeats)
    ]


def make_dispatcher(fake: StandinGym, concurrency: int, inline: bool = False, **kwargs: Any) -> Dispatcher:
    """A dispatcher of the stand-in's trials; its loop on a thread of its own (as under xdist) unless ``inline``
    (on the caller's thread, as in one process): tests of what runs while pytest's thread does not wait use the
    thread."""
    endpoint = GymEndpoint(head_url="http://127.0.0.1:1", servers=[], run_routes={"agent": fake.base_url + "/run"})
    return Dispatcher(endpoint, concurrency=concurrency, trial_timeout=30, default_agent=None, inline=inline, **kwargs)


#: What holds wherever the loop runs: on its own thread (xdist) or on pytest's (one process).
both_loops = pytest.mark.parametrize("inline", [False, True], ids=["loop-thread", "inline"])


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


# -- the budget split ------------------------------------------------------------------------


@pytest.mark.parametrize(("concurrency", "workers"), [(8, 1), (8, 2), (7, 2), (32, 3), (5, 4), (4, 4), (100, 7)])
def test_worker_shares_are_floor_or_ceil_and_sum_to_the_budget(concurrency: int, workers: int) -> None:
    shares = [worker_share(concurrency, workers, i) for i in range(workers)]
    assert sum(shares) == concurrency
    assert set(shares) <= {concurrency // workers, -(-concurrency // workers)}


def test_every_worker_gets_at_least_one_slot() -> None:
    assert [worker_share(2, 4, i) for i in range(4)] == [1, 1, 1, 1]


def test_worker_slot_reads_xdist_workerinput() -> None:
    assert worker_slot(None) is None
    assert worker_slot({"workerid": "gw3", "workercount": 4}) == (3, 4)


# -- the claim board ---------------------------------------------------------------------------


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_claim_is_won_once_and_names_its_pid(tmp_path: Path) -> None:
    a, b = ClaimBoard(tmp_path, pid=111), ClaimBoard(tmp_path, pid=222)
    assert a.claimant("x::t[r0]") is None
    assert a.claim("x::t[r0]")
    assert not b.claim("x::t[r0]")
    assert b.claimant("x::t[r0]") == 111
    b.release("x::t[r0]")  # not b's claim: nothing happens
    assert a.claimed("x::t[r0]")
    a.release("x::t[r0]")
    assert not a.claimed("x::t[r0]")
    assert b.claim("x::t[r0]")


def test_a_claim_seen_is_not_looked_up_again_and_one_given_back_here_is_free_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The feeder asks whether each trial of its queue is claimed at every pass: a trial seen claimed is known
    without a file lookup. What this process gives back is free again; what another gives back is still seen
    claimed (only for prefetching: ``state`` reads the board)."""
    a, b = ClaimBoard(tmp_path, pid=111), ClaimBoard(tmp_path, pid=222)
    assert a.claim("x::t[r0]")
    assert b.claimed("x::t[r0]")
    lookups: list[str] = []
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda path: lookups.append(str(path)) or real_exists(path))
    assert all(b.claimed("x::t[r0]") for _ in range(5))
    assert lookups == []
    assert a.claimed("x::t[r0]")
    a.release("x::t[r0]")
    assert not a.claimed("x::t[r0]")
    assert b.claimed("x::t[r0]")
    assert b.state("x::t[r0]") == (None, None)


def test_one_taker_wins_a_dead_claimants_trial(tmp_path: Path) -> None:
    dead = dead_pid()
    ClaimBoard(tmp_path, pid=dead).claim("n")
    assert not alive(dead)
    takers = [ClaimBoard(tmp_path, pid=1000 + i) for i in range(3)]
    wins = [board.take_over("n", dead) for board in takers]
    assert wins == [True, False, False]
    assert takers[1].claimant("n") == 1000


def test_published_outcomes_read_back_equal(tmp_path: Path) -> None:
    board = ClaimBoard(tmp_path)
    outcome = TrialOutcome(
        nodeid="d.jsonl::abc[r1]",
        task_hash="abc" * 20,
        repeat=1,
        line=3,
        dataset="d.jsonl",
        reward=0.5,
        answer={"reward": 0.5, "text": "ü \\boxed{E}"},
        request={"responses_create_params": {}},
        latency_s=0.25,
        tokens={"total_tokens": 7},
    )
    assert board.read(outcome.nodeid) is None
    assert board.claim(outcome.nodeid)
    assert board.state(outcome.nodeid) == (board.pid, None)
    board.publish(outcome)
    assert ClaimBoard(tmp_path).state(outcome.nodeid) == (board.pid, replace(outcome, request=None))
    assert TrialOutcome.from_json({**outcome.to_json(), "future_field": 1}) == outcome


def test_a_claim_left_empty_by_a_dead_writer_expires(tmp_path: Path) -> None:
    board = ClaimBoard(tmp_path)
    path = Path(board._path("n"))
    path.touch()
    assert board.claimant("n") == -1  # being written: alive
    os.utime(path, (time.time() - 60, time.time() - 60))
    assert board.claimant("n") == 0
    assert not alive(0)


@pytest.mark.parametrize(
    "line",
    [
        b"[]",
        b"{}",
        b'{"nodeid": "n"}',
        b'"text"',
        b'{"nodeid": "n", "tokens": 5}',
        b"[" * 100_000,
        # The fields there, of types to_json never writes: a reward of true is no 1.0, a latency no text.
        b'{"nodeid": "n", "task_hash": "abc", "repeat": 0, "line": 1, "dataset": "d", "reward": true}',
        b'{"nodeid": "n", "task_hash": "abc", "repeat": 0, "line": 1, "dataset": "d", "latency_s": "x"}',
        b'{"nodeid": "n", "task_hash": "abc", "repeat": true, "line": 1, "dataset": "d", "reward": 1.0}',
        b'{"nodeid": "n", "task_hash": "abc", "repeat": 0, "line": 1, "dataset": "d", "tokens": {"turns": true}}',
    ],
)
def test_a_published_line_that_is_no_outcome_is_none_not_an_error(tmp_path: Path, line: bytes) -> None:
    """Another program's line in a claim file: the trial has no outcome yet, and the waiter does not crash."""
    board = ClaimBoard(tmp_path)
    Path(board._path("n")).write_bytes(b"4242\n" + line + b"\n")
    assert board.state("n") == (4242, None)


def test_a_claim_naming_a_pid_of_thousands_of_digits_is_one_being_written(tmp_path: Path) -> None:
    board = ClaimBoard(tmp_path)
    Path(board._path("n")).write_bytes(b"9" * 5000 + b"\n")
    assert board.claimant("n") == -1


# -- one process ---------------------------------------------------------------------------------


@both_loops
def test_concurrency_bounds_rollouts_in_flight(fake: StandinGym, tmp_path: Path, inline: bool) -> None:
    fake.latency_s = 0.1
    specs = make_specs(tmp_path, 6, repeats=4)
    dispatcher = make_dispatcher(fake, inline=inline, concurrency=4)
    dispatcher.plan(specs)
    started = time.monotonic()
    try:
        outcomes = [dispatcher.result(spec) for spec in specs]
    finally:
        dispatcher.close()
    elapsed = time.monotonic() - started
    assert [o.nodeid for o in outcomes] == [s.nodeid for s in specs]
    assert all(o.reward == 1.0 for o in outcomes)
    assert sorted(runs(fake)) == sorted((s.task_index, s.repeat) for s in specs)
    assert fake.max_in_flight == 4
    assert 0.55 < elapsed < 2.0  # 24 trials, 4 at a time, 0.1 s each: 0.6 s


def test_lookahead_bounds_prefetch(fake: StandinGym, tmp_path: Path) -> None:
    specs = make_specs(tmp_path, 20)
    dispatcher = make_dispatcher(fake, concurrency=8, lookahead=5)
    dispatcher.plan(specs)
    try:
        wait_for(lambda: len(runs(fake)) >= 5)
        time.sleep(0.2)
        assert len(runs(fake)) == 5
        dispatcher.result(specs[9])  # pytest jumped ahead: trial 9 runs now, the 5 after it are prefetched
        wait_for(lambda: len(runs(fake)) >= 11)
        time.sleep(0.2)
        assert sorted(index for index, _ in runs(fake)) == [0, 1, 2, 3, 4, 9, 10, 11, 12, 13, 14]
    finally:
        dispatcher.close()


def test_a_tasks_row_is_read_once_for_its_repeats_and_each_request_is_its_own(
    fake: StandinGym, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = make_specs(tmp_path, 3, repeats=4)
    reads: list[int] = []
    load = RowReader.load

    def counted(reader: RowReader, task: Task) -> dict[str, Any]:
        reads.append(task.line)
        return load(reader, task)

    monkeypatch.setattr(RowReader, "load", counted)
    dispatcher = make_dispatcher(fake, concurrency=4)
    dispatcher.plan(specs)
    try:
        outcomes = [dispatcher.result(spec) for spec in specs]
    finally:
        dispatcher.close()
    assert reads == [1, 2, 3]
    bodies = [request.json() for request in list(fake.log) if request.route == "/run"]
    assert sorted(
        (b["_ng_task_index"], b["_ng_rollout_index"], b["responses_create_params"]["input"]) for b in bodies
    ) == [(i, r, f"q{i}") for i in range(3) for r in range(4)]
    assert [(o.request or {}).get("_ng_rollout_index") for o in outcomes] == [s.repeat for s in specs]


def open_files_of(path: Path) -> list[str]:
    folder = Path("/proc/self/fd")
    found = []
    for entry in folder.iterdir():
        try:
            if os.readlink(entry) == str(path):
                found.append(entry.name)
        except OSError:
            continue  # closed meanwhile
    return found


@both_loops
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_the_dataset_is_read_through_one_open_file_closed_with_the_dispatcher(
    fake: StandinGym, tmp_path: Path, inline: bool
) -> None:
    specs = make_specs(tmp_path, 6, repeats=2)
    dispatcher = make_dispatcher(fake, inline=inline, concurrency=3)
    dispatcher.plan(specs)
    try:
        outcomes = [dispatcher.result(spec) for spec in specs]
        assert len(open_files_of(tmp_path / "data.jsonl")) == 1
    finally:
        dispatcher.close()
    assert [o.reward for o in outcomes] == [1.0] * 12
    assert open_files_of(tmp_path / "data.jsonl") == []


def waiting(dispatcher: Dispatcher) -> bool:
    """The feeder waits for pytest to move on, and no wake-up is on its way."""
    return dispatcher._feeder_waiting and getattr(dispatcher, "_wake_at", 0) != sys.maxsize


def test_a_waiting_feeder_is_woken_once_per_step_of_the_lookahead_not_per_trial(
    fake: StandinGym, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest is the slower side here (Gym answers at once): every trial in the lookahead has run, and the
    feeder is woken to start more once pytest moved on by an eighth of it, not at every trial."""
    specs = make_specs(tmp_path, 200)
    dispatcher = make_dispatcher(fake, concurrency=4, lookahead=64)
    wakes: list[int] = []
    wake = dispatcher._wake

    def counted() -> None:
        wakes.append(dispatcher._position)
        wake()

    monkeypatch.setattr(dispatcher, "_wake", counted)
    dispatcher.plan(specs)
    try:
        for spec in specs:  # each time, the feeder has started all it may and waits before pytest moves on
            wait_for(lambda: waiting(dispatcher) or dispatcher._feeder is None or dispatcher._feeder.done())
            assert dispatcher.result(spec).reward == 1.0
        assert sorted(runs(fake)) == [(s.task_index, s.repeat) for s in specs]
        assert 10 <= len(wakes) <= 200 // 8 + 2, len(wakes)
    finally:
        dispatcher.close()


@both_loops
def test_nothing_is_dispatched_without_a_plan_or_a_request(fake: StandinGym, tmp_path: Path, inline: bool) -> None:
    specs = make_specs(tmp_path, 3)
    dispatcher = make_dispatcher(fake, inline=inline, concurrency=4)
    dispatcher.plan([])
    time.sleep(0.2)
    assert runs(fake) == []
    assert dispatcher.result(specs[1]).reward == 1.0
    dispatcher.close()
    assert runs(fake) == [(1, 0)]


def stop_cancels_and_starts_nothing(dispatcher: Dispatcher, specs: Sequence[TrialSpec]) -> None:
    """``stop()`` returns at once; trial 0, in flight, ends cancelled; trial 5 never starts; then ``close()``."""
    started = time.monotonic()
    dispatcher.stop()
    assert time.monotonic() - started < 3
    assert dispatcher.result(specs[0]).error_class == "cancelled"
    with pytest.raises(concurrent.futures.CancelledError):
        dispatcher.result(specs[5])
    dispatcher.close()


def test_stop_cancels_in_flight_and_starts_nothing(fake: StandinGym, tmp_path: Path) -> None:
    fake.latency_s = 5.0
    specs = make_specs(tmp_path, 10)
    dispatcher = make_dispatcher(fake, concurrency=2)
    dispatcher.plan(specs)
    wait_for(lambda: len(runs(fake)) == 2)
    stop_cancels_and_starts_nothing(dispatcher, specs)
    assert len(runs(fake)) == 2


@both_loops
def test_listener_records_each_trial_once_and_its_errors_do_not_hang(
    fake: StandinGym, tmp_path: Path, inline: bool
) -> None:
    specs = make_specs(tmp_path, 4)
    dispatcher = make_dispatcher(fake, inline=inline, concurrency=2)
    seen: list[str] = []

    def listener(outcome: TrialOutcome) -> None:
        seen.append(outcome.nodeid)
        raise OSError("disk full")

    dispatcher.listeners.append(listener)
    dispatcher.plan(specs)
    assert all(dispatcher.result(spec).ok for spec in specs)
    dispatcher.close()
    assert sorted(seen) == sorted(s.nodeid for s in specs)
    assert dispatcher.problems[0] == "recording a rollout failed: OSError: disk full"


@both_loops
def test_pytests_thread_records_each_trial_before_its_result_is_handed_out(
    fake: StandinGym, tmp_path: Path, inline: bool
) -> None:
    specs = make_specs(tmp_path, 6, repeats=2)
    dispatcher = make_dispatcher(fake, inline=inline, concurrency=4)
    recorded: list[tuple[str, str]] = []
    thread = threading.current_thread
    dispatcher.recorders.append(lambda batch: recorded.extend((o.nodeid, thread().name) for o in batch))

    def failing(batch: Sequence[TrialOutcome]) -> None:
        raise OSError("disk full")

    dispatcher.recorders.append(failing)
    dispatcher.plan(specs)
    try:
        for spec in specs:
            assert dispatcher.result(spec).ok
            assert spec.nodeid in [nodeid for nodeid, _ in recorded]  # before pytest reports it
    finally:
        dispatcher.close()
    assert sorted(nodeid for nodeid, _ in recorded) == sorted(s.nodeid for s in specs)  # each once
    assert {thread for _, thread in recorded} == {threading.current_thread().name}
    assert dispatcher.problems[0] == "recording a rollout failed: OSError: disk full"


def test_a_rollout_nobody_asks_for_is_recorded_on_the_loop_within_a_moment(fake: StandinGym, tmp_path: Path) -> None:
    specs = make_specs(tmp_path, 5)
    dispatcher = make_dispatcher(fake, concurrency=5)
    recorded: list[tuple[str, str, float]] = []
    dispatcher.recorders.append(
        lambda batch: recorded.extend((o.nodeid, threading.current_thread().name, time.monotonic()) for o in batch)
    )
    dispatcher.plan(specs)  # prefetched; pytest's thread is busy elsewhere and asks for none of them
    try:
        wait_for(lambda: len(recorded) == len(specs), timeout=10)
    finally:
        dispatcher.close()
    assert {thread for _, thread, _ in recorded} == {"pytest-gym-dispatch"}
    assert sorted(nodeid for nodeid, _, _ in recorded) == sorted(s.nodeid for s in specs)


def test_records_left_at_a_stop_are_written_by_the_stop(
    fake: StandinGym, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "RECORD_WITHIN_S", 3600.0)  # the loop never records: what is left is the stop's
    specs = make_specs(tmp_path, 3)
    dispatcher = make_dispatcher(fake, concurrency=3)
    recorded: list[str] = []
    dispatcher.recorders.append(lambda batch: recorded.extend(o.nodeid for o in batch))
    dispatcher.plan(specs)
    wait_for(lambda: len(runs(fake)) == 3)
    wait_for(lambda: len(dispatcher._unrecorded) == 3)
    assert recorded == []
    dispatcher.stop()
    assert sorted(recorded) == sorted(s.nodeid for s in specs)
    dispatcher.close()


def test_every_rollout_finished_before_pytest_asks_is_recorded_in_one_batch(
    fake: StandinGym, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "RECORD_WITHIN_S", 3600.0)  # the loop never records: pytest's thread does
    specs = make_specs(tmp_path, 4)
    dispatcher = make_dispatcher(fake, concurrency=4)
    batches: list[list[str]] = []
    dispatcher.recorders.append(lambda batch: batches.append([o.nodeid for o in batch]))
    dispatcher.plan(specs)
    try:
        wait_for(lambda: len(dispatcher._unrecorded) == 4)
        assert dispatcher.result(specs[0]).ok
        assert len(batches) == 1
        assert sorted(batches[0]) == sorted(s.nodeid for s in specs)
    finally:
        dispatcher.close()


# -- workers sharing a claim board ----------------------------------------------------------


def test_two_workers_run_every_trial_once(fake: StandinGym, tmp_path: Path) -> None:
    fake.latency_s = 0.02
    specs = make_specs(tmp_path, 10, repeats=3)
    board_dir = tmp_path / "board"
    workers = [make_dispatcher(fake, concurrency=2, claims=BoardClaims(ClaimBoard(board_dir))) for _ in range(2)]
    recorded: list[list[str]] = [[], []]
    for dispatcher, record in zip(workers, recorded, strict=True):
        dispatcher.listeners.append(lambda o, record=record: record.append(o.nodeid))
        dispatcher.plan(specs)
    results: dict[str, TrialOutcome] = {}

    def run(worker: int) -> None:
        for spec in specs[worker::2]:  # xdist hands out the items; each worker waits for its own
            results[spec.nodeid] = workers[worker].result(spec)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for dispatcher in workers:
        dispatcher.close()
    assert len(runs(fake)) == len(set(runs(fake))) == len(specs)
    assert fake.max_in_flight <= 4
    assert sorted(results) == sorted(s.nodeid for s in specs)
    assert all(outcome.reward == 1.0 for outcome in results.values())
    # Each rollout is recorded once, by the process that ran it.
    assert sorted(recorded[0] + recorded[1]) == sorted(s.nodeid for s in specs)


def test_global_slots_are_shared_by_their_holders(tmp_path: Path) -> None:
    first, second = GlobalSlots(tmp_path, 2), GlobalSlots(tmp_path, 2)
    assert first.try_acquire() == 0
    assert second.try_acquire() == 1
    assert first.try_acquire() is None
    assert second.try_acquire() is None
    second.release(1)
    assert first.try_acquire() == 1
    first.close()  # closing releases what it held
    assert second.try_acquire() == 0
    second.close()


def test_more_workers_than_slots_stay_within_the_slots(fake: StandinGym, tmp_path: Path) -> None:
    """Three workers, one rollout each at a time, two run-wide slots: never more than two in flight."""
    fake.latency_s = 0.05
    specs = make_specs(tmp_path, 12)
    board_dir = tmp_path / "board"
    workers = [
        make_dispatcher(fake, concurrency=1, claims=BoardClaims(ClaimBoard(board_dir), GlobalSlots(board_dir, 2)))
        for _ in range(3)
    ]
    for dispatcher in workers:
        dispatcher.plan(specs)
    threads = [threading.Thread(target=lambda i=i: [workers[i].result(spec) for spec in specs[i::3]]) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for dispatcher in workers:
        dispatcher.close()
    assert len(runs(fake)) == len(set(runs(fake))) == 12
    assert fake.max_in_flight == 2


def test_a_dead_workers_claim_is_taken_over(fake: StandinGym, tmp_path: Path) -> None:
    specs = make_specs(tmp_path, 3)
    board_dir = tmp_path / "board"
    ClaimBoard(board_dir, pid=dead_pid()).claim(specs[1].nodeid)
    dispatcher = make_dispatcher(fake, concurrency=2, claims=BoardClaims(ClaimBoard(board_dir)))
    dispatcher.plan(specs)
    try:
        outcomes = [dispatcher.result(spec) for spec in specs]
    finally:
        dispatcher.close()
    assert all(o.reward == 1.0 for o in outcomes)
    assert sorted(runs(fake)) == [(0, 0), (1, 0), (2, 0)]


def test_a_live_claimant_that_never_publishes_is_a_timeout_error(
    fake: StandinGym, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "CLAIM_WAIT_MARGIN_S", 0.3)
    specs = make_specs(tmp_path, 1)
    board_dir = tmp_path / "board"
    ClaimBoard(board_dir, pid=os.getppid()).claim(specs[0].nodeid)
    endpoint = GymEndpoint(head_url="http://127.0.0.1:1", servers=[], run_routes={"agent": fake.base_url + "/run"})
    dispatcher = Dispatcher(
        endpoint, concurrency=1, trial_timeout=0.2, default_agent=None, claims=BoardClaims(ClaimBoard(board_dir))
    )
    try:
        started = time.monotonic()
        outcome = dispatcher.result(specs[0])
        assert 0.4 < time.monotonic() - started < 3
    finally:
        dispatcher.close()
    assert outcome.error_class == "timeout"
    assert f"pid {os.getppid()}" in (outcome.error or "")
    assert runs(fake) == []


def test_a_worker_drains_what_it_claimed_at_close(fake: StandinGym, tmp_path: Path) -> None:
    """A worker that finished its items still completes the rollouts another worker may wait for."""
    fake.latency_s = 0.3
    specs = make_specs(tmp_path, 4)
    board_dir = tmp_path / "board"
    dispatcher = make_dispatcher(fake, concurrency=4, claims=BoardClaims(ClaimBoard(board_dir)))
    dispatcher.plan(specs)
    wait_for(lambda: len(runs(fake)) == 4)
    dispatcher.close()
    reader = ClaimBoard(board_dir)
    assert all(reader.read(spec.nodeid) is not None for spec in specs)


def test_a_stopped_worker_gives_its_claims_back(fake: StandinGym, tmp_path: Path) -> None:
    fake.latency_s = 5.0
    specs = make_specs(tmp_path, 2)
    board_dir = tmp_path / "board"
    dispatcher = make_dispatcher(fake, concurrency=2, claims=BoardClaims(ClaimBoard(board_dir)))
    dispatcher.plan(specs)
    wait_for(lambda: len(runs(fake)) == 2)
    dispatcher.stop()
    dispatcher.close()
    reader = ClaimBoard(board_dir)
    assert [reader.claimant(s.nodeid) for s in specs] == [None, None]
    assert [reader.read(s.nodeid) for s in specs] == [None, None]


def test_the_switch_interval_is_lowered_while_dispatchers_run(fake: StandinGym, tmp_path: Path) -> None:
    before = sys.getswitchinterval()
    first = make_dispatcher(fake, concurrency=1)
    second = make_dispatcher(fake, concurrency=1)
    assert sys.getswitchinterval() == min(before, dispatch.SWITCH_INTERVAL_S)
    first.close()
    assert sys.getswitchinterval() == min(before, dispatch.SWITCH_INTERVAL_S)
    second.close()
    second.close()
    assert sys.getswitchinterval() == before


@both_loops
def test_close_shuts_the_event_loop_and_its_thread(fake: StandinGym, tmp_path: Path, inline: bool) -> None:
    """An unclosed loop keeps its selector's descriptors (a ResourceWarning on Python 3.10)."""
    specs = make_specs(tmp_path, 3)
    dispatcher = make_dispatcher(fake, inline=inline, concurrency=2)
    dispatcher.plan(specs[:2])
    assert dispatcher.result(specs[0]).reward == 1.0
    dispatcher.close()
    assert dispatcher._loop.is_closed()
    assert (dispatcher._thread is None) == inline
    assert dispatcher._thread is None or not dispatcher._thread.is_alive()
    dispatcher.close()  # a second close (the session's end after a crash path) is harmless
    with pytest.raises(concurrent.futures.CancelledError):  # not "RuntimeError: Event loop is closed"
        dispatcher.result(specs[2])


# -- one process: the loop on pytest's thread --------------------------------------------------


def test_in_one_process_the_loop_runs_on_pytests_thread_and_under_xdist_on_its_own(
    fake: StandinGym, tmp_path: Path
) -> None:
    specs = make_specs(tmp_path, 8)
    before = sys.getswitchinterval()
    endpoint = GymEndpoint(head_url="http://127.0.0.1:1", servers=[], run_routes={"agent": fake.base_url + "/run"})
    alone = Dispatcher(endpoint, concurrency=4, trial_timeout=30, default_agent=None)
    alone.plan(specs)
    try:
        assert [alone.result(spec).reward for spec in specs] == [1.0] * 8
        names = [thread.name for thread in threading.enumerate()]
        assert "pytest-gym-dispatch" not in names
        assert "pytest-gym-relay" in names  # idle while pytest's thread comes back in time
        assert sys.getswitchinterval() == before  # no second thread to hand the interpreter lock to
    finally:
        alone.close()
    assert alone.inline
    assert "pytest-gym-relay" not in [thread.name for thread in threading.enumerate()]
    worker = Dispatcher(
        endpoint, concurrency=4, trial_timeout=30, default_agent=None, claims=BoardClaims(ClaimBoard(tmp_path / "b"))
    )
    try:
        assert not worker.inline
        assert "pytest-gym-dispatch" in [thread.name for thread in threading.enumerate()]
    finally:
        worker.close()


def test_inline_asking_for_a_finished_result_lets_the_loop_send_the_next_requests(
    fake: StandinGym, tmp_path: Path
) -> None:
    """Without that pass, rollouts pytest reaches finished would start the next ones only when pytest next waits:
    the slots would stay idle while pytest works through what finished."""
    specs = make_specs(tmp_path, 6)
    dispatcher = make_dispatcher(fake, inline=True, concurrency=4, lookahead=2)
    dispatcher.plan(specs)
    try:
        assert dispatcher.result(specs[0]).ok  # the loop ran until it was done: trials 0 to 2 went out
        wait_for(lambda: len(runs(fake)) == 3)
        time.sleep(0.1)  # their answers are in; the loop does not run while pytest does not ask
        assert len(runs(fake)) == 3
        assert dispatcher.result(specs[1]).ok  # done already: passes of the loop wake the feeder, which starts 3
        wait_for(lambda: len(runs(fake)) == 4, timeout=5)  # sent before pytest asks for it
        assert sorted(runs(fake)) == [(i, 0) for i in range(4)]
    finally:
        dispatcher.close()


def test_inline_stop_cancels_what_is_in_flight_and_starts_nothing(fake: StandinGym, tmp_path: Path) -> None:
    fake.latency_s = 5.0
    specs = make_specs(tmp_path, 10)
    dispatcher = make_dispatcher(fake, inline=True, concurrency=4, lookahead=2)
    recorded: list[str] = []
    dispatcher.recorders.append(lambda batch: recorded.extend(o.nodeid for o in batch))
    dispatcher.plan(specs)
    with pytest.raises(concurrent.futures.TimeoutError):
        dispatcher.result(specs[0], timeout=0.5)  # the loop ran meanwhile: it and the 2 after it went out
    assert len(runs(fake)) == 3
    stop_cancels_and_starts_nothing(dispatcher, specs)
    assert len(runs(fake)) == 3
    assert recorded == []  # a cancelled rollout is no record


def test_inline_while_pytests_thread_is_away_the_relay_reads_answers_as_they_come(
    fake: StandinGym, tmp_path: Path
) -> None:
    """pytest's thread runs a slow test of another kind while rollouts are in flight. The relay runs the loop
    then: their latency is Gym's, not the slow test's, no timer falls due, and what finished is recorded (on the
    relay: pytest's thread is busy)."""
    answer = fake.run
    fake.routes["/run"] = lambda request: replace(
        answer(request), delay_s=0.1 if request.json()["_ng_task_index"] == 0 else 0.6
    )
    specs = make_specs(tmp_path, 4)
    endpoint = GymEndpoint(head_url="http://127.0.0.1:1", servers=[], run_routes={"agent": fake.base_url + "/run"})
    dispatcher = Dispatcher(endpoint, concurrency=4, trial_timeout=1.5, default_agent=None, inline=True, lookahead=3)
    recorded: list[tuple[str, str]] = []
    dispatcher.recorders.append(
        lambda batch: recorded.extend((o.nodeid, threading.current_thread().name) for o in batch)
    )
    dispatcher.plan(specs)
    try:
        assert dispatcher.result(specs[0]).ok  # after 0.1 s; trials 1 to 3 went out with it
        time.sleep(2.0)  # away: they are answered at 0.6 s; their timers (1.5 s) would fall due
        outcomes = [dispatcher.result(spec) for spec in specs[1:]]
        assert dispatcher.counts["relayed"] >= 1
    finally:
        dispatcher.close()
    assert [o.error for o in outcomes] == [None, None, None]
    assert all(0.5 < o.latency_s < 1.0 for o in outcomes), [o.latency_s for o in outcomes]
    assert sorted(recorded) == sorted(
        [(specs[0].nodeid, "MainThread")] + [(s.nodeid, "pytest-gym-relay") for s in specs[1:]]
    )


def test_inline_an_interrupt_inside_the_loop_leaves_it_able_to_stop_and_close(fake: StandinGym, tmp_path: Path) -> None:
    """Ctrl-C (and SIGTERM, which pytest-gym turns into it) arrives on pytest's thread, which may be running the
    loop at that moment: the session's end must still cancel, record and close."""
    specs = make_specs(tmp_path, 20)
    dispatcher = make_dispatcher(fake, inline=True, concurrency=2)
    interrupted: list[str] = []

    def listener(outcome: TrialOutcome) -> None:
        if not interrupted:
            interrupted.append(outcome.nodeid)
            raise KeyboardInterrupt

    dispatcher.listeners.append(listener)
    dispatcher.plan(specs)
    with pytest.raises(KeyboardInterrupt):
        dispatcher.result(specs[0])
    dispatcher.stop()
    dispatcher.close()
    assert dispatcher._loop.is_closed()
    with pytest.raises(concurrent.futures.CancelledError):
        dispatcher.result(specs[-1])  # never started


# -- a trial refused by the process that reports it is run by nobody ------------------------


class SplitAdmission:
    """Refuses every trial to pytest's thread; to the loop (a feeder whose view of the ledger lags behind), it
    says wait until pytest's thread has refused, then start: the race of two processes reading one ledger."""

    def __init__(self) -> None:
        self.refused = threading.Event()
        self.ledger = self
        self.loop_asks = self.loop_asks_after_refusal = 0

    def decide(self, spec: TrialSpec) -> Decision:
        if threading.current_thread() is threading.main_thread():
            self.refused.set()
            return Decision("skip", "budget exhausted after 10 trials", "budget")
        self.loop_asks += 1
        if not self.refused.is_set():
            return Decision("wait")
        self.loop_asks_after_refusal += 1
        return Decision("start")

    def note(self, decision: Decision) -> None:
        pass

    def record(self, outcome: TrialOutcome) -> None:
        pass


class AlwaysStart(SplitAdmission):
    def decide(self, spec: TrialSpec) -> Decision:
        return Decision("start")


def test_a_trial_pytests_thread_refused_is_not_started_by_a_feeder_that_decided_late(
    fake: StandinGym, tmp_path: Path
) -> None:
    specs = make_specs(tmp_path, 1)
    admission = SplitAdmission()
    dispatcher = make_dispatcher(fake, concurrency=2, admission=admission)
    dispatcher.plan(specs)
    try:
        wait_for(lambda: admission.loop_asks > 0)  # the feeder holds the trial back
        with pytest.raises(NotAdmitted):
            dispatcher.result(specs[0])
        assert dispatcher._feeder is not None
        dispatcher._feeder.result(timeout=10)  # the feeder ends: nothing left to start or hold back
        assert dispatcher.counts["ran"] == 0, admission.loop_asks_after_refusal
    finally:
        dispatcher.close()
    assert runs(fake) == []


def test_a_trial_one_worker_refused_is_not_run_by_another_that_decided_late(fake: StandinGym, tmp_path: Path) -> None:
    specs = make_specs(tmp_path, 1)
    board_dir = tmp_path / "board"
    refusing, late = (
        make_dispatcher(fake, concurrency=1, claims=BoardClaims(ClaimBoard(board_dir)), admission=admission)
        for admission in (SplitAdmission(), AlwaysStart())
    )
    try:
        refusing.plan(specs)
        with pytest.raises(NotAdmitted):
            refusing.result(specs[0])
        late.plan(specs)
        assert late._feeder is not None
        late._feeder.result(timeout=10)
        assert late.counts["ran"] == 0
    finally:
        late.close()
        refusing.close()
    assert runs(fake) == []


def test_a_refusal_yields_to_another_workers_claim_made_first(fake: StandinGym, tmp_path: Path) -> None:
    """Refused here, but another (live) worker claimed it a moment before: its outcome is waited for."""
    specs = make_specs(tmp_path, 1)
    board_dir = tmp_path / "board"
    ClaimBoard(board_dir, pid=os.getppid()).claim(specs[0].nodeid)
    dispatcher = make_dispatcher(
        fake, concurrency=1, claims=BoardClaims(ClaimBoard(board_dir)), admission=SplitAdmission()
    )
    try:
        assert dispatcher.start_now(specs[0]) is None  # no NotAdmitted: the claimant's outcome will count
        assert specs[0].nodeid not in dispatcher._refused
    finally:
        dispatcher.close()
    assert runs(fake) == []


def test_under_xdist_a_rollout_is_recorded_before_another_worker_can_take_it(
    fake: StandinGym, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker may report a trial as soon as it is on the board, and the controller then reads the run
    folder (Gym's aggregate metrics once the last trial reported): the record comes first, even while this
    worker's pytest thread is busy elsewhere and asks for nothing."""
    monkeypatch.setattr(dispatch, "RECORD_WITHIN_S", 3600.0)  # no late recording on the loop to rely on
    specs = make_specs(tmp_path, 4)
    claims = BoardClaims(ClaimBoard(tmp_path / "board"))
    recorded: list[str] = []
    unrecorded_at_publish: list[str] = []
    publish = claims.publish

    def checked_publish(outcome: TrialOutcome) -> None:
        if outcome.nodeid not in recorded:
            unrecorded_at_publish.append(outcome.nodeid)
        publish(outcome)

    monkeypatch.setattr(claims, "publish", checked_publish)
    dispatcher = make_dispatcher(fake, concurrency=4, claims=claims)
    dispatcher.recorders.append(lambda batch: recorded.extend(o.nodeid for o in batch))
    dispatcher.plan(specs)  # prefetched; pytest's thread asks for none of them
    try:
        wait_for(lambda: len(recorded) == len(specs), timeout=10)
    finally:
        dispatcher.close()
    assert unrecorded_at_publish == []
    assert sorted(recorded) == sorted(s.nodeid for s in specs)
