"""Gyms kept between runs (``--gym-reuse``): found by fingerprint, leased to one run at a time, captures and logs
per run, a dead one started again, stopped by ``stop-kept`` or with their owner. A stand-in head and a supervised
``sleep`` play the started Gym here; the real one: tests/gym/test_reuse.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.endpoint import GymEndpoint, ServerInstance
from pytest_gym.core.pids import pid_alive
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym import kept
from pytest_gym.gym.deployment import POLICY_SERVER_TYPE, Started, policy_process_name
from pytest_gym.gym.discovery import discover
from pytest_gym.gym.kept import NotKept, acquire_kept, fingerprint, keep_owner, release_kept, stop_kept
from pytest_gym.process.groups import group_alive, spawn_supervised, stop_supervised
from pytest_gym.process.keep import LEASE_FILE
from pytest_gym.runfolder.layout import CAPTURE_DIR, GYM_LOG, RECORDER_LOG, STATE_FILE
from pytest_gym.standins import SCRIPT_ENV
from pytest_gym.standins.cassette import iter_recordings
from pytest_gym.standins.launch import start_model_recorder, start_policy
from tests.helpers.standin import StandinGym, serving


class FakeStarts:
    """``start_deployment`` for these tests: a supervised ``sleep`` as Gym (its owner as given), the stand-in head."""

    def __init__(self, head: StandinGym) -> None:
        self.head = head
        self.entries: list[Path] = []
        self.owners: list[int | None] = []

    def __call__(
        self,
        settings: GymSettings,
        entry: Path,
        owner_pid: int | None = None,
        access: Any = None,
        idle: tuple[float, Path] | None = None,
    ) -> tuple[GymEndpoint, Started]:
        self.entries.append(entry)
        self.owners.append(owner_pid)
        (entry / GYM_LOG).write_text("gym env start ...\n")
        gym = spawn_supervised("gym", ["sleep", "600"], entry, entry / GYM_LOG, owner_pid=owner_pid, grace=1, idle=idle)
        return discover(self.head.base_url), Started(gym_pid=gym.pid, supervised=[asdict(gym)])


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeStarts]:
    with serving() as head:
        fake = FakeStarts(head)
        monkeypatch.setattr(kept, "start_deployment", fake)
        yield fake


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Path]:
    """A pool owned by this test process; whatever a test leaves kept is stopped at its end."""
    folder = tmp_path / "pool"
    folder.mkdir()
    (folder / kept.OWNER_FILE).write_text(str(os.getpid()))
    yield folder
    for entry in folder.iterdir():
        if entry.is_dir():
            (entry / LEASE_FILE).unlink(missing_ok=True)  # a lease the test kept: void, so the Gym is stopped
    stop_kept(folder, grace=1)


def settings_for(pool: Path, **changes: Any) -> GymSettings:
    return GymSettings(
        resources_server="mcqa", policy="none", model_url="http://127.0.0.1:9/v1", reuse=str(pool)
    ).model_copy(update=changes)


def gym_pid(entry: Path) -> int:
    return int(json.loads((entry / STATE_FILE).read_text())["started"]["gym_pid"])


def test_a_second_run_with_the_same_settings_attaches_and_gets_only_its_part_of_the_log(
    starts: FakeStarts, pool: Path, tmp_path: Path
) -> None:
    first_run, second_run = tmp_path / "run1", tmp_path / "run2"
    endpoint, record = acquire_kept(settings_for(pool), first_run, os.getpid())
    assert not record["reused"]
    assert endpoint.head_url == starts.head.base_url
    assert starts.owners == [os.getpid()]  # the pool's owner file: the kept Gym lives as long as this process
    entry = Path(record["entry"])
    with (entry / GYM_LOG).open("a") as log:
        log.write("a line of the first run\n")
    release_kept(record, first_run)
    with (entry / GYM_LOG).open("a") as log:
        log.write("between the runs\n")
    _, again = acquire_kept(settings_for(pool), second_run, os.getpid())
    with (entry / GYM_LOG).open("a") as log:
        log.write("a line of the second run\n")
    notes = release_kept(again, second_run)

    assert again["reused"]
    assert again["entry"] == record["entry"]
    assert len(starts.entries) == 1
    assert pid_alive(gym_pid(entry))  # kept, not stopped at the end of either run
    first_log, second_log = (first_run / GYM_LOG).read_text(), (second_run / GYM_LOG).read_text()
    assert "gym env start" in first_log
    assert "a line of the first run" in first_log
    assert "gym env start" not in second_log
    assert "a line of the first run" not in second_log
    assert "between the runs" not in second_log
    assert "a line of the second run" in second_log
    assert f"stops when unused for 900 s or when process {os.getpid()} ends" in notes[0]
    assert "stop-kept" in notes[0]


def test_gyms_captures_go_to_the_folder_of_the_run_holding_the_lease(
    starts: FakeStarts, pool: Path, tmp_path: Path
) -> None:
    for run in ("run1", "run2"):
        _, record = acquire_kept(settings_for(pool), tmp_path / run, os.getpid())
        link = Path(record["entry"]) / CAPTURE_DIR
        assert link.resolve() == (tmp_path / run / CAPTURE_DIR).resolve()
        assert link.resolve().is_dir()
        release_kept(record, tmp_path / run)


def test_a_leased_gym_is_not_shared_another_slot_starts_and_then_none_is_kept(
    starts: FakeStarts, pool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kept, "SLOTS", 2)
    held = [acquire_kept(settings_for(pool), tmp_path / f"run{i}", os.getpid()) for i in range(2)]
    with pytest.raises(NotKept, match="every kept Gym with these settings is in use"):
        acquire_kept(settings_for(pool), tmp_path / "run2", os.getpid())
    assert len({h[1]["entry"] for h in held}) == 2
    assert len(starts.entries) == 2


def test_a_lease_of_a_run_that_is_gone_is_void(starts: FakeStarts, pool: Path, tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _, record = acquire_kept(settings_for(pool), tmp_path / "run1", gone.pid)
    # never released: the run was killed
    _, again = acquire_kept(settings_for(pool), tmp_path / "run2", os.getpid())
    assert again["entry"] == record["entry"]
    assert again["reused"]


def test_a_kept_gym_found_dead_is_started_again(starts: FakeStarts, pool: Path, tmp_path: Path) -> None:
    _, record = acquire_kept(settings_for(pool), tmp_path / "run1", os.getpid())
    release_kept(record, tmp_path / "run1")
    entry = Path(record["entry"])
    first = gym_pid(entry)
    stop_kept(pool, grace=1)
    assert not group_alive(first)
    _, again = acquire_kept(settings_for(pool), tmp_path / "run2", os.getpid())
    assert not again["reused"]
    assert len(starts.entries) == 2
    assert gym_pid(entry) != first


def dead_head(entry: Path) -> None:
    """The kept Gym's record names a head that no longer answers (port 9: discard, closed here)."""
    state = json.loads((entry / STATE_FILE).read_text())
    state["endpoint"]["head_url"] = "http://127.0.0.1:9"
    (entry / STATE_FILE).write_text(json.dumps(state))


