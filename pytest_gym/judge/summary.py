"""The suite summary: the one typed form of a suite's numbers, gates and baseline comparison.

The judge writes it (``SuiteVerdict.summary``); every reader takes it from here: the summary file, the
terminal section, the JUnit properties, the HTML report and its charts, the exporters. Nothing downstream
recomputes a statistic: a figure on the page is the figure in the summary.

Read back from a file it is validated: a field of the wrong type is an error, not a guess. Fields added
by a later version are kept (``extra="allow"``) and shown as they are, so an older reader still shows them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: Bounds on what a summary read back may hold: far above any real run, far below harm.
MAX_SUITES = 10_000
MAX_K = 10_000
_K = re.compile(r"[1-9][0-9]{0,4}")  # as written: str(k), k >= 1; "0" and "01" are no k a run wrote


#: Suite sections left out of the JSON when they do not apply (as the summary always did).
_OPTIONAL_SECTIONS = (
    "baseline", "totals", "baseline_note", "ci_note", "gates_deferred", "narrowed", "changes", "known_failures",
    "verdict", "health_clean_rate", "unhealthy_trials", "health_unobserved", "health_checks", "health_note",
    "efficiency", "skipped", "cut_short", "budget", "savings_note", "sequential",
)  # fmt: skip

#: The verdict words of a suite (the vocabulary of Gym's planned release policy, Gym #1493): PASS; WARN when
#: only quarantined (known) or tracked (xfail) failures remain; FAIL; INCONCLUSIVE when a gate is undecided.
VERDICT_WORDS = ("PASS", "WARN", "FAIL", "INCONCLUSIVE")


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=False, defer_build=True)


class GateSummary(_Model):
    value: float | None = None
    passed: bool = False
    reason: str = ""
    undecided: bool = False
    tasks_needed: int | None = None
    #: With errored trials: the metric with them counted as failures and as successes (lowest, highest).
    bounds: list[float] | None = None
    #: The tasks with an errored trial, named (hash and line).
    errored_tasks: list[str] = Field(default_factory=list)


class TaskRef(_Model):
    """A task as messages name it: its short hash and dataset line."""

    hash: str = ""
    line: int | None = None

    @property
    def label(self) -> str:
        return f"{self.hash} (line {self.line})" if self.line is not None else self.hash


class FlakyTask(TaskRef):
    successes: int = 0
    repeats: int = 0

    @property
    def shown(self) -> str:
        """``hash12 (line N) passed/trials``."""
        return f"{self.label} {self.successes}/{self.repeats}"


class TotalsSummary(_Model):
    """What a suite's trials cost (``judge.totals.SuiteTotals``)."""

    trials: int = 0
    trials_with_usage: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    latency_p99_s: float | None = None
    latency_max_s: float | None = None
    latency_sum_s: float = 0.0
    retries: int = 0
    cost: float | None = None
    trials_with_steps: int = 0
    turns: int | None = None
    tool_calls: int | None = None


class SpendSummary(_Model):
    """What this run's own trials (not reused ones) spent against a budget (``--gym-max-cost``/``--gym-max-tokens``,
    a suite file's ``max_cost``/``max_tokens``), and how many trials the budget left unrun."""

    max_cost: float | None = None
    max_tokens: int | None = None
    cost: float | None = None
    tokens: int | None = None
    trials: int = 0
    skipped: int = 0

    def line(self) -> str:
        """``$0.42 of $0.50, 1,234 of 5,000 tokens``."""
        parts = []
        if self.max_cost is not None:
            parts.append(f"${self.cost or 0.0:.4g} of ${self.max_cost:.4g}")
        if self.max_tokens is not None:
            parts.append(f"{self.tokens or 0:,} of {self.max_tokens:,} tokens")
        return ", ".join(parts)


class UnjudgedSpend(_Model):
    """Rollouts that finished and were paid for, yet count in no suite: pytest stopped before their trials ran (-x,
    --maxfail, Ctrl-C, dispatched ahead of pytest), or reported them as not run (--gym-max-errors, --gym-run-timeout).
    Their records stay in the run folder (``--gym-resume`` reuses them); ``cost`` at each suite's prices."""

    rollouts: int = 0
    tokens: int | None = None
    cost: float | None = None

    def line(self) -> str:
        """``not judged: 8 rollouts finished for trials that did not run or count (16 tokens, $0.0012 spent, ...``."""
        spent = [f"{self.tokens:,} tokens" if self.tokens is not None else "usage unknown"]
        if self.cost is not None:
            spent.append(f"${self.cost:.4g}")
        return (
            f"not judged: {self.rollouts} rollout{'s' if self.rollouts != 1 else ''} finished for trials that did not "
            "run or count "
            f"({', '.join(spent)} spent, in no suite's totals); their records are in the run folder: "
            "--gym-resume reuses them"
        )


