"""Synthetic run folders for the HTML report's tests: written the way a run writes them.

Trials go through RunFolderWriter, the suite numbers through SuiteResults and write_summary, a baseline
through the judge's own baseline code, so the report reads what a real run leaves behind.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.core.settings import GymSettings
from pytest_gym.judge.suites import SuiteResults, parse_gates
from pytest_gym.runfolder.rollouts import RunFolderWriter
from pytest_gym.runfolder.summary import write_summary

AGENT = "mcqa_simple_agent"
LETTERS = "ABCDEFGHIJ"


@dataclass
class Spec:
    """What one synthetic suite looks like."""

    suite: str = "evals/mcqa.jsonl"
    tasks: int = 12
    repeats: int = 4
    seed: int = 1
    error_every: int = 0  # every Nth trial is an infrastructure fault
    tool_calls: bool = False
    prompt_chars: int = 200
    answer_chars: int = 60
    difficulty: Sequence[float] | None = None  # per task: the chance a trial succeeds


def rows(spec: Spec) -> list[dict[str, Any]]:
    rng = random.Random(spec.seed)
    out = []
    for i in range(spec.tasks):
        filler = " ".join(
            rng.choice(["why", "which", "sum", "the", "of", "prime", "graph", "edge"]) for _ in range(200)
        )
        question = f"Question {i}: which option is right? " + filler[: max(0, spec.prompt_chars - 40)]
        out.append(
            {
                "responses_create_params": {"input": [{"role": "user", "content": question}]},
                "options": [{letter: f"option {letter}"} for letter in LETTERS[:4]],
                "expected_answer": LETTERS[i % 4],
            }
        )
    return out


def _answer(row: dict[str, Any], letter: str, reward: float, spec: Spec, rng: random.Random) -> dict[str, Any]:
    text = f"Thinking it over, the answer is \\boxed{{{letter}}}. " + "x" * max(0, spec.answer_chars - 40)
    output: list[dict[str, Any]] = []
    if spec.tool_calls:
        output += [
            {
                "type": "function_call",
                "name": "search",
                "arguments": json.dumps({"q": "option facts"}),
                "call_id": "c1",
            },
            {"type": "function_call_output", "call_id": "c1", "output": "three results, the second says " + letter},
        ]
    output.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
    tokens_in = rng.randint(80, 400)
    tokens_out = rng.randint(5, 60)
    return {
        "responses_create_params": row["responses_create_params"],
        "response": {
            "id": "resp",
            "object": "response",
            "output": output,
            "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out, "total_tokens": tokens_in + tokens_out},
        },
        "reward": reward,
        "mask_sample": False,
        "failure_kind": None,
        "failure_reason": None,
        "options": row["options"],
        "expected_answer": row["expected_answer"],
        "extracted_answer": letter,
    }


def write_suite(writer: RunFolderWriter, results: SuiteResults, spec: Spec, shift: float = 0.0) -> None:
    """Every trial of one suite: ``shift`` moves every task's chance of success (a later, better or worse run)."""
    rng = random.Random(spec.seed * 7919 + int(shift * 1000))
    difficulty = spec.difficulty or [
        random.Random(spec.seed + i).choice([0.0, 0.2, 0.5, 0.9, 1.0]) for i in range(spec.tasks)
    ]
    count = 0
    for index, row in enumerate(rows(spec)):
        digest = task_hash(row)
        for repeat in range(spec.repeats):
            count += 1
            request = {**row, "agent_ref": {"name": AGENT}, "_ng_task_index": index, "_ng_rollout_index": repeat}
            base = {
                "nodeid": f"{spec.suite}::{digest[:12]}[r{repeat}]",
                "task_hash": digest,
                "repeat": repeat,
                "line": index + 1,
                "dataset": spec.suite,
                "request": request,
                "agent": AGENT,
                "latency_s": round(rng.lognormvariate(-1.5, 0.6), 4),
            }
            if spec.error_every and count % spec.error_every == 0:
                outcome = TrialOutcome(
                    **base,
                    error="HTTP 500 from http://127.0.0.1:1/run: boom",
                    error_class="http_status",
                    http_status=500,
                    attempts=2,
                )
            else:
                success = rng.random() < min(1.0, max(0.0, difficulty[index] + shift))
                letter = row["expected_answer"] if success else LETTERS[(LETTERS.index(row["expected_answer"]) + 1) % 4]
                reward = 1.0 if success else 0.0
                outcome = TrialOutcome(**base, reward=reward, answer=_answer(row, letter, reward, spec, rng))
            writer.record(outcome)
            results.add(outcome)


def make_run(
    run_dir: Path,
    specs: Sequence[Spec] = (Spec(),),
    *,
    gates: Sequence[str] = ("mean_reward>=0.6", "pass@2>=0.5"),
    baseline: Path | None = None,
    baseline_shift: float = 0.3,
    min_reward: float = 1.0,
    summary_extra: dict[str, Any] | None = None,
) -> Path:
    """A run folder with every spec's trials and the summary a run writes; with ``baseline``, a run before it
    (each task's chance of success ``baseline_shift`` higher) is written there first and compared with."""
    if baseline is not None:
        settings = GymSettings(baseline=str(baseline), update_baseline=True, min_reward=min_reward)
        before = SuiteResults(settings, [])
        with RunFolderWriter(run_dir.parent / (run_dir.name + "-before")) as writer:
            for spec in specs:
                write_suite(writer, before, spec, shift=baseline_shift)
        before.judge(run_dir)
    settings = GymSettings(
        gate=tuple(gates), baseline=str(baseline) if baseline else None, min_reward=min_reward, max_regression=0.05
    )
    results = SuiteResults(settings, parse_gates(settings.gate, "test"))
    with RunFolderWriter(run_dir) as writer:
        for spec in specs:
            write_suite(writer, results, spec)
    verdicts = results.judge(run_dir)
    suites = {v.suite: {**v.metrics(), **(summary_extra or {})} for v in verdicts}
    write_summary(run_dir, suites, notes=["a note from the run"])
    (run_dir / "pytest_gym_run.json").write_text(
        json.dumps({"digest": "0" * 16, "basis": {"agent": AGENT, "reward_key": "reward", "policy": "scripted"}})
    )
    return run_dir
