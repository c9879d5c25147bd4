"""The pull-request comment: a compact Markdown view of a run for the reviewer (``python -m pytest_gym comment``).

Per suite: the verdict word and what happened, the mean reward with its interval and its change against the
baseline (the paired comparison of ``--gym-baseline``, else the baseline run's own mean and interval), pass@k,
the gates; then the tasks that flipped against the baseline run, each with its hash, line and both final
answers; known failures; tokens, cost and latency; a link to the report. Everything is the summary's (the
judge's numbers); a run judged without ``--gym-baseline-run`` is compared now with the judge's code.

Texts from a model are untrusted Markdown: every one goes into a code span (no mention, link, image or HTML
of its own renders), on one line, masked and bounded, and the whole comment stays under what GitHub accepts.
"""

from __future__ import annotations

import re
from pathlib import Path

from pytest_gym.core.masking import MAX_FIELD, Masker, clean_text
from pytest_gym.core.words import counted
from pytest_gym.judge.paired import Rule
from pytest_gym.judge.summary import ChangesSummary, RunSummary, SuiteSummary, TaskChange
from pytest_gym.runfolder.diff import SuiteDiff, changes_summary, diff_runs
from pytest_gym.runfolder.summary import read_summary

#: The hidden marker that finds the comment again (``--marker KEY`` adds a key: one comment per job or suite).
MARKER = "<!-- pytest-gym-comment -->"
#: GitHub refuses comments longer than 65,536 characters; GitLab's limit is higher.
MAX_COMMENT = 60_000
#: Answers in the comment: one line each, at most this long.
ANSWER_CHARS = 160
#: Flipped tasks listed per suite and kind.
MAX_ROWS = 10
_ICON = {"PASS": "✅", "WARN": "⚠️", "FAIL": "❌", "INCONCLUSIVE": "❔"}
_KEY = re.compile(r"[A-Za-z0-9_.:/-]{1,80}")
_RULES: dict[str, Rule] = {"all": "all", "majority": "majority", "any": "any"}


class CommentError(ValueError):
    """The run folder cannot make a comment (no summary); the message says what to give."""


def marker(key: str | None = None) -> str:
    if not key:
        return MARKER
    if not _KEY.fullmatch(key):
        raise CommentError(f"--marker {key[:80]!r}: use letters, digits and _ . : / - (at most 80)")
    return f"<!-- pytest-gym-comment:{key} -->"


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.3f}"