class SequentialCheck(_Model):
    """One gate's sequential check (``judge.sequential``): how and when it was decided, its confidence sequence."""

    op: str = ">="
    threshold: float = 0.0
    #: "holds", "fails", or None (undecided when the run ended).
    decision: str | None = None
    decided_at: int | None = None
    #: The confidence sequence at the end of the checks (each end at the gate's level).
    low: float | None = None
    high: float | None = None
    #: (tasks, lower, upper) over the run, for the report's plot.
    history: list[tuple[int, float, float]] = Field(default_factory=list)


class SequentialSummary(_Model):
    """``--gym-sequential``: the seeded order, when the suite was decided, each check."""

    seed: int = 0
    tasks: int = 0
    #: Tasks of the order taken when every check was decided (None: they never all were).
    decided_at: int | None = None
    message: str | None = None
    confidence: float = 0.95
    checks: dict[str, SequentialCheck] = Field(default_factory=dict)
    #: Gates a sequential run cannot decide early (the suite then runs to the end).
    undecidable: list[str] = Field(default_factory=list)
    #: Whether the verdicts are the sequential decisions (the suite stopped early) or the full run's.
    stopped_early: bool = False


class TaskChange(TaskRef):
    """A task that flipped or whose mean reward moved against the baseline run, with both final answers."""

    #: ``new_failure``, ``fixed`` or ``moved``.
    kind: str = "moved"
    before_mean: float | None = None
    after_mean: float | None = None
    #: Each repeat's reward in repeat order (None: the trial errored).
    before_rewards: list[float | None] = Field(default_factory=list)
    after_rewards: list[float | None] = Field(default_factory=list)
    #: The final answer of the trial that shows the change on each side (bounded, masked, one line).
    before_answer: str = ""
    after_answer: str = ""
    before_repeat: int | None = None
    after_repeat: int | None = None


class ChangesSummary(_Model):
    """The answer-level comparison with a baseline run folder (``--gym-baseline-run``)."""

    baseline_run: str = ""
    shared_tasks: int = 0
    new_failures: int = 0
    fixed: int = 0
    moved: int = 0
    #: New failures first, then fixes, then the largest moves; at most ``runfolder.diff.MAX_LISTED``.
    tasks: list[TaskChange] = Field(default_factory=list)
    #: Changed tasks left out of ``tasks``.
    not_listed: int = 0

    @property
    def flips(self) -> list[TaskChange]:
        return [t for t in self.tasks if t.kind in ("new_failure", "fixed")]


class KnownTask(TaskRef):
    """A task of the known-failures file (``--gym-known-failures``) and its entry."""

    entry: str = ""
    reason: str = ""
    link: str | None = None
    expires: str | None = None


class KnownFailuresSummary(_Model):
    """What the known-failures file did to a suite: quarantined tasks left out of its gates."""

    file: str = ""
    #: Listed tasks with a failing trial (reported xfail).
    failing: list[KnownTask] = Field(default_factory=list)
    #: Listed tasks whose every trial passed: "fixed: remove from the list".
    fixed: list[KnownTask] = Field(default_factory=list)
    #: Entries past their ``expires:`` date: their tasks are judged as any other, and each fails.
    expired: list[KnownTask] = Field(default_factory=list)
    #: Trials of listed tasks below min reward (left out of the gates).
    failed_trials: int = 0

    @property
    def quarantined(self) -> int:
        return len(self.failing) + len(self.fixed)


class BaselineSummary(_Model):
    """The comparison with the suite's stored baseline.

    ``ci_low``/``ci_high`` are one-sided 95% bounds of the change (``bounds`` says so), from the test that
    decides: ``ci_high < -max_regression`` exactly when ``p_beyond`` (of a drop larger than it) < 0.05.
    ``compared``: which trials of each task were compared (the first ones both runs have). ``new_failures``
    and ``fixed`` are stable flips; ``flaky_failures``/``flaky_fixes`` the other flips, not counted.
    ``passed`` is the ``<suite>::baseline`` verdict (``reason`` why not: a regression, ``no_evidence``, or
    ``undecided`` over errored trials); ``text`` the comparison in one line, as the terminal shows it.
    """

    file: str | None = None
    mean_delta: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    bounds: str = ""
    p_drop: float | None = None
    max_regression: float = 0.0
    p_beyond: float | None = None
    method: str = ""
    significant_drop: bool = False
    shared_tasks: int = 0
    compared: str = ""
    trials_compared: dict[str, int] | None = None
    no_evidence: str | None = None
    text: str = ""
    new_failures: list[str] = Field(default_factory=list)
    fixed: list[str] = Field(default_factory=list)
    new_failure_tasks: list[TaskRef] = Field(default_factory=list)
    fixed_tasks: list[TaskRef] = Field(default_factory=list)
    flaky_failures: list[TaskRef] = Field(default_factory=list)
    flaky_fixes: list[TaskRef] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    unused: list[str] = Field(default_factory=list)
    new_tasks: list[str] = Field(default_factory=list)
    regressed: bool = False
    passed: bool = True
    undecided: bool = False
    reason: str = ""
    settings_mismatch: list[str] = Field(default_factory=list)
    #: No comparison was made: the file, or the suite's entry in it, is missing or unreadable (``reason`` says
    #: which, and how to create it); the check fails.
    missing: bool = False
    #: New failures and fixes of quarantined tasks (known failures): not counted by the new_failures/fixed gates.
    quarantined_new_failures: list[TaskRef] = Field(default_factory=list)
    quarantined_fixed: list[TaskRef] = Field(default_factory=list)


