"""The compact end-of-run section: per suite, the numbers a reviewer needs and what to do next."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_gym.core.masking import MAX_MESSAGE, clean_text
from pytest_gym.core.words import counted

if TYPE_CHECKING:
    from pytest_gym.exporters.api import ExportResult
    from pytest_gym.judge.summary import (
        BaselineSummary,
        ChangesSummary,
        RunSummary,
        SequentialSummary,
        SuiteSummary,
        TaskRef,
        TotalsSummary,
    )


_SHOW_FAILURES = 5
#: Flips against the baseline run listed with both answers.
TOP_FLIPS = 5


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}s"


def _totals_line(totals: TotalsSummary) -> str:
    parts = []
    if totals.total_tokens is not None:
        parts.append(
            f"tokens {totals.input_tokens or 0} in / {totals.output_tokens or 0} out / {totals.total_tokens} total"
        )
    if totals.latency_max_s is not None:
        parts.append(
            f"latency p50 {_seconds(totals.latency_p50_s)} p90 {_seconds(totals.latency_p90_s)} "
            f"p99 {_seconds(totals.latency_p99_s)} max {_seconds(totals.latency_max_s)}"
        )
    parts.append(f"retries {totals.retries}")
    if totals.cost is not None:
        parts.append(f"cost {totals.cost:.4g}")
    return "  totals: " + ", ".join(parts)


def _tasks(tasks: list[TaskRef], limit: int = _SHOW_FAILURES) -> str:
    """``hash12 (line N), ...`` for the first ``limit``, then how many more."""
    shown = ", ".join(t.label for t in tasks[:limit])
    more = f" and {len(tasks) - limit} more" if len(tasks) > limit else ""
    return (shown + more) or "none"


def changes_lines(changes: ChangesSummary | None, top: int = TOP_FLIPS) -> list[str]:
    """--gym-baseline-run: the counts, then the top flips, each with the baseline's and this run's final answer."""
    if changes is None:
        return []
    lines = [
        f"  changes against the baseline run {changes.baseline_run}: {counted(changes.new_failures, 'new failure')}, "
        f"{changes.fixed} fixed, {changes.moved} moved (of {changes.shared_tasks} tasks both runs measured)"
    ]
    flips = changes.flips
    for task in flips[:top]:
        kind = "new failure" if task.kind == "new_failure" else "fixed"
        lines.append(f"    {kind} {task.label}: mean reward {_fmt(task.before_mean)} -> {_fmt(task.after_mean)}")
        lines.append(f"      baseline r{task.before_repeat}: {task.before_answer}")
        lines.append(f"      this run r{task.after_repeat}: {task.after_answer}")
    more = changes.new_failures + changes.fixed - min(top, len(flips))
    if more > 0:
        lines.append(f"    ... and {more} more flips (the report's Changes section shows them all)")
    return lines


def _known_lines(s: SuiteSummary) -> list[str]:
    """--gym-known-failures: the quarantined tasks that failed, those that pass now, the expired entries."""
    known = s.known_failures
    if known is None:
        return []
    lines = []
    for what, tasks in (
        ("quarantined, failing (xfail)", known.failing),
        ("known failures that pass now (remove from the list)", known.fixed),
        ("expired known-failure entries", known.expired),
    ):
        if tasks:
            shown = ", ".join(f"{t.label} [{t.entry}]" for t in tasks[:_SHOW_FAILURES])
            more = f" and {len(tasks) - _SHOW_FAILURES} more" if len(tasks) > _SHOW_FAILURES else ""
            lines.append(f"  {what} ({len(tasks)}): {shown}{more}")
    return lines


def _comparison(c: BaselineSummary) -> str:
    """The comparison in one line: the judge's own words, or (a summary written before it kept them) the numbers."""
    if c.text:
        return c.text
    p_drop = f"{c.p_drop:.3g}" if c.p_drop is not None else "n/a"
    return (
        f"delta {_fmt(c.mean_delta)} over {c.shared_tasks} shared tasks"
        f" (95% CI {_fmt(c.ci_low)}..{_fmt(c.ci_high)}, p(drop) {p_drop}, {c.method})"
    )


#: The gate that fails a run on any task that newly fails, named when the paired test did not decide.
NEW_FAILURES_GATE = "new_failures<=0"


