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

import collections
import contextlib
import hashlib
import json
import math
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, TypeAlias

from pytest_gym.core.answers import final_text, prompt_text
from pytest_gym.core.answers import steps as answer_steps
from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.dataset import canonical_json
from pytest_gym.core.masking import Masker, strip_control
from pytest_gym.core.numbers import is_int, is_number
from pytest_gym.core.taskrule import TaskRuleError, parse_task_rule
from pytest_gym.core.tracing import trace_link
from pytest_gym.judge.baseline import BaselineError, load_baseline
from pytest_gym.judge.gates import GateSyntaxError, parse_gate
from pytest_gym.judge.paired import Rule
from pytest_gym.judge.stats import pass_at_k, pass_hat_k, suite_stats, task_stats
from pytest_gym.judge.suites import SuiteVerdict
from pytest_gym.judge.summary import BaselineSummary, SuiteSummary, SummaryError
from pytest_gym.judge.totals import TrialCost, suite_totals
from pytest_gym.judge.verdict_word import verdict_of
from pytest_gym.report.changes import changes_of, section
from pytest_gym.runfolder.diff import reward_key_of
from pytest_gym.runfolder.health import trial_health
from pytest_gym.runfolder.layout import (
    AGGREGATE_FILE,
    FAILURES_FILE,
    MATERIALIZED_FILE,
    REPORT_FILE,
    ROLLOUTS_FILE,
    RUN_INFO_FILE,
    SUMMARY_FILE,
)
from pytest_gym.runfolder.records import (
    ROLLOUT_ID_KEY,
    ROLLOUT_INDEX_KEY,
    TASK_INDEX_KEY,
    TRACE_ID_KEY,
    Failure,
    Stamps,
    failure_of,
    finite,
    read_records,
    stamps,
    task_index_of,
)
from pytest_gym.runfolder.summary import read_summary

#: Version of the embedded data's shape (the page's script reads it).
SCHEMA = 1

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
#: The same for the baseline run folder (--gym-baseline-run): the Changes section shows its answers beside these.
BaselineRuns: TypeAlias = "str | Path | Mapping[str, str | Path] | None"
#: Records of a run folder's ``rollouts.jsonl``, already read.
Records: TypeAlias = "Sequence[dict[str, Any]]"
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
    """The run's masking (``core.masking.Masker``, secrets looked up once) for the page, with Gym's text stripped
    of control characters (bidirectional overrides and lone surrogates included: the page must show what a text
    says, not a reordering of it, and be UTF-8); non-finite numbers become null, since the page's JSON is strict."""

    def __init__(self) -> None:
        self._masker = Masker()

    def text(self, value: str) -> str:
        return self._masker.text(strip_control(value))

    def data(self, value: Any) -> Any:
        return finite(_stripped(self._masker.data(value)))


def _stripped(value: Any) -> Any:
    """Masked data with control characters dropped from every string and key."""
    if isinstance(value, str):
        return strip_control(value)
    if isinstance(value, Mapping):
        return {strip_control(str(key)): _stripped(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_stripped(item) for item in value]
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
        return finite(value)
    if isinstance(value, str):
        return _clip(value, limit)
    return _clip(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str), limit)


# -- reading the run folder --------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


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


#: What the dispatcher adds to a row per trial: without them a request is its row again (hashes to its task).
_PER_TRIAL_KEYS = frozenset({TASK_INDEX_KEY, ROLLOUT_INDEX_KEY, ROLLOUT_ID_KEY})


def _row_of_request(request: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k not in _PER_TRIAL_KEYS}


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
    #: The record's stamps, validated once (None: not read yet).
    stamps: Stamps | None = None


@dataclass
class _Task:
    suite: str
    key: str  # the full task hash (or "index-N" for a record without ours)
    index: int | None = None
    trials: dict[int, _Trial] = field(default_factory=dict)


def _suite_and_key(found: Stamps) -> tuple[str, str]:
    suite = found.suite or found.agent or "rollouts"
    if found.task_hash:
        return suite, found.task_hash
    return suite, f"index-{found.task_index}"


def _interesting(task: _Task, min_reward: float, reward_key: str) -> bool:
    """A task with an errored trial or a reward below ``min_reward``: one people will want to read."""
    for trial in task.trials.values():
        reward = _number(trial.record.get(reward_key)) if trial.ok else None
        if reward is None or reward < min_reward:
            return True
    return False