class SuiteSummary(_Model):
    """One suite's numbers as the run judged them."""

    tasks: int = 0
    trials: int = 0
    errors: int = 0
    error_rate: float | None = None
    mean_reward: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_note: str | None = None
    min_reward: float = 1.0
    #: --gym-task-pass: when a task passes (all / majority / any of its trials reach min_reward).
    task_pass: str = "all"
    pass_at: dict[str, float] = Field(default_factory=dict)
    pass_hat: dict[str, float] = Field(default_factory=dict)
    flaky_rate: float | None = None
    gates: dict[str, GateSummary] = Field(default_factory=dict)
    #: In a shard: the gates left to the merge, with why.
    gates_deferred: dict[str, str] = Field(default_factory=dict)
    flaky_tasks: list[FlakyTask] = Field(default_factory=list)
    totals: TotalsSummary | None = None
    baseline: BaselineSummary | None = None
    baseline_note: str | None = None
    #: Only the selected trials counted (-k, -m, --deselect, --lf narrowed the suite).
    narrowed: bool = False
    #: Gym's health checks (``judge.health``): the share of checked trials whose evidence is clean, the unhealthy
    #: ones, the ones with nothing to check, trials per check that fired, and why the checks did not run.
    health_clean_rate: float | None = None
    unhealthy_trials: int | None = None
    health_unobserved: int | None = None
    health_checks: dict[str, int] = Field(default_factory=dict)
    health_note: str | None = None
    #: Trials with a reward below min_reward.
    failed_trials: int | None = None
    #: PASS / WARN / FAIL / INCONCLUSIVE (``VERDICT_WORDS``) and what happened, in a few words.
    verdict: str | None = None
    verdict_text: str = ""
    #: --gym-baseline-run: the tasks that flipped or moved, with both answers.
    changes: ChangesSummary | None = None
    #: --gym-known-failures: the suite's listed tasks.
    known_failures: KnownFailuresSummary | None = None
    #: What the trials cost, as the efficiency gates read it (``judge.efficiency.figures``).
    efficiency: dict[str, float | None] = Field(default_factory=dict)
    #: Trials not run, by why (``judge.savings.KINDS``: budget, decided, sequential).
    skipped: dict[str, int] = Field(default_factory=dict)
    #: Why the suite's verdicts are undecided: a budget stopped it before all its trials ran.
    cut_short: str | None = None
    #: The suite's own budget (a suite file's max_cost/max_tokens) and what its trials spent.
    budget: SpendSummary | None = None
    #: What the suite's numbers stand on when trials were skipped (pass@k and the interval over what ran).
    savings_note: str | None = None
    #: --gym-sequential: the suite's sequential checks.
    sequential: SequentialSummary | None = None

    @property
    def all_trials(self) -> int:
        """Trials with a reward plus errored ones: what the run ran."""
        return self.trials + self.errors

    def pass_at_k(self) -> list[tuple[int, float]]:
        """(k, pass@k) in k order."""
        return sorted((int(k), v) for k, v in self.pass_at.items() if k.isdigit())

    @property
    def failed(self) -> bool:
        baseline = self.baseline
        return any(not g.passed for g in self.gates.values()) or bool(
            baseline and (baseline.regressed or not baseline.passed or self.cut_short)
        )

    @property
    def trials_saved(self) -> int:
        """Trials not run because their task's or suite's verdict was decided without them."""
        return self.skipped.get("decided", 0) + self.skipped.get("sequential", 0)

    def extra_fields(self) -> dict[str, Any]:
        """Fields a later version added: shown as they are."""
        return dict(self.model_extra or {})

    def to_json(self) -> dict[str, Any]:
        """JSON form: numbers that are None stay (null: "not measured"); sections that do not apply are left out."""
        data: dict[str, Any] = self.model_dump(mode="json")
        for key in _OPTIONAL_SECTIONS:
            value = data.get(key)
            if value is None or value == {} or value is False:  # a count of 0 stays
                data.pop(key, None)
        return data


