"""Shard run folders brought together: checked, indexed, and written out as one Gym-format run folder.

``pytest --gym-merge DIR ...`` and ``python -m pytest_gym merge DIR ... -o OUT`` share this module:

- ``read_shard_folders`` refuses what cannot be one run (a folder given twice, shards of different splits,
  settings, repeats or datasets), naming the folders and what differs;
- ``index_shards`` finds every finished trial by (task hash, repeat) without keeping the records in memory
  (an offset per record; ``take`` reads one back), and refuses a task found in two folders;
- ``write_merged`` streams the chosen trials' rollouts, failure rows and materialized inputs into one folder
  and recomputes Gym's aggregate metrics for it (``pytest_gym.runfolder.aggregate``).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.shard import shard_of
from pytest_gym.runfolder.aggregate import aggregate_metrics
from pytest_gym.runfolder.layout import AGGREGATE_FILE, FAILURES_FILE, MATERIALIZED_FILE, ROLLOUTS_FILE, RUN_INFO_FILE
from pytest_gym.runfolder.records import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY, RecordError, parse_record, stamps
from pytest_gym.runfolder.rollouts import (
    aggregate_entry,
    aggregate_request_from_records,
    order_key,
    write_aggregate_metrics,
)
from pytest_gym.runfolder.runinfo import (
    Reusable,
    basis_differences,
    file_sha256,
    read_run_info,
    run_info_problem,
    write_run_info,
)

Key = tuple[str, int]
_SHOW = 5


class MergeError(ValueError):
    """Shard folders that cannot be merged; the message names the folders and what to do."""


@dataclass
class ShardFolder:
    """One shard's run folder and what its ``pytest_gym_run.json`` says."""

    path: Path
    info: dict[str, Any]
    index: int
    count: int

    @property
    def shard(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def label(self) -> str:
        return f"{self.path} (shard {self.shard})"

    @property
    def datasets(self) -> list[dict[str, str]]:
        return list(self.info.get("datasets") or [])

    @property
    def repeats(self) -> int:
        return int(self.info.get("repeats") or 1)


def _shard_folder(path: Path) -> ShardFolder:
    if not path.is_dir():
        raise MergeError(f"pytest-gym merge: {path} is not a folder; give each shard job's run folder (--gym-run-dir)")
    info = read_run_info(path)
    if info is None:
        raise MergeError(
            f"pytest-gym merge: {path} has no readable {RUN_INFO_FILE}: not a pytest-gym run folder "
            "(give each shard job's --gym-run-dir, as uploaded)"
        )
    problem = run_info_problem(info)
    if problem is not None:
        raise MergeError(
            f"pytest-gym merge: {path / RUN_INFO_FILE}: {problem}; not a run info pytest-gym wrote (edited, or from "
            "an untrusted source?): give each shard job's run folder as it uploaded it"
        )
    shard = str(info.get("shard") or "")
    index, _, count = shard.partition("/")
    if not (index.isdigit() and count.isdigit()):
        raise MergeError(
            f"pytest-gym merge: {path} was not run as a shard (no --gym-shard in its {RUN_INFO_FILE}); "
            "run each part with --gym-shard I/N (a whole run is --gym-shard 1/1)"
        )
    return ShardFolder(path, info, int(index), int(count))


def _datasets_text(folder: ShardFolder) -> str:
    return ", ".join(f"{d.get('path')} (sha256 {str(d.get('sha256'))[:12]})" for d in folder.datasets) or "none"


def read_shard_folders(paths: Sequence[Path]) -> list[ShardFolder]:
    """The folders in shard order, or MergeError saying why they are not parts of one run."""
    if not paths:
        raise MergeError("pytest-gym merge: no shard run folders given")
    seen: dict[Path, Path] = {}
    for path in paths:
        resolved = Path(os.path.realpath(path))
        if resolved in seen:
            raise MergeError(f"pytest-gym merge: {path} is given twice; give each shard's run folder once")
        seen[resolved] = path
    folders = [_shard_folder(Path(p)) for p in paths]
    first = folders[0]
    by_index: dict[int, ShardFolder] = {}
    for folder in folders:
        if folder.count != first.count:
            raise MergeError(
                f"pytest-gym merge: {first.label} and {folder.label} come from different splits "
                f"({first.count} and {folder.count} shards); merge the shards of one split"
            )
        other = by_index.get(folder.index)
        if other is not None:
            raise MergeError(
                f"pytest-gym merge: shard {folder.shard} is given twice: {other.path} and {folder.path} "
                "(a copied or re-run folder?); give each shard's run folder once"
            )
        by_index[folder.index] = folder
        if folder.info.get("digest") != first.info.get("digest"):
            differ = basis_differences(first.info.get("basis") or {}, folder.info.get("basis") or {})
            raise MergeError(
                f"pytest-gym merge: {first.label} and {folder.label} were run with different settings "
                f"({', '.join(differ) or 'settings digest'} differ); run every shard with the same settings"
            )
        if folder.repeats != first.repeats:
            raise MergeError(
                f"pytest-gym merge: {first.label} ran {first.repeats} repeats, {folder.label} {folder.repeats}; "
                "run every shard with the same --gym-repeats"
            )
        if folder.datasets != first.datasets:
            raise MergeError(
                f"pytest-gym merge: the shards ran different datasets: {first.label}: {_datasets_text(first)}; "
                f"{folder.label}: {_datasets_text(folder)}; run every shard on the same datasets"
            )
    return sorted(folders, key=lambda f: f.index)


@dataclass
class ShardRecords(Reusable):
    """Every finished trial of the shards, by (task hash, repeat): where its record is, read back on demand."""

    folders: list[ShardFolder] = field(default_factory=list)
    rollouts: dict[Key, tuple[int, int, int]] = field(default_factory=dict)
    failures: dict[Key, tuple[int, int, int]] = field(default_factory=dict)
    #: Per folder: (task index, repeat) -> task hash, to find a materialized input's trial.
    by_index: list[dict[tuple[int, int], str]] = field(default_factory=list)
    _fds: dict[tuple[int, str], int] = field(default_factory=dict, repr=False)

    def _read(self, name: str, where: tuple[int, int, int]) -> dict[str, Any] | None:
        folder, offset, length = where
        fd = self._fds.get((folder, name))
        if fd is None:
            fd = self._fds[(folder, name)] = os.open(self.folders[folder].path / name, os.O_RDONLY | os.O_CLOEXEC)
        return _record(self.folders[folder].path / name, 0, os.pread(fd, length, offset))

    def take(self, task_hash: str, repeat: int) -> dict[str, Any] | None:
        where = self.rollouts.get((task_hash, repeat))
        return self._read(ROLLOUTS_FILE, where) if where else None

    def failure(self, task_hash: str, repeat: int) -> dict[str, Any] | None:
        where = self.failures.get((task_hash, repeat))
        return self._read(FAILURES_FILE, where) if where and (task_hash, repeat) not in self.rollouts else None

    def __contains__(self, key: object) -> bool:
        return key in self.rollouts or key in self.failures

    def keys(self) -> set[Key]:
        return set(self.rollouts) | set(self.failures)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of every line of a jsonl file (none if it does not exist)."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        offset = 0
        for line in fh:
            yield offset, line
            offset += len(line)


def _record(path: Path, number: int, line: bytes) -> dict[str, Any] | None:
    try:
        return parse_record(path, number, line)
    except RecordError as exc:
        raise MergeError(f"pytest-gym merge: {exc}") from None


def index_shards(folders: Sequence[ShardFolder]) -> ShardRecords:
    """Where every finished trial of ``folders`` is; MergeError when a task is in two of them."""
    records = ShardRecords(folders=list(folders), by_index=[{} for _ in folders])
    owner: dict[str, int] = {}
    overlaps: list[tuple[str, int, int]] = []
    for number, folder in enumerate(folders):
        for name, target in ((ROLLOUTS_FILE, records.rollouts), (FAILURES_FILE, records.failures)):
            for line_number, (offset, line) in enumerate(_lines(folder.path / name), start=1):
                record = _record(folder.path / name, line_number, line)
                found = stamps(record) if record is not None else None
                if found is None or found.key is None:
                    continue
                task_hash, repeat = found.key
                first = owner.setdefault(task_hash, number)
                if first != number:
                    overlaps.append((task_hash, first, number))
                    continue
                target.setdefault((task_hash, repeat), (number, offset, len(line)))
                if found.task_index is not None:
                    records.by_index[number][(found.task_index, repeat)] = task_hash
    if overlaps:
        task_hash, first, second = overlaps[0]
        tasks = len({o[0] for o in overlaps})
        raise MergeError(
            f"pytest-gym merge: {tasks} tasks are in more than one shard folder, e.g. task {task_hash[:12]} in "
            f"{folders[first].label} and {folders[second].label}; each task must come from exactly one shard "
            "(overlapping folders: one given twice under two names, or shards of different splits)"
        )
    shards = ", ".join(f.shard for f in folders)
    records.note = f"merge: {len(records.keys())} trials from {len(folders)} shard run folders (shards {shards})"
    return records


@dataclass(frozen=True)
class MissingTrial:
    """A trial the datasets ask for that no shard folder holds."""

    label: str
    task_hash: str
    repeat: int


def missing_message(missing: Sequence[MissingTrial], folders: Sequence[ShardFolder], fix: str) -> str:
    """Which trials no shard ran, which shards they belong to, and what to do."""
    tasks = sorted({m.task_hash for m in missing})
    count = folders[0].count if folders else 1
    wanted = sorted({shard_of(h, count) for h in tasks})
    given = {f.index for f in folders}
    absent = [i for i in wanted if i not in given]
    ran = [f for f in folders if f.index in wanted]
    shown = ", ".join(m.label for m in missing[:_SHOW])
    shown += f" and {len(missing) - _SHOW} more" if len(missing) > _SHOW else ""
    parts = [f"{len(missing)} trials ({len(tasks)} tasks) were run by no shard given: {shown}."]
    if absent:
        names = ", ".join(f"{i}/{count}" for i in absent)
        parts.append(f"They belong to shard{'s' if len(absent) > 1 else ''} {names}, whose run folder was not given.")
    if ran:
        parts.append(
            "Shard folders without all of their trials (an interrupted or cancelled job?): "
            + ", ".join(f.label for f in ran)
            + "; rerun that shard (--gym-resume keeps what finished) and merge again."
        )
    parts.append(fix)
    return "pytest-gym merge: " + " ".join(parts)


@dataclass
class MergeResult:
    rollouts: int = 0
    failures: int = 0
    materialized: int = 0
    notes: list[str] = field(default_factory=list)


def _shard_aggregates(folders: Sequence[ShardFolder]) -> dict[str, tuple[set[str], set[str]]]:
    """Per agent, the metric names (agent metrics, key metrics) the shards' own Gym aggregates hold."""
    names: dict[str, tuple[set[str], set[str]]] = defaultdict(lambda: (set(), set()))
    for folder in folders:
        try:
            entries = json.loads((folder.path / AGGREGATE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for entry in entries if isinstance(entries, list) else []:
            ref = entry.get("agent_ref") if isinstance(entry, dict) else None
            if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                agent, key = names[ref["name"]]
                agent.update(entry.get("agent_metrics") or {})
                key.update(entry.get("key_metrics") or {})
    return names


def _measured(record: dict[str, Any]) -> dict[str, Any]:
    """What Gym's aggregation reads of a record (the body it would POST, numbers only): 200k fit in memory."""
    light = aggregate_request_from_records([record])["verify_responses"][0]
    keep = (TASK_INDEX_KEY, ROLLOUT_INDEX_KEY, "mask_sample", "response", "ng_perf", "reward")
    return {k: v for k, v in light.items() if k in keep or (not k.startswith("_") and isinstance(v, (int, float)))}


def _aggregate(
    by_agent: dict[str, list[dict[str, Any]]], folders: Sequence[ShardFolder], out_dir: Path, result: MergeResult
) -> None:
    """Gym's aggregate metrics of the merged records, per agent (no Gym to ask: computed here)."""
    if not by_agent:
        return
    shard_names = _shard_aggregates(folders)
    entries = []
    for agent, group in sorted(by_agent.items()):
        metric_names, key_names = shard_names.get(agent, (set(), set()))
        try:
            group.sort(key=order_key)
            metrics = aggregate_metrics(
                group,  # already stripped as Gym's collector would (_measured); sorted as it sends them
                with_pass_at_k=any(name.startswith("pass@") for name in metric_names),
                key_metric_names=sorted(key_names),
            )
        except ValueError as exc:
            result.notes.append(f"merge: aggregate metrics of {agent} not computed: {exc}")
            continue
        entries.append(aggregate_entry(agent, metrics))
        lost = sorted(n for n in metric_names - set(metrics["agent_metrics"]) if "_across_repeats/" not in n)
        if lost:
            shown = ", ".join(lost[:6]) + (f" and {len(lost) - 6} more" if len(lost) > 6 else "")
            result.notes.append(
                f"merge: {AGGREGATE_FILE} of {agent} is computed without a Gym; the environment's own metrics "
                f"{shown} are not in it (they are in each shard's file)"
            )
    if entries:
        write_aggregate_metrics(out_dir, entries)


def write_merged(
    records: ShardRecords,
    out_dir: Path,
    selected: Callable[[Key], bool] | None = None,
    run_info: dict[str, Any] | None = None,
) -> MergeResult:
    """Write the chosen trials (all by default) of the shards into ``out_dir``, in Gym's layout.

    Records are copied byte for byte, shard after shard; ``rollouts_aggregate_metrics.json`` is recomputed.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    chosen = selected or (lambda key: True)
    result = MergeResult()
    keep_rollouts: list[set[int]] = [set() for _ in records.folders]
    keep_failures: list[set[int]] = [set() for _ in records.folders]
    kept: set[Key] = set()
    for key, (number, offset, _) in records.rollouts.items():
        if chosen(key):
            keep_rollouts[number].add(offset)
            kept.add(key)
    for key, (number, offset, _) in records.failures.items():
        if key not in records.rollouts and chosen(key):
            keep_failures[number].add(offset)
            kept.add(key)
    by_agent: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with (
        (out_dir / ROLLOUTS_FILE).open("ab") as rollouts,
        (out_dir / FAILURES_FILE).open("ab") as failures,
        (out_dir / MATERIALIZED_FILE).open("ab") as materialized,
    ):
        for number, folder in enumerate(records.folders):
            wanted = keep_rollouts[number]
            for offset, line in _lines(folder.path / ROLLOUTS_FILE) if wanted else ():
                if offset not in wanted:
                    continue
                rollouts.write(line if line.endswith(b"\n") else line + b"\n")
                result.rollouts += 1
                record = _record(folder.path / ROLLOUTS_FILE, 0, line) or {}
                by_agent[stamps(record).agent or ""].append(_measured(record))
            wanted = keep_failures[number]
            for offset, line in _lines(folder.path / FAILURES_FILE) if wanted else ():
                if offset in wanted:
                    failures.write(line if line.endswith(b"\n") else line + b"\n")
                    result.failures += 1
            index = records.by_index[number]
            written: set[tuple[int, int]] = set()
            for line_number, (_, line) in enumerate(_lines(folder.path / MATERIALIZED_FILE), start=1):
                row = _record(folder.path / MATERIALIZED_FILE, line_number, line)
                found = stamps(row) if row is not None else None
                if found is None or found.task_index is None or found.repeat is None:
                    continue
                position = (found.task_index, found.repeat)
                task_hash = index.get(position)
                if task_hash is None or (task_hash, position[1]) not in kept or position in written:
                    continue
                written.add(position)
                materialized.write(line if line.endswith(b"\n") else line + b"\n")
                result.materialized += 1
    _aggregate(by_agent, records.folders, out_dir, result)
    first = records.folders[0] if records.folders else None
    if first is not None:
        info = {k: v for k, v in first.info.items() if k not in ("digest", "basis", "shard")}
        info["merged_from"] = [{"run_dir": str(f.path), "shard": f.shard} for f in records.folders]
        info.update(run_info or {})
        write_run_info(out_dir, None, basis=dict(first.info.get("basis") or {}), **info)
    return result


def write_merged_run(records: ShardRecords, out_dir: Path, judged: set[Key]) -> list[str]:
    """--gym-merge: this run's folder gets the judged trials of the shards, in Gym's layout; notes on what happened."""
    try:
        merged = write_merged(records, out_dir, judged.__contains__)
    except OSError as exc:
        return [f"merge: the merged run folder could not be written: {exc}"]
    finally:
        records.close()
    return list(merged.notes)


def expected_trials(
    folders: Sequence[ShardFolder], rootdir: Path, read: Callable[[Path], Iterable[str]]
) -> tuple[list[tuple[str, str, int]], list[str]]:
    """The trials the shards' datasets ask for, as (label, task hash, repeat), and problems finding them.

    ``read`` lists a dataset's task hashes in file order (``pytest_gym.core.dataset.read_tasks``).
    """
    first = folders[0]
    trials: list[tuple[str, str, int]] = []
    problems: list[str] = []
    for entry in first.datasets:
        path = Path(entry["path"])
        path = path if path.is_absolute() else rootdir / path
        if not path.is_file():
            problems.append(f"dataset {path} (from {first.path}/{RUN_INFO_FILE}) does not exist here")
            continue
        if file_sha256(path) != entry.get("sha256"):
            problems.append(f"dataset {path} changed since the shards ran (its sha256 differs)")
            continue
        for task_hash in read(path):
            trials += [(f"{entry['path']}::{task_hash[:12]}[r{r}]", task_hash, r) for r in range(first.repeats)]
    return trials, problems
