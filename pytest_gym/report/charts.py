"""The report's charts as inline SVG, drawn here rather than in the browser.

Hand-made SVG instead of a chart library: five simple chart kinds fit in a few hundred lines, weigh
nothing next to a vendored runtime, and read with JavaScript disabled (or blocked by an artifact viewer's
content policy). The page's script only adds clicks (open a task, filter the table); tooltips are SVG
``<title>`` elements. Colours come from the page's stylesheet through class names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

WIDTH = 360
HEIGHT = 200
GRID_WIDTH = 1120
_PAD_LEFT, _PAD_RIGHT, _PAD_TOP, _PAD_BOTTOM = 40, 12, 20, 34
#: A grid this small gets one element (and tooltip) per cell; a bigger one merges runs of a colour into paths.
_CELLS_WITH_TITLES = 800
_BASELINE_ROWS = 30


def fmt(value: Any, digits: int = 3) -> str:
    """A number for people: n/a for none, integers as they are, others to ``digits`` decimals."""
    if value is None or isinstance(value, bool):
        return "n/a" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        return f"{value:.{digits}f}"
    return escape(str(value))


def _n(x: float) -> str:
    """A coordinate, short."""
    return f"{x:.1f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def _svg(width: int, height: int, body: list[str], label: str, cls: str = "chart", extra: str = "") -> str:
    return (
        f'<svg class="{cls}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(label)}"{extra}><title>{escape(label)}</title>{"".join(body)}</svg>'
    )


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]."""
    if high <= low:
        return [low]
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks: list[float] = []
    value = first
    while value <= high + 1e-9 and len(ticks) < 50:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _tick_label(value: float) -> str:
    if abs(value) >= 1e6:
        return f"{value / 1e6:g}M"
    return f"{value / 1e3:g}k" if abs(value) >= 1e3 else f"{value:g}"


class _Frame:
    """A plot area with linear x and y scales and its axes."""

    def __init__(self, x: tuple[float, float], y: tuple[float, float], width: int = WIDTH, height: int = HEIGHT):
        self.x0, self.x1 = x
        self.y0, self.y1 = y
        self.left, self.right = _PAD_LEFT, width - _PAD_RIGHT
        self.top, self.bottom = _PAD_TOP, height - _PAD_BOTTOM

    def px(self, x: float) -> float:
        span = self.x1 - self.x0 or 1.0
        return self.left + (x - self.x0) / span * (self.right - self.left)

    def py(self, y: float) -> float:
        span = self.y1 - self.y0 or 1.0
        return self.bottom - (y - self.y0) / span * (self.bottom - self.top)

    def axes(self, x_label: str, y_label: str, x_ticks: Sequence[float], y_ticks: Sequence[float]) -> list[str]:
        out = ['<g class="axis">']
        for t in y_ticks:
            y = _n(self.py(t))
            out.append(f'<line class="gridline" x1="{self.left}" x2="{self.right}" y1="{y}" y2="{y}"/>')
            out.append(f'<text x="{self.left - 4}" y="{y}" text-anchor="end" dy="0.32em">{_tick_label(t)}</text>')
        for t in x_ticks:
            x = _n(self.px(t))
            out.append(f'<line x1="{x}" x2="{x}" y1="{self.bottom}" y2="{self.bottom + 3}"/>')
            out.append(f'<text x="{x}" y="{self.bottom + 13}" text-anchor="middle">{_tick_label(t)}</text>')
        out.append(f'<line x1="{self.left}" x2="{self.right}" y1="{self.bottom}" y2="{self.bottom}"/>')
        mid = _n((self.left + self.right) / 2)
        out.append(
            f'<text class="label" x="{mid}" y="{self.bottom + 28}" text-anchor="middle">{escape(x_label)}</text>'
        )
        out.append(
            f'<text class="label" transform="translate(11 {_n((self.top + self.bottom) / 2)}) rotate(-90)" '
            f'text-anchor="middle">{escape(y_label)}</text>'
        )
        out.append("</g>")
        return out

    def vline(self, x: float, cls: str, label: str) -> str:
        """A dashed vertical marker, its label kept inside the chart near the edges."""
        at = self.px(x)
        anchor = "end" if at > self.right - 40 else "start" if at < self.left + 40 else "middle"
        px = _n(at)
        return (
            f'<g class="{cls}"><line x1="{px}" x2="{px}" y1="{self.top - 4}" y2="{self.bottom}"/>'
            f'<text x="{px}" y="{self.top - 6}" text-anchor="{anchor}">{escape(label)}</text></g>'
        )


