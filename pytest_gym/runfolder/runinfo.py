"""``--gym-resume RUN_DIR``: report finished trials of an earlier run instead of paying for them again.

A trial is reused when the earlier run folder has its record (task hash and repeat)
and the earlier run was made with the same settings that shape a rollout (agent,
model, environment, reward key: their digest is stored in ``pytest_gym_run.json``).
Mismatched settings reuse nothing, and the run says which settings differ.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.locks import locked
from pytest_gym.core.masking import clean_text, mask_data
from pytest_gym.core.numbers import is_int
from pytest_gym.core.settings import GymSettings
from pytest_gym.runfolder.layout import ROLLOUTS_FILE, RUN_INFO_FILE, RUN_INFO_LOCK
from pytest_gym.runfolder.records import read_records, reward_of, stamps


def rollout_basis(settings: GymSettings) -> dict[str, Any]:
    """The settings that decide what a rollout returns (not how fast or where it is reported), masked.

    Masked before it is digested or written: a model URL or a ``--gym-set`` override may carry a credential,
    and a credential does not change what a rollout returns. Gym config overrides (``--gym-hydra``), the
    resources-server binding and benchmarks count only when set, so older run folders keep their digest;
    ``--gym-env`` (paths, caches) and ``--gym-header`` (access to a remote Gym) do not count."""
    basis: dict[str, Any] = {
        "agent": settings.agent,
        "model": settings.model,
        "model_type": settings.model_type,
        "resources_server": settings.resources_server,
        "config": [os.path.basename(c) for c in settings.config],
        "set": sorted(settings.set),
        "reward_key": settings.reward_key,
        "policy": settings.policy,
    }
    if settings.hydra:
        basis["hydra"] = sorted(settings.hydra)
    if settings.bind_resources_server != "auto":
        basis["bind_resources_server"] = settings.bind_resources_server
    if settings.benchmark:
        basis["benchmark"] = sorted(settings.benchmark)
    if settings.agent_type:
        basis["agent_type"] = settings.agent_type
    if settings.policy == "scripted":
        basis["policy_answer"] = settings.policy_answer
    else:
        basis["model_url"] = settings.model_url
    masked: dict[str, Any] = mask_data(basis)
    return masked


def digest(basis: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(basis, sort_keys=True, default=str).encode()).hexdigest()[:16]


def write_run_info(
    run_dir: Path, settings: GymSettings | None, basis: dict[str, Any] | None = None, **extra: Any
) -> None:
    """Record what this run's rollouts depend on (once per run folder, atomically).

    ``extra``: what a shard adds for the merge (``shard``, ``repeats``, ``datasets``, ``rootdir``);
    ``basis``: the rollout settings when they are not this run's own (a merged folder keeps its shards').
    What another process recorded first (the task ranges, at collection) is kept.
    """
    if basis is None:
        if settings is None:
            raise ValueError("write_run_info needs the settings or the basis")
        basis = rollout_basis(settings)
    with _info_lock(run_dir):
        existing = read_run_info(run_dir) or {}
        if "digest" in existing:
            return
        data = {"digest": digest(basis), "basis": basis, **extra}
        for key, value in existing.items():
            data.setdefault(key, value)
        write_atomically(run_dir / RUN_INFO_FILE, json.dumps(data, indent=2).encode(), fsync=False)


def _info_lock(run_dir: Path) -> Any:
    run_dir.mkdir(parents=True, exist_ok=True)
    return locked(run_dir / RUN_INFO_LOCK)


class TaskRanges:
    """Each dataset's range of Gym's ``_ng_task_index`` in one run, so that no two tasks of a run share an index.

    Gym's tools key a run folder by (``_ng_task_index``, ``_ng_rollout_index``); the index of a task is its
    place among its dataset's distinct rows, which repeats across datasets. Each dataset gets the next
    ``rows`` indices (its non-blank lines), in a fixed order: the run's datasets as given (``--gym-dataset``,
    ini, the shards' for a merge), then benchmarks and suite files as collected; like Gym's own collation
    of several datasets. The first dataset starts at 0, so a one-dataset run keeps the indices it always had;
    every shard and the merge assign the same ranges (they read the same datasets in the same order).
    """

    def __init__(self) -> None:
        self._ranges: dict[str, tuple[int, int]] = {}
        self._shown: dict[str, str] = {}
        self._next = 0

    def start(self, dataset: Path, rows: int) -> int:
        """Where ``dataset``'s range starts (allocated now if it has none yet)."""
        key = os.path.realpath(dataset)
        found = self._ranges.get(key)
        if found is None:
            found = self._ranges[key] = (self._next, rows)
            self._shown[key] = str(dataset)
            self._next += rows
        return found[0]

    def __contains__(self, dataset: object) -> bool:
        return isinstance(dataset, (str, Path)) and os.path.realpath(dataset) in self._ranges

    def entries(self, rootdir: Path) -> list[dict[str, Any]]:
        """The ranges as the run info records them: path (from the rootdir), first index, rows."""
        found = []
        for key, (start, rows) in self._ranges.items():
            try:
                shown = Path(key).relative_to(rootdir.resolve()).as_posix()
            except ValueError:
                shown = self._shown[key]
            found.append({"path": shown, "start": start, "rows": rows})
        return found


