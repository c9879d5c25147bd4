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
    baseline_from,
    compare,
    load_baseline,
    write_baseline,
)
from pytest_gym.judge.stats import suite_stats

SETTINGS: dict[str, Any] = {"repeats": 2, "min_reward": 1.0, "agent": "mcqa_agent", "model": "m1", "datasets": ["a"]}


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
    write_baseline(path, baseline)

    loaded = load_baseline(path)
    assert loaded == baseline
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["created_at"].startswith("2025-01-02T03:04:05")
    assert data["settings"] == SETTINGS
    assert data["suite"]["mean_reward"] == 0.5
    assert data["suite"]["pass_at"] == {"1": 0.5, "2": 2 / 3}
    assert data["tasks"][h(0)] == {"n": 2, "successes": 2, "mean_reward": 1.0, "passed": True, "errors": 0, "line": 1}
    assert data["tasks"][h(1)]["passed"] is False  # mean 0.5 < min_reward 1.0
    assert data["tasks"][h(3)] == {"n": 0, "successes": 0, "mean_reward": None, "passed": False, "errors": 2, "line": 4}
    assert os.listdir(path.parent) == ["baseline.json"]  # no temp file left behind
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_load_missing_is_none(tmp_path: Path) -> None:
    assert load_baseline(tmp_path / "nope.json") is None


def _valid_data() -> dict[str, Any]:
    return make_baseline({0: [1, 1], 1: [0, 1]}).model_dump(mode="json")


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda d: d.update(schema_version=99), "schema_version 99 is not supported"),
        (lambda d: d["tasks"].update({"abc": d["tasks"][h(0)]}), "task key 'abc' is not a full lowercase SHA-256"),
        (lambda d: d["tasks"][h(0)].update(successes=5), "successes (5) exceeds n (2)"),
        (lambda d: d["tasks"][h(0)].update(n=-1), "tasks." + h(0) + ".n"),
        (lambda d: d["tasks"][h(0)].update(mean_reward=None), "mean_reward must be null exactly when n is 0"),
        (lambda d: d["suite"].pop("mean_reward"), "suite.mean_reward: Field required"),
        (lambda d: d.update(extra_field=1), "extra_field: Extra inputs are not permitted"),
        (lambda d: d.update(created_at="yesterday"), "created_at"),
    ],
)
def test_invalid_content_names_file_and_problem(tmp_path: Path, mutate: Any, problem: str) -> None:
    data = _valid_data()
    mutate(data)
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError) as info:
        load_baseline(path)
    assert str(path) in str(info.value)
    assert problem in str(info.value)
    assert info.value.path == path


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "is not valid JSON"),
        ('{"schema_version": NaN}', "is not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ("", "is not valid JSON"),
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
    write_baseline(path, old)
    before = path.read_bytes()

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_baseline(path, make_baseline({0: [0, 0], 1: [1, 1]}))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["baseline.json"]


# --- comparison --------------------------------------------------------------------------------


def test_compare_classifies_tasks() -> None:
    # Baseline: 0 passes, 1 fails, 2 passes, 3 passes (not selected now), 4 all errored.
    baseline = make_baseline({0: [1, 1], 1: [0, 1], 2: [1, 1], 3: [1, 1]}, errors={4: 2})
    # Now: 0 fails, 1 passes, 2 still passes, 4 still errored, 5 is new; 3 was not selected.
    now = suite_stats(
        {h(0): [1, 0], h(1): [1, 1], h(2): [1, 1], h(5): [0, 0]}, min_reward=1.0, errors_by_task={h(4): 2}
    )
    result = compare(baseline, now, max_regression=None, settings=SETTINGS)
    assert result.new_failures == [h(0)]
    assert result.fixed == [h(1)]
    assert result.unused == [h(3)]
    assert result.new_tasks == [h(5)]
    assert result.settings_mismatch == []
    # Paired over the tasks measured in both: deltas 0: -0.5, 1: +0.5, 2: 0.
    assert result.paired.n_shared == 3
    assert result.paired.mean_delta == pytest.approx(0.0)
    assert not result.regressed


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
    # Eight tasks at 1.0 in the baseline; now each is 1.0 - drop, give or take 0.02.
    # Paired deltas -drop +- 0.02, so the 95% CI is about -drop +- 0.017: significant for any drop > 0.02.
    baseline = make_baseline({i: [1.0, 1.0] for i in range(8)})
    wiggle = [0.02, -0.02] * 4
    now = suite_stats({h(i): [1.0 - drop + wiggle[i]] * 2 for i in range(8)}, min_reward=1.0)
    return baseline, now


def test_regressed_needs_a_significant_drop_beyond_the_allowance() -> None:
    baseline, now = _drop_run(0.1)
    assert compare(baseline, now).paired.significant_drop
    assert compare(baseline, now).regressed  # default allowance 0
    assert compare(baseline, now, max_regression=0.05).regressed
    assert not compare(baseline, now, max_regression=0.2).regressed  # real, but within the allowance


def test_large_but_noisy_drop_is_not_a_regression() -> None:
    # Two tasks: one drops by 1.0, one gains 0.2. Mean delta -0.4 but the CI
    # (-0.4 +- 12.706 * 0.6) spans zero, so the evidence does not support a regression.
    baseline = make_baseline({0: [1.0], 1: [0.5]})
    now = suite_stats({h(0): [0.0], h(1): [0.7]}, min_reward=1.0)
    result = compare(baseline, now)
    assert result.paired.mean_delta == pytest.approx(-0.4)
    assert result.paired.ci_high is not None
    assert result.paired.ci_high > 0
    assert not result.regressed


def test_max_regression_must_be_non_negative() -> None:
    baseline, now = _drop_run(0.1)
    with pytest.raises(ValueError, match="max_regression"):
        compare(baseline, now, max_regression=-0.1)


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
    assert set(result.paired.deltas.values()) == {0.0}
    assert not result.regressed
