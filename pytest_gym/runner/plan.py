"""The run plan: settings in, what this process will do out, or every reason it cannot (``PlanError``).

Everything that can be checked before a trial runs is checked here, with no pytest in sight: option
combinations, the run folder, the shard, the shard folders of a merge and their datasets, the gates, the
folder a re-score reads. The session turns a ``PlanError`` into a ``pytest.UsageError`` in one place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gym.core.endpoint import GymError
from pytest_gym.core.settings import RECORDER_POLICIES, GymSettings
from pytest_gym.core.shard import Shard, ShardError, parse_shard
from pytest_gym.judge.gates import BadGate, Gate, parse_gates
from pytest_gym.rollout.budget import parse_error_budget
from pytest_gym.runfolder.layout import MATERIALIZED_FILE, NO_MODEL_CASSETTE, ROLLOUTS_FILE
from pytest_gym.runfolder.location import check_run_dir_unused, new_run_dir
from pytest_gym.runfolder.records import RecordError, iter_records
from pytest_gym.runfolder.runinfo import Reusable, file_sha256, load_reusable

if TYPE_CHECKING:
    from pytest_gym.judge.known import KnownFailures
    from pytest_gym.runfolder.merge import ShardRecords


class PlanError(ValueError):
    """A run that cannot start as asked: the message names the option or file and the fix."""


@dataclass(frozen=True)
class RunPlan:
    """What this process runs and where; one per pytest process."""

    settings: GymSettings
    run_dir: Path
    #: The process that owns the run (the only one, or the xdist controller): it judges, reports and stops Gym.
    owner: bool
    gates: tuple[Gate, ...]
    #: --gym-shard: the part of the suite this job runs; its gates and baselines wait for the merge.
    shard: Shard | None = None
    #: --gym-merge: every finished trial of the shard run folders; this run judges them and runs none.
    merged: ShardRecords | None = None
    #: --gym-resume: the earlier run's finished trials this run may report instead of running.
    reusable: Reusable | None = None
    #: --gym-known-failures: the tasks whose failure is accepted for now.
    known: KnownFailures | None = None


def build_plan(
    settings: GymSettings,
    *,
    owner: bool,
    rootdir: Path,
    run_dir: Path | None = None,
    shard_on_command_line: bool = False,
    collect_only: bool = False,
    environ: Mapping[str, str] | None = None,
    bases: tuple[Path, ...] = (),
) -> RunPlan:
    """The plan for ``settings``; ``run_dir`` is an xdist worker's (the controller's folder) or None.

    ``bases``: the folders relative paths were resolved from (pytest's, the ini file's), named when one of
    Gym's configs is found nowhere."""
    if run_dir is None:
        run_dir = Path(settings.run_dir) if settings.run_dir else new_run_dir(rootdir)
    if owner:
        problem = check_run_dir_unused(run_dir)
        if problem:
            raise PlanError(f"pytest-gym: {problem}")
    if settings.merge and settings.shard and not shard_on_command_line:
        # An ini shared by the shard jobs and the merge job (gym_shard = auto): the merge is no shard.
        settings = settings.model_copy(update={"shard": None})
    check_combinations(settings)
    if owner and not collect_only and not settings.merge:
        from pytest_gym.gym.preflight import check_start

        try:  # the gym CLI and Gym's configs: now, not after a Gym start and one error per trial
            check_start(settings, bases)
        except GymError as exc:
            raise PlanError(str(exc)) from None
    if settings.rescore:
        check_rescore_source(Path(settings.rescore))
        settings = _no_model(settings, run_dir, create=owner and not collect_only)
    shard = None
    if settings.shard:
        try:
            shard = parse_shard(settings.shard, os.environ if environ is None else environ)
        except ShardError as exc:
            raise PlanError(str(exc)) from None
    if settings.policy == "scripted":
        check_policy_script(settings, os.environ if environ is None else environ)
    merged = None
    if settings.merge:
        settings, merged = _merge_sources(settings, rootdir)
    reusable = None
    if settings.resume:
        try:
            reusable = load_reusable(Path(settings.resume), settings)
        except RecordError as exc:
            raise PlanError(f"pytest-gym: --gym-resume: {exc}") from None
    gates = tuple(gates_of(settings.gate, "--gym-gate / gym_gate"))
    known = None
    if settings.known_failures:
        known = known_failures(Path(settings.known_failures), rootdir)
    return RunPlan(settings, run_dir, owner, gates, shard, merged, reusable, known)


def known_failures(path: Path, rootdir: Path) -> KnownFailures:
    """The known-failures file, named in messages as from the rootdir; PlanError naming its line."""
    from pytest_gym.judge.known import KnownFailuresError, load_known_failures

    try:
        shown = str(path.relative_to(rootdir)) if path.is_relative_to(rootdir) else str(path)
        return load_known_failures(path, shown)
    except KnownFailuresError as exc:
        raise PlanError(str(exc)) from None