def code(text: str, limit: int = ANSWER_CHARS) -> str:
    """Untrusted text as an inline code span on one line: masked, bounded, table-safe."""
    one = " ".join(clean_text(text, MAX_FIELD).split())
    if len(one) > limit:
        one = one[: limit - 1] + "…"
    one = one.replace("|", "\\|")
    if not one:
        return "*(empty)*"
    longest = max((len(run) for run in re.findall(r"`+", one)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if one.startswith("`") or one.endswith("`") else ""
    return f"{fence}{pad}{one}{pad}{fence}"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _ci(s: SuiteSummary) -> str:
    return f" ({_num(s.ci_low)}..{_num(s.ci_high)})" if s.ci_low is not None else ""


def _delta(s: SuiteSummary, before: SuiteSummary | None) -> str:
    """The change against the baseline: the paired comparison when the run made one, else both means."""
    b = s.baseline
    if b is not None and b.mean_delta is not None:
        ci = f" ({_signed(b.ci_low)}..{_signed(b.ci_high)})" if b.ci_low is not None else ""
        p = f", p(drop) {b.p_drop:.3g}" if b.p_drop is not None else ""
        return f"{_signed(b.mean_delta)}{ci}{p}" + (" **regression**" if b.regressed else "")
    if before is not None and before.mean_reward is not None and s.mean_reward is not None:
        return f"{_signed(s.mean_reward - before.mean_reward)} (was {_num(before.mean_reward)}{_ci(before)})"
    return "—"


def _pass_at(s: SuiteSummary) -> str:
    ks = s.pass_at_k()
    return ", ".join(f"pass@{k} {_num(v)}" for k, v in ks if k in (1, ks[-1][0])) or "n/a"


def _gates(s: SuiteSummary) -> str:
    if s.gates_deferred:
        return "deferred to the merge"
    shown = []
    for label, g in s.gates.items():
        icon = "✅" if g.passed else ("❔" if g.undecided else "❌")
        shown.append(f"{icon} `{_cell(label)}` ({_num(g.value)})")
    return "<br>".join(shown) or "none"


def _flip_rows(tasks: list[TaskChange], kind: str) -> list[str]:
    rows = [t for t in tasks if t.kind == kind]
    lines = [
        f"| `{t.hash}` | {t.line if t.line is not None else ''} | {_num(t.before_mean)} → {_num(t.after_mean)} "
        f"| {code(t.before_answer)} | {code(t.after_answer)} |"
        for t in rows[:MAX_ROWS]
    ]
    if len(rows) > MAX_ROWS:
        lines.append(f"| … | | | {len(rows) - MAX_ROWS} more in the report | |")
    return lines


def _changes(name: str, changes: ChangesSummary) -> list[str]:
    head = (
        f"**{_cell(name)}** against the baseline run `{_cell(Path(changes.baseline_run).name or changes.baseline_run)}`"
        f": {counted(changes.new_failures, 'new failure')}, {changes.fixed} fixed, {changes.moved} moved "
        f"(of {changes.shared_tasks} tasks both ran)"
    )
    lines = [head]
    for kind, title in (("new_failure", "New failures"), ("fixed", "Fixed")):
        rows = _flip_rows(changes.tasks, kind)
        if rows:
            lines += [
                "",
                f"<details{' open' if kind == 'new_failure' else ''}><summary>{title}</summary>",
                "",
                "| task | line | mean reward | baseline answer | this run's answer |",
                "|---|---:|---|---|---|",
                *rows,
                "",
                "</details>",
            ]
    return [*lines, ""]


def _baseline_failures(name: str, s: SuiteSummary) -> list[str]:
    """New failures against the baseline file when no baseline run gave their answers."""
    b = s.baseline
    if b is None or not b.new_failure_tasks:
        return []
    shown = ", ".join(f"`{t.hash}` (line {t.line})" if t.line else f"`{t.hash}`" for t in b.new_failure_tasks[:20])
    more = f" and {len(b.new_failure_tasks) - 20} more" if len(b.new_failure_tasks) > 20 else ""
    return [f"**{_cell(name)}**: {counted(len(b.new_failures), 'new failure')} against the baseline: {shown}{more}", ""]


def _known(name: str, s: SuiteSummary) -> list[str]:
    known = s.known_failures
    if known is None or not (known.failing or known.fixed or known.expired):
        return []
    parts = []
    for what, tasks in (("quarantined, failing", known.failing), ("fixed, remove from the list", known.fixed),
                        ("expired", known.expired)):  # fmt: skip
        if tasks:
            parts.append(f"{len(tasks)} {what} ({', '.join(f'`{t.hash}`' for t in tasks[:10])})")
    return [f"**{_cell(name)}** known failures: " + "; ".join(parts), ""]


def _totals(name: str, s: SuiteSummary) -> str | None:
    t = s.totals
    if t is None:
        return None
    tokens = f"{t.input_tokens or 0:,} in / {t.output_tokens or 0:,} out" if t.total_tokens is not None else "n/a"
    cost = f"{t.cost:.4g}" if t.cost is not None else "n/a"
    latency = f"{_num(t.latency_p50_s, 2)} / {_num(t.latency_p90_s, 2)} s" if t.latency_max_s is not None else "n/a"
    return f"| {_cell(name)} | {tokens} | {cost} | {latency} | {t.retries} | {s.errors} |"


def changes_for(
    run_dir: Path, summary: RunSummary, baseline_run: Path | None
) -> tuple[dict[str, ChangesSummary], dict[str, SuiteSummary]]:
    """Each suite's changes (the summary's, or made now against ``baseline_run``) and the baseline run's suites."""
    found = {name: s.changes for name, s in summary.suites.items() if s.changes is not None}
    before: dict[str, SuiteSummary] = {}
    if baseline_run is None:
        return found, before
    theirs = read_summary(baseline_run)
    before = dict(theirs.suites) if theirs is not None else {}
    missing = {name for name in summary.suites if name not in found}
    if missing:
        rules = {name: (s.min_reward, _RULES.get(s.task_pass, "all")) for name, s in summary.suites.items()}
        diff = diff_runs(run_dir, baseline_run, rules.__getitem__, missing)
        for name in missing:
            found[name] = changes_summary(diff.suites.get(name) or SuiteDiff(name), str(baseline_run))
    return found, before


def markdown(
    run_dir: Path, baseline_run: Path | None = None, report_url: str | None = None, key: str | None = None
) -> str:
    """The comment for the run folder (``CommentError`` when it has no summary)."""
    if report_url is not None and not re.match(r"https?://[^\s]+$", report_url):
        raise CommentError(f"--report-url {report_url[:100]!r}: give an http(s) URL (e.g. the artifact's)")
    summary = read_summary(run_dir)
    if summary is None:
        raise CommentError(f"{run_dir} has no pytest_gym_summary.json: give the run folder of a finished run")
    changes, before = changes_for(run_dir, summary, baseline_run)
    words = [s.verdict or "PASS" for s in summary.suites.values()]
    worst = next((w for w in ("FAIL", "INCONCLUSIVE", "WARN") if w in words), "PASS") if words else "no suites"
    lines = [
        marker(key),
        f"### pytest-gym: {_ICON.get(worst, '')} {worst} · run `{_cell(Path(summary.run_dir or run_dir).name)}`",
        "",
        "| suite | verdict | mean reward (95% CI) | vs baseline | pass@k | gates |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in summary.suites.items():
        verdict = f"{_ICON.get(s.verdict or '', '')} **{s.verdict or 'n/a'}**: {_cell(s.verdict_text)}"
        lines.append(
            f"| `{_cell(name)}` | {verdict} | {_num(s.mean_reward)}{_ci(s)} | {_delta(s, before.get(name))} "
            f"| {_pass_at(s)} | {_gates(s)} |"
        )
    if not summary.suites:
        lines.append("| (no suite was judged) | | | | | |")
    lines.append("")
    details: list[str] = []
    for name, s in summary.suites.items():
        if name in changes:
            details += _changes(name, changes[name])
        else:
            details += _baseline_failures(name, s)
        details += _known(name, s)
    totals = [row for name, s in summary.suites.items() if (row := _totals(name, s))]
    tail = []
    if totals:
        tail += ["| suite | tokens | cost | latency p50 / p90 | retries | errors |", "|---|---|---|---|---:|---:|"]
        tail += [*totals, ""]
    if report_url:
        tail += [f"**[Full report]({report_url.replace(')', '%29').replace(' ', '%20')})**", ""]
    tail.append(f"<sub>pytest-gym · {len(summary.suites)} suite{'s' * (len(summary.suites) != 1)}</sub>")
    body = "\n".join(lines)
    budget = MAX_COMMENT - len(body) - sum(len(t) + 1 for t in tail) - 200
    kept = []
    for line in details:
        if budget - len(line) - 1 < 0:
            kept.append("*(more in the report: the comment is at its length limit)*")
            break
        kept.append(line)
        budget -= len(line) + 1
    return Masker().text("\n".join([body, *kept, *tail]) + "\n")
