"""A suite's trend over runs (``python -m pytest_gym history RUN_DIR... -o history.html``): one self-contained page
(and a JSON) from the run folders of nightly or CI runs.

For each suite: its mean reward with the 95% interval, pass@1 and pass@k, cost and latency across runs in time
order, the thresholds of its gates drawn in, every run linked to its own report. Runs whose settings differ
from the run before (model, agent, environment, policy, repeats, min reward, task-pass rule) are marked, since
a change of numbers there may be a change of setup. Every number is the run's own summary (the judge's); a
folder without a summary, or one that cannot be read, is listed with why and drawn nowhere.

SVG drawn here like the report's charts (``report.charts``): no script, no network.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.masking import Masker, clean_text
from pytest_gym.judge.gates import GateSyntaxError, parse_gate
from pytest_gym.judge.summary import RunSummary, SuiteSummary, SummaryError
from pytest_gym.report.charts import _Frame, _n, _svg, _ticks, fmt
from pytest_gym.runfolder.layout import REPORT_FILE, SUMMARY_FILE
from pytest_gym.runfolder.runinfo import read_run_info
from pytest_gym.runfolder.summary import read_summary

#: Runs a history page draws (the newest ones when given more).
MAX_RUNS = 500
WIDTH, HEIGHT = 560, 220
#: Gate metrics drawn on the reward chart, and on the pass@k chart.
_REWARD_METRICS = ("mean_reward", "ci_low(mean_reward)", "ci_high(mean_reward)")


@dataclass
class RunPoint:
    """One run folder as the history reads it."""

    label: str
    path: Path
    finished_at: str | None
    time_source: str
    report: str | None
    basis: dict[str, Any]
    summary: RunSummary | None
    problem: str | None = None
    #: What differs from the run before (empty: the same settings).
    changed: list[str] = field(default_factory=list)


def _finished(summary: RunSummary | None, run_dir: Path) -> tuple[str | None, str]:
    if summary is not None and summary.finished_at:
        return summary.finished_at, "summary"
    try:
        mtime = (run_dir / SUMMARY_FILE).stat().st_mtime
    except OSError:
        return None, "unknown"
    return datetime.fromtimestamp(mtime, timezone.utc).isoformat(timespec="seconds"), "file time"


def _link(run_dir: Path, page_dir: Path) -> str | None:
    target = run_dir / REPORT_FILE
    if not target.is_file():
        return None
    return Path(os.path.relpath(target.resolve(), page_dir.resolve())).as_posix()


def read_run(run_dir: Path, page_dir: Path) -> RunPoint:
    problem = None
    try:
        summary = read_summary(run_dir)
        if summary is None:
            problem = f"no {SUMMARY_FILE} (not a finished run?)"
    except SummaryError as exc:
        summary, problem = None, f"unusable summary: {exc}"
    info = read_run_info(run_dir)
    basis = info.get("basis") if isinstance(info, dict) and isinstance(info.get("basis"), dict) else {}
    finished, source = _finished(summary, run_dir)
    return RunPoint(
        label=run_dir.resolve().name,
        path=run_dir,
        finished_at=finished,
        time_source=source,
        report=_link(run_dir, page_dir),
        basis=dict(basis or {}),
        summary=summary,
        problem=problem,
    )


def _suite_settings(s: SuiteSummary) -> dict[str, Any]:
    ks = s.pass_at_k()
    return {"min_reward": s.min_reward, "task_pass": s.task_pass, "repeats (max k)": ks[-1][0] if ks else None}


def _settings(run: RunPoint) -> dict[str, Any]:
    settings = {k: v for k, v in run.basis.items() if k not in ("model_url",)}
    for name, s in run.summary.suites.items() if run.summary else []:
        settings.update({f"{name}: {k}": v for k, v in _suite_settings(s).items()})
    return settings


def mark_changes(runs: list[RunPoint]) -> None:
    """Each run's settings that differ from the run before it (the first run has none)."""
    before: dict[str, Any] | None = None
    for run in runs:
        if run.summary is None:
            continue
        now = _settings(run)
        if before is not None:
            run.changed = [k for k in sorted(set(now) | set(before)) if now.get(k) != before.get(k)]
        before = now


def _suite_point(s: SuiteSummary) -> dict[str, Any]:
    ks = s.pass_at_k()
    totals = s.totals
    gates = []
    for label, gate in s.gates.items():
        try:
            parsed = parse_gate(label)
        except GateSyntaxError:
            continue
        gates.append(
            {"label": label, "metric": parsed.metric_label, "threshold": parsed.threshold, "passed": gate.passed}
        )
    return {
        "mean_reward": s.mean_reward,
        "ci_low": s.ci_low,
        "ci_high": s.ci_high,
        "pass_at_1": dict(ks).get(1),
        "k": ks[-1][0] if ks else None,
        "pass_at_k": ks[-1][1] if ks else None,
        "cost": totals.cost if totals else None,
        "latency_p50_s": totals.latency_p50_s if totals else None,
        "latency_p90_s": totals.latency_p90_s if totals else None,
        "tasks": s.tasks,
        "trials": s.all_trials,
        "verdict": s.verdict,
        "gates": gates,
    }


