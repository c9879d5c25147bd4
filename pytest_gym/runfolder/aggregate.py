"""Gym's aggregate metrics computed here, for a run folder no Gym is there to ask: a merge of shards.

``gym eval compare`` reads a run's ``rollouts_aggregate_metrics.json``; a run normally gets it from Gym's
``/aggregate_metrics``. A merged run has no Gym, and per-shard aggregates do not add up (medians, standard
deviations, t-intervals), so ``aggregate_metrics`` recomputes them from the records, as
``nemo_gym/reward_profile.py`` of nemo-gym 0.7.0 does (``compute_aggregate_metrics`` with
``RewardProfiler.profile_from_data``, ``compute_perf_summary`` and, when the environment reports pass@k,
``compute_pass_majority_metrics`` with the default ``accuracy = reward`` score): per-task
(``group_level_metrics``), per-agent (``agent_metrics``: mean/max/min/median/std of every numeric field, the
across-repeats statistics, ``num_repeats``) and per-repeat (``repeat_level_metrics``) numbers. Checked
against Gym's own functions in ``tests/session/test_merge.py`` (equal to 1e-9).

Not reproduced: what an environment's own ``compute_metrics`` adds beyond pass@k with the reward as the
score (mcqa's ``majority@k`` and ``no_answer``, for instance) and its own ``get_key_metrics`` choice;
``key_metrics`` keeps the keys of the shards' own key metrics that were recomputed, else Gym's default
(every ``mean/*``).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_gym.core.numbers import is_int, is_number
from pytest_gym.judge.intervals import t_ppf
from pytest_gym.runfolder.records import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY

TASK = TASK_INDEX_KEY
ROLLOUT = ROLLOUT_INDEX_KEY
AGENT_REF = "agent_ref"
MASK = "mask_sample"
_STATS = ("mean", "max", "min", "median", "std")
_NAN = float("nan")
#: ``nemo_gym/metrics_config.py``: what is not a primary metric (repeat aggregation skips it).
_EXCLUDED_PREFIXES = tuple(f"{s}/" for s in ("max", "min", "median", "std", "sem", "se", "p25", "p75"))
_EXCLUDED_PREFIXES += ("ci_low_95/", "ci_high_95/", "histogram/")
_PASS_SUFFIXES = ("/std_dev_across_runs", "/std_err_across_runs", "/avg_sample_std_dev")
_EXCLUDED_SUFFIXES = (
    "/max", "/min", "/median", "/p5", "/p25", "/p75", "/p95", "/ci_low_95", "/ci_high_95", "/ci_lower",
    "/ci_upper", "_ci_lower", "_ci_upper", "_ci95_lower", "_ci95_upper", "/_ng_attempt_index", *_PASS_SUFFIXES,
)  # fmt: skip
_EXCLUDED_NAMES = frozenset(
    {TASK, ROLLOUT, "_ng_attempt_index", "sample_count", "missing_count", "num_repeats", "token_usage_version"}
)
_ACROSS = "_across_repeats/"
_NOT_MEASURED = frozenset({MASK})


def _is_primary(name: str) -> bool:
    return (
        name not in _EXCLUDED_NAMES
        and not name.startswith(_EXCLUDED_PREFIXES)
        and not name.endswith(_EXCLUDED_SUFFIXES)
        and _ACROSS not in name
    )


def _number(value: Any) -> bool:
    return is_number(value)


def _numeric_fields(items: Iterable[tuple[str, Any]], skip: frozenset[str] = frozenset()) -> dict[str, float]:
    """Gym's numeric view of a result: numbers as they are, booleans as 0/1, no ``_``-keys."""
    out: dict[str, Any] = {}
    for key, value in items:
        if key.startswith("_") or key in skip:
            continue
        if isinstance(value, bool):
            out[key] = int(value)
        elif isinstance(value, (int, float)):
            out[key] = value
    return out


