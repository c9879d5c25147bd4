"""Adaptive concurrency's arithmetic: a throttled window halves the limit once, answers grow it back after
the Retry-After, and the run folder's log summarizes what the run met."""

from __future__ import annotations

import json
from pathlib import Path

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
