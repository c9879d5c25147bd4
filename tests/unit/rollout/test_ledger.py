"""The run folder's ledger: what every process rolled out, read back by all of them (budgets, adaptive repeats)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.rollout.ledger import Ledger, Spend
from pytest_gym.runfolder.layout import LEDGER_FILE


def outcome(repeat: int, reward: float | None, tokens: dict[str, int]) -> TrialOutcome:
    return TrialOutcome(
        nodeid="evals/qa.jsonl::task[r0]",
        task_hash="abc123",
        repeat=repeat,
        line=1,
        dataset="evals/qa.jsonl",
        reward=reward,
        error=None if reward is not None else "HTTP 502",
        tokens=tokens,
    )


def test_what_one_process_records_another_reads_back(tmp_path: Path) -> None:
    writer, reader = Ledger(tmp_path), Ledger(tmp_path)
    writer.record(outcome(0, 1.0, {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15, "turns": 2}))
    writer.record(outcome(1, None, {}))
    reader.refresh()
    assert {r: result.reward for r, result in reader.task("evals/qa.jsonl", "abc123").items()} == {0: 1.0, 1: None}
    assert reader.spend["evals/qa.jsonl"] == Spend(trials=2, input_tokens=10, output_tokens=5, total_tokens=15)
    assert reader.total == reader.spend["evals/qa.jsonl"]


def append(tmp_path: Path, *entries: object) -> None:
    with (tmp_path / LEDGER_FILE).open("a", encoding="utf-8") as fh:
        for entry in entries:
            fh.write((entry if isinstance(entry, str) else json.dumps(entry)) + "\n")


def test_a_token_count_of_true_is_not_one_token(tmp_path: Path) -> None:
    (tmp_path / LEDGER_FILE).parent.mkdir(parents=True, exist_ok=True)
    append(tmp_path, {"s": "a.jsonl", "t": "t1", "r": 0, "v": 1.0, "u": {"input_tokens": True, "output_tokens": 7}})
    ledger = Ledger(tmp_path)
    ledger.refresh()
    assert ledger.total == Spend(trials=1, input_tokens=0, output_tokens=7, total_tokens=7)


@pytest.mark.parametrize(
    "line",
    [
        '{"s": "a.jsonl", "t": "t1", "r": true, "v": 1.0}',
        '{"s": "a.jsonl", "t": "t1", "r": "0", "v": 1.0}',
        '{"s": "a.jsonl", "t": "t1", "r": -1, "v": 1.0}',
        '{"s": "a.jsonl", "t": "t1", "v": 1.0}',
        '{"s": "a.jsonl", "t": "t1", "r": 0, "v": 1.0, "u": [1]}',
        '["s", "t", "r"]',
        "{torn",
        '{"s": "a.jsonl", "t": "t1", "r": 0, "v": 1.0, "x": "' + "y" * 5000 + '"}',
        "[" * 4000,  # Python 3.10 and 3.11 raise RecursionError on it (3.13 a ValueError): the oldest leg runs it
    ],
    ids=[
        "repeat-true",
        "repeat-string",
        "repeat-negative",
        "no-repeat",
        "usage-list",
        "array",
        "torn",
        "too-long",
        "deep",
    ],
)
def test_a_line_this_plugin_did_not_write_is_skipped_and_the_next_one_counts(tmp_path: Path, line: str) -> None:
    (tmp_path / LEDGER_FILE).parent.mkdir(parents=True, exist_ok=True)
    append(tmp_path, line, {"s": "a.jsonl", "t": "t2", "r": 0, "v": 0.0, "u": {"input_tokens": 3}})
    ledger = Ledger(tmp_path)
    ledger.refresh()
    assert list(ledger.results) == [("a.jsonl", "t2")]
    assert ledger.total == Spend(trials=1, input_tokens=3, output_tokens=0, total_tokens=3)


def test_a_copied_line_counts_once(tmp_path: Path) -> None:
    (tmp_path / LEDGER_FILE).parent.mkdir(parents=True, exist_ok=True)
    entry = {"s": "a.jsonl", "t": "t1", "r": 2, "v": 0.5, "u": {"input_tokens": 4, "output_tokens": 1}}
    append(tmp_path, entry, entry)
    ledger = Ledger(tmp_path)
    ledger.refresh()
    assert ledger.task("a.jsonl", "t1")[2].reward == 0.5
    assert ledger.total == Spend(trials=1, input_tokens=4, output_tokens=1, total_tokens=5)
