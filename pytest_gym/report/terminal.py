"""The compact end-of-run section: per suite, the numbers a reviewer needs and what to do next."""

from __future__ import annotations

import pytest

from pytest_gym.core.masking import MAX_MESSAGE, clean_text
from pytest_gym.exporters.api import ExportResult
from pytest_gym.judge.summary import BaselineSummary, SuiteSummary, TaskRef, TotalsSummary

_SHOW_FAILURES = 5


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
        if s.narrowed:
            lines.append("  (only the selected trials count: the selection narrowed the suite)")
        if s.totals is not None:
            lines.append(_totals_line(s.totals))
        flaky = s.flaky_tasks
        if flaky:
            shown = ", ".join(t.shown for t in flaky[:_SHOW_FAILURES])
            more = f" and {len(flaky) - _SHOW_FAILURES} more" if len(flaky) > _SHOW_FAILURES else ""
            lines.append(f"  flaky ({len(flaky)} of {s.tasks} tasks, passed/trials): {shown}{more}")
        for label, gate in s.gates.items():
            lines.append(f"  gate {label}: {'PASS' if gate.passed else 'FAIL'} ({gate.reason})")
        if deferred is not None:
            why, labels = deferred
            lines += [f"  gate {label}: {why}" for label in labels.get(name, [])]
            if baseline:
                lines.append(f"  baseline: {why}")
        c = s.baseline
        if c is not None:
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
