"""``github``: a Markdown table in the GitHub Actions job summary, where reviewers of a CI run look first.

Names come from files anyone can add to a pull request (a dataset called ``<img src=...>.jsonl``), and the
job summary renders Markdown and some HTML: every name is written as text (Markdown's and HTML's special
characters backslash-escaped) or as a code span fenced by more backticks than it holds.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pytest_gym.core.masking import strip_control
from pytest_gym.core.numbers import is_int, is_number
from pytest_gym.core.words import counted
from pytest_gym.exporters.api import Exporter, ExportResult, ExportRun, mask_text
from pytest_gym.judge.summary import FlakyTask, SuiteSummary, TotalsSummary

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
#: Characters that start Markdown or HTML syntax inside a line (a table cell, a list item's text).
_MARKUP = re.compile(r"([\\`*_\[\]<>&|~!#])")


def marker(run_id: str) -> str:
    """The comment that marks a run as appended, so a second export does not repeat it (no ``--`` inside)."""
    safe = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._:+-]+", "_", run_id))
    return f"<!-- pytest-gym run {safe} -->"


def _num(value: Any) -> str:
    return f"{value:.3f}" if is_number(value) else "n/a"


def _one_line(text: str) -> str:
    return strip_control(str(text)).replace("\r", " ").replace("\n", " ")


def _text(text: str) -> str:
    """``text`` as literal Markdown text on one line: ``<img ...>`` and ``<!--`` show as written."""
    return _MARKUP.sub(r"\\\1", _one_line(text))


def _code(text: str, cell: bool = False) -> str:
    """``text`` as a code span on one line, fenced by one backtick more than its longest run; in a table
    ``cell`` its ``|`` escaped (GitHub splits the cells before it reads code spans)."""
    text = _one_line(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    if cell:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(text: str) -> str:
    return text.replace("\n", " ")


def _pass_at(m: SuiteSummary) -> str:
    ks = m.pass_at_k()
    shown = [(k, v) for k, v in ks if k in (1, ks[-1][0])]
    return ", ".join(f"pass@{k} {_num(v)}" for k, v in shown) or "n/a"


def _gates(m: SuiteSummary) -> str:
    return (
        "<br>".join(
            f"{'✅' if g.passed else '❌'} {_code(label, cell=True)} ({_num(g.value)})" for label, g in m.gates.items()
        )
        or "none"
    )


def _int(value: Any) -> str:
    return str(value) if is_int(value) else "n/a"


def _totals_row(suite: str, totals: TotalsSummary) -> str:
    tokens = " / ".join(_int(v) for v in (totals.input_tokens, totals.output_tokens, totals.total_tokens))
    latency = " / ".join(
        _num(v) for v in (totals.latency_p50_s, totals.latency_p90_s, totals.latency_p99_s, totals.latency_max_s)
    )
    shown_cost = f"{totals.cost:.4g}" if totals.cost is not None else "n/a"
    return f"| {_text(suite)} | {tokens} | {latency} | {_int(totals.retries)} | {shown_cost} |"


def _flaky(task: FlakyTask) -> str:
    line = f" (line {_text(str(task.line))})" if task.line is not None else ""
    return f"{_code(task.hash)}{line} {_text(f'{task.successes}/{task.repeats}')}"


def _savings(m: SuiteSummary) -> list[str]:
    """What a suite did not run and why, its budget, and how a sequential run decided it."""
    found = []
    if m.cut_short:
        found.append(f"**undecided**: {m.cut_short}")
    elif m.savings_note:
        found.append(m.savings_note)
    if m.budget is not None:
        found.append(f"suite budget: spent {m.budget.line()}")
    seq = m.sequential
    if seq is not None and seq.message:
        found.append(f"sequential (seed {seq.seed}): {seq.message}")
    return found


def markdown(run: ExportRun) -> str:
    """The section for one run: a row per suite with trials, mean reward ± CI, pass@k and gates; a row per
    suite with its totals (tokens, latency, retries, cost); flaky tasks and the baseline comparison as notes."""
    status = "✅ passed" if run.exit_status == 0 else f"❌ exit status {run.exit_status}"
    lines = [
        marker(run.run_id),
        f"### pytest-gym: run {_code(run.run_id)} ({status})",
        "",
        "| suite | tasks | trials | errors | mean reward (95% CI) | pass@k | gates |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    notes = []
    totals_rows = []
    suites = run.suites
    budget = run.budget
    if budget is not None:
        stopped = f", {budget.skipped} trials not run" if budget.skipped else ""
        notes.append(f"- run budget: spent {budget.line()} on {budget.trials} trials{stopped}")
    if run.unjudged is not None:
        notes.append(f"- {run.unjudged.line()}")
    for suite, m in suites.items():
        ci = f" ({_num(m.ci_low)}..{_num(m.ci_high)})" if m.ci_low is not None else ""
        lines.append(
            f"| {_text(suite)} | {m.tasks} | {m.all_trials} | {m.errors} "
            f"| {_num(m.mean_reward)}{ci} | {_pass_at(m)} | {_cell(_gates(m))} |"
        )
        if m.totals is not None:
            totals_rows.append(_totals_row(suite, m.totals))
        flaky = m.flaky_tasks
        if flaky:
            shown = ", ".join(_flaky(t) for t in flaky[:10]) + (
                f" and {len(flaky) - 10} more" if len(flaky) > 10 else ""
            )
            notes.append(f"- {_code(suite)}: {len(flaky)} flaky tasks (passed/trials): {shown}")
        baseline = m.baseline
        if baseline is not None and baseline.missing:
            notes.append(f"- {_code(suite)}: **baseline check failed**: {_cell(baseline.reason)}")
        elif baseline is not None:
            regressed = (
                " **regression**"
                if baseline.regressed
                else " **undecided**"
                if baseline.undecided
                else " **no evidence**"
                if baseline.no_evidence
                else ""
            )
            p_text = f" (one-sided p = {baseline.p_drop:.3g})" if baseline.p_drop is not None else ""
            notes.append(
                f"- {_code(suite)} against the baseline: mean reward delta {_num(baseline.mean_delta)}{p_text} over "
                f"{baseline.shared_tasks} shared tasks, "
                f"{counted(len(baseline.new_failures), 'new failure')}, "
                f"{len(baseline.fixed)} fixed{regressed}"
            )
        notes += [f"- `{suite}`: {_cell(text)}" for text in _savings(m)]
    if not suites:
        lines.append("| (no Gym trials ran) | | | | | | |")
    if totals_rows:
        lines += [
            "",
            "| suite | tokens in / out / total | latency p50 / p90 / p99 / max (s) | retries | cost |",
            "|---|---:|---:|---:|---:|",
            *totals_rows,
        ]
    lines += ["", *notes, *([""] if notes else [])]
    return mask_text("\n".join(lines) + "\n")


class GithubExporter(Exporter):
    """Appends to ``$GITHUB_STEP_SUMMARY``; outside GitHub Actions it skips, so one config serves both."""

    name = "github"

    def export(self, run: ExportRun) -> ExportResult:
        target = os.environ.get(STEP_SUMMARY_ENV)
        if not target:
            return ExportResult("skipped", f"${STEP_SUMMARY_ENV} is not set (not running in GitHub Actions)")
        path = Path(target)
        try:
            existing = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
            if marker(run.run_id) in existing:
                return ExportResult("skipped", f"run {run.run_id} is already in {path}", str(path))
            with path.open("a", encoding="utf-8") as f:
                f.write(("\n" if existing and not existing.endswith("\n") else "") + markdown(run))
        except OSError as exc:
            return ExportResult("failed", f"cannot append to {path}: {exc.strerror or exc}", str(path))
        return ExportResult("succeeded", f"appended the summary table to {path}", str(path))
