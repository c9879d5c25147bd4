"""The suite summary: the one typed form of a suite's numbers, gates and baseline comparison.

The judge writes it (``SuiteVerdict.summary``); every reader takes it from here: the summary file, the
terminal section, the JUnit properties, the HTML report and its charts, the exporters. Nothing downstream
recomputes a statistic: a figure on the page is the figure in the summary.

Read back from a file it is validated: a field of the wrong type is an error, not a guess. Fields added
by a later version are kept (``extra="allow"``) and shown as they are, so an older reader still shows them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: Bounds on what a summary read back may hold: far above any real run, far below harm.
MAX_SUITES = 10_000
MAX_K = 10_000


#: Suite sections left out of the JSON when they do not apply (as the summary always did).
_OPTIONAL_SECTIONS = ("baseline", "totals", "baseline_note", "ci_note", "gates_deferred", "narrowed")


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
            baseline and (baseline.regressed or not baseline.passed)
        )

    def extra_fields(self) -> dict[str, Any]:
        """Fields a later version added: shown as they are."""
        return dict(self.model_extra or {})

    def to_json(self) -> dict[str, Any]:
        """JSON form: numbers that are None stay (null: "not measured"); sections that do not apply are left out."""
        data: dict[str, Any] = self.model_dump(mode="json")
        for key in _OPTIONAL_SECTIONS:
            if data.get(key) in (None, {}, False):
                data.pop(key, None)
        return data


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

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"run_dir": self.run_dir, "suites": {n: s.to_json() for n, s in self.suites.items()}}
        data["notes"] = list(self.notes)
        for key in ("shard", "verdicts", "merged_from", "rescore"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        data.update(self.model_extra or {})
        return data


class SummaryError(ValueError):
    """A summary file that is not one pytest-gym wrote."""


def parse_summary(data: Any) -> RunSummary:
    """A summary read back (from JSON); ``SummaryError`` naming the first problem."""
    if not isinstance(data, dict):
        raise SummaryError(f"a JSON {type(data).__name__}, not the object pytest-gym writes")
    suites = data.get("suites")
    if isinstance(suites, dict) and len(suites) > MAX_SUITES:
        raise SummaryError(f"{len(suites)} suites, more than the {MAX_SUITES} pytest-gym reads")
    for name, suite in (suites or {}).items() if isinstance(suites, dict) else []:
        for key in ("pass_at", "pass_hat"):
            values = suite.get(key) if isinstance(suite, dict) else None
            if isinstance(values, dict) and any(not str(k).isdigit() or int(k) > MAX_K for k in values):
                raise SummaryError(f"suite {str(name)[:80]!r}: {key} has a k that is not a number from 1 to {MAX_K}")
    try:
        return RunSummary.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SummaryError(f"{where}: {first['msg']}") from None