def _sample_std(values: Sequence[float]) -> float:
    """pandas' ``std()`` (ddof 1): NaN below two values."""
    n = len(values)
    if n < 2:
        return _NAN
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def _quantile(values: Sequence[float], q: float) -> float:
    """pandas' ``quantile`` (linear interpolation between closest ranks)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def _describe(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> dict[str, Any]:
    """``RewardProfiler.describe_dataframe`` of one group, serialised (no histograms, no NaN)."""
    described: dict[str, dict[str, Any]] = {stat: {} for stat in _STATS}
    present: dict[str, bool] = {}
    for column in columns:
        values = [row[column] for row in rows if column in row]
        present[column] = len(values) == len(rows)
        described["std"][column] = _sample_std(values)
        if not values:
            continue
        described["mean"][column] = sum(values) / len(values)
        described["max"][column] = max(values)
        described["min"][column] = min(values)
        described["median"][column] = statistics.median(values)
    if all(math.isnan(v) for v in described["std"].values()):
        # Gym: "Std is more interpretable using 0 rather than NaN for no std" (columns with no gap only).
        for column in columns:
            if present[column]:
                described["std"][column] = 0.0
    out: dict[str, Any] = {}
    for stat in _STATS:
        for column, value in described[stat].items():
            if not (isinstance(value, float) and math.isnan(value)):
                out[f"{stat}/{column}"] = value
    return out


def _interval(mean: float, se: float, n: int) -> tuple[float, float] | None:
    """``RewardProfiler._confidence_interval``: a 95% t-interval; a point when every value is equal."""
    if n <= 1:
        return None
    if se == 0:
        return mean, mean
    half = t_ppf(0.975, n - 1) * se
    return mean - half, mean + half


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    n = len(values)
    mean = float(sum(values) / n)
    std = float(_sample_std(values)) if n > 1 else 0.0
    return mean, std, std / n**0.5


def _repeat_level(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """``RewardProfiler._compute_repeat_level_metrics`` for one agent (none with a single repeat)."""
    repeats = sorted({row[ROLLOUT] for row in rows})
    if len(repeats) < 2:
        return []
    total_tasks = len({row[TASK] for row in rows})
    by_repeat: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_repeat[row[ROLLOUT]].append(row)
    entries = []
    for repeat in repeats:
        group = by_repeat[repeat]
        present = len({row[TASK] for row in group})
        entry: dict[str, Any] = {ROLLOUT: int(repeat), "sample_count": present, "missing_count": total_tasks - present}
        for column in sorted(columns):
            values = [row[column] for row in group if column in row]
            if not values:
                continue
            mean, std, sem = _spread(values)
            entry.update(
                {
                    f"mean/{column}": mean,
                    f"median/{column}": float(statistics.median(values)),
                    f"std/{column}": std,
                    f"sem/{column}": sem,
                    f"min/{column}": float(min(values)),
                    f"max/{column}": float(max(values)),
                    f"p25/{column}": _quantile(values, 0.25),
                    f"p75/{column}": _quantile(values, 0.75),
                }
            )
            ci = _interval(mean, sem, len(values))
            if ci:
                entry[f"ci_low_95/{column}"], entry[f"ci_high_95/{column}"] = ci
        entries.append(entry)
    return entries


def _across_repeats(repeat_level: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``RewardProfiler._aggregate_repeat_level_metrics`` for one agent: each repeat's estimate as one sample."""
    if not repeat_level:
        return {}
    columns: list[str] = []
    for entry in repeat_level:
        columns += [k for k, v in entry.items() if k not in columns and _number(v) and _is_primary(k)]
    out: dict[str, Any] = {}
    for column in columns:
        values = [entry[column] for entry in repeat_level if _number(entry.get(column))]
        if not values:
            continue
        mean, std, se = _spread(values)
        out[f"mean{_ACROSS}{column}"] = mean
        out[f"median{_ACROSS}{column}"] = float(statistics.median(values))
        out[f"std{_ACROSS}{column}"] = std
        out[f"min{_ACROSS}{column}"] = float(min(values))
        out[f"max{_ACROSS}{column}"] = float(max(values))
        out[f"se{_ACROSS}{column}"] = se
        ci = _interval(mean, se, len(values))
        if ci:
            out[f"ci_low_95{_ACROSS}{column}"], out[f"ci_high_95{_ACROSS}{column}"] = ci
    return out


def _rollout_info(result: Mapping[str, Any], position: tuple[Any, Any]) -> dict[str, Any]:
    """``RewardProfiler.rollout_info_from_result`` (the mask flag is not a field)."""
    task, repeat = position
    info: dict[str, Any] = {"rollout_id": f"{task}:{repeat}", TASK: task, ROLLOUT: repeat}
    if "reward" in result:
        info["reward"] = result.get("reward")
    usage = (result.get("response") or {}).get("usage") or {}
    for key, value in usage.items():
        if isinstance(value, bool):
            info[key] = int(value)
        elif isinstance(value, (int, float)):
            info[key] = value
    for key, value in result.items():
        if key.startswith("_") or key in ("reward", "response", MASK):
            continue
        if isinstance(value, bool):
            info[key] = int(value)
        elif isinstance(value, (int, float)):
            info[key] = value
    return info