def history_data(run_dirs: list[Path], page_dir: Path) -> dict[str, Any]:
    """The runs in time order and, per suite, one point per run that judged it."""
    runs = [read_run(Path(d), page_dir) for d in run_dirs]
    runs.sort(key=lambda r: (r.finished_at is None, r.finished_at or "", str(r.path)))
    runs = runs[-MAX_RUNS:]
    mark_changes(runs)
    masker = Masker()
    suites: dict[str, list[dict[str, Any]]] = {}
    out_runs = []
    for index, run in enumerate(runs):
        out_runs.append(
            masker.data(
                {
                    "index": index,
                    "label": clean_text(run.label, 200),
                    "path": str(run.path),
                    "finished_at": run.finished_at,
                    "time_source": run.time_source,
                    "report": run.report,
                    "changed": run.changed,
                    "problem": run.problem,
                    "settings": {k: v for k, v in run.basis.items() if v not in (None, "", [], {})},
                }
            )
        )
        for name, s in run.summary.suites.items() if run.summary else []:
            suites.setdefault(clean_text(name, 400), []).append({"run": index, **masker.data(_suite_point(s))})
    return {"runs": out_runs, "suites": suites}


# -- the charts ---------------------------------------------------------------------------------------------


def _x(frame: _Frame, index: int) -> float:
    return frame.px(index)


def _run_link(run: dict[str, Any], body: str) -> str:
    if run.get("report"):
        return f'<a href="{escape(run["report"])}">{body}</a>'
    return body


def _changed_marks(frame: _Frame, runs: list[dict[str, Any]]) -> list[str]:
    out = []
    for run in runs:
        if run["changed"]:
            x = _n(_x(frame, run["index"]))
            what = ", ".join(run["changed"][:8])
            out.append(
                f'<g class="changed"><line x1="{x}" x2="{x}" y1="{frame.top}" y2="{frame.bottom}"/>'
                f'<text x="{x}" y="{frame.top - 4}" text-anchor="middle">\u25b2</text>'
                f"<title>settings changed before this run: {escape(what)}</title></g>"
            )
    return out


def _thresholds(frame: _Frame, points: list[dict[str, Any]], metrics: tuple[str, ...], cls: str) -> list[str]:
    """Each gate on these metrics as a dashed step line through the runs that had it, its label at its end."""
    lines: dict[str, list[tuple[int, float]]] = {}
    for point in points:
        for gate in point["gates"]:
            if gate["metric"] in metrics:
                lines.setdefault(gate["label"], []).append((point["run"], gate["threshold"]))
    out = []
    for label, steps in lines.items():
        path = []
        for i, (run, threshold) in enumerate(steps):
            x0 = _x(frame, run) - (4 if i == 0 else 0)
            x1 = _x(frame, steps[i + 1][0]) if i + 1 < len(steps) else _x(frame, run) + 4
            y = _n(frame.py(threshold))
            path.append(f"M{_n(x0)} {y}H{_n(x1)}")
        last_run, last = steps[-1]
        out.append(
            f'<g class="threshold {cls}" data-gate="{escape(label)}"><path d="{"".join(path)}"/>'
            f'<text x="{_n(_x(frame, last_run) + 6)}" y="{_n(frame.py(last))}" dy="0.32em">{escape(label)}</text>'
            f"<title>gate {escape(label)}</title></g>"
        )
    return out


def _frame(count: int, low: float, high: float) -> _Frame:
    frame = _Frame((-0.5, max(0.5, count - 0.5)), (low, high), width=WIDTH, height=HEIGHT)
    frame.right = WIDTH - 110  # room for the thresholds' labels
    return frame


