"""One self-contained HTML page per run, built from its run folder: the numbers, the plots and every trial.

The page needs no server and no network (a CI artifact opened on a laptop): style, script and data are
inline. The data goes in once, as JSON in a ``<script type="application/json">`` element, and the task
table is drawn from it in the browser; the suite numbers and the charts are drawn here, as HTML and SVG, so
they read with JavaScript disabled (and under a viewer's content policy that blocks inline scripts).

What is read (all optional, a missing or partial file gives a partial page):

``pytest_gym_summary.json``
    every suite's numbers, gates and baseline comparison as the run judged them; keys this module does not
    know are shown as they are, so numbers added to the summary later appear without a change here.
``rollouts.jsonl`` / ``rollouts_failures.jsonl``
    every trial: reward, answer, steps, usage, attempts and (``_pytest_gym_latency_s``) latency; the suite
    and task come from ``_pytest_gym_nodeid`` / ``_pytest_gym_task_hash``. Per-task numbers, flaky tasks,
    totals and which tasks decided a gate are computed from these.
``rollouts_materialized_inputs.jsonl``
    the rows as sent: the prompt, and the dataset's fields (``expected_answer``...) apart from the answer's.
``rollouts_aggregate_metrics.json`` and ``pytest_gym_run.json``
    Gym's own key metrics, and the settings the rollouts depended on (the reward key).

A baseline file (``--gym-baseline``) adds every task's mean reward before; without it the before/after view
shows what the summary says (new failures and fixes).

Everything embedded passes through the same masking as every other output. Texts are clipped to a budget
that shrinks with the number of trials, so a 10,000-trial run stays a few MB; rollouts.jsonl keeps the rest.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, TypeAlias

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.dataset import canonical_json
from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.masking import MASK, SECRET_NAME, known_secrets, mask_secrets
from pytest_gym.core.numbers import is_int, is_number
from pytest_gym.judge.baseline import BaselineError, load_baseline
from pytest_gym.judge.gates import GateSyntaxError, parse_gate
from pytest_gym.judge.stats import pass_at_k, pass_hat_k, suite_stats
from pytest_gym.runfolder.layout import (
    AGGREGATE_FILE,
    FAILURES_FILE,
    MATERIALIZED_FILE,
    REPORT_FILE,
    ROLLOUTS_FILE,
    RUN_INFO_FILE,
    SUMMARY_FILE,
)

#: Version of the embedded data's shape (the page's script reads it).
SCHEMA = 1
#: Key stamped on every record by RunFolderWriter: the trial's latency in seconds.
LATENCY_KEY = "_pytest_gym_latency_s"

#: Summary keys drawn in their own places; any other key is listed as it is.
_KNOWN_SUITE_KEYS = frozenset(
    {
        "tasks", "trials", "errors", "error_rate", "mean_reward", "ci_low", "ci_high", "min_reward",
        "pass_at", "pass_hat", "gates", "baseline", "baseline_note", "flaky", "flaky_tasks",
    }
)  # fmt: skip
#: Answer keys that are not "fields" of the answer (the trial's own data shown elsewhere, or Gym's plumbing).
_NOT_FIELDS = frozenset(
    {
        "responses_create_params", "response", "agent_ref", "task_source", "skills_ref", "ng_trajectory",
        "ng_perf", "ng_agent_observations", "ng_model_call_capture", "mask_sample", "failure_kind",
        "failure_reason",
    }
)  # fmt: skip
#: A baseline file for every suite, or one per suite (by the path part of its node ids).
Baselines: TypeAlias = "str | Path | Mapping[str, str | Path] | None"
_HEX12 = re.compile(r"[0-9a-f]{12}")
#: Characters of text kept for all trials (answers, steps, errors) and for all prompts, shared out so that a
#: trial of a failing or errored task gets ``_INTERESTING`` times the share of a passing one; each share is
#: kept between the two bounds. A small run keeps everything up to the upper bound.
_TRIAL_TEXT, _TRIAL_BOUNDS = 1_000_000, (60, 20_000)
_TASK_TEXT, _TASK_BOUNDS = 400_000, (120, 20_000)
_INTERESTING = 3
_MAX_STEPS = 40
_STEP_CHARS = 40
_FIELD_CHARS = 400


def _bounded(chars: float, bounds: tuple[int, int]) -> int:
    return max(bounds[0], min(bounds[1], int(chars)))


class _Masker:
    """``mask_secrets`` on every string and ``mask_mapping``'s rule on every key, with the secrets looked up once.

    Calling ``mask_mapping`` on every record scans the environment per string (seconds for a big run); this
    calls ``mask_secrets`` only on strings that hold a known secret or a bearer token, which is where it
    changes anything, so the result is the same.
    """

    def __init__(self) -> None:
        self._secrets = known_secrets()

    def text(self, value: str) -> str:
        if "Bearer" in value or any(secret in value for secret in self._secrets):
            return mask_secrets(value)
        return value

    def data(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                self.text(str(key)): (
                    MASK
                    if isinstance(key, str) and SECRET_NAME.search(key) and value[key] not in (None, "")
                    else self.data(value[key])
                )
                for key in value
            }
        if isinstance(value, (list, tuple)):
            return [self.data(item) for item in value]
        return _finite(value)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _number(value: Any) -> float | None:
    if not is_number(value):
        return None
    return float(value) if math.isfinite(value) else None


def _clip(text: str, limit: int) -> str:
    """At most ``limit`` characters; the page says how many more the run folder has."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\u2026 [+{len(text) - limit} chars]"