class ConcurrencySummary(_Model):
    """What the run met of rate limits: answers 429/503, and the concurrency limit over time."""

    adaptive: bool = False
    #: --gym-concurrency: the limit's ceiling.
    ceiling: int = 0
    #: Answers 429 (too many requests) and 503 (unavailable) to /run, over all processes of the run.
    throttled: int = 0
    status_429: int = 0
    status_503: int = 0
    #: The lowest limit the run came down to, and the limit at its end.
    lowest: int | None = None
    final: int | None = None
    #: [seconds since the first rollout, limit] at each change (bounded: at most ``MAX_TIMELINE`` points).
    timeline: list[list[float]] = Field(default_factory=list)


MAX_TIMELINE = 200


class RunSummary(_Model):
    """``pytest_gym_summary.json``: every suite of the run, and what the run noted."""

    run_dir: str = ""
    suites: dict[str, SuiteSummary] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    #: A shard run: which shard, and whether its verdicts were judged or deferred to the merge.
    shard: str | None = None
    verdicts: str | None = None
    #: A merge: the shard folders it came from.
    merged_from: list[str] | None = None
    #: --gym-rescore: what the verifier change moved.
    rescore: dict[str, Any] | None = None
    #: --gym-trace-url: the template of a link to a trial's trace (``{trace_id}``).
    trace_url: str | None = None
    #: Rate limits met and the adaptive concurrency limit over time (``rollout.adaptive``).
    concurrency: ConcurrencySummary | None = None
    #: When the run was judged (UTC, ISO 8601): ``python -m pytest_gym history`` orders runs by it.
    finished_at: str | None = None
    #: The run folder the answers were compared with (--gym-baseline-run, or the baseline file's).
    baseline_run: str | None = None
    #: --gym-known-failures: the file, and its entries that matched no task of the run.
    known_failures: dict[str, Any] | None = None
    #: The run's budget (--gym-max-cost, --gym-max-tokens) and what the run spent.
    budget: SpendSummary | None = None
    #: What finished rollouts spent that no suite counts (the run stopped before their trials), when any.
    unjudged: UnjudgedSpend | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"run_dir": self.run_dir, "suites": {n: s.to_json() for n, s in self.suites.items()}}
        data["notes"] = list(self.notes)
        if self.concurrency is not None:
            data["concurrency"] = self.concurrency.model_dump(mode="json")
        for key in (
            "shard", "verdicts", "merged_from", "rescore", "trace_url", "finished_at", "baseline_run", "known_failures"
        ):  # fmt: skip
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        for key in ("budget", "unjudged"):
            if (part := getattr(self, key)) is not None:
                data[key] = part.model_dump(mode="json")
        data.update(self.model_extra or {})
        return data


class SummaryError(ValueError):
    """A summary file that is not one pytest-gym wrote."""


def parse_summary(data: Any, *, strict: bool = False) -> RunSummary:
    """A summary read back (from JSON); ``SummaryError`` naming the first problem.

    ``strict``: ``data`` is also checked as strict JSON (a file read back): a count of ``true`` is no 1 and a rate
    of "0.9" no number in what a reviewer compares (history, the PR comment against the baseline run)."""
    if not isinstance(data, dict):
        raise SummaryError(f"a JSON {type(data).__name__}, not the object pytest-gym writes")
    suites = data.get("suites")
    if isinstance(suites, dict) and len(suites) > MAX_SUITES:
        raise SummaryError(f"{len(suites)} suites, more than the {MAX_SUITES} pytest-gym reads")
    for name, suite in (suites or {}).items() if isinstance(suites, dict) else []:
        for key in ("pass_at", "pass_hat"):
            values = suite.get(key) if isinstance(suite, dict) else None
            # ASCII digits, few of them: ``str.isdigit`` takes "²" and ``int`` refuses more than 4300 digits.
            if isinstance(values, dict) and any(not _K.fullmatch(str(k)) or int(k) > MAX_K for k in values):
                raise SummaryError(f"suite {str(name)[:80]!r}: {key} has a k that is not a number from 1 to {MAX_K}")
    try:
        if strict:
            # Re-encoded with a lone surrogate (a dataset file name that is not UTF-8) replaced: Python's JSON
            # reads and writes it, pydantic's parser refuses it. Strict JSON mode still takes arrays as tuples.
            RunSummary.model_validate_json(json.dumps(data, ensure_ascii=False).encode("utf-8", "replace"), strict=True)
        return RunSummary.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SummaryError(f"{where}: {first['msg']}") from None
