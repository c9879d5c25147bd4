"""Baseline files: round trip, validation, atomic writes, and comparison by content hash."""

from __future__ import annotations

import json
import os
import random
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.judge.baseline import (
    SCHEMA_VERSION,
    Baseline,
    BaselineError,
    apply_updates,
    baseline_from,
    compare,
    load_baseline,
    load_baselines,
    update_baselines,
    updated_baseline,
    write_baseline,
)
from pytest_gym.judge.stats import suite_stats

SETTINGS: dict[str, Any] = {"repeats": 2, "min_reward": 1.0, "agent": "mcqa_agent", "model": "m1", "datasets": ["a"]}
SUITE = "data/a.jsonl"


def row(i: int) -> dict[str, Any]:
    return {"responses_create_params": {"input": f"question {i}"}, "expected": i % 3}


def h(i: int) -> str:
    return task_hash(row(i))


def make_baseline(rewards: dict[int, list[float]], errors: dict[int, int] | None = None) -> Baseline:
    stats = suite_stats(
        {h(i): r for i, r in rewards.items()},
        min_reward=1.0,
        errors_by_task={h(i): e for i, e in (errors or {}).items()},
    )
    lines = {h(i): i + 1 for i in list(rewards) + list(errors or {})}
    return baseline_from(stats, SETTINGS, lines, created_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc))


# --- file round trip and validation -------------------------------------------------------------


def test_write_then_load_round_trips(tmp_path: Path) -> None:
    baseline = make_baseline({0: [1, 1], 1: [1, 0], 2: [0, 0]}, errors={3: 2})
    path = tmp_path / "sub" / "baseline.json"
    assert write_baseline(path, baseline, SUITE) == []

    assert load_baseline(path, SUITE) == baseline
    assert load_baseline(path) == baseline  # the only suite in the file
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 2
    entry = data["suites"][SUITE]
    assert entry["created_at"].startswith("2025-01-02T03:04:05")
    assert entry["settings"] == SETTINGS
    assert entry["suite"]["mean_reward"] == 0.5
    assert entry["suite"]["pass_at"] == {"1": 0.5, "2": 2 / 3}
    assert entry["suite"]["flaky_rate"] == 1 / 3
    assert entry["tasks"][h(0)] == {
        "n": 2,
        "successes": 2,
        "mean_reward": 1.0,
        "passed": True,
        "errors": 0,
        "line": 1,
        "rewards": [1.0, 1.0],  # in trial order, for comparisons across repeat counts
    }
    assert entry["tasks"][h(1)]["rewards"] == [1.0, 0.0]
    assert entry["tasks"][h(1)]["passed"] is False  # 1 of 2 trials < min_reward 1.0
    assert entry["tasks"][h(3)] == {
        "n": 0,
        "successes": 0,
        "mean_reward": None,
        "passed": False,
        "errors": 2,
        "line": 4,
        "rewards": [],
    }
    assert os.listdir(path.parent) == ["baseline.json"]  # no temp file left behind
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_load_missing_is_none(tmp_path: Path) -> None:
    assert load_baseline(tmp_path / "nope.json") is None
    assert load_baselines(tmp_path / "nope.json") is None


def test_each_suite_keeps_its_own_baseline(tmp_path: Path) -> None:
    """Two suites, one file (was: the last suite overwrote the first, which then shared 0 tasks)."""
    path = tmp_path / "b.json"
    first, second = make_baseline({0: [1, 1]}), make_baseline({5: [0, 1], 6: [1, 1]})
    update_baselines(path, {"a.jsonl": first, "b.jsonl": second})
    stored = load_baselines(path)
    assert stored is not None
    assert stored.suites == {"a.jsonl": first, "b.jsonl": second}
    newer = make_baseline({0: [0, 0]})
    write_baseline(path, newer, "a.jsonl")  # updating one suite leaves the other as it was
    assert load_baseline(path, "a.jsonl") == newer
    assert load_baseline(path, "b.jsonl") == second
    assert load_baseline(path, "c.jsonl") is None  # a suite the file does not hold
    with pytest.raises(BaselineError, match=r"holds 2 suites \(a.jsonl, b.jsonl\): name the one to read"):
        load_baseline(path)