def record_task_ranges(run_dir: Path, ranges: list[dict[str, Any]]) -> None:
    """Add the datasets' ``_ng_task_index`` ranges to the run info (every collecting process writes the same)."""
    if not ranges:
        return
    with _info_lock(run_dir):
        info = read_run_info(run_dir) or {}
        if info.get("task_ranges") == ranges:
            return
        info["task_ranges"] = ranges
        write_atomically(run_dir / RUN_INFO_FILE, json.dumps(info, indent=2).encode(), fsync=False)


#: Bounds on a run info read back (a folder from another job or a fork): the settings' own bounds.
MAX_REPEATS = 100_000
MAX_DATASETS = 10_000
MAX_TASK_INDEX = 10_000_000
_MAX_INFO_BYTES = 16 << 20
_SHARD = re.compile(r"[1-9][0-9]{0,4}/[1-9][0-9]{0,4}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def run_info_problem(info: dict[str, Any]) -> str | None:
    """What in a run info no run writes (so nothing is sized or trusted by it), or None."""
    shard = info.get("shard")
    if shard is not None and not (isinstance(shard, str) and _SHARD.fullmatch(shard)):
        return f"'shard' is {shard!r:.60}, not I/N"
    repeats = info.get("repeats")
    if repeats is not None and not (is_int(repeats) and 1 <= repeats <= MAX_REPEATS):
        return f"'repeats' is {repeats!r:.60}, not a number of repeats from 1 to {MAX_REPEATS}"
    datasets = info.get("datasets")
    if datasets is not None:
        if not isinstance(datasets, list) or len(datasets) > MAX_DATASETS:
            return f"'datasets' is not a list of at most {MAX_DATASETS} datasets"
        for number, entry in enumerate(datasets):
            path = entry.get("path") if isinstance(entry, dict) else None
            sha = entry.get("sha256") if isinstance(entry, dict) else None
            if not isinstance(path, str) or not 0 < len(path) <= 4096 or not isinstance(sha, str):
                return f"'datasets' entry {number} has no path and sha256"
            if not _SHA256.fullmatch(sha):
                return f"'datasets' entry {number}: sha256 {sha!r:.80} is not a SHA-256"
    ranges = info.get("task_ranges")
    if ranges is not None:
        if not isinstance(ranges, list) or len(ranges) > MAX_DATASETS:
            return f"'task_ranges' is not a list of at most {MAX_DATASETS} ranges"
        for number, entry in enumerate(ranges):
            values = [entry.get(k) if isinstance(entry, dict) else None for k in ("start", "rows")]
            if not all(is_int(v) and 0 <= v <= MAX_TASK_INDEX for v in values):
                return f"'task_ranges' entry {number} has no start and rows from 0 to {MAX_TASK_INDEX}"
    if not isinstance(info.get("basis", {}), dict) or not isinstance(info.get("digest", ""), str):
        return "'basis' or 'digest' is not what pytest-gym writes"
    return None


def read_run_info(run_dir: Path) -> dict[str, Any] | None:
    """A run folder's ``pytest_gym_run.json``, or None when it has none (or it does not parse)."""
    path = run_dir / RUN_INFO_FILE
    try:
        if path.stat().st_size > _MAX_INFO_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def basis_differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The rollout settings two runs disagree on, by name."""
    return sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))


def file_sha256(path: Path) -> str:
    digest_ = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest_.update(block)
    return digest_.hexdigest()


def dataset_entries(datasets: tuple[str, ...], rootdir: Path) -> list[dict[str, str]]:
    """Each dataset as the merge finds it again: its path from the rootdir (absolute outside it) and content hash."""
    entries = []
    for dataset in datasets:
        path = Path(dataset)
        try:
            shown = path.resolve().relative_to(rootdir.resolve()).as_posix()
        except ValueError:
            shown = str(path)
        entries.append({"path": shown, "sha256": file_sha256(path)})
    return entries


@dataclass
class Reusable:
    """Finished trials of an earlier run, by (task hash, repeat)."""

    records: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    note: str = ""

    def take(self, task_hash: str, repeat: int) -> dict[str, Any] | None:
        return self.records.get((task_hash, repeat))


def load_reusable(resume_dir: Path, settings: GymSettings) -> Reusable:
    """What can be reused from ``resume_dir`` with these settings, and a note saying so (or why not)."""
    info_path = resume_dir / RUN_INFO_FILE
    rollouts = resume_dir / ROLLOUTS_FILE
    if not rollouts.exists():
        return Reusable(note=f"resume: {resume_dir} has no {ROLLOUTS_FILE}; nothing to reuse")
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return Reusable(note=f"resume: {resume_dir} has no readable {RUN_INFO_FILE}; nothing reused")
    if not isinstance(info, dict):
        return Reusable(
            note=f"resume: {info_path} holds a JSON {type(info).__name__}, not the object pytest-gym writes; "
            "nothing reused (was it edited by hand?)"
        )
    basis = rollout_basis(settings)
    if info.get("digest") != digest(basis):
        earlier = info.get("basis")
        earlier = earlier if isinstance(earlier, dict) else {}
        differ = basis_differences(basis, earlier)
        return Reusable(
            note=clean_text(
                f"resume: {resume_dir} was run with other settings ({', '.join(differ) or 'its digest'} differ); "
                "nothing reused"
            )
        )
    records: dict[tuple[str, int], dict[str, Any]] = {}
    skipped = 0
    for record in read_records(rollouts):
        key = stamps(record).key
        if key is None:
            continue
        if settings.reward_key in record and reward_of(record, settings.reward_key) is None:
            skipped += 1  # NaN, infinite or not a number: run the trial again (a suite's own key: outcome_from_rollout)
            continue
        records[key] = record
    note = f"resume: {len(records)} finished trials available from {resume_dir}"
    if skipped:
        note += f" ({skipped} records without a finite {settings.reward_key!r} are run again)"
    return Reusable(records=records, note=note)


def write_shard_info(run_dir: Path, settings: GymSettings, shard: str, rootdir: Path) -> None:
    """A shard's run folder says which shard, datasets and repeats it ran: the merge checks them."""
    # A folder reused after an attempt that ran nothing (check_run_dir_unused allows it): this run's info.
    (run_dir / RUN_INFO_FILE).unlink(missing_ok=True)
    write_run_info(
        run_dir,
        settings,
        shard=shard,
        repeats=settings.repeats,
        datasets=dataset_entries(settings.dataset, rootdir),
        rootdir=str(rootdir),
    )