def _collect(run_dir: Path, mask: _Masker, rollouts: Records | None = None) -> dict[tuple[str, str], _Task]:
    tasks: dict[tuple[str, str], _Task] = {}
    # Failures first: a trial with both (it cannot happen, but a folder may be assembled by hand) shows its reward.
    for name, ok in ((FAILURES_FILE, False), (ROLLOUTS_FILE, True)):
        for record in rollouts if ok and rollouts is not None else read_records(run_dir / name):
            found = stamps(record)
            suite, key = _suite_and_key(found)
            suite = mask.text(suite)
            task = tasks.get((suite, key))
            if task is None:
                task = tasks[(suite, key)] = _Task(suite, key)
            if found.task_index is not None:
                task.index = found.task_index
            repeat = found.repeat if found.repeat is not None else len(task.trials)
            task.trials[repeat] = _Trial(repeat, record, ok, found.nodeid, found)
    return tasks


def _materialized_rows(
    run_dir: Path,
    wanted: set[str],
    by_index: Mapping[int, str] | None = None,
    by_rollout: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """task hash -> the row as sent, for the tasks in ``wanted``.

    A row is found by its content hash, or else by its trial's rollout id (``by_rollout``), or else by its task
    index (``by_index``), both from the rollout records: a row whose secrets were masked when it was written no
    longer hashes to its task. The index comes last: the datasets of a run share their first indices.
    """
    rows: dict[str, dict[str, Any]] = {}
    seen: dict[Any, list[dict[str, Any]]] = {}  # task index -> rows already hashed (the repeats of a task are equal)
    for request in read_records(run_dir / MATERIALIZED_FILE):
        if len(rows) == len(wanted):
            break
        row = _row_of_request(request)
        index = task_index_of(request)
        same_index = seen.setdefault(index if isinstance(index, int) else None, [])
        if any(row == known for known in same_index):
            continue
        same_index.append(row)
        digests = _request_hashes(request)
        rollout_id = request.get(ROLLOUT_ID_KEY)
        if by_rollout is not None and isinstance(rollout_id, str) and rollout_id in by_rollout:
            digests.append(by_rollout[rollout_id])
        if by_index is not None and isinstance(index, int) and index in by_index:
            digests.append(by_index[index])
        for digest in digests:
            if digest in wanted and digest not in rows:
                rows[digest] = row
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


def _numbers(summary: SuiteSummary, source: str) -> dict[str, Any]:
    """The suite's headline numbers, as the judge gave them."""
    keys = ("tasks", "trials", "errors", "error_rate", "mean_reward", "ci_low", "ci_high", "pass_at", "pass_hat")
    numbers = {key: getattr(summary, key) for key in keys}
    numbers["source"] = source
    return numbers


def _savings(summary: SuiteSummary) -> dict[str, Any] | None:
    """What the suite did not run and why, its own budget, and its efficiency figures (the summary's)."""
    figures = {k: v for k, v in summary.efficiency.items() if v is not None}
    if not summary.skipped and summary.budget is None and not figures:
        return None
    return {
        "skipped": dict(summary.skipped),
        "saved": summary.trials_saved,
        "note": summary.savings_note,
        "cut_short": summary.cut_short,
        "budget": summary.budget.line() if summary.budget is not None else None,
        "efficiency": figures,
    }


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested summary entries as (dotted key, short value) rows, for the keys shown as they are."""
    if isinstance(value, Mapping) and value and len(value) <= 40:
        rows = []
        for key, item in value.items():
            rows.extend(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return rows
    return [(prefix, _short_json(value, 200))]


class _Builder:
    def __init__(
        self, run_dir: Path, baseline: Baselines, baseline_run: BaselineRuns = None, rollouts: Records | None = None
    ) -> None:
        self.run_dir = run_dir
        self.rollouts = rollouts
        self.baseline = baseline
        self.baseline_run = baseline_run
        self.mask = _Masker()
        self.notes: list[str] = []
        self.trace_url: str | None = None
        self.health: dict[str, tuple[str, ...]] = {}

    def build(self) -> dict[str, Any]:
        run_dir = self.run_dir
        try:
            summary = read_summary(run_dir)
        except SummaryError as exc:
            summary = None
            self.notes.append(f"the summary is unusable ({exc}): the numbers are computed from the rollouts")
        if summary is None and not self.notes:
            self.notes.append(f"no readable {SUMMARY_FILE}: the numbers are computed from the rollouts")
        suites_summary = summary.suites if summary is not None else {}
        self.trace_url = summary.trace_url if summary is not None else None
        self.health = trial_health(run_dir)
        run_info = _read_json(run_dir / RUN_INFO_FILE)
        basis = run_info.get("basis") if isinstance(run_info, dict) and isinstance(run_info.get("basis"), dict) else {}
        assert isinstance(basis, dict)
        reward_key = str(basis.get("reward_key") or "reward")

        collected = _collect(run_dir, self.mask, self.rollouts)
        indices = collections.Counter(t.index for t in collected.values() if isinstance(t.index, int))
        by_index = {t.index: t.key for t in collected.values() if isinstance(t.index, int) and indices[t.index] == 1}
        by_rollout = {
            trial.stamps.rollout_id: t.key
            for t in collected.values()
            for trial in t.trials.values()
            if trial.stamps is not None and trial.stamps.rollout_id
        }
        rows = _materialized_rows(run_dir, {t.key for t in collected.values()}, by_index, by_rollout)
        known = {self.mask.text(str(n)) for n in suites_summary}
        names = list(suites_summary) + sorted({t.suite for t in collected.values()} - known)
        plan = []
        for raw_name in names:
            entry = suites_summary.get(raw_name)
            name = self.mask.text(str(raw_name))
            min_reward = entry.min_reward if entry is not None else 1.0
            rule = entry.task_pass if entry is not None else "all"
            own = [t for t in collected.values() if t.suite == name]
            own.sort(key=lambda t: (t.index if t.index is not None else 2**62, t.key))
            plan.append((name, entry, min_reward, rule, own))
        # Text budgets: failing and errored tasks are the ones people read, so their trials get more.
        weight = {id(t): _INTERESTING if _interesting(t, m, reward_key) else 1 for _, _, m, _, own in plan for t in own}
        self.trial_unit = _TRIAL_TEXT / max(
            1, sum(weight[id(t)] * len(t.trials) for _, _, _, _, own in plan for t in own)
        )
        self.task_unit = _TASK_TEXT / max(1, sum(weight.values()))
        suites = []
        tasks_out: list[dict[str, Any]] = []
        for name, entry, min_reward, rule, own in plan:
            built = [self._task(t, rows.get(t.key), min_reward, reward_key, weight[id(t)], rule) for t in own]
            _mark_common_prefix(built)
            prompts = {b["_full_hash"]: b["prompt"] for b in built}
            position = {b["hash"]: len(tasks_out) + i for i, b in enumerate(built)}
            suites.append(self._suite(name, entry, built, min_reward, len(tasks_out)))
            self._changes(suites[-1], entry, (min_reward, rule), rows, reward_key, prompts, position)
            tasks_out.extend(built)
        clipped = {
            "trial": _bounded(self.trial_unit, _TRIAL_BOUNDS),
            "trial_failing": _bounded(self.trial_unit * _INTERESTING, _TRIAL_BOUNDS),
            "task": _bounded(self.task_unit, _TASK_BOUNDS),
        }

        notes = [self.mask.text(n) for n in (summary.notes if summary is not None else [])]
        return {
            "schema": SCHEMA,
            "run": {
                "run_dir": self.mask.text(summary.run_dir if summary is not None and summary.run_dir else str(run_dir)),
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

    def _changes(
        self,
        suite: dict[str, Any],
        entry: SuiteSummary | None,
        judged_by: tuple[float, str],
        rows: Mapping[str, dict[str, Any]],
        reward_key: str,
        prompts: Mapping[str, str],
        position: Mapping[str, int],
    ) -> None:
        """The suite's part of the Changes section: the tasks that flipped or moved, both runs side by side."""
        name = suite["name"]
        given = self.baseline_run.get(name) if isinstance(self.baseline_run, Mapping) else self.baseline_run
        folder = Path(given) if given else None
        if folder is not None and not folder.is_dir():
            self.notes.append(f"{name}: the baseline run {given} is not a folder: no answers to compare with")
            folder = None
        rule = _rule(judged_by[1])
        found = changes_of(entry, name, self.run_dir, folder, lambda _: (judged_by[0], rule))
        if found is None:
            return
        self.trial_chars = _bounded(self.trial_unit * _INTERESTING, _TRIAL_BOUNDS)
        theirs = reward_key_of(folder) if folder is not None else reward_key

        def view(key: str) -> Callable[[dict[str, Any], bool, int], dict[str, Any]]:
            def trial(record: dict[str, Any], scored: bool, repeat: int) -> dict[str, Any]:
                found_stamps = stamps(record)
                row = rows.get(found_stamps.task_hash or "") or {}
                short = (found_stamps.task_hash or "")[:12]
                return self._trial(_Trial(repeat, record, scored, None, found_stamps), row, key, short, name)

            return trial

        suite["changes"] = section(
            found, name, self.run_dir, folder, (view(theirs), view(reward_key)), prompts.get, position, self.mask.text
        )

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
        self,
        task: _Task,
        row: dict[str, Any] | None,
        min_reward: float,
        reward_key: str,
        weight: int,
        rule: str = "all",
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
        name = _task_name(trials, task.suite) or short
        out_trials = [self._trial(t, row, reward_key, name, task.suite) for t in trials]
        rewards = [t["reward"] for t in out_trials if t.get("reward") is not None]
        errors = sum(1 for t in out_trials if "error" in t)
        # The judge's own per-task numbers (its rule for "passed"): the page computes nothing of its own.
        own = task_stats(task.key, rewards, min_reward, errors, _rule(rule))
        latencies = [t["latency"] for t in out_trials if t.get("latency") is not None]
        tokens = [t["tokens"][2] for t in out_trials if t.get("tokens")]
        out: dict[str, Any] = {
            "id": f"{task.suite}::{short}",
            "suite": task.suite,
            "hash": short,
            "name": name,  # the task part of its node id: the hash, and the row's label when it has one
            "index": task.index,
            "prompt": prompt,
            "n": own.n,
            "successes": own.successes,
            "errors": errors,
            "mean": own.mean_reward,
            "passed": own.passed,
            "flaky": own.flaky,
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
        found = trial.stamps or stamps(record)
        out: dict[str, Any] = {"r": trial.repeat}
        if trial.nodeid and trial.nodeid != f"{suite}::{short}[r{trial.repeat}]":
            out["nodeid"] = mask.text(trial.nodeid)  # the page builds the usual node id itself
        if found.latency_s is not None:
            out["latency"] = round(found.latency_s, 3)
        if found.attempts != 1:
            out["attempts"] = found.attempts
        link = trace_link(self.trace_url, record.get(TRACE_ID_KEY))
        if link:
            out["trace"] = mask.text(link)
        health = self.health.get(str(record.get(ROLLOUT_ID_KEY)), ())
        if health:
            out["health"] = [mask.text(code) for code in health]
        if not trial.ok:
            failure: Failure = failure_of(record)
            out["error"] = _clip(mask.text(failure.message), self.trial_chars)
            out["error_class"] = mask.text(failure.type)
            if failure.http_status is not None:
                out["http_status"] = failure.http_status
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
        steps = answer_steps(record)
        answer = final_text(record)
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
        self, name: str, entry: SuiteSummary | None, tasks: list[dict[str, Any]], min_reward: float, offset: int
    ) -> dict[str, Any]:
        """One suite's data; its tasks are the page's tasks ``offset`` on, and it names them by that position."""
        mask = self.mask
        source = "summary"
        if entry is None:
            entry, source = _judged_here(tasks, min_reward, name), "rollouts"
        by_full = {t["_full_hash"]: t for t in tasks}
        position = {t["id"]: offset + i for i, t in enumerate(tasks)}
        gates = []
        for label, gate in entry.gates.items():
            ids, what = _gate_tasks(str(label), tasks)
            gates.append(
                {
                    "label": mask.text(str(label)),
                    "value": _number(gate.value),
                    "passed": gate.passed,
                    "reason": mask.text(gate.reason),
                    "tasks": [position[i] for i in ids],
                    "tasks_are": what,
                }
            )
        flaky_ids = {t["id"] for t in tasks if t["flaky"]}
        by_short = {t["hash"]: t["id"] for t in tasks}
        for value in _summary_entry(entry).values():
            flaky_ids.update(by_short[h] for h in _summary_hashes(value) if h in by_short)
        for task in tasks:
            task["flaky"] = task["id"] in flaky_ids
        baseline = self._baseline(name, entry.baseline, tasks, by_full, position)
        other = [(key, value) for k, v in mask.data(entry.extra_fields()).items() for key, value in _flatten(v, str(k))]
        suite: dict[str, Any] = {
            "name": name,
            "min_reward": min_reward,
            "numbers": mask.data(_numbers(entry, source)),
            "gates": gates,
            "failed": any(not g["passed"] for g in gates)
            or bool(baseline and (baseline.get("regressed") or baseline.get("passed") is False)),
            # The judge's words (a summary written before they existed: the judge's code, on the summary).
            "verdict": entry.verdict or verdict_of(entry)[0],
            "verdict_text": mask.text(entry.verdict_text if entry.verdict else verdict_of(entry)[1]),
            "baseline": baseline,
            "baseline_note": mask.text(entry.baseline_note) if entry.baseline_note else None,
            "flaky": sorted(position[i] for i in flaky_ids),
            "totals": mask.data(entry.totals.model_dump(mode="json")) if entry.totals is not None else {},
            "other": [[k, v] for k, v in other],
            "task_count": len(tasks),
            "changes": None,
            "savings": mask.data(_savings(entry)),
            "sequential": mask.data(entry.sequential.model_dump(mode="json")) if entry.sequential else None,
        }
        for task in tasks:
            task.pop("_full_hash", None)
        return suite

    def _baseline(
        self,
        name: str,
        section: BaselineSummary | None,
        tasks: list[dict[str, Any]],
        by_full: Mapping[str, dict[str, Any]],
        position: Mapping[str, int],
    ) -> dict[str, Any] | None:
        """The summary's comparison, with every task's mean before when the baseline file can be read."""
        if section is None:
            return None
        by_short = {t["hash"]: t for t in tasks}
        new_failures = {h for h in _summary_hashes(section.new_failures) if h in by_short}
        fixed = {h for h in _summary_hashes(section.fixed) if h in by_short}
        flaky_failures = {t.hash for t in section.flaky_failures if t.hash in by_short}
        flaky_fixes = {t.hash for t in section.flaky_fixes if t.hash in by_short}
        before: dict[str, float | None] = {}
        before_passed: dict[str, bool] = {}
        # The baseline file given to the report (the summary's own path is not followed: it may be anything).
        path = self.baseline.get(name) if isinstance(self.baseline, Mapping) else self.baseline
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
            change = next(
                (kind for kind, hashes in (("new_failure", new_failures), ("fixed", fixed), ("flaky_failure",
                 flaky_failures), ("flaky_fix", flaky_fixes)) if short in hashes),
                None,
            )  # fmt: skip
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
        lists = ("new_failures", "fixed", "unused", "new_tasks", "new_failure_tasks", "fixed_tasks")
        out: dict[str, Any] = self.mask.data(section.model_dump(mode="json", exclude=set(lists)))
        for key in ("new_failures", "fixed", "unused", "new_tasks", "flaky_failures", "flaky_fixes"):
            out[f"{key}_count"] = len(getattr(section, key))
        out["changed"] = [index for *_, index in sorted(changed)]
        out["source"] = source
        return out


def _rule(text: object) -> Rule:
    """The summary's task-pass rule, or ``all`` when it holds none this version reads."""
    try:
        return parse_task_rule(str(text)).text
    except TaskRuleError:
        return "all"


_CHANGE_ORDER = {"new_failure": 0, "fixed": 1, "flaky_failure": 2, "flaky_fix": 3, None: 4}


#: A prompt prefix shared by every task of a suite is skipped in the task table when it is at least this long.
_COMMON_PREFIX_MIN = 20


def _task_name(trials: list[_Trial], suite: str) -> str | None:
    """The task part of the trials' node id (``<hash>`` or ``<hash>-<label>``, see ``core.dataset.task_name``)."""
    for trial in trials:
        nodeid = trial.nodeid or ""
        if nodeid.startswith(f"{suite}::") and nodeid.endswith(f"[r{trial.repeat}]"):
            return nodeid[len(suite) + 2 : -len(f"[r{trial.repeat}]")] or None
    return None


def _mark_common_prefix(tasks: list[dict[str, Any]]) -> None:
    """A template's text every prompt of a suite starts with: its length (cut back to a word) as ``prompt_at``,
    where the task table starts each prompt (the task's own view shows it whole)."""
    prompts = [t["prompt"] for t in tasks if t.get("prompt")]
    if len(prompts) < 2 or len(prompts) < len(tasks):
        return
    first, last = min(prompts), max(prompts)  # the common prefix of all is that of the extremes
    common = first[: next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first))]
    cut = max(common.rfind(" "), common.rfind("\n")) + 1  # at a word: the rest of each prompt reads whole
    if cut >= _COMMON_PREFIX_MIN:
        for task in tasks:
            task["prompt_at"] = cut