def _x_axis(frame: _Frame, runs: list[dict[str, Any]], y_label: str, y_ticks: list[float]) -> list[str]:
    step = max(1, len(runs) // 12)
    shown = [r["index"] for r in runs][::step]
    body = frame.axes("run (oldest first)", y_label, [], y_ticks)
    for index in shown:
        x = _n(_x(frame, index))
        body.append(f'<text class="xl" x="{x}" y="{frame.bottom + 13}" text-anchor="middle">{index + 1}</text>')
    return body


def reward_chart(points: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    """Mean reward per run with its 95% interval, the reward gates' thresholds, settings changes marked."""
    measured = [p for p in points if p["mean_reward"] is not None]
    if not measured:
        return ""
    values = [v for p in measured for v in (p["mean_reward"], p["ci_low"], p["ci_high"]) if v is not None]
    values += [g["threshold"] for p in points for g in p["gates"] if g["metric"] in _REWARD_METRICS]
    low, high = min([0.0, *values]), max([1.0, *values])
    frame = _frame(len(runs), low, high)
    body = _x_axis(frame, runs, "mean reward", _ticks(low, high, 4))
    body += _changed_marks(frame, runs)
    body += _thresholds(frame, points, _REWARD_METRICS, "t-reward")
    path = " ".join(f"{_n(_x(frame, p['run']))},{_n(frame.py(p['mean_reward']))}" for p in measured)
    body.append(f'<g class="series s-at"><polyline points="{path}"/></g>')
    for p in measured:
        x = _n(_x(frame, p["run"]))
        run = runs[p["run"]]
        if p["ci_low"] is not None and p["ci_high"] is not None:
            y0, y1 = _n(frame.py(p["ci_low"])), _n(frame.py(p["ci_high"]))
            body.append(f'<line class="ci" x1="{x}" x2="{x}" y1="{y0}" y2="{y1}"/>')
        ci = f" (95% CI {fmt(p['ci_low'])}\u2013{fmt(p['ci_high'])})" if p["ci_low"] is not None else ""
        title = f"run {p['run'] + 1} {run['label']}: mean reward {fmt(p['mean_reward'])}{ci}"
        dot = (
            f'<circle class="pt{" changed" if run["changed"] else ""}" cx="{x}" cy="{_n(frame.py(p["mean_reward"]))}" '
            f'r="4" data-run="{p["run"]}"><title>{escape(title)}</title></circle>'
        )
        body.append(_run_link(run, dot))
    return _svg(WIDTH, HEIGHT, body, "Mean reward per run with its 95% interval", extra=' data-chart="reward"')


def line_chart(
    points: list[dict[str, Any]],
    runs: list[dict[str, Any]],
    series: list[tuple[str, str, str]],
    y_label: str,
    name: str,
    gate_metrics: tuple[str, ...] = (),
    unit_range: bool = False,
) -> str:
    """Lines of ``series`` ((key, label, css class)) per run; gates on ``gate_metrics`` drawn in."""
    values = [p[key] for p in points for key, _, _ in series if p.get(key) is not None]
    if not values:
        return ""
    thresholds = [g["threshold"] for p in points for g in p["gates"] if g["metric"] in gate_metrics]
    low = 0.0
    high = max([1.0 if unit_range else 0.0, *values, *thresholds]) or 1.0
    frame = _frame(len(runs), low, high)
    body = _x_axis(frame, runs, y_label, _ticks(low, high, 4))
    body += _changed_marks(frame, runs)
    body += _thresholds(frame, points, gate_metrics, "t-pass")
    for i, (key, label, cls) in enumerate(series):
        shown = [p for p in points if p.get(key) is not None]
        if not shown:
            continue
        path = " ".join(f"{_n(_x(frame, p['run']))},{_n(frame.py(p[key]))}" for p in shown)
        body.append(f'<g class="series {cls}"><polyline points="{path}"/>')
        for p in shown:
            run = runs[p["run"]]
            title = f"run {p['run'] + 1} {run['label']}: {label.replace('k', str(p.get('k') or 'k'))} {fmt(p[key], 4)}"
            dot = (
                f'<circle cx="{_n(_x(frame, p["run"]))}" cy="{_n(frame.py(p[key]))}" r="3">'
                f"<title>{escape(title)}</title></circle>"
            )
            body.append(_run_link(run, dot))
        body.append("</g>")
        x = frame.left + 4 + i * 90
        body.append(
            f'<g class="legend {cls}"><line x1="{x}" x2="{x + 14}" y1="{frame.top - 11}" y2="{frame.top - 11}"/>'
            f'<text x="{x + 18}" y="{frame.top - 11}" dy="0.32em">{escape(label)}</text></g>'
        )
    return _svg(WIDTH, HEIGHT, body, f"{y_label} per run", extra=f' data-chart="{name}"')


def suite_charts(points: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, str]:
    pass_gates = tuple(sorted({g["metric"] for p in points for g in p["gates"] if g["metric"].startswith("pass")}))
    return {
        "reward": reward_chart(points, runs),
        "passk": line_chart(
            points,
            runs,
            [("pass_at_1", "pass@1", "s-at"), ("pass_at_k", "pass@k", "s-hat")],
            "share of tasks",
            "passk",
            pass_gates,
            unit_range=True,
        ),
        "cost": line_chart(points, runs, [("cost", "cost", "s-at")], "cost", "cost"),
        "latency": line_chart(
            points,
            runs,
            [("latency_p50_s", "p50", "s-at"), ("latency_p90_s", "p90", "s-hat")],
            "latency (s)",
            "latency",
        ),
    }


def render(data: dict[str, Any]) -> str:
    import jinja2
    from markupsafe import Markup

    from pytest_gym.report.html import _static, embed_json

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_gym.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["num"] = fmt
    charts = {name: {k: Markup(v) for k, v in suite_charts(points, data["runs"]).items()}
              for name, points in data["suites"].items()}  # fmt: skip
    return env.get_template("history.html.j2").render(
        data=data,
        charts=charts,
        data_json=Markup(embed_json(data)),
        style=Markup(_static("report.css") + ".warnc { color: var(--warn); }"),
        generated_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )


def write_history(run_dirs: list[Path], output: Path, json_output: Path | None = None) -> dict[str, Any]:
    """Write the page (and the JSON) for these run folders; returns the data."""
    data = history_data(run_dirs, output.parent)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(output, render(data).encode("utf-8"), fsync=False)
    if json_output is not None:
        json_output.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(json_output, json.dumps(data, indent=2, allow_nan=False).encode(), fsync=False)
    return data