def _v1_data() -> dict[str, Any]:
    """A baseline file as pytest-gym wrote it before suites had their own keys."""
    return {"schema_version": 1, **make_baseline({0: [1, 1], 1: [0, 1]}).model_dump(mode="json")}


def test_version_1_file_still_reads_for_the_suite_sharing_its_tasks(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    data = _v1_data()
    data["suite"].pop("flaky_rate")  # not in version 1
    path.write_text(json.dumps(data))
    stored = load_baselines(path)
    assert stored is not None
    assert stored.legacy is not None
    assert stored.suites == {}
    assert stored.for_suite("x.jsonl", {h(0), h(9)}) is stored.legacy
    assert stored.for_suite("y.jsonl", {h(9)}) is None  # shares no task: another suite's baseline
    assert load_baseline(path, "any") == stored.legacy
    # Updating converts the file; the unnamed suite is replaced by the named one.
    notes = write_baseline(path, make_baseline({9: [1]}), "y.jsonl")
    assert notes == [f"converted {path} from schema_version 1 (one unnamed suite) to 2 (suites by name)"]
    assert set(json.loads(path.read_text())["suites"]) == {"y.jsonl"}


def _valid_data() -> dict[str, Any]:
    return {"schema_version": 2, "suites": {SUITE: make_baseline({0: [1, 1], 1: [0, 1]}).model_dump(mode="json")}}


def _entry(d: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = d["suites"][SUITE]
    return entry


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda d: d.update(schema_version=99), "schema_version 99 is not supported (this pytest-gym reads 1 and 2)"),
        (lambda d: d.pop("schema_version"), "schema_version missing"),
        (lambda d: _entry(d)["tasks"].update({"abc": _entry(d)["tasks"][h(0)]}), "is not a full lowercase SHA-256"),
        (lambda d: _entry(d)["tasks"][h(0)].update(successes=5), "successes (5) exceeds n (2)"),
        (lambda d: _entry(d)["tasks"][h(0)].update(n=-1), f"suites.{SUITE}.tasks.{h(0)}.n"),
        (lambda d: _entry(d)["tasks"][h(0)].update(mean_reward=None), "mean_reward must be null exactly when n is 0"),
        (lambda d: _entry(d)["suite"].pop("mean_reward"), f"suites.{SUITE}.suite.mean_reward: Field required"),
        (lambda d: d.update(extra_field=1), "extra_field: Extra inputs are not permitted"),
        (lambda d: _entry(d).update(created_at="yesterday"), "created_at"),
        (lambda d: d.update(suites=[]), "suites: Input should be a valid dictionary"),
        # Numbers and flags as written, never coerced: a gate must not judge against ``true`` taken as 1.
        (lambda d: _entry(d)["tasks"][h(0)].update(mean_reward=True), f"tasks.{h(0)}.mean_reward"),
        (lambda d: _entry(d)["tasks"][h(0)].update(n=True, successes=1, rewards=[1.0]), f"tasks.{h(0)}.n"),
        (lambda d: _entry(d)["tasks"][h(0)].update(passed="yes"), f"tasks.{h(0)}.passed"),
        (lambda d: _entry(d)["tasks"][h(0)].update(rewards=["1", 1.0]), f"tasks.{h(0)}.rewards.0"),
        (lambda d: _entry(d)["suite"].update(mean_reward="0.9"), f"suites.{SUITE}.suite.mean_reward"),
        (lambda d: _entry(d)["suite"].update(min_reward=True), f"suites.{SUITE}.suite.min_reward"),
        (lambda d: _entry(d)["suite"]["pass_at"].update({"1": True}), f"suites.{SUITE}.suite.pass_at.1"),
    ],
)
def test_invalid_content_names_file_and_problem(tmp_path: Path, mutate: Any, problem: str) -> None:
    data = _valid_data()
    mutate(data)
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError) as info:
        load_baselines(path)
    assert str(path) in str(info.value)
    assert problem in str(info.value)
    assert info.value.path == path