#: The reward axis ends here at most: any real reward is far inside, and spans between the ends stay finite
#: (rewards of +-1.7e308 have a span of 3.4e308, which is infinite in floating point).
AXIS_LIMIT = 1e300


def axis_value(value: float) -> float:
    """``value`` on the reward axis: within +-``AXIS_LIMIT`` (infinite and NaN values at an end, or 0)."""
    if math.isnan(value):
        return 0.0
    return min(AXIS_LIMIT, max(-AXIS_LIMIT, value))


def reward_range(values: Sequence[float]) -> tuple[float, float]:
    """The reward axis: [0, 1] unless some reward lies outside it (never beyond +-``AXIS_LIMIT``)."""
    low = min([0.0, *map(axis_value, values)])
    high = max([1.0, *map(axis_value, values)])
    return low, high


def reward_class(value: float | None, low: float, high: float) -> str:
    """Colour class of a reward: c0 (lowest) to c4 (highest), cx for none (an error)."""
    if value is None:
        return "cx"
    span = high - low or 1.0
    return f"c{min(4, max(0, int((axis_value(value) - low) / span * 5)))}"


def _histogram(values: Sequence[float], low: float, high: float, bins: int) -> list[tuple[float, float, int]]:
    width = (high - low) / bins if high > low else 1.0
    counts = [0] * bins
    for v in values:
        index = min(bins - 1, max(0, int((axis_value(v) - low) / width))) if high > low else 0
        counts[index] += 1
    return [(low + i * width, low + (i + 1) * width, counts[i]) for i in range(bins)]


def reward_histogram(tasks: Sequence[dict[str, Any]], min_reward: float) -> str:
    """How many tasks have each mean reward; a bar of tasks without any reward; the pass line."""
    means = [t["mean"] for t in tasks if t["mean"] is not None]
    errored = sum(1 for t in tasks if t["mean"] is None)
    if not means and not errored:
        return ""
    low, high = reward_range(means)
    bins = _histogram(means, low, high, 10)
    passing = _histogram([m for m in means if m >= min_reward], low, high, 10)
    top = max([c for _, _, c in bins] + [errored, 1])
    frame = _Frame((low, high + (high - low) / 8 if errored else high), (0, top))
    body = frame.axes("task mean reward", "tasks", _ticks(low, high), _ticks(0, top, 4))
    for (lo, hi, count), (_, _, passed) in zip(bins, passing, strict=True):
        if not count:
            continue
        x, x1 = frame.px(lo), frame.px(hi)
        # Stacked: the tasks of the bin that fail (below min_reward) at the bottom, those that pass above.
        for cls, start, size in (("fail", 0, count - passed), ("pass", count - passed, passed)):
            if not size:
                continue
            y0, y1 = frame.py(start), frame.py(start + size)
            word = "passing" if cls == "pass" else "failing"
            body.append(
                f'<rect class="bar {cls}" data-lo="{lo:g}" data-hi="{hi:g}" x="{_n(x + 1)}" y="{_n(y1)}" '
                f'width="{_n(max(1.0, x1 - x - 2))}" height="{_n(y0 - y1)}">'
                f"<title>{size} {word} task{'s' if size != 1 else ''} with mean reward {lo:.2f}\u2013{hi:.2f}"
                "</title></rect>"
            )
    if errored:
        x = frame.px(high + (high - low) / 40)
        y = frame.py(errored)
        body.append(
            f'<rect class="bar cx" data-errored="1" x="{_n(x)}" y="{_n(y)}" '
            f'width="{_n(frame.px(high + (high - low) / 9) - x)}" '
            f'height="{_n(frame.bottom - y)}"><title>{errored} task{"s" if errored != 1 else ""} without a reward '
            f"(every trial errored)</title></rect>"
        )
    body.append(frame.vline(min_reward, "marker", f"min reward {min_reward:g}"))
    return _svg(WIDTH, HEIGHT, body, "Distribution of task mean rewards", extra=' data-chart="rewards"')