def report_data(
    run_dir: Path, baseline: Baselines = None, baseline_run: BaselineRuns = None, rollouts: Records | None = None
) -> dict[str, Any]:
    """The page's data: run, suites (numbers, gates and their tasks, baseline, flaky, totals) and tasks.

    ``baseline`` is the ``--gym-baseline`` file the run was compared with (or a mapping from suite, the path
    part of its node ids, to its file): every task's mean reward before. It is read only for suites whose
    summary has a comparison; without it they show what the summary says. ``rollouts``: the records of the
    folder's ``rollouts.jsonl`` as the run wrote them last (the run holds them: not read again).
    """
    return _Builder(Path(run_dir), baseline, baseline_run, rollouts).build()


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


def _bytecode_cache() -> Any:
    """Jinja's cache of compiled templates (its own per-user folder, mode 0700, checked by Jinja), so a run does not
    parse and compile the page's template again (most of the page's CPU); None where that folder is not usable.
    A write that fails leaves the cache out; the page is the same either way."""
    import jinja2

    class _Cache(jinja2.FileSystemBytecodeCache):
        def dump_bytecode(self, bucket: Any) -> None:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

        def load_bytecode(self, bucket: Any) -> None:
            with contextlib.suppress(OSError, ValueError, EOFError, TypeError):
                super().load_bytecode(bucket)

    try:
        return _Cache()
    except (OSError, RuntimeError):
        return None


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
        bytecode_cache=_bytecode_cache(),
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