def test_a_kept_gym_that_died_is_started_again_and_the_run_says_why(
    starts: FakeStarts, pool: Path, tmp_path: Path
) -> None:
    """Killed from outside (OOM, a reboot of its owner's session): its record stays; the next run says why it did
    not attach but started a new one, with what became of the old one."""
    _, record = acquire_kept(settings_for(pool), tmp_path / "run1", os.getpid())
    release_kept(record, tmp_path / "run1")
    entry = Path(record["entry"])
    first = gym_pid(entry)
    os.killpg(first, 9)
    dead_head(entry)  # the stand-in head plays every Gym here: this one's stops answering with it
    deadline = time.monotonic() + 30
    while group_alive(first) and time.monotonic() < deadline:
        time.sleep(0.05)
    _, again = acquire_kept(settings_for(pool), tmp_path / "run2", os.getpid())
    notes = release_kept(again, tmp_path / "run2")
    assert not again["reused"]
    assert gym_pid(entry) != first
    assert notes[0].startswith(f"--gym-reuse: the kept Gym in {entry} was not running as recorded")
    assert "this run started a new one there; the old one: gym: " in notes[0]
    assert "stays up for the next run" in notes[-1]


@pytest.mark.parametrize("started", ["gym", {"supervised": [{"name": "gym", "pid": 0}]}], ids=["text", "pid-0"])
def test_a_kept_gym_whose_record_was_edited_by_hand_is_replaced_and_the_run_says_what_was_not_stopped(
    starts: FakeStarts, pool: Path, tmp_path: Path, started: Any
) -> None:
    _, record = acquire_kept(settings_for(pool), tmp_path / "run1", os.getpid())
    release_kept(record, tmp_path / "run1")
    entry = Path(record["entry"])
    first = gym_pid(entry)
    try:
        dead_head(entry)
        state = json.loads((entry / STATE_FILE).read_text())
        (entry / STATE_FILE).write_text(json.dumps({**state, "started": started}))
        _, again = acquire_kept(settings_for(pool), tmp_path / "run2", os.getpid())
        notes = release_kept(again, tmp_path / "run2")
        assert group_alive(first)  # nothing signalled on a hand-edited file's word
        assert not again["reused"]
        assert f"the kept Gym in {entry} was not running as recorded" in notes[0]
        assert "stop what it started by hand" in notes[0] or "was not stopped" in notes[0]
    finally:
        os.killpg(first, 9)