def _short_json(value: Any, limit: int = _FIELD_CHARS) -> Any:
    """A field's value for display: scalars as they are, anything else as compact JSON, clipped."""
    if value is None or isinstance(value, (bool, int, float)):
        return _finite(value)
    if isinstance(value, str):
        return _clip(value, limit)
    return _clip(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str), limit)


# -- reading the run folder --------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _content_text(content: Any) -> str:
    """The text of a message's content: a string, or a list of parts (input_text, output_text, ...)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
                elif part.get("type"):
                    parts.append(f"[{part.get('type')}]")
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False, default=str)


def prompt_text(params: Any) -> str:
    """The prompt of ``responses_create_params``: instructions and input messages, roles shown when several."""
    if not isinstance(params, Mapping):
        return ""
    messages: list[tuple[str, str]] = []
    instructions = params.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append(("instructions", instructions))
    given = params.get("input")
    if isinstance(given, str):
        messages.append(("user", given))
    elif isinstance(given, list):
        for item in given:
            if not isinstance(item, Mapping):
                continue
            if "content" in item:
                messages.append(
                    (str(item.get("role") or item.get("type") or "message"), _content_text(item["content"]))
                )
            else:
                messages.append(_step_text(item))
    if len(messages) == 1 and messages[0][0] == "user":
        return messages[0][1]
    return "\n\n".join(f"[{role}] {text}" for role, text in messages)


def _step_text(item: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, text) of one Responses-API output item."""
    kind = str(item.get("type") or "item")
    if kind == "message":
        return (str(item.get("role") or "assistant"), _content_text(item.get("content")))
    if kind == "function_call":
        arguments = item.get("arguments")
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)
        return ("call", f"{item.get('name') or '?'}({shown})")
    if kind == "function_call_output":
        output = item.get("output")
        return ("result", output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))
    if kind == "reasoning":
        summary = item.get("summary")
        text = _content_text(summary) if summary else _content_text(item.get("content"))
        return ("reasoning", text)
    rest = {k: v for k, v in item.items() if k not in ("id", "status")}
    return (kind, json.dumps(rest, ensure_ascii=False, default=str))


def _steps(answer: Mapping[str, Any]) -> list[tuple[str, str]]:
    response = answer.get("response")
    output = response.get("output") if isinstance(response, Mapping) else None
    if not isinstance(output, list):
        return []
    return [_step_text(item) for item in output if isinstance(item, Mapping)]


def _tokens(answer: Mapping[str, Any]) -> list[int] | None:
    """[input, output, total] tokens of the answer's usage (total = input + output when not given)."""
    response = answer.get("response")
    usage = response.get("usage") if isinstance(response, Mapping) else None
    if not isinstance(usage, Mapping):
        return None
    values = []
    for name in ("input_tokens", "output_tokens", "total_tokens"):
        value = usage.get(name)
        values.append(int(value) if is_int(value) else None)
    if values[2] is None and values[0] is not None and values[1] is not None:
        values[2] = values[0] + values[1]
    if all(v is None for v in values):
        return None
    return [v or 0 for v in values]


