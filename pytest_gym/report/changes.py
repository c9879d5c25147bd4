"""The report's "Changes" section: for each task that flipped or moved against the baseline run, the prompt once
and both runs side by side (each repeat's reward and final answer with the differing words marked, the
trajectory, the verifier's fields).

Which tasks changed is the judge's (the summary's ``changes``, or ``runfolder.diff`` for a run judged before the
comparison existed); this module only lays both run folders' records out next to each other. Text diffs are
word by word (``difflib``), on answers already masked and clipped by the page's builder.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_gym.judge.summary import ChangesSummary, SuiteSummary
from pytest_gym.runfolder.diff import Side, SuiteDiff, changes_summary, diff_runs, read_sides

#: Tasks the section shows in full (the rest are named, each linked to its row in the task table).
MAX_SHOWN = 100
#: Answers longer than this (in words and spaces) are shown without marks: a diff would cost too much.
_MAX_TOKENS = 4000
_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")

#: (record, scored, repeat) -> the page's trial dict (masked, clipped), from the page's builder; one per run folder.
TrialView = Callable[[dict[str, Any], bool, int], dict[str, Any]]


def marked(before: str, after: str) -> tuple[list[list[str]], list[list[str]]]:
    """Both texts as [kind, text] segments: ``same``, ``del`` (only before), ``ins`` (only after)."""
    a, b = _TOKEN.findall(before), _TOKEN.findall(after)
    if len(a) > _MAX_TOKENS or len(b) > _MAX_TOKENS:
        return [["same", before]], [["same", after]]
    left: list[list[str]] = []
    right: list[list[str]] = []

    def add(out: list[list[str]], kind: str, text: str) -> None:
        if not text:
            return
        if out and out[-1][0] == kind:
            out[-1][1] += text
        else:
            out.append([kind, text])

    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            add(left, "same", "".join(a[i1:i2]))
            add(right, "same", "".join(b[j1:j2]))
        else:
            add(left, "del", "".join(a[i1:i2]))
            add(right, "ins", "".join(b[j1:j2]))
    return left, right


def _fields(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[list[Any]]:
    """[field, before, after, differs] for the verifier's fields of the two trials shown first."""
    old, new = dict((before or {}).get("fields") or {}), dict((after or {}).get("fields") or {})
    rows = []
    for key in dict.fromkeys([*old, *new]):
        rows.append([key, old.get(key), new.get(key), old.get(key) != new.get(key)])
    return rows


def _side(side: Side, view: TrialView) -> dict[str, Any]:
    """One run's trials of the task, as the page shows trials."""
    trials = []
    for repeat in sorted(side.records):
        trials.append(view(side.records[repeat], side.rewards.get(repeat) is not None, repeat))
    return {"mean": side.mean, "rewards": side.in_order(), "trials": trials}


def changes_of(
    summary: SuiteSummary | None,
    suite: str,
    run_dir: Path,
    baseline_run: Path | None,
    judged_by: Callable[[str], tuple[float, Any]],
) -> ChangesSummary | None:
    """The suite's changes: the summary's, or the judge's comparison made now for a run judged without one."""
    if summary is not None and summary.changes is not None:
        return summary.changes
    if baseline_run is None:
        return None
    diff = diff_runs(run_dir, baseline_run, judged_by, {suite})
    return changes_summary(diff.suites.get(suite) or SuiteDiff(suite), str(baseline_run))


def section(
    changes: ChangesSummary,
    suite: str,
    run_dir: Path,
    baseline_run: Path | None,
    views: tuple[TrialView, TrialView],
    prompt_of: Callable[[str], str | None],
    task_position: Mapping[str, int],
    mask: Callable[[str], str],
) -> dict[str, Any]:
    """One suite's part of the section (the page's data: ``suites[i]["changes"]``)."""
    before_sides = read_sides(baseline_run) if baseline_run is not None else {}
    after_sides = read_sides(run_dir)
    by_short_before = {h[:12]: side for (_, h), side in before_sides.items()}
    by_short_after = {(s, h[:12]): (h, side) for (s, h), side in after_sides.items()}
    shown = []
    for change in changes.tasks[:MAX_SHOWN]:
        full, after = by_short_after.get((suite, change.hash), ("", None))
        before = before_sides.get((suite, full)) or by_short_before.get(change.hash)
        entry: dict[str, Any] = {
            "hash": change.hash,
            "line": change.line,
            "kind": change.kind,
            "before_mean": change.before_mean,
            "after_mean": change.after_mean,
            "before_rewards": change.before_rewards,
            "after_rewards": change.after_rewards,
            "task": task_position.get(change.hash),
            "prompt": prompt_of(full) if full else None,
        }
        if after is not None and before is not None:
            entry["before"], entry["after"] = _side(before, views[0]), _side(after, views[1])
            pairs = []
            old = {t["r"]: t for t in entry["before"]["trials"]}
            new = {t["r"]: t for t in entry["after"]["trials"]}
            for repeat in sorted(set(old) | set(new)):
                left, right = old.get(repeat), new.get(repeat)
                a = (left or {}).get("answer") or (left or {}).get("error") or ""
                b = (right or {}).get("answer") or (right or {}).get("error") or ""
                segments = marked(a, b)
                pairs.append({"r": repeat, "before": left, "after": right, "marked": segments})
            entry["repeats"] = pairs
            entry["fields"] = _fields(old.get(change.before_repeat or 0), new.get(change.after_repeat or 0))
        else:  # the baseline run's folder was not given: the summary's one-line answers
            entry["repeats"] = []
            segments = marked(change.before_answer, change.after_answer)
            entry["summary_answers"] = {"before": segments[0], "after": segments[1]}
        shown.append(entry)
    return {
        "baseline_run": mask(changes.baseline_run),
        "folder_read": baseline_run is not None,
        "shared_tasks": changes.shared_tasks,
        "new_failures": changes.new_failures,
        "fixed": changes.fixed,
        "moved": changes.moved,
        "tasks": shown,
        "more": [
            {"hash": c.hash, "kind": c.kind, "task": task_position.get(c.hash)} for c in changes.tasks[MAX_SHOWN:]
        ],
        "not_listed": changes.not_listed,
    }