def test_stop_kept_leaves_a_gym_a_live_run_holds(starts: FakeStarts, pool: Path, tmp_path: Path) -> None:
    _, free = acquire_kept(settings_for(pool), tmp_path / "run1", os.getpid())
    release_kept(free, tmp_path / "run1")
    _, held = acquire_kept(settings_for(pool, set=("x=1",)), tmp_path / "run2", os.getpid())  # another Gym
    free_pid, held_pid = gym_pid(Path(free["entry"])), gym_pid(Path(held["entry"]))
    notes = stop_kept(pool, grace=1)
    assert not group_alive(free_pid)
    assert group_alive(held_pid)
    assert any("in use by process" in note for note in notes)
    assert any("gym: stopped" in note for note in notes)


def test_a_kept_gym_stops_when_its_owner_ends(starts: FakeStarts, pool: Path, tmp_path: Path) -> None:
    owner = subprocess.Popen(["sleep", "600"])
    try:
        (pool / kept.OWNER_FILE).write_text(str(owner.pid))
        _, record = acquire_kept(settings_for(pool), tmp_path / "run1", os.getpid())
        release_kept(record, tmp_path / "run1")
        pid = gym_pid(Path(record["entry"]))
        assert group_alive(pid)
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 30
    while group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(pid)


def test_the_owner_is_the_pool_files_else_the_session_leader_else_the_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / kept.OWNER_FILE).write_text(str(gone.pid))
    leader = subprocess.Popen(["sleep", "60"])
    child = subprocess.Popen(["sleep", "60"])
    real_getsid = os.getsid
    try:
        # A dead owner in the file counts for nothing; the session leader comes next.
        monkeypatch.setattr(os, "getsid", lambda pid: leader.pid if pid == child.pid else real_getsid(pid))
        assert keep_owner(tmp_path, child.pid) == leader.pid
        # A leader outside this pid namespace reads as 0 (a CI runner's container): the parent is next.
        monkeypatch.setattr(os, "getsid", lambda pid: 0)
        assert keep_owner(tmp_path, child.pid) == os.getpid()
        (tmp_path / kept.OWNER_FILE).write_text(str(leader.pid))
        assert keep_owner(tmp_path, child.pid) == leader.pid
    finally:
        for process in (child, leader):
            process.kill()
            process.wait()