def perf_summary(records: Sequence[Mapping[str, Any]], total: int) -> dict[str, Any] | None:
    """``compute_perf_summary``: the ``perf_summary`` block from the records' ``ng_perf``, or None without any."""
    perf = [r["ng_perf"] for r in records if isinstance(r.get("ng_perf"), dict)]
    if total <= 0 or not perf:
        return None

    def values(key: str) -> list[float]:
        return [p[key] for p in perf if _number(p.get(key))]

    def stat(vals: list[float], name: str) -> float:
        if name == "mean":
            return statistics.fmean(vals)
        if name == "median":
            return float(statistics.median(vals))
        if name == "total":
            return float(sum(vals))
        if name == "std":
            return statistics.pstdev(vals)
        if name == "min":
            return float(min(vals))
        if name == "max":
            return float(max(vals))
        return _quantile(vals, int(name[1:]) / 100)

    token_key = "token_observability_coverage"
    coverage = sum(1 for p in perf if _number(p.get(token_key)) and p[token_key] > 0)
    summary: dict[str, Any] = {
        "overall_observability_coverage": len(perf) / total,
        "token_observability_coverage": coverage / total,
    }
    for field in ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens"):
        vals = values(field)
        for name in ("mean", "median", "total") if vals else ():
            summary[f"{name}_{field}"] = stat(vals, name)
    turns = values("num_turns")
    for name in ("mean", "median", "std", "min", "p90", "max") if turns else ():
        summary[f"{name}_num_turns"] = stat(turns, name)
    per_turn = [
        p["completion_tokens"] / p["num_turns"]
        for p in perf
        if _number(p.get("completion_tokens")) and _number(p.get("num_turns")) and p["num_turns"] > 0
    ]
    if per_turn:
        summary["mean_tokens_per_turn"] = stat(per_turn, "mean")
        summary["median_tokens_per_turn"] = stat(per_turn, "median")
    latency = values("total_latency_ms")
    for name in ("p50", "p90", "p99", "mean") if latency else ():
        summary[f"total_latency_{name}_ms"] = stat(latency, name)
    return summary