def baseline_verdict(c: BaselineSummary, gates: list[str]) -> str | None:
    """Why ``<suite>::baseline`` passed or failed, in words (None: ``baseline check failed: ...`` says it).

    When tasks flipped to failing but the paired test did not show a drop, it says so and names the gate
    that fails on them (unless the suite has a ``new_failures`` gate already)."""
    if not c.passed and not c.regressed:
        return None
    t = c.max_regression
    drop = f"drop larger than {t:g}" if t > 0 else "drop"
    p = c.p_beyond if t > 0 else c.p_drop
    shown = f"p {p:.3g}" if p is not None else "p n/a"
    over = f"over {c.shared_tasks} shared task{'s' * (c.shared_tasks != 1)}"
    if not c.passed:
        return f"  baseline check: FAIL: the paired test shows a {drop} ({shown} < 0.05 {over})"
    text = f"  baseline check: PASS: the paired test shows no {drop} ({shown}, not < 0.05, {over})"
    flipped = len(c.new_failures)
    if flipped:
        text += (
            f"; {flipped} task{'s' * (flipped != 1)} newly failing {'are' if flipped != 1 else 'is'} "
            "too few to show a drop"
        )
        if not any(label.replace(" ", "").startswith("new_failures") for label in gates):
            text += f'; to fail the run on any new failure add --gym-gate "{NEW_FAILURES_GATE}"'
    return text


def summary_lines(
    suites: dict[str, SuiteSummary],
    update_command: str | None,
    deferred: tuple[str, dict[str, list[str]]] | None = None,
    baseline: str | None = None,
) -> list[str]:
    """``deferred``: (why, labels of the gates per suite) when a shard leaves its gates and baseline to the merge."""
    lines: list[str] = []
    for name, s in suites.items():
        ci = f" (95% CI {_fmt(s.ci_low)}..{_fmt(s.ci_high)})" if s.ci_low is not None else ""
        ks = s.pass_at_k()
        passes = ", ".join(f"pass@{k} {_fmt(p)}" for k, p in ks if k in (1, ks[-1][0]))
        lines.append(
            f"{name}: {s.tasks} tasks, {s.all_trials} trials, {s.errors} errors, "
            f"mean reward {_fmt(s.mean_reward)}{ci}" + (f", {passes}" if passes else "")
        )
        if s.verdict:
            lines.append(f"  verdict: {s.verdict} ({s.verdict_text})")
        if s.narrowed:
            lines.append("  (only the selected trials count: the selection narrowed the suite)")
        if s.totals is not None:
            lines.append(_totals_line(s.totals))
        if s.budget is not None:
            lines.append(f"  suite budget: spent {s.budget.line()}")
        if s.savings_note:
            lines.append(f"  {s.savings_note}")
        if s.cut_short:
            lines.append(f"  UNDECIDED: {s.cut_short}")
        if s.sequential is not None:
            lines.append(f"  {_sequential_line(s.sequential)}")
        flaky = s.flaky_tasks
        if flaky:
            shown = ", ".join(t.shown for t in flaky[:_SHOW_FAILURES])
            more = f" and {len(flaky) - _SHOW_FAILURES} more" if len(flaky) > _SHOW_FAILURES else ""
            lines.append(f"  flaky ({len(flaky)} of {s.tasks} tasks, passed/trials): {shown}{more}")
        if s.unhealthy_trials is not None:
            rate = f"clean rate {_fmt(s.health_clean_rate)}" if s.health_clean_rate is not None else "nothing checked"
            fired = ", ".join(f"{code} {n}" for code, n in s.health_checks.items())
            lines.append(
                f"  health: {rate}, {s.unhealthy_trials} unhealthy" + (f" ({fired})" if fired else "")
                + f", {s.health_unobserved or 0} unobserved" + (f"; {s.health_note}" if s.health_note else "")
            )  # fmt: skip
        for label, gate in s.gates.items():
            lines.append(f"  gate {label}: {'PASS' if gate.passed else 'FAIL'} ({gate.reason})")
        if deferred is not None:
            why, labels = deferred
            lines += [f"  gate {label}: {why}" for label in labels.get(name, [])]
            if baseline:
                lines.append(f"  baseline: {why}")
        lines += _known_lines(s)
        lines += changes_lines(s.changes)
        c = s.baseline
        if c is not None and c.missing:
            lines.append(f"  {c.reason}")
        elif c is not None:
            verdict = "" if c.passed else " UNDECIDED" if c.undecided else " REGRESSION" if c.regressed else ""
            lines.append(f"  baseline: {_comparison(c)}{verdict}")
            words = baseline_verdict(c, list(s.gates))
            if words:
                lines.append(words)
            if not c.passed and not c.regressed:
                lines.append(f"  baseline check failed: {c.reason}")
            if c.new_failures:
                lines.append(f"  new failures ({len(c.new_failures)}): {_tasks(c.new_failure_tasks)}")
            if c.fixed:
                lines.append(f"  fixed ({len(c.fixed)}): {_tasks(c.fixed_tasks)}")
            for what, held in (("new failures", c.quarantined_new_failures), ("fixed", c.quarantined_fixed)):
                if held:
                    lines.append(f"  quarantined {what} (known failures, not counted): {_tasks(held)}")
            flips = c.flaky_failures + c.flaky_fixes
            if flips:
                lines.append(f"  flaky, not counted ({len(flips)}): {_tasks(flips)}")
            lines += [f"  note: {note}" for note in c.notes]
            if c.new_tasks:
                lines.append(f"  new tasks (not in baseline): {len(c.new_tasks)}")
            if c.unused:
                lines.append(f"  baseline tasks not run: {len(c.unused)}")
            if c.settings_mismatch:
                lines.append(f"  settings differ from the baseline's: {', '.join(c.settings_mismatch)}")
            if update_command:
                lines.append(f"  update the baseline: {update_command}")
        elif s.baseline_note:
            lines.append(f"  {s.baseline_note}")
    return lines