def pass_curves(pass_at: dict[str, Any], pass_hat: dict[str, Any]) -> str:
    """pass@k (some of k trials succeed) and pass^k (all of k succeed) against k."""
    series = []
    for name, values, cls in (("pass@k", pass_at, "s-at"), ("pass^k", pass_hat, "s-hat")):
        points = sorted((int(k), float(v)) for k, v in (values or {}).items() if isinstance(v, (int, float)))
        if points:
            series.append((name, points, cls))
    if not series:
        return ""
    max_k = max(k for _, points, _ in series for k, _ in points)
    frame = _Frame((1, max(2, max_k)), (0, 1))
    ks = list(range(1, max_k + 1))
    if len(ks) > 10:
        ks = [int(t) for t in _ticks(1, max_k) if t == int(t) and t >= 1]
    body = frame.axes("k (trials per task)", "share of tasks", ks, [0, 0.25, 0.5, 0.75, 1])
    for name, points, cls in series:
        path = " ".join(f"{_n(frame.px(k))},{_n(frame.py(v))}" for k, v in points)
        body.append(f'<g class="series {cls}"><polyline points="{path}"/>')
        for k, v in points:
            body.append(
                f'<circle cx="{_n(frame.px(k))}" cy="{_n(frame.py(v))}" r="3.5">'
                f"<title>{name[:5]}{k} = {v:.3f}</title></circle>"
            )
        body.append("</g>")
    for i, (name, _, cls) in enumerate(series):
        x = frame.left + 4 + i * 70
        y = frame.top - 11
        body.append(
            f'<g class="legend {cls}"><line x1="{x}" x2="{x + 14}" y1="{y}" y2="{y}"/>'
            f'<text x="{x + 18}" y="{y}" dy="0.32em">{name}</text></g>'
        )
    return _svg(WIDTH, HEIGHT, body, "pass@k and pass^k against k", extra=' data-chart="passk"')


def latency_histogram(latencies: Sequence[float], markers: dict[str, float | None] | None = None) -> str:
    """How long trials took (seconds), with the summary's percentiles (``markers``: label -> seconds) marked."""
    values = sorted(v for v in latencies if v is not None and v >= 0)
    if not values or values[-1] <= 0:
        return ""
    high = values[-1]
    bins = _histogram(values, 0.0, high, 20)
    top = max(c for _, _, c in bins)
    frame = _Frame((0, high), (0, top))
    body = frame.axes("trial latency (s)", "trials", _ticks(0, high), _ticks(0, top, 4))
    for lo, hi, count in bins:
        if not count:
            continue
        x, x1, y = frame.px(lo), frame.px(hi), frame.py(count)
        body.append(
            f'<rect class="bar lat" x="{_n(x + 0.5)}" y="{_n(y)}" width="{_n(max(1.0, x1 - x - 1))}" '
            f'height="{_n(frame.bottom - y)}"><title>{count} trial{"s" if count != 1 else ""}: '
            f"{lo:.3g}\u2013{hi:.3g} s</title></rect>"
        )
    last_px: float | None = None
    for label, value in (markers or {}).items():
        if value is None or value < 0:
            continue
        if last_px is not None and frame.px(value) - last_px <= 50:
            continue  # too close to the marker before it to be read
        body.append(frame.vline(value, "marker", f"{label} {value:.3g}s"))
        last_px = frame.px(value)
    return _svg(WIDTH, HEIGHT, body, "Distribution of trial latency", extra=' data-chart="latency"')


def _grid_order(tasks: Sequence[dict[str, Any]]) -> list[int]:
    """Worst tasks first: those without a reward, then by mean reward, then in dataset order."""
    return sorted(
        range(len(tasks)),
        key=lambda i: (tasks[i]["mean"] is not None, tasks[i]["mean"] or 0.0, tasks[i]["index"] or 0),
    )


def _hatched(cls: str, uid: str) -> str:
    """The fill of a grid cell: its colour class, or the hatch pattern for an error (an attribute, not CSS)."""
    return f' fill="url(#hatch-{uid})"' if cls == "cx" else f' class="{cls}"'