def _row_of_request(request: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k not in ("_ng_task_index", "_ng_rollout_index")}


def _request_hashes(request: Mapping[str, Any]) -> list[str]:
    """Task hashes the row behind a materialized request may have (the agent_ref was added, or was the row's)."""
    row = _row_of_request(request)
    candidates = [row]
    if "agent_ref" in row:
        candidates.insert(0, {k: v for k, v in row.items() if k != "agent_ref"})
    hashes = []
    for candidate in candidates:
        try:
            hashes.append(hashlib.sha256(canonical_json(candidate)).hexdigest())
        except (TypeError, ValueError):
            continue
    return hashes


@dataclass
class _Trial:
    repeat: int
    record: dict[str, Any]
    ok: bool
    nodeid: str | None


@dataclass
class _Task:
    suite: str
    key: str  # the full task hash (or "index-N" for a record without ours)
    index: int | None = None
    trials: dict[int, _Trial] = field(default_factory=dict)


def _suite_and_key(record: Mapping[str, Any]) -> tuple[str, str]:
    nodeid = record.get("_pytest_gym_nodeid")
    task_hash = record.get("_pytest_gym_task_hash")
    if isinstance(nodeid, str) and "::" in nodeid:
        suite = nodeid.split("::", 1)[0]
    else:
        ref = record.get("agent_ref")
        suite = str(ref.get("name")) if isinstance(ref, Mapping) and ref.get("name") else "rollouts"
    if isinstance(task_hash, str) and task_hash:
        return suite, task_hash
    return suite, f"index-{record.get('_ng_task_index')}"


def _interesting(task: _Task, min_reward: float, reward_key: str) -> bool:
    """A task with an errored trial or a reward below ``min_reward``: one people will want to read."""
    for trial in task.trials.values():
        reward = _number(trial.record.get(reward_key)) if trial.ok else None
        if reward is None or reward < min_reward:
            return True
    return False


def _collect(run_dir: Path, mask: _Masker) -> dict[tuple[str, str], _Task]:
    tasks: dict[tuple[str, str], _Task] = {}
    # Failures first: a trial with both (it cannot happen, but a folder may be assembled by hand) shows its reward.
    for name, ok in ((FAILURES_FILE, False), (ROLLOUTS_FILE, True)):
        for record in read_jsonl(run_dir / name):
            suite, key = _suite_and_key(record)
            suite = mask.text(suite)
            task = tasks.get((suite, key))
            if task is None:
                task = tasks[(suite, key)] = _Task(suite, key)
            index = record.get("_ng_task_index")
            if is_int(index):
                task.index = index
            repeat = record.get("_ng_rollout_index")
            repeat = repeat if is_int(repeat) else len(task.trials)
            nodeid = record.get("_pytest_gym_nodeid")
            task.trials[repeat] = _Trial(repeat, record, ok, nodeid if isinstance(nodeid, str) else None)
    return tasks


def _materialized_rows(
    run_dir: Path, wanted: set[str], by_index: Mapping[int, str] | None = None
) -> dict[str, dict[str, Any]]:
    """task hash -> the row as sent, for the tasks in ``wanted``.

    A row is found by its content hash, or else by its task index (``by_index``, from the rollout records):
    a row whose secrets were masked when it was written no longer hashes to its task.
    """
    rows: dict[str, dict[str, Any]] = {}
    seen: dict[Any, list[dict[str, Any]]] = {}  # task index -> rows already hashed (the repeats of a task are equal)
    for request in read_jsonl(run_dir / MATERIALIZED_FILE):
        if len(rows) == len(wanted):
            break
        row = _row_of_request(request)
        index = request.get("_ng_task_index")
        same_index = seen.setdefault(index if isinstance(index, int) else None, [])
        if any(row == known for known in same_index):
            continue
        same_index.append(row)
        digests = _request_hashes(request)
        if by_index is not None and isinstance(index, int) and index in by_index:
            digests.append(by_index[index])
        for digest in digests:
            if digest in wanted and digest not in rows:
                rows[digest] = _row_of_request(request)
                break
                break
    return rows