def pass_majority(tasks: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """``compute_pass_majority_metrics(tasks)`` with Gym's default score (``accuracy`` = reward), no answer key."""
    if not tasks:
        return {}
    scores = [[int(r["reward"]) if isinstance(r["reward"], bool) else r["reward"] for r in task] for task in tasks]
    max_k = max(len(task) for task in scores)
    metrics: dict[str, Any] = {}
    for k in range(1, max_k + 1):
        passes = []
        for vals in scores:
            if not vals or k > len(vals):
                continue
            if all(v in (0, 1) for v in vals):
                wrong = sum(1 for v in vals if not v)
                passes.append(1.0 if wrong < k else 1.0 - math.comb(wrong, k) / math.comb(len(vals), k))
            else:
                passes.append(max(vals[:k]))
        if passes:
            metrics[f"pass@{k}/accuracy"] = 100.0 * sum(passes) / len(passes)
        averages = [sum(vals[:k]) / len(vals[:k]) for vals in scores if vals[:k]]
        if averages:
            metrics[f"pass@1[avg-of-{k}]/accuracy"] = 100.0 * sum(averages) / len(averages)
    per_run = []
    for run in range(max_k):
        run_scores = [vals[run] for vals in scores if run < len(vals)]
        if run_scores:
            per_run.append(100.0 * sum(run_scores) / len(run_scores))
    metrics["per_sample_aggregate"] = {"accuracy": per_run} if per_run else {}
    for k in range(2, max_k + 1):
        runs = per_run[:k]
        if len(runs) >= 2:
            mean = sum(runs) / len(runs)
            std = math.sqrt(sum((x - mean) ** 2 for x in runs) / (len(runs) - 1))
            metrics[f"pass@1[avg-of-{k}]/accuracy/std_dev_across_runs"] = std
            metrics[f"pass@1[avg-of-{k}]/accuracy/std_err_across_runs"] = std / math.sqrt(len(runs))
    return metrics


def aggregate_metrics(
    verify_responses: Sequence[Mapping[str, Any]],
    *,
    with_pass_at_k: bool = False,
    key_metric_names: Iterable[str] = (),
) -> dict[str, Any]:
    """Gym's ``/aggregate_metrics`` answer for one environment server's ``verify_responses``.

    ``verify_responses`` is ``aggregate_request_from_records(records)["verify_responses"]``. Raises
    ValueError where Gym's aggregation fails too (two records of one task and repeat).
    """
    empty: dict[str, Any] = {"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {}, "perf_summary": None}
    if not verify_responses:
        return {**empty, "repeat_level_metrics": []}
    scored = [r for r in verify_responses if not r.get(MASK)]
    masked = [r for r in verify_responses if r.get(MASK)]
    coverage: dict[str, Any] = {}
    if masked:
        all_tasks = {r.get(TASK, 0) for r in verify_responses}
        measured = {r.get(TASK, 0) for r in scored}
        coverage = {
            "coverage/measured_rollouts": len(scored),
            "coverage/masked_rollouts": len(masked),
            "coverage/measured_tasks": len(measured),
            "coverage/fully_masked_tasks": len(all_tasks - measured),
        }
    perf = perf_summary(verify_responses, len(verify_responses))
    if not scored:
        return {**empty, "agent_metrics": dict(coverage), "key_metrics": dict(coverage), "perf_summary": perf}

    # Gym's select_measured drops the mask flag from what it measures; records are read, never copied.
    ordered: list[tuple[tuple[Any, Any], Mapping[str, Any]]] = []
    keys: set[tuple[Any, Any]] = set()
    for record in scored:
        key = (record.get(TASK, 0), record.get(ROLLOUT, 0))
        if not (is_int(key[0]) and is_int(key[1])):  # a hand-edited record: "3", true, [1]
            raise ValueError(f"a task or repeat index that is not a whole number ({key[0]!r}, {key[1]!r})")
        if key in keys:
            raise ValueError(f"two records for task {key[0]} repeat {key[1]}: Gym's aggregation refuses them too")
        keys.add(key)
        ordered.append((key, record))
    ordered.sort(key=lambda pair: pair[0])

    rows: list[dict[str, Any]] = []  # Gym's data frame: one numeric row per rollout
    columns: list[str] = []
    seen: set[str] = set()
    infos: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for key, record in ordered:
        infos[key[0]].append(_rollout_info(record, key))
        usage = (record.get("response") or {}).get("usage") or {}
        pairs = [*record.items(), *usage.items()] if isinstance(usage, dict) else list(record.items())
        numeric = _numeric_fields(pairs, skip=_NOT_MEASURED)
        for column in numeric:
            if column not in seen:
                seen.add(column)
                columns.append(column)
        rows.append({TASK: key[0], ROLLOUT: key[1], **numeric})

    by_task: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_task[row[TASK]].append(row)
    groups = []
    for task in sorted(by_task):
        group: dict[str, Any] = {TASK: task, **_describe(by_task[task], columns)}
        count = len(infos[task])
        group["sample"] = {AGENT_REF: {"name": "agent"}}
        group["num_rollouts"] = count
        group["expected_num_rollouts"] = count
        group["missing_num_rollouts"] = 0
        group["reward_profile_completion_pct"] = 100.0
        group["rollout_infos"] = sorted(infos[task], key=lambda info: info[ROLLOUT])
        groups.append(group)

    agent = _describe(rows, columns)
    repeat_level = _repeat_level(rows, columns)
    agent.update(_across_repeats(repeat_level))
    agent.update(coverage)
    if with_pass_at_k and all(_number(r.get("reward")) or isinstance(r.get("reward"), bool) for r in scored):
        tasks: dict[Any, list[Mapping[str, Any]]] = defaultdict(list)
        for record in scored:
            tasks[record.get(TASK, 0)].append(record)
        agent.update(pass_majority([tasks[t] for t in sorted(tasks)]))
    agent["num_repeats"] = len({r.get(ROLLOUT, 0) for r in verify_responses})
    wanted = [name for name in key_metric_names if name in agent]
    key_metrics = {name: agent[name] for name in wanted} or {k: v for k, v in agent.items() if k.startswith("mean/")}
    key_metrics.update(coverage)
    return {
        "group_level_metrics": groups,
        "agent_metrics": agent,
        "key_metrics": key_metrics,
        "perf_summary": perf,
        "repeat_level_metrics": repeat_level,
    }
