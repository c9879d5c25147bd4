"""Adaptive concurrency's arithmetic: a throttled window halves the limit once, answers grow it back after
the Retry-After, and the run folder's log summarizes what the run met."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.rollout.adaptive import Aimd, summarize


def test_a_throttled_window_halves_the_limit_once_and_answers_grow_it_back() -> None:
    state = Aimd(16)
    epoch = state.epoch
    assert state.throttled(epoch, None, now=0.0)
    assert state.permits == 8
    for _ in range(11):  # the rest of the burst was sent in the same window: it counts once
        assert not state.throttled(epoch, None, now=0.0)
    assert state.permits == 8
    assert state.throttled(state.epoch, None, now=0.0)
    assert state.permits == 4
    for _ in range(3):
        state.throttled(state.epoch, None, now=0.0)
    assert state.permits == 1  # never below one
    answers = 0
    while state.permits < 16:
        state.answered(now=0.0)
        answers += 1
    assert 100 < answers < 200  # one more permit per window of answers: sum(1..15) = 120
    assert not state.answered(now=0.0)
    assert state.permits == 16


def test_no_growth_before_the_retry_after_passed() -> None:
    state = Aimd(8)
    state.throttled(state.epoch, 5.0, now=100.0)
    assert state.permits == 4
    for _ in range(50):
        state.answered(now=104.0)
    assert state.permits == 4
    for _ in range(50):
        state.answered(now=105.5)
    assert state.permits > 4


def test_the_summary_of_a_log(tmp_path: Path) -> None:
    events = [{"t": 10.0, "status": 429, "limit": 8}, {"t": 10.5, "status": 429}, {"t": 11.0, "limit": 9},
              {"t": 12.0, "status": 503, "limit": 4}, "not json", {"t": 13.0, "limit": 5}]  # fmt: skip
    (tmp_path / "concurrency.jsonl").write_text("\n".join(json.dumps(e) if isinstance(e, dict) else e for e in events))
    summary = summarize(tmp_path, 16, adaptive=True)
    assert summary is not None
    assert (summary.throttled, summary.status_429, summary.status_503) == (3, 2, 1)
    assert summary.timeline == [[0.0, 16.0], [0.0, 8.0], [1.0, 9.0], [2.0, 4.0], [3.0, 5.0]]
    assert (summary.lowest, summary.final) == (4, 5)
    assert summarize(tmp_path / "nothing", 16, adaptive=True) is None


@pytest.mark.parametrize(
    "state",
    [
        {"limit": 2, "epoch": float("inf"), "hold_until": 0},
        {"limit": True, "epoch": 0, "hold_until": 0},
        {"limit": 2, "epoch": True, "hold_until": 0},
        {"limit": 2, "epoch": 1.5, "hold_until": 0},
        {"limit": "2", "epoch": 0, "hold_until": 0},
        {"limit": 2, "epoch": 0, "hold_until": float("inf")},
        {"limit": float("nan"), "epoch": 0, "hold_until": 0},
        {"limit": 2, "epoch": 0},
        [2, 0, 0],
        "2",
    ],
)
def test_a_shared_state_this_plugin_did_not_write_starts_the_limit_afresh(state: object) -> None:
    assert Aimd.from_json(state, 8) == Aimd(8)
    assert Aimd.from_json({"limit": 2, "epoch": 3, "hold_until": 5.0}, 8) == Aimd(8, 2.0, 3, 5.0)


def test_the_summary_takes_no_limit_of_true_and_no_time_that_is_not_finite(tmp_path: Path) -> None:
    lines = ['{"t": 10.0, "limit": 8}', '{"t": 11.0, "limit": true}', '{"t": Infinity, "limit": 2}',
             '{"t": NaN, "limit": 3}', '{"t": true, "limit": 4}', "[" * 4000, '{"t": 12.0, "limit": 6}']  # fmt: skip
    # "[" * 4000: a RecursionError on Python 3.10 and 3.11 (3.13: a ValueError); the oldest setup's leg runs this.
    (tmp_path / "concurrency.jsonl").write_text("\n".join(lines) + "\n")
    summary = summarize(tmp_path, 16, adaptive=True)
    assert summary is not None
    assert summary.timeline == [[0.0, 16.0], [0.0, 8.0], [2.0, 6.0]]
    assert (summary.lowest, summary.final) == (6, 6)