# -- building the page's data -------------------------------------------------------------------------------


def _summary_hashes(value: Any) -> list[str]:
    """12-hex task ids in a summary entry however it lists them (hashes, node ids, dicts keyed or holding them)."""
    items: Iterable[Any]
    if isinstance(value, Mapping):
        items = list(value.keys()) + [v for v in value.values() if isinstance(v, Mapping)]
    elif isinstance(value, list):
        items = value
    else:
        return []
    found = []
    for item in items:
        text = item
        if isinstance(item, Mapping):
            text = item.get("task_hash") or item.get("hash") or item.get("nodeid") or item.get("task") or ""
        if isinstance(text, str):
            tail = text.split("::", 1)[-1]
            match = _HEX12.search(tail)
            if match:
                found.append(match.group(0))
    return found


def _task_value(metric: str, k: int | None, task: Mapping[str, Any]) -> float | None:
    """A task's own value of a gate's metric (what the suite's value averages)."""
    n, successes, errors = task["n"], task["successes"], task["errors"]
    if metric in ("mean_reward", "ci_low(mean_reward)"):
        mean: float | None = task.get("mean")
        return mean
    if metric == "error_rate":
        return errors / (n + errors) if n + errors else None
    if k is None or n < k:
        return None
    return pass_at_k(n, successes, k) if metric == "pass@" else pass_hat_k(n, successes, k)