def gates_of(expressions: tuple[str, ...], where: str) -> list[Gate]:
    try:
        return parse_gates(expressions, where)
    except BadGate as exc:
        raise PlanError(str(exc)) from None


def check_policy_script(settings: GymSettings, environ: Mapping[str, str]) -> None:
    """``PYTEST_GYM_POLICY_SCRIPT`` is checked now: a bad one failed the policy process, and every trial with it."""
    from pytest_gym.standins import SCRIPT_ENV
    from pytest_gym.standins.policy import start_script

    try:
        start_script(settings.policy_answer, settings.model, settings.policy_latency_ms, environ.get(SCRIPT_ENV))
    except ValueError as exc:
        raise PlanError(f"pytest-gym: {exc}") from None


def check_combinations(settings: GymSettings) -> None:
    """Options that cannot go together, or that need another: refused with the fix."""
    try:
        parse_error_budget(settings.max_errors)
    except ValueError as exc:
        raise PlanError(f"pytest-gym: --gym-max-errors: {exc}") from None
    try:  # the --gym-header variables are set, the --gym-ca-file loads: now, not at the first trial
        settings.access()
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    if settings.resume and not Path(settings.resume).is_dir():
        raise PlanError(f"pytest-gym: --gym-resume {settings.resume} is not a run folder")
    # --gym-update-baseline without --gym-baseline: suite files may name their baselines; checked after collection.
    if settings.known_failures_strict and not settings.known_failures:
        raise PlanError("pytest-gym: --gym-known-failures-strict goes with --gym-known-failures FILE")
    if settings.baseline_run and not settings.update_baseline and not Path(settings.baseline_run).is_dir():
        raise PlanError(
            f"pytest-gym: --gym-baseline-run {settings.baseline_run} is not a folder; give the run folder of the "
            "run to compare with (e.g. main's last run, downloaded as an artifact)"
        )
    if settings.benchmark_data and len(settings.benchmark) != 1:
        raise PlanError(
            "pytest-gym: --gym-benchmark-data PATH is the data of one --gym-benchmark NAME; for several "
            "benchmarks write one suite file each (benchmark: NAME, benchmark_data: PATH)"
        )
    if settings.merge and settings.shard:
        raise PlanError("pytest-gym: --gym-merge judges all shards together; drop --gym-shard from it")
    if settings.merge and settings.resume:
        raise PlanError(
            "pytest-gym: --gym-merge runs no trial, so --gym-resume has nothing to do: resume the shard instead"
        )
    if settings.merge_allow_missing and not settings.merge:
        raise PlanError("pytest-gym: --gym-merge-allow-missing goes with --gym-merge RUN_DIR")
    if settings.reuse and settings.url:
        raise PlanError(
            "pytest-gym: --gym-reuse keeps a Gym this run starts, and with --gym-url nothing is started; drop one"
        )
    if settings.rescore_force and not settings.rescore:
        raise PlanError("pytest-gym: --gym-rescore-force goes with --gym-rescore RUN_DIR")
    check_affordable(settings)
    if settings.rescore:
        for name, conflict in (("resume", settings.resume), ("merge", settings.merge), ("shard", settings.shard)):
            if conflict:
                raise PlanError(
                    f"pytest-gym: --gym-rescore re-verifies a finished run and cannot go with --gym-{name}; drop one"
                )
        if settings.policy in RECORDER_POLICIES:
            raise PlanError(
                f"pytest-gym: --gym-rescore calls no model, so --gym-policy {settings.policy} has nothing to do; "
                "drop it"
            )


def check_affordable(settings: GymSettings) -> None:
    """Budgets, adaptive repeats and sequential gates: what they need, and what they cannot go with."""
    if settings.max_cost is not None and settings.price_in is None and settings.price_out is None:
        raise PlanError(
            "pytest-gym: --gym-max-cost needs the prices to count the cost: --gym-price-in and --gym-price-out "
            "(per million tokens)"
        )
    used = [
        name
        for name, on in (
            ("--gym-max-cost", settings.max_cost is not None),
            ("--gym-max-tokens", settings.max_tokens is not None),
            ("--gym-repeats-adaptive", settings.repeats_adaptive),
            ("--gym-sequential", settings.sequential),
        )
        if on
    ]
    for name, other in (("--gym-merge", settings.merge), ("--gym-rescore", settings.rescore)):
        if used and other:
            raise PlanError(f"pytest-gym: {name} runs no rollout, so {used[0]} has nothing to do; drop one")
    if settings.seed is not None and not settings.sequential:
        raise PlanError("pytest-gym: --gym-seed orders the tasks of --gym-sequential; add --gym-sequential")
    if settings.sequential and settings.repeats_adaptive:
        raise PlanError(
            "pytest-gym: --gym-sequential needs every task's repeats (a task's value is the mean of all of them), "
            "and --gym-repeats-adaptive stops them early: use one of the two"
        )
    if settings.sequential and settings.shard and not settings.shard_verdicts:
        raise PlanError(
            "pytest-gym: --gym-sequential decides gates for a whole suite, and a shard runs part of it: run it "
            "without --gym-shard (or judge the shard on its own part: --gym-shard-verdicts)"
        )
    if settings.repeats_adaptive:
        check_adaptive_gates(settings.gate, "--gym-gate")