def test_invalid_version_1_content_names_the_problem(tmp_path: Path) -> None:
    data = _v1_data()
    data["suite"].pop("mean_reward")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match=r"suite\.mean_reward: Field required"):
        load_baselines(path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "is not valid JSON"),
        ('{"schema_version": NaN}', "is not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ("", "is not valid JSON"),
        ('{"schema_version": true, "suites": {}}', "schema_version True is not supported"),
    ],
)
def test_unparseable_file_names_file_and_problem(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(content)
    with pytest.raises(BaselineError, match=problem) as info:
        load_baseline(path)
    assert str(path) in str(info.value)


def test_unreadable_path_is_a_baseline_error(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="cannot be read"):
        load_baseline(tmp_path)  # a directory


def test_failed_write_keeps_the_old_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "baseline.json"
    old = make_baseline({0: [1, 1]})
    write_baseline(path, old, SUITE)
    before = path.read_bytes()

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_baseline(path, make_baseline({0: [0, 0], 1: [1, 1]}), SUITE)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["baseline.json"]


# --- comparison --------------------------------------------------------------------------------


def test_compare_classifies_tasks() -> None:
    # Baseline: 0 passes, 1 fails, 2 passes, 3 passes (not selected now), 4 all errored, 6 passes, 7 fails.
    baseline = make_baseline({0: [1, 1], 1: [0, 1], 2: [1, 1], 3: [1, 1], 6: [1, 1], 7: [0, 0]}, errors={4: 2})
    # Now: 0 fails once, 1 passes, 2 still passes, 4 still errored, 5 is new, 6 fails, 7 passes; 3 was not selected.
    now = suite_stats(
        {h(0): [1, 0], h(1): [1, 1], h(2): [1, 1], h(5): [0, 0], h(6): [0, 0], h(7): [1, 1]},
        min_reward=1.0,
        errors_by_task={h(4): 2},
    )
    result = compare(baseline, now, max_regression=None, settings=SETTINGS)
    assert result.new_failures == [h(6)]  # every trial passed before and fails now: a stable flip
    assert result.fixed == [h(7)]
    assert result.flaky_failures == [h(0)]  # fails by the rule, but its trials disagree: not counted
    assert result.flaky_fixes == [h(1)]
    assert result.unused == [h(3)]
    assert result.new_tasks == [h(5)]
    assert result.settings_mismatch == []
    assert result.notes == [
        "flaky tasks (trials disagree): 1 in the baseline, 1 in this run; 2 flips of such tasks listed as flaky, "
        "not counted"
    ]
    # Paired over the tasks measured in both: 0: -0.5, 1: +0.5, 2: 0, 6: -1, 7: +1: the score test at 0 change.
    assert result.paired.n_shared == 5
    assert result.paired.mean_delta == pytest.approx(0.0)
    assert result.paired.p_drop == pytest.approx(0.5)
    assert result.paired.method.startswith("score test")
    assert result.deltas == {h(0): -0.5, h(1): 0.5, h(2): 0.0, h(6): -1.0, h(7): 1.0}
    assert result.compared == "each task on its 2 trials"
    assert (result.regressed, result.no_evidence, result.passed) == (False, None, True)


def test_too_few_shared_tasks_are_no_evidence() -> None:
    """Four tasks all failing now is p = 0.0625 at best: no drop could be shown, so the check fails."""
    few = compare(make_baseline({i: [1] for i in range(4)}), suite_stats({h(i): [1] for i in range(4)}, 1.0))
    assert few.no_evidence == (
        "4 shared tasks with a reward, fewer than the 5 a drop needs to show at all (every one failing)"
    )
    assert (few.regressed, few.passed) == (False, False)
    assert "no evidence" in few.summary()
    tolerant = compare(make_baseline({i: [1] for i in range(5)}), suite_stats({h(i): [1] for i in range(5)}, 1.0), 0.1)
    assert tolerant.no_evidence is not None
    assert "of more than 0.1" in tolerant.no_evidence
    enough = compare(make_baseline({i: [1] for i in range(5)}), suite_stats({h(i): [1] for i in range(5)}, 1.0))
    assert (enough.no_evidence, enough.passed) == (None, True)
    none = compare(make_baseline({0: [1]}), suite_stats({h(1): [1]}, 1.0))
    assert none.no_evidence is not None
    assert none.no_evidence.startswith("the baseline and this run share no task")
    assert none.summary().startswith("no evidence: the baseline and this run share no task")


def test_unequal_repeats_compare_the_trials_both_runs_have() -> None:
    """A baseline at 1 repeat and a run at 5: each task on its first trial, and the summary says so."""
    baseline = make_baseline({i: [1.0] for i in range(6)})
    now = suite_stats({h(i): [1.0, 0.0, 0.0, 0.0, 0.0] for i in range(6)}, 1.0)
    result = compare(baseline, now)
    assert set(result.deltas.values()) == {0.0}  # first trials agree; the means of 1 and of 5 trials would not
    assert result.trials_compared == {h(i): 1 for i in range(6)}
    assert result.compared == "each task on its first 1 trial both runs have (the baseline has 1 per task, this run 5)"
    assert result.paired.method.startswith("exact unconditional")  # one trial each: pass/fail pairs
    assert not result.regressed
    assert result.flaky_failures == [h(i) for i in range(6)]  # 1 of 1 passed, 1 of 5 now: not a stable flip
    assert result.notes[0].startswith("the baseline has tasks with one trial: a flip of such a task cannot be told")
    # And the other way round: a baseline at 5 and a run at 2 compares each task's first 2.
    back = compare(make_baseline({i: [1.0, 1.0, 0.0, 0.0, 0.0] for i in range(6)}), suite_stats(
        {h(i): [1.0, 1.0] for i in range(6)}, 1.0))  # fmt: skip
    assert set(back.deltas.values()) == {0.0}
    assert back.compared == "each task on its first 2 trials both runs have (the baseline has 5 per task, this run 2)"


def test_an_older_baseline_without_per_trial_rewards_still_compares() -> None:
    """Files written before rewards were kept: the baseline's mean against as many of this run's first trials."""
    old = make_baseline({i: [1.0, 0.0] for i in range(6)})
    for record in old.tasks.values():
        record.rewards = None
    now = suite_stats({h(i): [1.0, 0.0, 1.0, 1.0] for i in range(6)}, 1.0)
    result = compare(old, now)
    assert set(result.deltas.values()) == {0.0}  # 0.5 against the mean of the first two
    assert result.notes == [
        "flaky tasks (trials disagree): 6 in the baseline, 6 in this run; 0 flips of such tasks listed as flaky, "
        "not counted"
    ]
    fewer = compare(old, suite_stats({h(i): [1.0] for i in range(6)}, 1.0))  # 1 trial now: all of them
    assert set(fewer.deltas.values()) == {0.5}
    assert any("predates per-trial rewards" in note for note in fewer.notes)


# --- a narrowed run's update (-k, -m, --deselect, --lf) ------------------------------------------------------


def test_a_narrowed_update_replaces_the_selected_tasks_and_keeps_the_others() -> None:
    stored = make_baseline({i: [1.0, 1.0] for i in range(10)}, errors={10: 2})
    selected = make_baseline({0: [0.0, 0.0], 11: [1.0, 0.0]})  # task 0 broke; task 11 is new
    merged, said = updated_baseline(stored, selected, narrowed=True)
    assert merged is not None
    assert set(merged.tasks) == set(stored.tasks) | {h(11)}
    assert merged.tasks[h(0)] == selected.tasks[h(0)]
    assert merged.tasks[h(5)] == stored.tasks[h(5)]
    # The suite's numbers are judged again over all of them, as a whole run with these rewards would be.
    whole = make_baseline({**{i: [1.0, 1.0] for i in range(1, 10)}, 0: [0.0, 0.0], 11: [1.0, 0.0]}, errors={10: 2})
    assert merged.suite == whole.suite.model_copy(update={"efficiency": stored.suite.efficiency})
    assert (merged.suite.tasks, merged.suite.trials, merged.suite.errors) == (12, 22, 2)
    assert said == "1 task updated, 1 added, 10 not selected kept (the selection narrowed the suite)"


def test_a_narrowed_update_of_its_own_entries_changes_no_number() -> None:
    stored = make_baseline({0: [1.0, 0.0], 1: [1.0, 1.0], 2: [0.0, 0.0], 3: [0.5, 1.0]}, errors={4: 1})
    merged, _ = updated_baseline(stored, make_baseline({1: [1.0, 1.0], 3: [0.5, 1.0]}), narrowed=True)
    assert merged is not None
    assert (merged.suite, merged.tasks) == (stored.suite, stored.tasks)


def test_a_task_with_only_some_repeats_selected_keeps_its_entry() -> None:
    """``-k r0``: one of each task's two repeats ran; a task's entry is the whole task's or nothing."""
    stored = make_baseline({0: [1.0, 0.0], 1: [1.0, 1.0]})
    merged, said = updated_baseline(
        stored, make_baseline({0: [1.0], 2: [0.0]}), narrowed=True
    )  # task 2 is new: added all the same
    assert merged is not None
    assert merged.tasks[h(0)] == stored.tasks[h(0)]
    assert merged.tasks[h(2)].n == 1
    assert said == (
        "0 tasks updated, 1 added, 1 kept as they were (no trial measured, or only some repeats selected), "
        "1 not selected kept (the selection narrowed the suite)"
    )


def test_a_task_decided_before_its_last_repeats_is_updated_not_kept() -> None:
    """--gym-repeats-adaptive skips repeats of a task already decided: they count as run, the task is updated."""
    stored = make_baseline({0: [1.0, 1.0], 1: [1.0, 1.0]})
    written, said = updated_baseline(stored, make_baseline({0: [0.0]}), narrowed=True, skipped={h(0): 1})
    assert written is not None
    assert written.tasks[h(0)].mean_reward == 0.0
    assert said.startswith("1 task updated")


def test_a_narrowed_update_writes_nothing_it_cannot_merge() -> None:
    stored = make_baseline({i: [1.0, 1.0] for i in range(4)})
    other = make_baseline({0: [1.0, 1.0]}).model_copy(update={"settings": {**SETTINGS, "model": "m2"}})
    merged, said = updated_baseline(stored, other, narrowed=True)
    assert merged is None
    assert "other settings (model differ)" in said
    for record in stored.tasks.values():
        record.rewards = None  # written before per-trial rewards were kept
    merged, said = updated_baseline(stored, make_baseline({0: [1.0, 1.0]}), narrowed=True)
    assert merged is None
    assert "predates per-trial rewards" in said
    first = make_baseline({0: [1.0, 1.0]})
    assert updated_baseline(None, first, narrowed=True) == (
        first,
        "the 1 selected tasks only (the selection narrowed the suite)",
    )


def test_a_whole_run_replaces_the_baseline_but_keeps_the_tasks_it_measured_nothing_of() -> None:
    """Gym died halfway: the tasks whose every trial errored keep what the baseline knew of them."""
    stored = make_baseline({i: [1.0, 1.0] for i in range(6)})
    run = make_baseline({0: [0.0, 1.0], 1: [1.0, 1.0], 4: [1.0], 7: [1.0, 1.0]}, errors={2: 2, 3: 2, 4: 1})
    written, said = updated_baseline(stored, run, narrowed=False)
    assert written is not None
    assert set(written.tasks) == {h(i) for i in (0, 1, 2, 3, 4, 7)}  # task 5 left the dataset: gone
    assert (written.tasks[h(2)], written.tasks[h(3)]) == (stored.tasks[h(2)], stored.tasks[h(3)])
    assert written.tasks[h(4)] == run.tasks[h(4)]  # measured, if only once: the run's
    assert written.suite.efficiency == run.suite.efficiency
    assert said == "2 tasks with no trial measured (all errored) kept as they were"
    # Every task measured, or other settings: the run's baseline as it ran.
    assert updated_baseline(stored, make_baseline({0: [1.0, 0.0]}), narrowed=False) == (
        make_baseline({0: [1.0, 0.0]}),
        "",
    )
    other = run.model_copy(update={"settings": {**SETTINGS, "model": "m2"}})
    assert updated_baseline(stored, other, narrowed=False) == (other, "")


def test_two_narrowed_updates_at_once_keep_both(tmp_path: Path) -> None:
    """Two jobs (``-k task0``, ``-k task1``) read the file before either writes: each merges under the lock with the
    file as the other left it, so neither update is lost."""
    path = tmp_path / "b.json"
    write_baseline(path, make_baseline({i: [1.0, 1.0] for i in range(4)}), SUITE)
    first, second = make_baseline({0: [0.0, 0.0]}), make_baseline({1: [0.0, 0.0]})

    def merging(fresh: Baseline) -> Any:
        return lambda now: updated_baseline(now.for_suite(SUITE) if now else None, fresh, narrowed=True)

    queued = [merging(first), merging(second)]  # both made before either is written
    for update in queued:
        _, said = apply_updates(path, {SUITE: update})
        assert said[SUITE][0] is True
    stored = load_baselines(path)
    assert stored is not None
    tasks = stored.suites[SUITE].tasks
    assert (tasks[h(0)].mean_reward, tasks[h(1)].mean_reward, tasks[h(2)].mean_reward) == (0.0, 0.0, 1.0)


def test_an_update_that_writes_nothing_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline(path, make_baseline({0: [1.0, 1.0]}), SUITE)
    before = path.read_bytes()
    assert apply_updates(path, {SUITE: lambda now: (None, "not updated")}) == ([], {SUITE: (False, "not updated")})
    assert path.read_bytes() == before


def test_unused_is_ordered_by_baseline_line() -> None:
    baseline = make_baseline({7: [1], 2: [1], 5: [0], 0: [1]})
    result = compare(baseline, suite_stats({h(0): [1]}, min_reward=1.0))
    assert result.unused == [h(2), h(5), h(7)]


def test_settings_mismatch_lists_changed_added_and_removed_keys() -> None:
    baseline = make_baseline({0: [1, 1]})
    current = {**SETTINGS, "model": "m2", "datasets": ("a",), "new_key": 1}
    del current["agent"]
    result = compare(baseline, suite_stats({h(0): [1, 1]}, min_reward=1.0), settings=current)
    assert result.settings_mismatch == ["agent", "model", "new_key"]  # the tuple equals the stored list


def _drop_run(drop: float) -> tuple[Baseline, Any]:
    # Eight tasks at 1.0 in the baseline; now each is 1.0 - drop, give or take 0.02. The differences
    # vary little, so the rescaled score test finds the drop sure (the sign-flip test could not go below
    # 2**-8 with 8 tasks), and its bound says how large it is.
    baseline = make_baseline({i: [1.0, 1.0] for i in range(8)})
    wiggle = [0.02, -0.02] * 4
    now = suite_stats({h(i): [1.0 - drop + wiggle[i]] * 2 for i in range(8)}, min_reward=1.0)
    return baseline, now


def test_regressed_is_a_test_of_a_drop_beyond_the_allowance() -> None:
    baseline, now = _drop_run(0.1)
    assert compare(baseline, now).paired.p_drop < 1e-4
    assert compare(baseline, now).significant_drop
    assert compare(baseline, now).regressed  # default allowance 0
    assert -0.12 < compare(baseline, now).paired.ci_high < -0.08  # the drop is at least ~0.09
    assert compare(baseline, now, max_regression=0.05).regressed
    assert not compare(baseline, now, max_regression=0.1).regressed  # a drop of 0.1 is not shown to exceed 0.1
    assert not compare(baseline, now, max_regression=0.2).regressed  # real, but within the allowance
    for allowance in (0.0, 0.05, 0.08, 0.09, 0.1, 0.2):  # the bound and the test are one statement
        result = compare(baseline, now, max_regression=allowance)
        assert result.regressed == (result.paired.ci_high < -allowance), allowance


def test_large_but_noisy_drop_is_not_a_regression() -> None:
    # Two tasks: one drops by 1.0, one gains 0.2. Mean delta -0.4, but nothing is shown, and two tasks
    # are too few to show anything.
    baseline = make_baseline({0: [1.0], 1: [0.5]})
    now = suite_stats({h(0): [0.0], h(1): [0.7]}, min_reward=1.0)
    result = compare(baseline, now)
    assert result.paired.mean_delta == pytest.approx(-0.4)
    assert result.paired.p_drop > 0.2
    assert result.paired.ci_high > 0
    assert not result.regressed
    assert result.no_evidence is not None


def test_two_tasks_flipping_is_not_a_regression_but_eight_of_twenty_is() -> None:
    """Two flips: p = 0.25 (exact), and two tasks are no evidence; eight of twenty: p = 0.0059."""
    two = compare(make_baseline({0: [1], 1: [1]}), suite_stats({h(0): [0], h(1): [0]}, min_reward=1.0))
    assert (two.paired.p_drop, two.paired.mean_delta) == (pytest.approx(0.25), -1.0)
    assert two.paired.method.startswith("exact unconditional")
    assert two.new_failures == [h(0), h(1)]  # one trial each: a flip is "stable", and noted as noise-prone
    assert two.notes[0].startswith("the baseline and this run have tasks with one trial")
    assert not two.regressed
    assert not two.passed  # no evidence

    baseline = make_baseline({i: [1] for i in range(20)})
    now = suite_stats({h(i): [0 if i < 8 else 1] for i in range(20)}, min_reward=1.0)
    eight = compare(baseline, now)
    assert eight.paired.p_drop == pytest.approx(0.00591, abs=1e-5)
    assert eight.regressed
    assert not compare(baseline, now, max_regression=0.5).regressed  # real, but within the allowance
    assert eight.describe(eight.new_failures) == ", ".join(f"{h(i)[:12]} (line {i + 1})" for i in range(5)) + (
        " and 3 more"
    )


def test_task_pass_rule_judges_both_runs_alike() -> None:
    """The baseline's tasks are judged again by the current rule from their counts."""
    baseline = make_baseline({0: [1, 0, 1], 1: [1, 1, 1]})  # 0 passes only by majority
    now = suite_stats({h(0): [1, 0, 1], h(1): [1, 0, 1]}, min_reward=1.0, rule="majority")
    result = compare(baseline, now, rule="majority")
    assert (result.new_failures, result.fixed) == ([], [])
    strict = compare(baseline, suite_stats({h(0): [1, 0, 1], h(1): [1, 0, 1]}, min_reward=1.0))
    assert strict.new_failures == []  # it passed every trial, and still passes two of three: not a stable flip
    assert strict.flaky_failures == [h(1)]
    broken = compare(baseline, suite_stats({h(0): [1, 0, 1], h(1): [0, 0, 0]}, min_reward=1.0, rule="majority"),
                     rule="majority")  # fmt: skip
    assert broken.new_failures == [h(1)]


def test_rewards_outside_the_unit_interval_compare_pass_fail() -> None:
    baseline = make_baseline({i: [2.0] for i in range(6)})
    now = suite_stats({h(i): [0.0] for i in range(6)}, min_reward=1.0)
    result = compare(baseline, now)
    assert result.paired.method.endswith("on task pass/fail (rewards outside [0, 1])")
    assert result.paired.p_drop == pytest.approx(0.5**6)
    assert result.paired.mean_delta == -1.0  # the change of the pass rate
    assert result.regressed


def test_lines_name_tasks_by_the_current_run() -> None:
    baseline = make_baseline({0: [1], 1: [1]})
    result = compare(baseline, suite_stats({h(0): [0], h(1): [1]}, min_reward=1.0), lines={h(0): 42})
    assert result.label(h(0)) == f"{h(0)[:12]} (line 42)"
    assert result.label(h(1)) == f"{h(1)[:12]} (line 2)"  # the baseline's line, when this run did not say
    assert result.named([h(0)]) == [{"hash": h(0)[:12], "line": 42}]


def test_max_regression_must_be_non_negative() -> None:
    baseline, now = _drop_run(0.1)
    with pytest.raises(ValueError, match="max_regression"):
        compare(baseline, now, max_regression=-0.1)
    assert not compare(baseline, now, max_regression=1.5).regressed  # beyond any change: never a regression


def test_reordering_and_inserting_rows_does_not_matter() -> None:
    # Rewards follow the row's content, not its position, as a deterministic agent's would.
    def rewards_for(r: dict[str, Any]) -> list[float]:
        return [1.0, 1.0] if r["expected"] == 0 else [1.0, 0.0]

    original = [row(i) for i in range(10)]
    baseline_stats = suite_stats({task_hash(r): rewards_for(r) for r in original}, min_reward=1.0)
    baseline = baseline_from(baseline_stats, SETTINGS, {task_hash(r): n for n, r in enumerate(original, 1)})

    edited = list(original)
    random.Random(7).shuffle(edited)
    inserted = row(100)
    edited.insert(3, inserted)
    now = suite_stats({task_hash(r): rewards_for(r) for r in edited}, min_reward=1.0)

    result = compare(baseline, now, settings=SETTINGS)
    assert result.new_failures == []
    assert result.fixed == []
    assert result.unused == []
    assert result.new_tasks == [task_hash(inserted)]
    assert result.paired.n_shared == 10
    assert set(result.deltas.values()) == {0.0}
    assert not result.regressed