def test_the_fingerprint_follows_what_the_start_depends_on_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "env.yaml"
    config.write_text("a: 1\n")
    base = GymSettings(resources_server="mcqa", policy="scripted", config=(str(config),), reuse=str(tmp_path))
    environ = {"GYM_POLICY_API_KEY": "sk-one", "PYTEST_GYM_POLICY_SCRIPT": '{"seed": 1}', "HOME": "/root"}
    key = fingerprint(base, environ)
    same = [
        base.model_copy(update={"dataset": ("other.jsonl",), "repeats": 9, "gate": ("mean_reward>=1",)}),
        base.model_copy(update={"run_dir": "elsewhere", "trial_timeout": 5.0, "concurrency": 3}),
        # what the scripted policy answers: set at every lease (test_a_kept_policy_answers_as_the_leasing_run_asks)
        base.model_copy(update={"policy_answer": "B", "policy_latency_ms": 50.0}),
    ]
    assert {fingerprint(s, environ) for s in same} == {key}
    assert fingerprint(base, {**environ, "HOME": "/home/x"}) == key
    assert fingerprint(base, {**environ, "PYTEST_GYM_POLICY_SCRIPT": '{"seed": 2}'}) == key
    changed = [
        fingerprint(base.model_copy(update={"model": "other-model"}), environ),
        fingerprint(base.model_copy(update={"set": ("x=1",)}), environ),
        fingerprint(base.model_copy(update={"resources_server": "other"}), environ),
        fingerprint(base, {**environ, "GYM_POLICY_API_KEY": "sk-two"}),
        fingerprint(base, {**environ, "NEMO_GYM_EXTRA_ROOTS": "/x"}),
    ]
    config.write_text("a: 2\n")
    changed.append(fingerprint(base, environ))
    assert key not in changed
    assert len(set(changed)) == len(changed)
    assert "sk-one" not in key