def check_adaptive_gates(gates: tuple[str, ...], where: str) -> None:
    """Gates adaptive repeats cannot serve: they need every repeat of every task."""
    for gate in gates_of(gates, where):
        if (gate.metric in ("pass@", "pass^") and (gate.k or 1) > 1) or gate.metric == "flaky_rate":
            raise PlanError(
                f"pytest-gym: gate {gate.label} ({where}) needs every repeat of every task, and "
                "--gym-repeats-adaptive stops a decided task's repeats early: drop the gate or the option"
            )


def check_rescore_source(source: Path) -> None:
    """--gym-rescore RUN_DIR must be a run folder with saved answers."""
    fix = "give the run folder of an earlier pytest-gym (or `gym eval run`) run"
    if not source.is_dir():
        raise PlanError(f"pytest-gym: --gym-rescore {source} is not a folder; {fix}")
    for name in (ROLLOUTS_FILE, MATERIALIZED_FILE):
        if not (source / name).is_file():
            raise PlanError(f"pytest-gym: --gym-rescore {source} is not a run folder: it has no {name}; {fix}")
    try:
        answered = any("response" in record for _, record in iter_records(source / ROLLOUTS_FILE))
    except RecordError as exc:
        raise PlanError(f"pytest-gym: --gym-rescore: {exc}") from None
    if not answered:
        raise PlanError(
            f"pytest-gym: --gym-rescore {source}: {source / ROLLOUTS_FILE} holds no rollout with a saved "
            f"response, so there is nothing to re-verify; {fix} that finished some trials"
        )


def _no_model(settings: GymSettings, run_dir: Path, create: bool) -> GymSettings:
    """Under --gym-rescore a Gym this run starts gets a model that refuses every call (a replay of nothing)."""
    cassette = run_dir / NO_MODEL_CASSETTE
    if create:
        run_dir.mkdir(parents=True, exist_ok=True)
        cassette.touch()
    return settings.model_copy(update={"policy": "replay", "cassette": str(cassette), "replay_miss": "error"})


def _merge_sources(settings: GymSettings, rootdir: Path) -> tuple[GymSettings, ShardRecords]:
    """Check the shard folders and index their trials; the run takes the shards' datasets and repeats."""
    from pytest_gym.runfolder.merge import MergeError, index_shards, read_shard_folders

    try:
        folders = read_shard_folders([Path(p) for p in settings.merge])
    except MergeError as exc:
        raise PlanError(str(exc)) from None
    first = folders[0]
    shard_basis = first.info.get("basis") or {}
    datasets = []
    for entry in first.datasets:
        path = Path(entry["path"])
        path = path if path.is_absolute() else rootdir / path
        if not path.is_file():
            raise PlanError(
                f"pytest-gym merge: dataset {entry['path']} of the shards ({first.path}) is not at {path}; "
                "run the merge from a checkout of the same revision (paths are from the rootdir)"
            )
        if file_sha256(path) != entry.get("sha256"):
            raise PlanError(
                f"pytest-gym merge: dataset {path} changed since the shards ran (its sha256 differs); "
                "merge on the revision the shards ran"
            )
        datasets.append(str(path))
    explicit = settings.model_fields_set
    update: dict[str, Any] = {}
    if datasets:
        ours = sorted(os.path.realpath(d) for d in settings.dataset)
        if "dataset" in explicit and ours != sorted(os.path.realpath(d) for d in datasets):
            raise PlanError(
                f"pytest-gym merge: the shards ran {', '.join(datasets)}, this run names "
                f"{', '.join(settings.dataset)}; leave --gym-dataset out of the merge (it is read from the shards)"
            )
        update["dataset"] = tuple(datasets)
    for name, theirs in (("repeats", first.repeats), ("reward_key", shard_basis.get("reward_key", "reward"))):
        ours_value = getattr(settings, name)
        if name in explicit and ours_value != theirs:
            raise PlanError(
                f"pytest-gym merge: the shards ran with {name} {theirs!r}, this run says {ours_value!r}; "
                "leave it out of the merge (it is read from the shards) or make it equal"
            )
        update[name] = theirs
    try:
        records = index_shards(folders)
    except MergeError as exc:
        raise PlanError(str(exc)) from None
    return settings.model_copy(update=update), records
