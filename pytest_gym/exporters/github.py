"""``github``: a Markdown table in the GitHub Actions job summary, where reviewers of a CI run look first."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pytest_gym.core.numbers import is_int, is_number
from pytest_gym.exporters.api import Exporter, ExportResult, ExportRun, mask_text

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def marker(run_id: str) -> str:
    """The comment that marks a run as appended, so a second export does not repeat it."""
    return f"<!-- pytest-gym run {run_id.replace('--', '- -')} -->"


def _num(value: Any) -> str:
    return f"{value:.3f}" if is_number(value) else "n/a"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _pass_at(metrics: dict[str, Any]) -> str:
    pass_at = metrics.get("pass_at") or {}
    ks = sorted(int(k) for k in pass_at)
    shown = [k for k in ks if k in (1, ks[-1])] if ks else []
    return ", ".join(f"pass@{k} {_num(pass_at[str(k)])}" for k in shown) or "n/a"


def _gates(metrics: dict[str, Any]) -> str:
    gates = metrics.get("gates") or {}
    return (
        "<br>".join(
            f"{'✅' if g.get('passed') else '❌'} `{label}` ({_num(g.get('value'))})" for label, g in gates.items()
        )
        or "none"
    )


def _int(value: Any) -> str:
    return str(value) if is_int(value) else "n/a"


def _totals_row(suite: str, totals: dict[str, Any]) -> str:
    tokens = " / ".join(_int(totals.get(k)) for k in ("input_tokens", "output_tokens", "total_tokens"))
    latency = " / ".join(_num(totals.get(f"latency_{q}_s")) for q in ("p50", "p90", "p99", "max"))
    cost = totals.get("cost")
    shown_cost = f"{cost:.4g}" if is_number(cost) else "n/a"
    return f"| {_cell(suite)} | {tokens} | {latency} | {_int(totals.get('retries'))} | {shown_cost} |"


def _flaky(task: Any) -> str:
    if not isinstance(task, dict):
        return _cell(str(task))
    line = f" (line {task['line']})" if task.get("line") is not None else ""
    return f"`{_cell(str(task.get('hash')))}`{line} {task.get('successes')}/{task.get('repeats')}"


def markdown(run: ExportRun) -> str:
    """The section for one run: a row per suite with trials, mean reward ± CI, pass@k and gates; a row per
    suite with its totals (tokens, latency, retries, cost); flaky tasks and the baseline comparison as notes."""
    status = "✅ passed" if run.exit_status == 0 else f"❌ exit status {run.exit_status}"
    lines = [
        marker(run.run_id),
        f"### pytest-gym: run `{run.run_id}` ({status})",
        "",
        "| suite | tasks | trials | errors | mean reward (95% CI) | pass@k | gates |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    notes = []
    totals_rows = []
    for suite, m in (run.summary.get("suites") or {}).items():
        trials = (m.get("trials") or 0) + (m.get("errors") or 0)  # like the terminal summary: errored trials count
        ci = f" ({_num(m.get('ci_low'))}..{_num(m.get('ci_high'))})" if m.get("ci_low") is not None else ""
        lines.append(
            f"| {_cell(suite)} | {m.get('tasks', 'n/a')} | {trials} | {m.get('errors', 'n/a')} "
            f"| {_num(m.get('mean_reward'))}{ci} | {_pass_at(m)} | {_cell(_gates(m))} |"
        )
        totals = m.get("totals")
        if isinstance(totals, dict):
            totals_rows.append(_totals_row(suite, totals))
        flaky = m.get("flaky_tasks") or []
        if flaky:
            shown = ", ".join(_flaky(t) for t in flaky[:10]) + (
                f" and {len(flaky) - 10} more" if len(flaky) > 10 else ""
            )
            notes.append(f"- `{suite}`: {len(flaky)} flaky tasks (passed/trials): {shown}")
        baseline = m.get("baseline")
        if isinstance(baseline, dict):
            regressed = (
                " **regression**"
                if baseline.get("regressed")
                else " **undecided**"
                if baseline.get("undecided")
                else " **no evidence**"
                if baseline.get("no_evidence")
                else ""
            )
            p_drop = baseline.get("p_drop")
            p_text = f" (one-sided p = {p_drop:.3g})" if isinstance(p_drop, (int, float)) else ""
            notes.append(
                f"- `{suite}` against the baseline: mean reward delta {_num(baseline.get('mean_delta'))}{p_text} over "
                f"{baseline.get('shared_tasks', 'n/a')} shared tasks, "
                f"{len(baseline.get('new_failures') or [])} new failures, "
                f"{len(baseline.get('fixed') or [])} fixed{regressed}"
            )
    if not run.summary.get("suites"):
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