def _sequential_line(seq: SequentialSummary) -> str:
    head = f"sequential (--gym-seed {seq.seed}): "
    if seq.message and seq.stopped_early:
        return head + seq.message
    if seq.undecidable:
        return head + f"every task runs: {', '.join(seq.undecidable)} cannot be decided before the end"
    if seq.message:
        return head + seq.message + " (every task had run already: the full run's verdicts stand)"
    return head + f"not decided before the end ({seq.tasks} tasks): the full run's verdicts stand"


def run_lines(summary: RunSummary | None) -> list[str]:
    """Lines about the run as a whole: its budget and what it spent (in a suite or not), the rate limits it met and
    its concurrency."""
    if summary is None:
        return []
    lines = []
    b = summary.budget
    if b is not None:
        stopped = f", {b.skipped} trials not run" if b.skipped else ""
        lines.append(f"budget: spent {b.line()} on {b.trials} trials{stopped}")
    if summary.unjudged is not None:
        lines.append(summary.unjudged.line())
    c = summary.concurrency
    if c is not None:
        line = f"concurrency: {c.throttled} answers 429/503 (429: {c.status_429}, 503: {c.status_503})"
        if c.adaptive and c.lowest is not None:
            line += (
                f"; adaptive limit {c.ceiling} -> lowest {c.lowest}, {c.final} at the end ({len(c.timeline)} changes)"
            )
        elif not c.adaptive:
            line += f"; fixed limit {c.ceiling} (--gym-concurrency-adaptive off)"
        lines.append(line)
    return lines


_ESSENTIAL = ("gate ", "baseline", "no baseline", "new failures", "update the baseline", "run folder:")


def _essential(line: str) -> bool:
    """A line ``-q`` keeps: a suite's headline, its gates and baseline lines, the run folder."""
    return not line.startswith((" ", "note:", "export ")) or line.lstrip().startswith(_ESSENTIAL)


def write_section(
    terminalreporter: pytest.TerminalReporter,
    suites: dict[str, SuiteSummary],
    run_dir: str,
    notes: list[str],
    exports: list[tuple[str, ExportResult]],
    baseline: str | None,
    deferred: tuple[str, dict[str, list[str]]] | None = None,
    extra: list[str] | None = None,
    update: str | None = None,
) -> None:
    """The ``pytest-gym`` section: suites, gates (or why they wait), baseline, run folder, notes, exports.

    Notes carry Gym's words (an aggregate that failed, a server that died): every line is masked,
    bounded and stripped of control characters here, the last stop before the terminal. Without
    verdicts (no trial ran, or judging failed) the notes are still shown: they say why.
    """
    verbosity = terminalreporter.config.get_verbosity()
    if (not suites and not notes) or verbosity < -1:
        return
    if update is None and baseline:
        update = f"pytest ... --gym-baseline {baseline} --gym-update-baseline"
    update = None if deferred else update  # ``update``: the run's own command with --gym-update-baseline
    lines = [*summary_lines(suites, update, deferred, baseline), *(extra or []), f"run folder: {run_dir}"]
    lines += [f"note: {note}" for note in notes]
    for name, outcome in exports:
        where = f" [{outcome.location}]" if outcome.location else ""
        lines.append(f"export {name}: {outcome.status} - {outcome.message}{where}")
    if verbosity < 0:  # -q: what decided the run and where it is; -qq: nothing
        lines = [line for line in lines if _essential(line)]
    terminalreporter.write_sep("=", "pytest-gym")
    for line in lines:
        terminalreporter.write_line(clean_text(line, MAX_MESSAGE))
