"""Which earlier trials --gym-resume may reuse, and why not when it may not; a run that reuses every trial
starts and contacts no Gym; the resume note reaches the summary also under -n 2."""

from __future__ import annotations

import fnmatch
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.settings import GymSettings
from pytest_gym.runfolder.rollouts import ROLLOUTS_FILE
from pytest_gym.runfolder.runinfo import RUN_INFO_FILE, load_reusable, write_run_info
from tests.helpers.paths import EXAMPLE, EXAMPLE_ANSWERS
from tests.helpers.realgym import RealGym, attach, start_mode

SETTINGS = GymSettings(agent="mcqa_simple_agent", policy="scripted", policy_answer="\\boxed{E}")


def earlier_run(tmp_path: Path, settings: GymSettings = SETTINGS) -> Path:
    run = tmp_path / "earlier"
    write_run_info(run, settings)
    lines = [
        {"reward": 1.0, "_ng_task_index": 0, "_ng_rollout_index": 0, "_pytest_gym_task_hash": "a" * 64},
        {"reward": 0.0, "_ng_task_index": 0, "_ng_rollout_index": 1, "_pytest_gym_task_hash": "a" * 64},
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines) + '{"reward": 1.0, "_ng_ta'
    (run / ROLLOUTS_FILE).write_text(text)
    return run


def test_same_settings_reuse_every_complete_record(tmp_path: Path) -> None:
    reusable = load_reusable(earlier_run(tmp_path), SETTINGS)
    assert reusable.take("a" * 64, 0)["reward"] == 1.0  # type: ignore[index]
    assert reusable.take("a" * 64, 1)["reward"] == 0.0  # type: ignore[index]
    assert reusable.take("a" * 64, 2) is None
    assert "2 finished trials available" in reusable.note


def test_other_settings_reuse_nothing_and_say_which(tmp_path: Path) -> None:
    other = SETTINGS.model_copy(update={"policy_answer": "\\boxed{B}", "agent": "other_agent"})
    reusable = load_reusable(earlier_run(tmp_path), other)
    assert reusable.records == {}
    assert "agent, policy_answer differ" in reusable.note


def test_speed_settings_do_not_block_reuse(tmp_path: Path) -> None:
    faster = SETTINGS.model_copy(update={"concurrency": 64, "trial_timeout": 5.0, "repeats": 9})
    assert load_reusable(earlier_run(tmp_path), faster).records


def test_missing_pieces_are_explained(tmp_path: Path) -> None:
    assert "has no rollouts.jsonl" in load_reusable(tmp_path, SETTINGS).note
    (tmp_path / ROLLOUTS_FILE).write_text("{}\n")
    assert f"no readable {RUN_INFO_FILE}" in load_reusable(tmp_path, SETTINGS).note


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    assert len(read_jsonl(earlier_run(tmp_path) / ROLLOUTS_FILE)) == 2


# -- a run whose every selected trial is reused starts no Gym --------------------------------------------------
#
# The earlier run folder is written here as a finished run would leave it (run info with the same rollout
# settings, one record per trial), so these run without Gym; the real-Gym tests resume real runs.

AGENT = "mcqa_simple_agent"
PASS = ("--gym-min-reward", "0.5")  # every reward the earlier run recorded passes


def finished_run(run_dir: Path, dataset: Path, settings: GymSettings, repeats: int) -> list[float]:
    """A finished run of ``dataset`` with ``settings``; returns the rewards in file order (all >= 0.5)."""
    run_dir.mkdir(parents=True)
    write_run_info(run_dir, settings)
    rewards = []
    with (run_dir / ROLLOUTS_FILE).open("w") as fh:
        for index, line in enumerate(dataset.read_text().splitlines()):
            row = json.loads(line)
            for repeat in range(repeats):
                reward = 1.0 if (index + repeat) % 2 else 0.5  # not what Gym's mcqa returns: reused, not rerun
                rewards.append(reward)
                record = {**row, "reward": reward, "_ng_task_index": index, "_ng_rollout_index": repeat}
                fh.write(json.dumps({**record, "_pytest_gym_task_hash": task_hash(row)}) + "\n")
    return rewards