_COMPARE = {">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b}


def _gate_tasks(label: str, tasks: list[dict[str, Any]]) -> tuple[list[str], str]:
    """The tasks that decided a gate: those whose own value fails it (worst first), and what that means."""
    try:
        gate = parse_gate(label)
    except GateSyntaxError:
        return [], ""
    scored = []
    for position, task in enumerate(tasks):
        value = _task_value(gate.metric, gate.k, task)
        if value is None:
            if task["n"] == 0 and gate.metric != "error_rate":
                scored.append((-math.inf, position, task["id"]))  # all its trials errored: it has no value at all
            continue
        if not _COMPARE[gate.op](value, gate.threshold):
            scored.append((value if gate.op in (">=", ">") else -value, position, task["id"]))
    scored.sort()
    what = f"tasks whose own {gate.metric_label} is not {gate.op} {gate.threshold:g}"
    return [task_id for *_, task_id in scored], what


def _numbers(summary: Mapping[str, Any], tasks: list[dict[str, Any]], min_reward: float) -> dict[str, Any]:
    """The suite's headline numbers: the summary's, or computed from the rollouts when it has none."""
    if summary.get("tasks") is not None or summary.get("mean_reward") is not None:
        keys = ("tasks", "trials", "errors", "error_rate", "mean_reward", "ci_low", "ci_high", "pass_at", "pass_hat")
        numbers = {key: summary.get(key) for key in keys}
        numbers["source"] = "summary"
        return numbers
    rewards = {t["id"]: [tr["reward"] for tr in t["trials"] if tr.get("reward") is not None] for t in tasks}
    errors = {t["id"]: t["errors"] for t in tasks if t["errors"]}
    numbers = suite_stats({h: r for h, r in rewards.items() if r}, min_reward, errors).to_dict(per_task=False)
    numbers.pop("min_reward", None)
    numbers["source"] = "rollouts"
    return numbers


def _percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def _totals(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = sorted(tr["latency"] for t in tasks for tr in t["trials"] if tr.get("latency") is not None)
    tokens = [tr["tokens"] for t in tasks for tr in t["trials"] if tr.get("tokens")]
    attempts = [tr.get("attempts", 1) for t in tasks for tr in t["trials"]]
    totals: dict[str, Any] = {}
    if latencies:
        totals["latency_s"] = {
            "trials": len(latencies),
            "sum": round(math.fsum(latencies), 3),
            "mean": round(math.fsum(latencies) / len(latencies), 4),
            "p50": _percentile(latencies, 0.5),
            "p95": _percentile(latencies, 0.95),
            "max": latencies[-1],
        }
    if tokens:
        totals["tokens"] = {
            "trials": len(tokens),
            "input": sum(t[0] for t in tokens),
            "output": sum(t[1] for t in tokens),
            "total": sum(t[2] for t in tokens),
        }
    retried = [a for a in attempts if a > 1]
    totals["attempts"] = {"retried_trials": len(retried), "extra_attempts": sum(a - 1 for a in retried)}
    return totals


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested summary entries as (dotted key, short value) rows, for the keys shown as they are."""
    if isinstance(value, Mapping) and value and len(value) <= 40:
        rows = []
        for key, item in value.items():
            rows.extend(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return rows
    return [(prefix, _short_json(value, 200))]


class _Builder:
    def __init__(self, run_dir: Path, baseline: Baselines) -> None:
        self.run_dir = run_dir
        self.baseline = baseline
        self.mask = _Masker()
        self.notes: list[str] = []

    def build(self) -> dict[str, Any]:
        run_dir = self.run_dir
        summary_raw = _read_json(run_dir / SUMMARY_FILE)
        summary: dict[str, Any] = summary_raw if isinstance(summary_raw, dict) else {}
        if not summary:
            self.notes.append(f"no readable {SUMMARY_FILE}: the numbers are computed from the rollouts")
        suites_summary = summary.get("suites") if isinstance(summary.get("suites"), dict) else {}
        assert isinstance(suites_summary, dict)
        run_info = _read_json(run_dir / RUN_INFO_FILE)
        basis = run_info.get("basis") if isinstance(run_info, dict) and isinstance(run_info.get("basis"), dict) else {}
        assert isinstance(basis, dict)
        reward_key = str(basis.get("reward_key") or "reward")

        collected = _collect(run_dir, self.mask)
        by_index = {t.index: t.key for t in collected.values() if isinstance(t.index, int)}
        rows = _materialized_rows(run_dir, {t.key for t in collected.values()}, by_index)
        known = {self.mask.text(str(n)) for n in suites_summary}
        names = list(suites_summary) + sorted({t.suite for t in collected.values()} - known)
        plan = []
        for raw_name in names:
            entry = suites_summary.get(raw_name)
            entry = entry if isinstance(entry, dict) else {}
            name = self.mask.text(str(raw_name))
            min_reward = _number(entry.get("min_reward"))
            min_reward = 1.0 if min_reward is None else min_reward
            own = [t for t in collected.values() if t.suite == name]
            own.sort(key=lambda t: (t.index if t.index is not None else 2**62, t.key))
            plan.append((name, entry, min_reward, own))
        # Text budgets: failing and errored tasks are the ones people read, so their trials get more.
        weight = {id(t): _INTERESTING if _interesting(t, m, reward_key) else 1 for _, _, m, own in plan for t in own}
        self.trial_unit = _TRIAL_TEXT / max(1, sum(weight[id(t)] * len(t.trials) for _, _, _, own in plan for t in own))
        self.task_unit = _TASK_TEXT / max(1, sum(weight.values()))
        suites = []
        tasks_out: list[dict[str, Any]] = []
        for name, entry, min_reward, own in plan:
            built = [self._task(t, rows.get(t.key), min_reward, reward_key, weight[id(t)]) for t in own]
            suites.append(self._suite(name, entry, built, min_reward, len(tasks_out)))
            tasks_out.extend(built)
        clipped = {
            "trial": _bounded(self.trial_unit, _TRIAL_BOUNDS),
            "trial_failing": _bounded(self.trial_unit * _INTERESTING, _TRIAL_BOUNDS),
            "task": _bounded(self.task_unit, _TASK_BOUNDS),
        }

        notes = [self.mask.text(str(n)) for n in summary.get("notes") or [] if isinstance(n, str)]
        return {
            "schema": SCHEMA,
            "run": {
                "run_dir": self.mask.text(str(summary.get("run_dir") or run_dir)),
                "name": run_dir.resolve().name,
                "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "settings": self.mask.data({k: v for k, v in basis.items() if v not in (None, "", [], {})}),
                "reward_key": reward_key,
                "notes": notes,
                "report_notes": self.notes,
                "gym_metrics": self._gym_metrics(),
                "clipped_at": clipped,
            },
            "suites": suites,
            "tasks": tasks_out,
        }

    def _gym_metrics(self) -> list[dict[str, Any]]:
        entries = _read_json(self.run_dir / AGGREGATE_FILE)
        shown = []
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            ref = entry.get("agent_ref")
            agent = ref.get("name") if isinstance(ref, dict) else None
            metrics = entry.get("key_metrics") or entry.get("agent_metrics") or {}
            if isinstance(metrics, dict):
                flat = {
                    k: v for k, v in metrics.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)
                }
                shown.append(self.mask.data({"agent": agent, "metrics": dict(list(flat.items())[:30])}))
        return shown

    def _task(
        self, task: _Task, row: dict[str, Any] | None, min_reward: float, reward_key: str, weight: int
    ) -> dict[str, Any]:
        mask = self.mask
        self.trial_chars = _bounded(self.trial_unit * weight, _TRIAL_BOUNDS)
        task_chars = _bounded(self.task_unit * weight, _TASK_BOUNDS)
        trials = [task.trials[r] for r in sorted(task.trials)]
        if row is None:  # no materialized row: the answer echoes the prompt (not the dataset's fields)
            row = next(
                ({"responses_create_params": t.record.get("responses_create_params")} for t in trials if t.ok), {}
            )
        prompt = _clip(mask.text(prompt_text(row.get("responses_create_params"))), task_chars)
        field_chars = max(60, min(_FIELD_CHARS, task_chars))
        # Masked while still structured (a secret-named key inside a value), then shortened for display.
        masked = mask.data(
            {
                k: v
                for k, v in row.items()
                if k not in ("responses_create_params", "agent_ref") and not k.startswith("_")
            }
        )
        row_fields = {k: _short_json(v, field_chars) for k, v in masked.items()}
        short = task.key[:12] if not task.key.startswith("index-") else task.key
        out_trials = [self._trial(t, row, reward_key, short, task.suite) for t in trials]
        rewards = [t["reward"] for t in out_trials if t.get("reward") is not None]
        successes = sum(1 for r in rewards if r >= min_reward)
        mean = math.fsum(rewards) / len(rewards) if rewards else None
        errors = sum(1 for t in out_trials if "error" in t)
        latencies = [t["latency"] for t in out_trials if t.get("latency") is not None]
        tokens = [t["tokens"][2] for t in out_trials if t.get("tokens")]
        out: dict[str, Any] = {
            "id": f"{task.suite}::{short}",
            "suite": task.suite,
            "hash": short,
            "index": task.index,
            "prompt": prompt,
            "n": len(rewards),
            "successes": successes,
            "errors": errors,
            "mean": mean,
            "passed": mean is not None and mean >= min_reward,
            "flaky": 0 < successes < len(rewards),
            "latency": round(math.fsum(latencies) / len(latencies), 4) if latencies else None,
            "tokens": sum(tokens) if tokens else None,
            "trials": out_trials,
        }
        if row_fields:
            out["fields"] = row_fields
        out["_full_hash"] = task.key
        return out

    def _trial(self, trial: _Trial, row: Mapping[str, Any], reward_key: str, short: str, suite: str) -> dict[str, Any]:
        mask, record = self.mask, trial.record
        out: dict[str, Any] = {"r": trial.repeat}
        if trial.nodeid and trial.nodeid != f"{suite}::{short}[r{trial.repeat}]":
            out["nodeid"] = mask.text(trial.nodeid)  # the page builds the usual node id itself
        latency = _number(record.get(LATENCY_KEY))
        if latency is not None:
            out["latency"] = round(latency, 3)
        attempts = record.get("_pytest_gym_attempts")
        if is_int(attempts) and attempts != 1:
            out["attempts"] = attempts
        if not trial.ok:
            status = record.get("_ng_failure_http_status")
            out["error"] = _clip(mask.text(str(record.get("_ng_failure_message") or "error")), self.trial_chars)
            out["error_class"] = mask.text(str(record.get("_ng_failure_type") or "unknown"))
            if isinstance(status, int):
                out["http_status"] = status
            return out
        reward = _number(record.get(reward_key))
        if reward is None:
            out["error"] = f"no finite {reward_key!r} in the record"
            out["error_class"] = "no_reward"
            return out
        out["reward"] = reward
        tokens = _tokens(record)
        if tokens:
            out["tokens"] = tokens
        steps = _steps(record)
        answer = next((text for kind, text in reversed(steps) if kind == "assistant"), "")
        if not answer and steps:
            answer = steps[-1][1]
        if steps and steps[-1] == ("assistant", answer):
            steps = steps[:-1]  # the answer, shown as such
        # The answer and the steps before it share the trial's budget: the steps take at most half, in steps of
        # at least _STEP_CHARS (fewer steps, or none, when the budget is small; the page says how many more).
        steps_text = sum(len(text) for _, text in steps)
        steps_chars = min(steps_text, self.trial_chars // 2)
        fit = len(steps) if steps_text <= steps_chars else steps_chars // _STEP_CHARS
        shown = steps[: min(_MAX_STEPS, fit)]
        out["answer"] = _clip(mask.text(answer), self.trial_chars - (steps_chars if shown else 0))
        if shown:
            per_step = max(_STEP_CHARS, steps_chars // len(shown))
            out["steps"] = [[kind, _clip(mask.text(text), per_step)] for kind, text in shown]
            if len(steps) > len(shown):
                out["more_steps"] = len(steps) - len(shown)
        fields = {
            k: v
            for k, v in record.items()
            if k not in row and k != reward_key and k not in _NOT_FIELDS and not k.startswith("_")
        }
        if record.get("failure_kind"):
            fields["failure_kind"] = record["failure_kind"]
            fields["failure_reason"] = record.get("failure_reason")
        if record.get("mask_sample") is True:
            fields["mask_sample"] = True
        if fields:
            out["fields"] = {k: _short_json(v) for k, v in mask.data(fields).items()}
        return out

    def _suite(
        self, name: str, entry: dict[str, Any], tasks: list[dict[str, Any]], min_reward: float, offset: int
    ) -> dict[str, Any]:
        """One suite's data; its tasks are the page's tasks ``offset`` on, and it names them by that position."""
        mask = self.mask
        by_full = {t["_full_hash"]: t for t in tasks}
        position = {t["id"]: offset + i for i, t in enumerate(tasks)}
        gates = []
        raw_gates = entry.get("gates")
        for label, gate in raw_gates.items() if isinstance(raw_gates, dict) else []:
            gate = gate if isinstance(gate, dict) else {}
            ids, what = _gate_tasks(str(label), tasks)
            gates.append(
                {
                    "label": mask.text(str(label)),
                    "value": _number(gate.get("value")),
                    "passed": gate.get("passed") is True,
                    "reason": mask.text(str(gate.get("reason") or "")),
                    "tasks": [position[i] for i in ids],
                    "tasks_are": what,
                }
            )
        flaky_ids = {t["id"] for t in tasks if t["flaky"]}
        by_short = {t["hash"]: t["id"] for t in tasks}
        for key in ("flaky", "flaky_tasks"):
            flaky_ids.update(by_short[h] for h in _summary_hashes(entry.get(key)) if h in by_short)
        for task in tasks:
            task["flaky"] = task["id"] in flaky_ids
        baseline = self._baseline(name, entry.get("baseline"), tasks, by_full, position)
        other = [
            (key, value)
            for k, v in mask.data(entry).items()
            if k not in _KNOWN_SUITE_KEYS
            for key, value in _flatten(v, str(k))
        ]
        suite: dict[str, Any] = {
            "name": name,
            "min_reward": min_reward,
            "numbers": mask.data(_numbers(entry, tasks, min_reward)),
            "gates": gates,
            "failed": any(not g["passed"] for g in gates)
            or bool(baseline and (baseline.get("regressed") or baseline.get("passed") is False)),
            "baseline": baseline,
            "baseline_note": mask.text(str(entry["baseline_note"])) if entry.get("baseline_note") else None,
            "flaky": sorted(position[i] for i in flaky_ids),
            "totals": _totals(tasks),
            "other": [[k, v] for k, v in other],
            "task_count": len(tasks),
        }
        for task in tasks:
            task.pop("_full_hash", None)
        return suite

    def _baseline(
        self,
        name: str,
        section: Any,
        tasks: list[dict[str, Any]],
        by_full: Mapping[str, dict[str, Any]],
        position: Mapping[str, int],
    ) -> dict[str, Any] | None:
        """The summary's comparison, with every task's mean before when the baseline file can be read."""
        if not isinstance(section, dict):
            return None
        by_short = {t["hash"]: t for t in tasks}
        new_failures = {h for h in _summary_hashes(section.get("new_failures")) if h in by_short}
        fixed = {h for h in _summary_hashes(section.get("fixed")) if h in by_short}
        before: dict[str, float | None] = {}
        before_passed: dict[str, bool] = {}
        given = self.baseline.get(name) if isinstance(self.baseline, Mapping) else self.baseline
        path = given or section.get("path")
        source = None
        if path:
            try:
                stored = load_baseline(str(path), suite=name)
            except BaselineError as exc:
                self.notes.append(f"{name}: {exc}")
                stored = None
            if stored is not None:
                source = str(path)
                for full, record in stored.tasks.items():
                    if full in by_full:
                        before[full[:12]] = record.mean_reward
                        before_passed[full[:12]] = record.passed
        changed = []
        for task in tasks:
            short = task["hash"]
            change = "new_failure" if short in new_failures else "fixed" if short in fixed else None
            was = before.get(short)
            if change is None and short not in before:
                continue
            delta = task["mean"] - was if was is not None and task["mean"] is not None else None
            task["baseline"] = {"before": was, "delta": delta}
            if change:
                task["baseline"]["change"] = change
            if short in before_passed:
                task["baseline"]["before_passed"] = before_passed[short]
            if change == "new_failure" or (delta is not None and delta < 0):
                task["regressed"] = True
            if change or delta:
                changed.append((_CHANGE_ORDER[change], delta or 0.0, position[task["id"]]))
        kept = {k: v for k, v in section.items() if k not in ("new_failures", "fixed", "unused", "new_tasks")}
        out = self.mask.data(kept)
        for key in ("new_failures", "fixed", "unused", "new_tasks"):
            value = section.get(key)
            out[f"{key}_count"] = len(value) if isinstance(value, (list, dict)) else 0
        out["changed"] = [index for *_, index in sorted(changed)]
        out["source"] = source
        return dict(out)


_CHANGE_ORDER = {"new_failure": 0, "fixed": 1, None: 2}


def report_data(run_dir: Path, baseline: Baselines = None) -> dict[str, Any]:
    """The page's data: run, suites (numbers, gates and their tasks, baseline, flaky, totals) and tasks.

    ``baseline`` is the ``--gym-baseline`` file the run was compared with (or a mapping from suite, the path
    part of its node ids, to its file): every task's mean reward before. It is read only for suites whose
    summary has a comparison; without it they show what the summary says.
    """
    return _Builder(Path(run_dir), baseline).build()


# -- the page ---------------------------------------------------------------------------------------------


def embed_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>``, ``&`` or line separators."""
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in some text: escape everything instead
        text = json.dumps(data, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


def _static(name: str) -> str:
    return (resources.files("pytest_gym.report") / "static" / name).read_text(encoding="utf-8")


def render(data: dict[str, Any]) -> str:
    """The HTML page for ``report_data``'s result."""
    import jinja2
    from markupsafe import Markup

    from pytest_gym.report import charts

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_gym.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["num"] = charts.fmt
    suite_charts = []
    for number, suite in enumerate(data["suites"]):
        positions = [i for i, t in enumerate(data["tasks"]) if t["suite"] == suite["name"]]
        own = [data["tasks"][i] for i in positions]
        suite_charts.append(charts.suite_charts(suite, own, positions[0] if positions else 0, f"s{number}"))
    template = env.get_template("report.html.j2")
    return template.render(
        data=data,
        charts=[{k: Markup(v) for k, v in c.items()} for c in suite_charts],
        data_json=Markup(embed_json(data)),
        script=Markup(_static("report.js").replace("</", "<\\/")),
        style=Markup(_static("report.css")),
    )


def build_report(run_dir: Path, output: Path | None = None, baseline: Baselines = None) -> Path:
    """Write the run's page (default ``run_dir/report.html``) in one step and return its path.

    ``baseline``: see :func:`report_data`.
    """
    run_dir = Path(run_dir)
    target = Path(output) if output is not None else run_dir / REPORT_FILE
    html = render(report_data(run_dir, baseline))
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, html.encode("utf-8"), fsync=False)
    return target