def test_a_kept_policy_answers_as_the_leasing_run_asks(
    pool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer, latency and script are no part of a kept Gym's identity: a run that changes only them attaches,
    and its policy answers as this run's own fresh one would, its counts at zero."""

    def start(settings: GymSettings, entry: Path, owner_pid: int | None = None, access: Any = None,
              idle: tuple[float, Path] | None = None) -> tuple[GymEndpoint, Started]:  # fmt: skip
        policy, url = start_policy(settings, entry, owner_pid=owner_pid, idle=idle)
        endpoint = discover(head.base_url)
        endpoint.policy_url = url
        return endpoint, Started(policy_pid=policy.pid, supervised=[asdict(policy)])

    def script(url: str) -> dict[str, Any]:
        with urllib.request.urlopen(url.removesuffix("/v1") + "/_script", timeout=10) as reply:
            found: dict[str, Any] = json.load(reply)
        return found

    with serving() as head:
        monkeypatch.setattr(kept, "start_deployment", start)
        first = settings_for(pool, policy="scripted", model_url=None, policy_answer="A")
        endpoint, record = acquire_kept(first, tmp_path / "run1", os.getpid())
        assert endpoint.policy_url is not None
        assert script(endpoint.policy_url)["answer"] == "A"
        release_kept(record, tmp_path / "run1")
        monkeypatch.setenv(SCRIPT_ENV, json.dumps({"seed": 7}))
        second = first.model_copy(update={"policy_answer": "B", "policy_latency_ms": 5.0})
        again_endpoint, again = acquire_kept(second, tmp_path / "run2", os.getpid())
        release_kept(again, tmp_path / "run2")
    assert again["reused"]
    assert again_endpoint.policy_url == endpoint.policy_url
    now = script(endpoint.policy_url)
    assert (now["answer"], now["latency_ms"], now["seed"]) == ("B", 5.0, 7)


def test_a_recording_its_replay_and_a_rescore_share_one_kept_gym_and_its_recorder(
    pool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder is leased with the Gym: each run gets its own mode, folder, counts and stats line."""
    starts: list[Path] = []

    def start(settings: GymSettings, entry: Path, owner_pid: int | None = None, access: Any = None,
              idle: tuple[float, Path] | None = None) -> tuple[GymEndpoint, Started]:  # fmt: skip
        starts.append(entry)
        recorder, url = start_model_recorder(settings, entry, owner_pid=owner_pid, idle=idle)
        endpoint = discover(head.base_url)
        endpoint.policy_url = url
        name = policy_process_name(settings.policy)
        endpoint.servers.append(ServerInstance(name, POLICY_SERVER_TYPE, settings.policy, url, recorder.pid))
        return endpoint, Started(policy_pid=recorder.pid, supervised=[asdict(recorder)])

    def answer(url: str) -> str:
        body = json.dumps({"model": "m", "input": [{"role": "user", "content": "Which? A) B) C)"}]}).encode()
        request = urllib.request.Request(url + "/responses", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return str(json.load(reply)["output"][0]["content"][0]["text"])

    upstream, upstream_url = start_policy(GymSettings(policy_answer="\\boxed{C}"), tmp_path / "model")
    try:
        with serving() as head:
            monkeypatch.setattr(kept, "start_deployment", start)
            runs = [tmp_path / f"run{i}" for i in range(3)]
            recording = settings_for(pool, policy="record", model_url=upstream_url)
            endpoint, record = acquire_kept(recording, runs[0], os.getpid())
            assert endpoint.policy_url is not None
            assert answer(endpoint.policy_url) == "\\boxed{C}"
            release_kept(record, runs[0])
            stop_supervised([upstream])  # the model is gone: the replay and the rescore call none

            replay = settings_for(pool, policy="replay", model_url=None, cassette=str(runs[0]))
            again, second = acquire_kept(replay, runs[1], os.getpid())
            assert answer(endpoint.policy_url) == "\\boxed{C}"
            release_kept(second, runs[1])
            empty = tmp_path / "empty.jsonl"
            empty.write_text("")
            rescore = settings_for(pool, policy="replay", model_url=None, cassette=str(empty), rescore="earlier")
            _, third = acquire_kept(rescore, runs[2], os.getpid())
            release_kept(third, runs[2])
    finally:
        stop_supervised([upstream])
    assert len(starts) == 1
    assert second["reused"]
    assert third["reused"]
    assert again.policy_url == endpoint.policy_url
    assert [s.process_name for s in again.servers if s.server_type == POLICY_SERVER_TYPE] == ["model_replayer"]
    assert len(list(iter_recordings(runs[0]))) == 1  # the recording run's cassette, in its own folder
    stats = [
        [json.loads(line.split("stats: ", 1)[1]) for line in (run / RECORDER_LOG).read_text().splitlines()
         if "recorder released; stats:" in line]
        for run in runs
    ]  # fmt: skip
    assert [[(s["mode"], s["calls"], s["hits"], s["upstream_calls"]) for s in found] for found in stats] == [
        [("record", 1, 0, 1)], [("replay", 1, 1, 0)], [("replay", 0, 0, 0)],
    ]  # fmt: skip


def wait_until(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return bool(condition())


def test_a_kept_gym_unused_for_its_idle_time_stops_and_the_next_run_starts_another(
    starts: FakeStarts, pool: Path, tmp_path: Path
) -> None:
    settings = settings_for(pool, reuse_idle=1.0)
    _, record = acquire_kept(settings, tmp_path / "run1", os.getpid())
    entry = Path(record["entry"])
    pid = gym_pid(entry)
    notes = release_kept(record, tmp_path / "run1")
    assert "stops when unused for 1 s" in notes[0]
    assert wait_until(lambda: not group_alive(pid), 20)
    assert not (entry / STATE_FILE).exists()  # claimed before the stop: no run attaches to a stopping Gym
    _, again = acquire_kept(settings, tmp_path / "run2", os.getpid())
    assert not again["reused"]
    assert len(starts.entries) == 2


def test_a_gym_a_run_holds_is_never_idle_however_long_the_run(starts: FakeStarts, pool: Path, tmp_path: Path) -> None:
    _, record = acquire_kept(settings_for(pool, reuse_idle=0.5), tmp_path / "run1", os.getpid())
    pid = gym_pid(Path(record["entry"]))
    time.sleep(3)  # six idle times; the supervisor checks every second
    assert group_alive(pid)
    release_kept(record, tmp_path / "run1")
    assert wait_until(lambda: not group_alive(pid), 20)


def test_python_m_pytest_gym_stop_kept_stops_the_pools_gyms_and_says_so(
    starts: FakeStarts, pool: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_gym.__main__ import main

    assert main(["stop-kept", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder (give the --gym-reuse DIR)" in capsys.readouterr().err
    _, record = acquire_kept(settings_for(pool), tmp_path / "run1", os.getpid())
    release_kept(record, tmp_path / "run1")
    pid = gym_pid(Path(record["entry"]))
    assert main(["stop-kept", str(pool), "--grace", "1"]) == 0
    assert f"{Path(record['entry']).name}: gym: stopped" in capsys.readouterr().out
    assert not group_alive(pid)
    assert main(["stop-kept", str(pool)]) == 0
    assert "no kept Gym in" in capsys.readouterr().out


def test_with_no_process_to_keep_it_for_nothing_is_kept_and_the_reason_is_said(
    starts: FakeStarts, pool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (pool / kept.OWNER_FILE).unlink()
    monkeypatch.setattr(kept, "parent_pid", lambda pid: 1)  # pytest as PID 1 of a container: no parent
    monkeypatch.setattr(kept.os, "getsid", lambda pid: pid)  # ... and the leader of its session
    with pytest.raises(NotKept, match="no process to keep a Gym for"):
        acquire_kept(settings_for(pool), tmp_path / "run1", os.getpid())
    assert starts.entries == []


def test_a_run_that_cannot_keep_its_gym_starts_one_stops_it_and_says_why(
    starts: FakeStarts, pool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gym.gym import acquire

    monkeypatch.setattr(kept, "keep_owner", lambda pool, pid: None)
    monkeypatch.setattr(acquire, "start_deployment", starts)
    acquire.acquire(settings_for(pool), tmp_path / "run1")
    pid = gym_pid(tmp_path / "run1")
    notes = acquire.release(settings_for(pool), tmp_path / "run1")
    assert "no process to keep a Gym for" in notes[0]
    assert any("gym: stopped" in note for note in notes[1:])
    assert not group_alive(pid)


@pytest.mark.parametrize("policy", ["scripted", "record", "replay"])
def test_a_kept_gyms_model_stand_in_stops_once_unused_like_its_gym(
    policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``start_deployment`` gives the scripted policy and the model recorder the kept Gym's idle time (its
    supervisor stops it once unused), as it gives Gym's."""
    from pytest_gym.core.endpoint import GymError
    from pytest_gym.gym.deployment import start_deployment
    from pytest_gym.standins import launch

    given: list[tuple[float, Path] | None] = []

    def stand_in(settings: GymSettings, run_dir: Path, owner_pid: int | None = None, **kwargs: Any) -> Any:
        given.append(kwargs.get("idle"))
        raise GymError("stopped here: the stand-in is what this test looks at")

    monkeypatch.setattr(launch, "start_policy", stand_in)
    monkeypatch.setattr(launch, "start_model_recorder", stand_in)
    settings = GymSettings(resources_server="mcqa", policy=policy, cli=sys.executable, model_url="http://x/v1")
    with pytest.raises(GymError, match="stopped here"):
        start_deployment(settings, tmp_path / "entry", owner_pid=os.getpid(), idle=(60.0, tmp_path / "entry"))
    assert given == [(60.0, tmp_path / "entry")]