def trial_grid(tasks: Sequence[dict[str, Any]], offset: int, uid: str) -> str:
    """Tasks (columns, worst first) x repeats (rows), a cell per trial coloured by reward, errors hatched.

    ``offset`` is the index of the first of ``tasks`` in the page's task list: the page maps a click on a
    cell back to its task through ``data-order``.
    """
    if not tasks:
        return ""
    repeats = max((tr["r"] for t in tasks for tr in t["trials"]), default=0) + 1
    rewards = [tr["reward"] for t in tasks for tr in t["trials"] if tr.get("reward") is not None]
    low, high = reward_range(rewards)
    order = _grid_order(tasks)
    count = len(tasks)
    size = 4
    candidate: int
    for candidate in (24, 20, 16, 14, 12, 10, 8, 6, 5, 4):
        cols = max(1, min(count, GRID_WIDTH // candidate))
        bands = math.ceil(count / cols)
        if candidate * count <= GRID_WIDTH * 3 and bands * (repeats * candidate + 6) <= 520:
            size = candidate
            break
    cols = max(1, min(count, GRID_WIDTH // size))
    bands = math.ceil(count / cols)
    gap = 6
    band_h = repeats * size + gap
    left = 34 if size >= 10 and repeats <= 12 else 8
    top = 4
    width = left + cols * size + 4
    height = top + bands * band_h + 2
    body = [
        f'<defs><pattern id="hatch-{uid}" width="4" height="4" patternUnits="userSpaceOnUse" '
        f'patternTransform="rotate(45)"><rect width="4" height="4" class="cx"/>'
        f'<line x1="0" y1="0" x2="0" y2="4" class="hatch"/></pattern></defs>'
    ]
    cells = count * repeats
    inner = size - 1 if size >= 8 else size  # small cells touch: a 1px gap would stripe the whole grid
    by_class: dict[str, list[str]] = {}
    for position, task_index in enumerate(order):
        task = tasks[task_index]
        band, col = divmod(position, cols)
        x = left + col * size
        by_repeat = {tr["r"]: tr for tr in task["trials"]}
        for r in range(repeats):
            trial = by_repeat.get(r)
            if trial is None:
                continue  # not run (deselected, cancelled): left blank
            y = top + band * band_h + r * size
            cls = reward_class(trial.get("reward"), low, high)
            if cells <= _CELLS_WITH_TITLES:
                what = f"reward {trial['reward']:g}" if trial.get("reward") is not None else "error"
                fill = _hatched(cls, uid)
                body.append(
                    f'<rect{fill} x="{x}" y="{y}" width="{inner}" height="{inner}">'
                    f"<title>{escape(task['hash'])} r{r}: {what}</title></rect>"
                )
            else:
                by_class.setdefault(cls, []).append(f"M{x} {y}h{inner}v{inner}h-{inner}z")
    for cls, parts in sorted(by_class.items()):
        body.append(f'<path{_hatched(cls, uid)} d="{"".join(parts)}"/>')
    if left > 8:
        for band in range(bands):
            for r in range(repeats):
                label_y = top + band * band_h + r * size + size / 2
                body.append(
                    f'<text class="rlabel" x="{left - 4}" y="{_n(label_y)}" text-anchor="end" dy="0.32em">r{r}</text>'
                )
    order_attr = ",".join(str(offset + i) for i in order)
    extra = (
        f' data-chart="grid" data-order="{order_attr}" data-cell="{size}" data-cols="{cols}" data-left="{left}" '
        f'data-top="{top}" data-band="{band_h}" data-repeats="{repeats}"'
    )
    label = f"{count} tasks x {repeats} repeats, coloured by reward (worst tasks first; hatched: error)"
    return _svg(width, height, body, label, cls="chart grid", extra=extra)


def baseline_view(changed: Sequence[int], tasks: Sequence[dict[str, Any]], offset: int) -> str:
    """Before -> after mean reward per changed task (positions in the page's task list, new failures first,
    then fixes, then the biggest drops)."""
    shown = [
        {"task": i, "before": tasks[i - offset]["baseline"]["before"], "after": tasks[i - offset]["mean"],
         "change": tasks[i - offset]["baseline"].get("change"), "delta": tasks[i - offset]["baseline"]["delta"]}
        for i in changed[:_BASELINE_ROWS]
    ]  # fmt: skip
    if not shown:
        return ""
    values = [v for r in shown for v in (r["before"], r["after"]) if v is not None]
    low, high = reward_range(values)
    row_h = 18
    width = 640
    height = 28 + len(shown) * row_h + 40
    frame = _Frame((low, high), (0, 1), width=width, height=height)
    frame.left = 190
    frame.top = 28
    frame.bottom = height - 40
    body = frame.axes("mean reward: before \u25cb \u2192 after \u25cf", "", _ticks(low, high), [])
    for i, row in enumerate(shown):
        task = tasks[row["task"] - offset]
        y = frame.top + i * row_h + row_h / 2
        change = {"new_failure": "new failure", "fixed": "fixed"}.get(row["change"] or "", "")
        cls = "down" if (row["delta"] or 0) < 0 or row["change"] == "new_failure" else "up"
        label = str(task["hash"]) + (" \u00b7 " + change if change else "")
        body.append(f'<g class="brow {cls}" data-task="{row["task"]}">')
        body.append(f'<text x="{frame.left - 8}" y="{_n(y)}" text-anchor="end" dy="0.32em">{escape(label)}</text>')
        after, before = row["after"], row["before"]
        title = f"{task['hash']}: before {fmt(before)}, after {fmt(after)}" + (f" ({change})" if change else "")
        if before is not None and after is not None:
            body.append(f'<line x1="{_n(frame.px(before))}" x2="{_n(frame.px(after))}" y1="{_n(y)}" y2="{_n(y)}"/>')
        if before is not None:
            body.append(f'<circle class="before" cx="{_n(frame.px(before))}" cy="{_n(y)}" r="4"/>')
        if after is not None:
            body.append(f'<circle class="after" cx="{_n(frame.px(after))}" cy="{_n(y)}" r="4.5"/>')
        body.append(f"<title>{escape(title)}</title></g>")
    if len(changed) > len(shown):
        body.append(
            f'<text class="label" x="{frame.left}" y="{frame.top - 12}">{len(shown)} of {len(changed)} changed tasks '
            "shown (the table lists every one)</text>"
        )
    return _svg(width, height, body, "Per-task mean reward before and after", extra=' data-chart="baseline"')


def confidence_sequence_chart(sequential: dict[str, Any] | None) -> str:
    """--gym-sequential: each check's confidence sequence over the tasks taken (a band), its threshold, and
    the task at which it was decided. Drawn from the summary's ``sequential.checks`` histories."""
    checks = [
        (str(label), check)
        for label, check in ((sequential or {}).get("checks") or {}).items()
        if isinstance(check, dict) and check.get("history")
    ]
    if not checks:
        return ""
    rows = [(int(t), float(lo), float(hi)) for _, c in checks for t, lo, hi in c["history"]]
    low = min([0.0, *(lo for _, lo, _ in rows), *(float(c.get("threshold", 0.0)) for _, c in checks)])
    x_max = max(2, max(t for t, _, _ in rows))
    frame = _Frame((0, x_max), (low, 1.0))
    body = frame.axes("tasks of the seeded order", "metric of the whole suite", _ticks(0, x_max), _ticks(low, 1.0))
    for i, (label, check) in enumerate(checks):
        cls = f"s-seq{i % 4}"
        history = [(int(t), float(lo), float(hi)) for t, lo, hi in check["history"]]
        top = " ".join(f"{_n(frame.px(t))},{_n(frame.py(hi))}" for t, _, hi in history)
        bottom = " ".join(f"{_n(frame.px(t))},{_n(frame.py(lo))}" for t, lo, _ in reversed(history))
        body.append(
            f'<g class="series band {cls}"><polygon points="{top} {bottom}"><title>{escape(label)}: the whole '
            f"suite's value lies in the band at every point, at the gate's level</title></polygon></g>"
        )
        threshold = float(check.get("threshold", 0.0))
        y = frame.py(threshold)
        body.append(
            f'<line class="marker {cls}" x1="{_n(frame.left)}" x2="{_n(frame.right)}" y1="{_n(y)}" y2="{_n(y)}">'
            f"<title>{escape(label)}: threshold {threshold:g}</title></line>"
        )
        if check.get("decided_at"):
            body.append(frame.vline(float(check["decided_at"]), "marker", f"{label}: {check.get('decision')}"))
    return _svg(WIDTH, HEIGHT, body, "Confidence sequences of the sequential gates", extra=' data-chart="sequence"')


def suite_charts(suite: dict[str, Any], tasks: Sequence[dict[str, Any]], offset: int, uid: str) -> dict[str, str]:
    """Every chart of one suite by name; an empty string where there is nothing to show."""
    numbers = suite.get("numbers") or {}
    charts = {
        "rewards": reward_histogram(tasks, suite["min_reward"]),
        "passk": pass_curves(numbers.get("pass_at") or {}, numbers.get("pass_hat") or {}),
        "latency": latency_histogram(
            [tr["latency"] for t in tasks for tr in t["trials"] if tr.get("latency") is not None],
            {q: (suite.get("totals") or {}).get(f"latency_{q}_s") for q in ("p50", "p90", "p99")},
        ),
        "grid": trial_grid(tasks, offset, uid),
    }
    baseline = suite.get("baseline")
    changed = baseline.get("changed") if baseline else None
    charts["baseline"] = baseline_view(changed, tasks, offset) if changed else ""
    charts["sequence"] = confidence_sequence_chart(suite.get("sequential"))
    return charts