def build_report(
    run_dir: Path,
    output: Path | None = None,
    baseline: Baselines = None,
    baseline_run: BaselineRuns = None,
    rollouts: Records | None = None,
) -> Path:
    """Write the run's page (default ``run_dir/report.html``) in one step and return its path.

    ``baseline``, ``rollouts``: see :func:`report_data`.
    """
    run_dir = Path(run_dir)
    target = Path(output) if output is not None else run_dir / REPORT_FILE
    html = render(report_data(run_dir, baseline, baseline_run, rollouts))
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, html.encode("utf-8"), fsync=False)
    return target


def _judged_here(tasks: list[dict[str, Any]], min_reward: float, name: str) -> SuiteSummary:
    """A suite the run folder has no summary for (a folder Gym's own collector wrote): judged by the judge's own
    code on the rollouts, so its numbers are computed the way a run computes them."""
    rewards = {t["_full_hash"]: [tr["reward"] for tr in t["trials"] if tr.get("reward") is not None] for t in tasks}
    errors = {t["_full_hash"]: t["errors"] for t in tasks if t["errors"]}
    stats = suite_stats({h: r for h, r in rewards.items() if r}, min_reward, errors)
    costs = [
        TrialCost(
            latency_s=tr.get("latency"),
            attempts=tr.get("attempts", 1),
            input_tokens=tr["tokens"][0] if tr.get("tokens") else None,
            output_tokens=tr["tokens"][1] if tr.get("tokens") else None,
            total_tokens=tr["tokens"][2] if tr.get("tokens") else None,
        )
        for t in tasks
        for tr in t["trials"]
    ]
    return SuiteVerdict(name, stats, [], totals=suite_totals(costs, None, None)).summary()


def _summary_entry(entry: SuiteSummary) -> dict[str, Any]:
    """What of the summary names tasks (flaky tasks, by hash or node id), for ``_summary_hashes``."""
    extra = entry.extra_fields()
    return {
        "flaky_tasks": [task.model_dump() for task in entry.flaky_tasks],
        "flaky": extra.get("flaky"),
    }


def write_html(
    run_dir: Path,
    baseline: Baselines = None,
    copy_to: str | None = None,
    baseline_run: BaselineRuns = None,
    rollouts: Records | None = None,
) -> str | None:
    """The run's page in its folder (and a copy at ``copy_to``, ``--gym-html``); a note when it cannot be written."""
    try:
        page = build_report(run_dir, baseline=baseline, baseline_run=baseline_run, rollouts=rollouts)
        if copy_to:
            Path(copy_to).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, copy_to)
    except (OSError, ValueError) as exc:
        return f"the HTML report could not be written: {type(exc).__name__}: {exc}"
    return None