@pytest.fixture
def dataset(pytester: pytest.Pytester) -> Path:
    path = pytester.path / "example.jsonl"
    shutil.copy(EXAMPLE, path)
    pytester.makeini("[pytest]\n")
    return path


@pytest.fixture
def listener() -> Iterator[tuple[str, list[int]]]:
    """A URL on 127.0.0.1 that counts the connections made to it (and answers none)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    contacts: list[int] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            contacts.append(1)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", contacts
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def reused_rewards(pytester: pytest.Pytester, run_dir: str) -> list[float]:
    records = read_jsonl(pytester.path / run_dir / ROLLOUTS_FILE)
    return [r["reward"] for r in sorted(records, key=lambda r: (r["_ng_task_index"], r["_ng_rollout_index"]))]


def recording_gym(where: Path) -> tuple[Path, Path]:
    """A ``gym`` command (in a venv-shaped folder, for --gym-server-venv auto) that records each call and fails."""
    venv = where / "fake-venv"
    (venv / "lib" / "python3.13" / "site-packages").mkdir(parents=True)
    (venv / "bin").mkdir()
    called = where / "gym-called"
    fake_gym = venv / "bin" / "gym"
    fake_gym.write_text(f'#!/bin/sh\necho "$@" >> {called}\nexit 1\n')
    fake_gym.chmod(0o755)
    return fake_gym, called


XDIST = pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])


@XDIST
def test_all_reused_in_attach_mode_never_contacts_gym(
    pytester: pytest.Pytester, dataset: Path, listener: tuple[str, list[int]], xdist: tuple[str, ...]
) -> None:
    if xdist:
        pytest.importorskip("xdist")
    url, contacts = listener
    rewards = finished_run(pytester.path / "run1", dataset, GymSettings(agent=AGENT), repeats=2)
    args = ("--gym-url", url, "--gym-agent", AGENT, "--gym-dataset", "example.jsonl", "--gym-repeats", "2", *PASS)
    result = pytester.runpytest(*args, "--gym-resume", "run1", "--gym-run-dir", "run2", *xdist)
    result.assert_outcomes(passed=10)
    result.stdout.fnmatch_lines(["note: resume: 10 finished trials available from */run1"])
    assert contacts == [], "a run that reused every trial contacted Gym"
    assert reused_rewards(pytester, "run2") == rewards


@XDIST
def test_all_reused_in_start_mode_never_starts_gym(
    pytester: pytest.Pytester, dataset: Path, xdist: tuple[str, ...]
) -> None:
    if xdist:
        pytest.importorskip("xdist")
    fake_gym, called = recording_gym(pytester.path)
    settings = GymSettings(agent=AGENT, resources_server="mcqa", policy="scripted", policy_answer="\\boxed{E}")
    rewards = finished_run(pytester.path / "run1", dataset, settings, repeats=1)
    result = pytester.runpytest(*start_mode(str(fake_gym), "--gym-resume", "run1", *PASS), *xdist)
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["note: resume: 5 finished trials available from */run1"])
    assert not called.exists(), f"the gym command was run: {called.read_text()}"
    assert reused_rewards(pytester, "run") == rewards


def test_one_trial_not_reused_does_start_gym(pytester: pytest.Pytester, dataset: Path) -> None:
    """The check above can fail: with one more repeat than the earlier run had, the gym command is run."""
    fake_gym, called = recording_gym(pytester.path)
    settings = GymSettings(agent=AGENT, resources_server="mcqa", policy="scripted", policy_answer="\\boxed{E}")
    finished_run(pytester.path / "run1", dataset, settings, repeats=1)
    result = pytester.runpytest(*start_mode(str(fake_gym), "--gym-resume", "run1", "--gym-repeats", "2", *PASS))
    result.assert_outcomes(passed=5, errors=5)
    assert called.exists()


# -- against a real Gym: the note under -n 2, and resuming a real finished run ----------------------------------


@pytest.mark.gym
@XDIST
def test_the_resume_note_reaches_the_summary_and_its_json(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    """Under -n 2 only the workers read the earlier run: their note travels back to the controller."""
    pytester.runpytest(*attach(gym, "--gym-run-dir", "run1")).assert_outcomes(passed=2, failed=3)
    gym.script(reset_stats=True)
    again = pytester.runpytest(
        *attach(gym, "--gym-repeats", "2", "--gym-resume", "run1", "--gym-run-dir", "run2"), *xdist
    )
    again.assert_outcomes(passed=4, failed=6)
    assert gym.policy_calls() == 5  # the 5 second repeats; the first ones were reused
    shown = [line.removeprefix("note: ") for line in again.stdout.lines if line.startswith("note: resume:")]
    assert len(shown) == 1, again.stdout.str()
    assert fnmatch.fnmatch(shown[0], "resume: 5 finished trials available from */run1")
    notes = json.loads((pytester.path / "run2" / "pytest_gym_summary.json").read_text())["notes"]
    assert [note for note in notes if note.startswith("resume:")] == shown


@pytest.mark.gym
@XDIST
def test_resuming_a_finished_run_contacts_no_gym(
    pytester: pytest.Pytester,
    example: Path,
    gym: RealGym,
    listener: tuple[str, list[int]],
    xdist: tuple[str, ...],
) -> None:
    rows = zip(EXAMPLE.read_text().splitlines(), EXAMPLE_ANSWERS, strict=True)
    right = [line for line, answer in rows if answer == "E"]  # what the scripted policy answers
    (pytester.path / "right.jsonl").write_text("".join(line + "\n" for line in right))
    first = pytester.runpytest(*attach(gym, "--gym-repeats", "2", "--gym-run-dir", "run1", dataset="right.jsonl"))
    first.assert_outcomes(passed=4)
    gym.script(reset_stats=True)
    url, contacts = listener
    again = pytester.runpytest(
        *("--gym-url", url, "--gym-agent", AGENT, "--gym-dataset", "right.jsonl", "--gym-repeats", "2"),
        *("--gym-resume", "run1", "--gym-run-dir", "run2", "--junitxml", "r.xml", *xdist),
    )
    again.assert_outcomes(passed=4)
    assert contacts == [], "resuming a finished run contacted the --gym-url head"
    assert gym.policy_calls() == 0
    assert reused_rewards(pytester, "run2") == reused_rewards(pytester, "run1") == [1.0] * 4
    assert (pytester.path / "r.xml").read_text().count("[[PROPERTY|gym_reused=True]]") == 4


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"hydra": ("mcqa.resources_servers.mcqa.grading_mode=lenient_answer_colon",)}, "hydra"),
        ({"bind_resources_server": "off"}, "bind_resources_server"),
        ({"benchmark": ("minibench",)}, "benchmark"),
    ],
)
def test_gym_config_changes_block_reuse(tmp_path: Path, change: dict[str, object], named: str) -> None:
    """A Gym config override changes the rewards (a grading mode): reusing the old rollouts would hide it."""
    reusable = load_reusable(earlier_run(tmp_path), SETTINGS.model_copy(update=change))
    assert reusable.records == {}
    assert f"({named} differ)" in reusable.note


def test_runner_environment_and_headers_do_not_block_reuse(tmp_path: Path) -> None:
    """Paths and caches for Gym's processes, and access headers for a remote Gym, change no reward."""
    elsewhere = SETTINGS.model_copy(update={"env": ("HF_HOME=/cache/hf",), "header": ("X-Team=TEAM_TOKEN",)})
    assert load_reusable(earlier_run(tmp_path), elsewhere).records
