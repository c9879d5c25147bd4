"""``--gym-resume RUN_DIR``: report finished trials of an earlier run instead of paying for them again.

A trial is reused when the earlier run folder has its record (task hash and repeat)
and the earlier run was made with the same settings that shape a rollout (agent,
model, environment, reward key: their digest is stored in ``pytest_gym_run.json``).
Mismatched settings reuse nothing, and the run says which settings differ.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.masking import clean_text, json_depth_exceeds, mask_data
from pytest_gym.core.numbers import is_finite_number, is_int, is_number
from pytest_gym.core.outcome import TrialOutcome, TrialSpec, token_usage
from pytest_gym.core.settings import GymSettings
from pytest_gym.runfolder.layout import ROLLOUTS_FILE, RUN_INFO_FILE

#: Fields the run folder adds to Gym's answer (``pytest_gym.runfolder.rollouts``), besides ``_pytest_gym_*``.
_FOLDER_STAMPS = frozenset({"_ng_environment_server", "_ng_result_type"})


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
    """
    target = run_dir / RUN_INFO_FILE
    if target.exists():
        return
    if basis is None:
        if settings is None:
            raise ValueError("write_run_info needs the settings or the basis")
        basis = rollout_basis(settings)
    run_dir.mkdir(parents=True, exist_ok=True)
    data = {"digest": digest(basis), "basis": basis, **extra}
    write_atomically(target, json.dumps(data, indent=2).encode(), fsync=False)


def read_run_info(run_dir: Path) -> dict[str, Any] | None:
    """A run folder's ``pytest_gym_run.json``, or None when it has none (or it does not parse)."""
    try:
        data = json.loads((run_dir / RUN_INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
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
    for record in read_jsonl(rollouts):
        task_hash = record.get("_pytest_gym_task_hash")
        repeat = record.get("_ng_rollout_index")
        if not isinstance(task_hash, str) or not is_int(repeat):
            continue
        if settings.reward_key in record and not _reusable_reward(record[settings.reward_key]):
            skipped += 1  # NaN, infinite or not a number: run the trial again (a suite's own key: reused_outcome)
            continue
        records[(task_hash, repeat)] = record
    note = f"resume: {len(records)} finished trials available from {resume_dir}"
    if skipped:
        note += f" ({skipped} records without a finite {settings.reward_key!r} are run again)"
    return Reusable(records=records, note=note)


def _reusable_reward(reward: Any) -> bool:
    return is_finite_number(reward)


def reused_outcome(spec: TrialSpec, record: dict[str, Any], *, from_shard: bool = False) -> TrialOutcome | None:
    """The outcome an earlier run's record gives this trial; None when the record cannot be trusted.

    ``from_shard``: the record is this run's own trial, run by a shard job (--gym-merge), not an earlier
    run's: it keeps its latency and is not marked reused, so the merged totals equal an unsharded run's.
    """
    reward = record.get(spec.reward_key)
    if not _reusable_reward(reward) or reward is None:
        return None
    if json_depth_exceeds(record):
        return None
    attempts = record.get("_pytest_gym_attempts", 1)
    ref = record.get("agent_ref")
    name = ref.get("name") if isinstance(ref, dict) else None
    # The answer as Gym gave it: without what the run folder stamped on it (a failure message lists its fields).
    answer = {k: v for k, v in record.items() if not k.startswith("_pytest_gym_") and k not in _FOLDER_STAMPS}
    return TrialOutcome.for_spec(
        spec,
        reward=float(reward),
        answer=answer,
        attempts=attempts if is_int(attempts) and attempts > 0 else 1,
        agent=name if isinstance(name, str) else spec.agent,
        tokens=token_usage(record),
        latency_s=_recorded_latency(record) if from_shard else 0.0,
        reused=not from_shard,
    )


def _recorded_latency(record: dict[str, Any]) -> float:
    latency = record.get("_pytest_gym_latency_s")
    if not is_number(latency):
        return 0.0
    return float(latency) if math.isfinite(latency) and latency >= 0 else 0.0
