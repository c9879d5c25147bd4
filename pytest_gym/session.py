"""The run as pytest sees it: one ``GymSession`` per process, registered once; its methods are the hooks.

Everything a run keeps lives here (settings, the rollout side, the suite results,
the notes, the verdicts, the exports), under one stash key. The end of the
session is one ordered method, ``pytest_sessionfinish``: close the rollouts,
judge the suites and report gates and baselines as tests (before pytest writes
JUnit), then post-process JUnit, run the exports and stop Gym (after).

Under xdist the controller owns the run (it judges, exports and stops Gym) and
each worker runs trials; workers send their notes back through ``workeroutput``
(see ``pytest_gym.xdist_hooks``).
"""

from __future__ import annotations

import concurrent.futures
import fnmatch
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_gym.collect import GymDatasetFile, GymSuiteFile, GymTrial, raise_fault
from pytest_gym.core.endpoint import GymError
from pytest_gym.core.masking import MAX_MESSAGE, add_secret, clean_text
from pytest_gym.core.options import is_suite_file
from pytest_gym.core.outcome import TrialOutcome, TrialSpec, from_properties
from pytest_gym.core.settings import GymSettings, SettingError, resolve, secret_name
from pytest_gym.core.shard import Shard, ShardError, parse_shard
from pytest_gym.exporters.api import ExportConfigError, Exporter, ExportResult, ExportRun
from pytest_gym.judge.gates import Gate
from pytest_gym.judge.suites import BadGate, SuiteResults, SuiteVerdict, parse_gates
from pytest_gym.report.junit import flat_properties, postprocess_junit
from pytest_gym.report.progress import Progress
from pytest_gym.report.synthetic import deferred_reports, synthetic_reports
from pytest_gym.report.terminal import write_section
from pytest_gym.rollout.budget import ErrorBudget, SharedErrorCount, parse_error_budget
from pytest_gym.runfolder.layout import (
    BENCHMARK_METRICS_FILE,
    NO_MODEL_CASSETTE,
    REPORT_FILE,
    RUN_INFO_FILE,
    RUN_STARTED_FILE,
    SUMMARY_FILE,
)
from pytest_gym.runfolder.location import check_run_dir_unused, new_run_dir
from pytest_gym.runfolder.merge import (
    MergeError,
    MissingTrial,
    ShardRecords,
    index_shards,
    missing_message,
    read_shard_folders,
    write_merged,
)
from pytest_gym.runfolder.records import outcome_from_failure, outcome_from_rollout
from pytest_gym.runfolder.runinfo import (
    Reusable,
    dataset_entries,
    file_sha256,
    load_reusable,
    write_run_info,
)
from pytest_gym.runfolder.scrub import scrub_run_folder
from pytest_gym.runfolder.summary import write_summary
from pytest_gym.runner.run import GymRun
from pytest_gym.runner.server import GymServer
from pytest_gym.suitefile import suite_settings
from pytest_gym.xdist_hooks import (
    SESSION_PLUGIN,
    WORKER_OUTPUT,
    worker_owner_pid,
    worker_queue,
    worker_run_dir,
    worker_slot,
)

if TYPE_CHECKING:
    from pytest_gym.gym.rescore import RescoredTrials

T = TypeVar("T")
SESSION_KEY = pytest.StashKey["GymSession"]()
#: Run-folder files handed to exporters (the ones that exist).
ARTIFACTS = (
    "rollouts.jsonl",
    "rollouts_failures.jsonl",
    "rollouts_materialized_inputs.jsonl",
    "rollouts_aggregate_metrics.json",
    SUMMARY_FILE,
    REPORT_FILE,
    "gym_env.log",
    "gym_prepare.log",
    BENCHMARK_METRICS_FILE,
    "policy.log",
)


def settings_of(config: pytest.Config) -> GymSettings:
    try:
        return resolve(config.getoption, config.getini, cli_base=config.invocation_params.dir, ini_base=config.rootpath)
    except SettingError as exc:
        raise pytest.UsageError(str(exc)) from None


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a CI job cancelled, a container stopped) ends the run like Ctrl-C: pytest reports what
    # finished and every sessionfinish runs, so Gym and the policy are stopped and the run folder is whole.
    raise KeyboardInterrupt(f"pytest-gym: stopped by signal {signum}")


@dataclass
class TrialState:
    """What every trial of this process needs besides its own spec: decided once, with the first trial."""

    budget: ErrorBudget
    total: int
    errors: SharedErrorCount
    reusable: Reusable | None = None
    reused: frozenset[str] = field(default_factory=frozenset)
    rescored: RescoredTrials | None = None


class GymSession:
    """pytest-gym's state and hooks for one pytest process."""

    def __init__(
        self,
        config: pytest.Config,
        settings: GymSettings,
        run_dir: Path,
        owner: bool,
        shard: Shard | None = None,
        merged: ShardRecords | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        self.owner = owner
        #: --gym-shard: the part of the suite this job runs; its gates and baselines wait for the merge.
        self.shard = shard
        #: --gym-merge: every finished trial of the shard run folders; this run judges them and runs none.
        self.merged = merged
        #: In a shard: per suite, the labels of the gates left to the merge.
        self.deferred_gates: dict[str, list[str]] = {}
        workerinput = getattr(config, "workerinput", None)
        self.run = GymRun(
            settings=settings,
            run_dir=run_dir,
            owner=owner,
            worker=worker_slot(workerinput),
            owner_pid=worker_owner_pid(workerinput),
        )
        self.gates = self._gates(settings.gate, "--gym-gate / gym_gate")
        #: Notes for the terminal section and the summary: this process's, and (controller) the workers'.
        self.notes: list[str] = []
        self.trials: TrialState | None = None
        self.results: SuiteResults | None = None
        self.progress = Progress(interval_s=settings.progress_interval)
        self.verdicts: list[SuiteVerdict] | None = None
        self.exports: list[tuple[str, ExportResult]] = []
        self.exporters: list[Exporter] = []
        self._setup_errors: dict[str, str] = {}
        #: --gym-rescore (owner): what the verifier change moved, for the summary.
        self.rescore_report: dict[str, Any] | None = None
        #: xdist controller: ask Gym for the aggregate metrics as soon as the last trial reported.
        self.early_aggregate = False
        self._finished = False
        self._sigterm_installed = False
        #: What the run's ``gym env start`` gets from suite files: benchmarks, and Hydra items (key -> item, where).
        self._start_benchmarks: list[str] = []
        self._start_hydra: dict[str, tuple[str, str]] = {}
        #: Benchmark suites: data path -> (suite name, settings) for --gym-benchmark; suite -> (benchmark, agent).
        self._benchmark_files: dict[str, tuple[str, GymSettings]] = {}
        self.benchmark_suites: dict[str, tuple[str, str | None]] = {}
        self._deadline: float | None = None
        self.gym_metric_lines: list[str] = []
        for item in settings.env:
            key, _, value = item.partition("=")
            if secret_name(key):
                add_secret(value)
        for name in settings.secret_env:
            add_secret(os.environ.get(name, ""))
        if owner:
            judged = settings.model_copy(update={"baseline": None, "update_baseline": False})
            self.results = SuiteResults(
                judged if self.deferred else settings, self.gates, settings_for=self._judged_settings
            )
            self.results.narrowed = bool(
                config.getoption("keyword")
                or config.getoption("markexpr")
                or config.getoption("deselect", None)
                or config.getoption("lf", False)
            )
            self.exporters = self._configured_exporters()

    @property
    def run_dir(self) -> Path:
        return self.run.run_dir

    @property
    def resume(self) -> bool:
        """Whether trials may be reused rather than run (xdist workers then prefetch nothing early)."""
        return bool(self.settings.resume or self.settings.rescore or self.merged is not None)

    @property
    def deferred(self) -> str | None:
        """Why gates and baselines are not judged here (a shard sees part of the suite), or None."""
        if self.shard is None or self.settings.shard_verdicts:
            return None
        return f"deferred to the merge (shard {self.shard})"

    # -- setting up --------------------------------------------------------------------------------

    @classmethod
    def install(cls, config: pytest.Config, run_dir: Path | None = None) -> GymSession:
        """Validate the settings, create the session and register it (once; later calls return it)."""
        existing = config.stash.get(SESSION_KEY, None)
        if existing is not None:
            return existing
        settings = settings_of(config)
        workerinput = getattr(config, "workerinput", None)
        owner = workerinput is None
        if not owner:
            run_dir = worker_run_dir(workerinput)
        if run_dir is None:
            run_dir = Path(settings.run_dir) if settings.run_dir else new_run_dir(config.rootpath)
        if owner:
            problem = check_run_dir_unused(run_dir)
            if problem:
                raise pytest.UsageError(f"pytest-gym: {problem}")
        if settings.merge and settings.shard and config.getoption("gym_shard") is None:
            # An ini shared by the shard jobs and the merge job (gym_shard = auto): the merge is no shard.
            settings = settings.model_copy(update={"shard": None})
        cls._check(settings)
        if settings.rescore:
            settings = cls._no_model(settings, run_dir, owner and not config.option.collectonly)
        shard = cls._shard(settings)
        merged = None
        if settings.merge:
            settings, merged = cls._merge_sources(config, settings)
        session = cls(config, settings, run_dir, owner, shard, merged)
        if owner and settings.run_timeout is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / RUN_STARTED_FILE).write_text(repr(time.time()), encoding="utf-8")
        config.stash[SESSION_KEY] = session
        config.pluginmanager.register(session, SESSION_PLUGIN)
        session._install_sigterm()
        if owner and shard is not None and not config.option.collectonly:
            session._write_shard_info()
        return session

    @staticmethod
    def _shard(settings: GymSettings) -> Shard | None:
        if not settings.shard:
            return None
        try:
            return parse_shard(settings.shard, os.environ)
        except ShardError as exc:
            raise pytest.UsageError(str(exc)) from None

    @staticmethod
    def _merge_sources(config: pytest.Config, settings: GymSettings) -> tuple[GymSettings, ShardRecords]:
        """Check the shard folders and index their trials; the run takes the shards' datasets and repeats."""
        try:
            folders = read_shard_folders([Path(p) for p in settings.merge])
        except MergeError as exc:
            raise pytest.UsageError(str(exc)) from None
        first = folders[0]
        shard_basis = first.info.get("basis") or {}
        rootdir = config.rootpath
        datasets = []
        for entry in first.datasets:
            path = Path(entry["path"])
            path = path if path.is_absolute() else rootdir / path
            if not path.is_file():
                raise pytest.UsageError(
                    f"pytest-gym merge: dataset {entry['path']} of the shards ({first.path}) is not at {path}; "
                    "run the merge from a checkout of the same revision (paths are from the rootdir)"
                )
            if file_sha256(path) != entry.get("sha256"):
                raise pytest.UsageError(
                    f"pytest-gym merge: dataset {path} changed since the shards ran (its sha256 differs); "
                    "merge on the revision the shards ran"
                )
            datasets.append(str(path))
        explicit = settings.model_fields_set
        update: dict[str, Any] = {}
        if datasets:
            ours = sorted(os.path.realpath(d) for d in settings.dataset)
            if "dataset" in explicit and ours != sorted(os.path.realpath(d) for d in datasets):
                raise pytest.UsageError(
                    f"pytest-gym merge: the shards ran {', '.join(datasets)}, this run names "
                    f"{', '.join(settings.dataset)}; leave --gym-dataset out of the merge (it is read from the shards)"
                )
            update["dataset"] = tuple(datasets)
        for name, theirs in (("repeats", first.repeats), ("reward_key", shard_basis.get("reward_key", "reward"))):
            ours_value = getattr(settings, name)
            if name in explicit and ours_value != theirs:
                raise pytest.UsageError(
                    f"pytest-gym merge: the shards ran with {name} {theirs!r}, this run says {ours_value!r}; "
                    "leave it out of the merge (it is read from the shards) or make it equal"
                )
            update[name] = theirs
        try:
            records = index_shards(folders)
        except MergeError as exc:
            raise pytest.UsageError(str(exc)) from None
        return settings.model_copy(update=update), records

    def _write_shard_info(self) -> None:
        """A shard's run folder says which shard, datasets and repeats it ran: the merge checks them."""
        assert self.shard is not None
        settings = self.settings
        # A folder reused after an attempt that ran nothing (check_run_dir_unused allows it): this run's info.
        (self.run_dir / RUN_INFO_FILE).unlink(missing_ok=True)
        write_run_info(
            self.run_dir,
            settings,
            shard=str(self.shard),
            repeats=settings.repeats,
            datasets=dataset_entries(settings.dataset, self.config.rootpath),
            rootdir=str(self.config.rootpath),
        )

    @staticmethod
    def _check(settings: GymSettings) -> None:
        try:
            parse_error_budget(settings.max_errors)
        except ValueError as exc:
            raise pytest.UsageError(f"pytest-gym: --gym-max-errors: {exc}") from None
        try:  # the --gym-header variables are set, the --gym-ca-file loads: now, not at the first trial
            settings.access()
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        if settings.resume and not Path(settings.resume).is_dir():
            raise pytest.UsageError(f"pytest-gym: --gym-resume {settings.resume} is not a run folder")
        if settings.update_baseline and not settings.baseline:
            raise pytest.UsageError("pytest-gym: --gym-update-baseline needs --gym-baseline PATH (where to write it)")
        if settings.benchmark_data and len(settings.benchmark) != 1:
            raise pytest.UsageError(
                "pytest-gym: --gym-benchmark-data PATH is the data of one --gym-benchmark NAME; for several "
                "benchmarks write one suite file each (benchmark: NAME, benchmark_data: PATH)"
            )
        if settings.merge and settings.shard:
            raise pytest.UsageError("pytest-gym: --gym-merge judges all shards together; drop --gym-shard from it")
        if settings.merge and settings.resume:
            raise pytest.UsageError(
                "pytest-gym: --gym-merge runs no trial, so --gym-resume has nothing to do: resume the shard instead"
            )
        if settings.merge_allow_missing and not settings.merge:
            raise pytest.UsageError("pytest-gym: --gym-merge-allow-missing goes with --gym-merge RUN_DIR")
        if settings.rescore_force and not settings.rescore:
            raise pytest.UsageError("pytest-gym: --gym-rescore-force goes with --gym-rescore RUN_DIR")
        if settings.rescore:
            GymSession._check_rescore(settings)

    @staticmethod
    def _check_rescore(settings: GymSettings) -> None:
        """--gym-rescore RUN_DIR must be a run folder with saved answers; it replaces rolling out, nothing else."""
        from pytest_gym.core.jsonl import read_jsonl
        from pytest_gym.runfolder.layout import MATERIALIZED_FILE, ROLLOUTS_FILE

        source = Path(settings.rescore or "")
        fix = "give the run folder of an earlier pytest-gym (or `gym eval run`) run"
        if not source.is_dir():
            raise pytest.UsageError(f"pytest-gym: --gym-rescore {source} is not a folder; {fix}")
        for name in (ROLLOUTS_FILE, MATERIALIZED_FILE):
            if not (source / name).is_file():
                raise pytest.UsageError(
                    f"pytest-gym: --gym-rescore {source} is not a run folder: it has no {name}; {fix}"
                )
        if not any("response" in record for record in read_jsonl(source / ROLLOUTS_FILE)):
            raise pytest.UsageError(
                f"pytest-gym: --gym-rescore {source}: {source / ROLLOUTS_FILE} holds no rollout with a saved "
                f"response, so there is nothing to re-verify; {fix} that finished some trials"
            )
        for name, conflict in (("resume", settings.resume), ("merge", settings.merge), ("shard", settings.shard)):
            if conflict:
                raise pytest.UsageError(
                    f"pytest-gym: --gym-rescore re-verifies a finished run and cannot go with --gym-{name}; drop one"
                )
        if settings.policy in ("record", "replay"):
            raise pytest.UsageError(
                f"pytest-gym: --gym-rescore calls no model, so --gym-policy {settings.policy} has nothing to do; "
                "drop it"
            )

    @staticmethod
    def _no_model(settings: GymSettings, run_dir: Path, create: bool) -> GymSettings:
        """Under --gym-rescore a Gym this run starts gets a model that refuses every call (a replay of nothing)."""
        cassette = run_dir / NO_MODEL_CASSETTE
        if create:
            run_dir.mkdir(parents=True, exist_ok=True)
            cassette.touch()
        return settings.model_copy(update={"policy": "replay", "cassette": str(cassette), "replay_miss": "error"})

    @staticmethod
    def _gates(expressions: tuple[str, ...], where: str) -> list[Gate]:
        try:
            return parse_gates(expressions, where)
        except BadGate as exc:
            raise pytest.UsageError(str(exc)) from None

    def _configured_exporters(self) -> list[Exporter]:
        if not self.settings.export and not self.settings.export_opt:
            return []
        from pytest_gym.exporters.registry import BuiltinExports, available_exporters, configure_exporters

        extra = [cls for group in self.config.hook.pytest_gym_exporters() for cls in group]
        try:
            exporters = configure_exporters(
                self.settings.export, self.settings.export_opt, available_exporters(extra=extra)
            )
        except ExportConfigError as exc:
            raise pytest.UsageError(f"pytest-gym: {exc}") from None
        if exporters:
            self.config.pluginmanager.register(BuiltinExports(exporters), "pytest-gym-exports")
        return exporters

    def _install_sigterm(self) -> None:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _terminate)
            self._sigterm_installed = True

    # -- benchmarks, and what suite files add to the run's `gym env start` ----------------------------

    def benchmark_dataset(self, name: str, settings: GymSettings, data: str | None, where: str) -> Path:
        """A benchmark suite's prepared data (prepared now if needed); its servers join the run's Gym."""
        from pytest_gym.gym.benchmarks import benchmark_suite

        try:
            bench = benchmark_suite(name, settings, self.run_dir, data)
        except GymError as exc:
            raise pytest.UsageError(clean_text(f"pytest-gym: {where}: {exc}", MAX_MESSAGE)) from None
        if name not in self._start_benchmarks and name not in self.settings.benchmark:
            self._start_benchmarks.append(name)
        return bench.data

    def add_start(self, hydra: Sequence[str], where: str) -> None:
        """Hydra items of a suite file for the run's one ``gym env start``; two files must not disagree."""
        for item in hydra:
            key = item.partition("=")[0]
            known = self._start_hydra.get(key)
            if known is not None and known[0] != item:
                raise pytest.UsageError(
                    f"pytest-gym: {where} sets Gym parameter {key} differently from {known[1]}: the suites of a run "
                    "share one Gym; run them separately or agree on the value"
                )
            self._start_hydra[key] = (item, where)

    def start_settings(self) -> GymSettings:
        """The run's settings plus what the suite files add to ``gym env start``."""
        if not self._start_benchmarks and not self._start_hydra:
            return self.settings
        return self.settings.model_copy(
            update={
                "benchmark": (*self.settings.benchmark, *self._start_benchmarks),
                "hydra": (*self.settings.hydra, *(item for item, _ in self._start_hydra.values())),
            }
        )

    def _add_benchmark_args(self) -> None:
        """``--gym-benchmark NAME``: its prepared data is collected as the suite ``NAME``."""
        from pytest_gym.suitefile import SuiteFileError, benchmark_overrides

        config = self.config
        for name in self.settings.benchmark:
            try:
                overrides = benchmark_overrides(
                    name, config.getoption, config.getini, config.invocation_params.dir, config.rootpath
                )
                settings = resolve(
                    config.getoption,
                    config.getini,
                    cli_base=config.invocation_params.dir,
                    ini_base=config.rootpath,
                    overrides=overrides,
                )
            except (SuiteFileError, SettingError) as exc:
                raise pytest.UsageError(f"pytest-gym: --gym-benchmark {name}: {exc}") from None
            data = self.benchmark_dataset(name, settings, self.settings.benchmark_data, f"--gym-benchmark {name}")
            self._benchmark_files[str(data)] = (name, settings)
            self.benchmark_suites[name] = (name, settings.agent)
            if str(data) not in config.args:
                config.args.append(str(data))

    def add_dataset_args(self) -> None:
        """Make sure every dataset is collected; alone, when the command line named datasets but no paths."""
        config = self.config
        self._add_benchmark_args()
        if self._benchmark_files and config.args_source != pytest.Config.ArgsSource.ARGS:
            # Named on the command line, no paths: run the benchmarks (and --gym-dataset's datasets) alone.
            config.args[:] = [*self._benchmark_files, *self.settings.dataset]
        datasets = list(self.settings.dataset)
        if not datasets:
            return
        for dataset in datasets:
            if not Path(dataset).is_file():
                raise pytest.UsageError(
                    f"pytest-gym: dataset {dataset} does not exist (from --gym-dataset or gym_dataset); "
                    "check the path (relative paths: command line from the current folder, ini from the rootdir)"
                )
        from_cli = bool(config.getoption("gym_dataset")) or self.merged is not None  # a merge judges only them
        if from_cli and config.args_source != pytest.Config.ArgsSource.ARGS:
            config.args[:] = [*self._benchmark_files, *datasets]
            return
        known = {str(Path(arg).resolve()) for arg in config.args}
        norecurse = config.getini("norecursedirs")
        config.args.extend(d for d in datasets if d not in known and not _in_a_searched_dir(d, config.args, norecurse))

    def _judged_settings(self, suite: str) -> tuple[GymSettings, list[Gate]]:
        """A suite's settings as the owner judges it: without its baseline while verdicts are deferred."""
        settings, gates = self._suite_settings(suite)
        if self.deferred:
            settings = settings.model_copy(update={"baseline": None, "update_baseline": False})
        return settings, gates

    def _suite_settings(self, suite: str) -> tuple[GymSettings, list[Gate]]:
        """How the owner finds a suite's settings and gates (it may not have collected: xdist)."""
        config = self.config
        path = config.rootpath / suite
        for bench_settings in (s for name, s in self._benchmark_files.values() if name == suite):
            return bench_settings, self._gates(bench_settings.gate, f"--gym-benchmark {suite}")
        if not is_suite_file(path):
            return self.settings, self.gates
        settings, _ = suite_settings(
            path, config.getoption, config.getini, config.invocation_params.dir, config.rootpath
        )
        return settings, self._gates(settings.gate, f"suite file {path}")

    # -- collection ---------------------------------------------------------------------------------

    def collect_file(self, file_path: Path, parent: pytest.Collector) -> GymDatasetFile | None:
        if is_suite_file(file_path):
            suite: GymSuiteFile = GymSuiteFile.from_parent(parent, path=file_path)
            return suite
        if str(file_path) in self._benchmark_files:
            name, settings = self._benchmark_files[str(file_path)]
            bench: GymDatasetFile = GymDatasetFile.from_parent(parent, path=file_path, settings=settings, nodeid=name)
            return bench
        if str(file_path) not in self.settings.dataset:
            return None
        collector: GymDatasetFile = GymDatasetFile.from_parent(parent, path=file_path, settings=self.settings)
        return collector

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
        """--gym-merge: every selected trial must come from a shard; else refuse, or deselect them when allowed."""
        merged = self.merged
        if merged is None:
            return
        missing = [i for i in items if isinstance(i, GymTrial) and i.spec.key not in merged]
        if not missing:
            return
        trials = [MissingTrial(item.nodeid, item.spec.task.hash, item.spec.repeat) for item in missing]
        if self.settings.merge_allow_missing:
            message = missing_message(trials, merged.folders, "Deselected (--gym-merge-allow-missing).")
            self.add_note(message.removeprefix("pytest-gym merge: "))
            gone = set(map(id, missing))
            items[:] = [i for i in items if id(i) not in gone]
            config.hook.pytest_deselected(items=missing)
            if self.results is not None:
                self.results.narrowed = True
            return
        if self.owner:  # an xdist worker leaves them in: each fails with the message instead
            raise pytest.UsageError(
                missing_message(trials, merged.folders, "Or pass --gym-merge-allow-missing to judge without them.")
            )

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.progress.total = sum(1 for item in session.items if isinstance(item, GymTrial))
        if self.owner and self.progress.total and not self.config.option.collectonly:
            self.run.start_trajectories()

    # -- re-scoring an earlier run -------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """--gym-rescore: the owner re-verifies every saved answer once, before any trial (and before xdist
        starts its workers): the trials, wherever they run, only read the verdicts from the run folder."""
        if not self.owner or not self.settings.rescore or self.config.option.collectonly:
            return
        from pytest_gym.gym.rescore import UnsafeRescore, moved, moved_note, write_rescore_info

        source = Path(self.settings.rescore)
        try:
            result = self.run.rescore(source)
        except UnsafeRescore as exc:
            raise pytest.UsageError(f"pytest-gym: --gym-rescore {source}: {exc}") from None
        except GymError as exc:
            error = clean_text(f"pytest-gym: --gym-rescore: {exc}", MAX_MESSAGE)
            write_rescore_info(self.run_dir, source, None, error)
            return
        report = moved(result, self.settings.min_reward, self.settings.task_pass)
        self.rescore_report = {"source": str(source), **report}
        write_rescore_info(self.run_dir, source, report)
        self.add_note(moved_note(source, report))

    # -- trials ------------------------------------------------------------------------------------

    def plan(self, session: pytest.Session) -> list[TrialSpec]:
        """Every selected trial, in run order (identical on all xdist workers, which claim them from one another)."""
        return [item.spec for item in session.items if isinstance(item, GymTrial)]

    def _trial_state(self, session: pytest.Session) -> TrialState:
        if self.trials is None:
            planned = self.plan(session)
            settings = self.settings
            reusable = self.merged or (load_reusable(Path(settings.resume), settings) if settings.resume else None)
            reused: frozenset[str] = frozenset()
            rescored = None
            if settings.rescore:
                from pytest_gym.gym.rescore import load_rescored

                rescored = load_rescored(self.run.run_dir, Path(settings.rescore))
            if reusable is not None:
                self.add_note(reusable.note)
                reused = frozenset(s.nodeid for s in planned if reusable.take(s.task.hash, s.repeat) is not None)
            self.trials = TrialState(
                parse_error_budget(settings.max_errors),
                len(planned),
                SharedErrorCount(self.run.run_dir),
                reusable,
                reused,
                rescored,
            )
        return self.trials

    def open_gym(self, session: pytest.Session) -> GymServer:
        """The deployment, acquired once per process; dispatching of the planned trials starts with it."""
        # Once acquired, or known unreachable, no plan is made again: per trial that would be O(trials^2).
        if self.run.server is not None:
            return self.run.server
        try:
            if self.run.error is not None:
                raise GymError(self.run.error)
            state = self._trial_state(session)
            planned = self.plan(session)
            self.run.settings = self.start_settings()
            return self.run.open(planned, worker_queue(session, planned), skip=state.reused)
        except GymError as exc:
            pytest.fail(clean_text(f"pytest-gym: {exc}", MAX_MESSAGE), pytrace=False)

    def trial_outcome(self, item: GymTrial) -> TrialOutcome:
        """The finished rollout of ``item`` (reused, or run now); a fault fails the setup phase."""
        spec = item.spec
        state = self._trial_state(item.session)
        record = state.reusable.take(spec.task.hash, spec.repeat) if state.reusable else None
        from_shard = self.merged is not None
        outcome = outcome_from_rollout(spec, record, reused=not from_shard, keep_latency=from_shard) if record else None
        if state.rescored is not None:
            outcome = state.rescored.outcome(spec)  # no rollout: the saved answer, verified again
            self.run.open_writer().record(outcome)
        elif self.merged is not None:
            outcome = outcome or self._merged_fault(spec)  # its record is copied at the end (write_merged)
        elif outcome is not None and record is not None:
            self.run.open_writer().append_rollout(record)
        else:
            self._check_run_timeout(item)
            self.open_gym(item.session)
            if state.budget.exceeded(state.errors.count(), state.total):
                self.run.stop_dispatch()
                pytest.fail(
                    f"not run: {state.errors.count()} trials errored, more than --gym-max-errors allows "
                    f"({state.budget.limit(state.total)} of {state.total}); fix the cause (see the first errors) "
                    "and rerun",
                    pytrace=False,
                )
            assert self.run.dispatcher is not None
            deadline = self._run_deadline()
            try:
                remaining = None if deadline is None else max(0.0, deadline - time.time())
                found: TrialOutcome | None = self.run.dispatcher.result(spec, remaining)
            except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
                found = None
            if found is None:  # failed outside the except block: no chained traceback in the report
                self._check_run_timeout(item)
                pytest.fail("cancelled: the run was stopped before this rollout started", pytrace=False)
            outcome = found
            if not outcome.ok:
                self._check_run_timeout(item)
        item.user_properties.extend(outcome.to_properties())
        if not outcome.ok:
            state.errors.add()
            if self.settings.policy == "replay" and not self.settings.rescore:
                outcome.error = f"{outcome.error}{self._replay_miss(outcome, spec)}"
            raise_fault(outcome)
        return outcome

    def _run_deadline(self) -> float | None:
        """When --gym-run-timeout ends the run (epoch seconds), from the owner's start; None without it."""
        timeout = self.settings.run_timeout
        if timeout is None:
            return None
        if self._deadline is None:
            try:
                started = float((self.run_dir / RUN_STARTED_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                started = time.time()
            self._deadline = started + timeout
        return self._deadline

    def _check_run_timeout(self, item: GymTrial) -> None:
        """Past the run's deadline: start nothing more, cancel what runs, and error this trial saying why.

        The trial counts as an infrastructure fault of its suite (``error_class`` run_timeout)."""
        deadline = self._run_deadline()
        if deadline is None or time.time() < deadline:
            return
        self.run.stop_dispatch()
        message = (
            f"not finished: the run timeout (--gym-run-timeout {self.settings.run_timeout:g} s) was hit before this "
            "trial's rollout finished; raise the timeout, run fewer trials (-k, --gym-repeats) or more at once "
            "(--gym-concurrency)"
        )
        fault = TrialOutcome.for_spec(item.spec, error_class="run_timeout", error=message)
        item.user_properties.extend(fault.to_properties())
        pytest.fail(message, pytrace=False)

    def _replay_miss(self, outcome: TrialOutcome, spec: TrialSpec) -> str:
        """Why a replayed trial had no recording (Gym reports only that its model call failed)."""
        from pytest_gym.core.dataset import DatasetError
        from pytest_gym.standins.cassette import misses_for_row, read_misses

        try:
            row = outcome.request or spec.task.load_row()
            misses = misses_for_row(read_misses(self.run.run_dir), row)
        except (OSError, ValueError, DatasetError):
            return ""
        return f"\n{misses[0].message}" if misses else ""

    def _merged_fault(self, spec: TrialSpec) -> TrialOutcome:
        """A trial of a merge without a reward: the fault its shard recorded, or not run by any shard."""
        assert self.merged is not None
        failure = self.merged.failure(spec.task.hash, spec.repeat)
        if failure is not None:
            return outcome_from_failure(spec, failure)
        pytest.fail(
            missing_message(
                [MissingTrial(spec.nodeid, spec.task.hash, spec.repeat)],
                self.merged.folders,
                "Or pass --gym-merge-allow-missing to judge without it.",
            ),
            pytrace=False,
        )

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        session = item.session
        if session.shouldstop or session.shouldfail:
            self.run.stop_dispatch()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """On the owner: every trial's reports arrive here (xdist forwards the workers')."""
        if self.results is None:
            return
        if report.when == "setup" and report.failed:
            self._setup_errors[report.nodeid] = clean_text(report.longreprtext.strip(), MAX_MESSAGE) or "setup failed"
        if report.when != "teardown":
            return
        setup_error = self._setup_errors.pop(report.nodeid, None)
        outcome = from_properties(report.nodeid, report.user_properties)
        if outcome is None:
            return
        if setup_error is not None:
            outcome.error, outcome.error_class = setup_error, outcome.error_class or "setup"
        self.results.add(outcome, errored=setup_error is not None)
        self.progress.add(outcome)
        if self.early_aggregate and self.progress.done == self.progress.total:
            self.run.start_aggregate()
        self.config.hook.pytest_gym_trial_result(trial=outcome, result=outcome)
        self._maybe_print_progress()

    def _maybe_print_progress(self) -> None:
        if self.config.get_verbosity() < 0 or not self.progress.due():
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(self.progress.line())

    def add_note(self, note: object) -> None:
        """Keep a note for the terminal section and the summary: masked, bounded, once."""
        text = clean_text(str(note), MAX_MESSAGE)
        if text not in self.notes:
            self.notes.append(text)

    def add_worker_notes(self, notes: Sequence[object]) -> None:
        """Notes a worker sent back (the controller keeps one copy of each)."""
        for note in notes:
            self.add_note(note)

    def worker_payload(self) -> dict[str, Any]:
        """What a worker sends the controller at its end (builtins only: xdist serialises it)."""
        return {"notes": list(self.notes)}

    # -- the end of the session, in order ----------------------------------------------------------

    def _step(self, what: str, call: Callable[..., T], *args: Any) -> T | None:
        """One step of the end of the session: a failure becomes a note, never a traceback that would
        skip the steps after it (JUnit, the summary, the exports, stopping Gym)."""
        try:
            return call(*args)
        except Exception as exc:
            self.add_note(f"{what} failed: {type(exc).__name__}: {exc}")
            return None

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        """Before pytest's own sessionfinish (JUnit): close, judge, report gates. After: JUnit, exports, stop."""
        try:
            if session.shouldstop or session.shouldfail or session.exitstatus == pytest.ExitCode.INTERRUPTED:
                self._step("stopping the rollouts", self.run.stop_dispatch)  # -x, --maxfail, Ctrl-C: cancel
            self._step("closing the rollouts", self._close_rollouts)
            if self.shard is not None and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
                # A shard may hold none of a small suite's tasks: that job did its part.
                self.add_note(f"shard {self.shard} holds none of the selected tasks: nothing to run here")
                session.exitstatus = pytest.ExitCode.OK
            if self.owner:
                self._judge(session)
            else:
                workeroutput = getattr(self.config, "workeroutput", None)
                if workeroutput is not None:
                    workeroutput[WORKER_OUTPUT] = self.worker_payload()
        except BaseException:
            self._stop_gym()
            raise
        try:
            return (yield)
        finally:
            try:
                if self.owner:
                    self._step("adding the suite results to the JUnit report", self._postprocess_junit)
                    if self.verdicts is not None:
                        self._step("exporting the run", self._export, session)
            finally:
                self._stop_gym()

    def _close_rollouts(self) -> None:
        try:
            self.run.close()  # every rollout of this process is in the run folder now
        finally:
            self._collect_run_notes()

    def _judge(self, session: pytest.Session) -> None:
        """Judge the suites and write the summary, whatever Gym answered: each step may fail on its own."""
        results = self.results
        if results is None or not results.trials:
            return
        entries = None
        if self.merged is not None:
            self._step("writing the merged run folder", self._write_merged, results)
        else:
            entries = self._step("Gym's /aggregate_metrics", self.run.aggregate_metrics)
        self._collect_run_notes()
        verdicts = self._step("judging the suites", results.judge, self.config.rootpath)
        if verdicts is None and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # no verdict is not a pass
        self.verdicts = verdicts = verdicts or []
        deferred = self._defer(verdicts)
        if self.shard is not None and not self.deferred:
            self.add_note(
                f"gates and baselines judged on shard {self.shard}'s part of the suite (--gym-shard-verdicts)"
            )
        suites = {v.suite: v.metrics() for v in verdicts}
        for suite, (labels, _) in deferred.items():
            suites[suite]["gates_deferred"] = dict.fromkeys(labels, self.deferred)
        extra: dict[str, Any] = {}
        if self.shard is not None:
            extra = {"shard": str(self.shard), "verdicts": "deferred" if self.deferred else "judged"}
        if self.merged is not None:
            extra = {"merged_from": [f.label for f in self.merged.folders]}
        if self.rescore_report is not None:
            extra["rescore"] = self.rescore_report
        self._step(
            "writing the summary",
            lambda: write_summary(self.run.run_dir, suites, self.settings.summary, notes=self.notes, **extra),
        )
        self._step("Gym's benchmark metrics", self._benchmark_metrics, verdicts, entries or [])
        self._write_html()
        failed = False
        session.testscollected += sum(len(v.gates) + (v.comparison is not None) for v in verdicts)
        session.testscollected += sum(len(labels) + has_baseline for labels, has_baseline in deferred.values())
        for verdict in verdicts:
            self._step(
                "the pytest_gym_suite_result hook",
                lambda v: self.config.hook.pytest_gym_suite_result(suite=v.suite, metrics=suites[v.suite]),
                verdict,
            )
            reports = self._step("reporting the gates", lambda v: list(synthetic_reports(v)), verdict) or []
            if verdict.suite in deferred and self.deferred:
                labels, has_baseline = deferred[verdict.suite]
                path = str(self.config.rootpath / verdict.suite)
                reports += deferred_reports(verdict.suite, path, labels, has_baseline, self.deferred)
            for report in reports:
                self._step("reporting a gate", lambda r: self.config.hook.pytest_runtest_logreport(report=r), report)
                failed = failed or report.failed
        if failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _benchmark_of(self, suite: str) -> tuple[str, str | None] | None:
        """(benchmark, agent) of a benchmark suite: --gym-benchmark's, or a suite file's ``benchmark:``."""
        if suite in self.benchmark_suites:
            return self.benchmark_suites[suite]
        path = self.config.rootpath / suite
        if not is_suite_file(path):
            return None
        from pytest_gym.suitefile import load_suite_file

        suite_file = load_suite_file(path)
        if not suite_file.benchmark:
            return None
        return suite_file.benchmark, self._suite_settings(suite)[0].agent

    def _benchmark_metrics(self, verdicts: list[SuiteVerdict], entries: list[dict[str, Any]]) -> None:
        """Gym's own aggregate metrics of each benchmark suite (its agent's): terminal lines and a run-folder file."""
        found: dict[str, Any] = {}
        for verdict in verdicts:
            bench = self._benchmark_of(verdict.suite)
            if bench is None:
                continue
            name, agent = bench
            entry = next((e for e in entries if (e.get("agent_ref") or {}).get("name") == agent), None)
            if entry is None and len(entries) == 1:
                entry = entries[0]
            key_metrics = dict(entry.get("key_metrics") or {}) if entry else {}
            found[verdict.suite] = {"benchmark": name, "agent": agent, "key_metrics": key_metrics}
            shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in key_metrics.items())
            self.gym_metric_lines.append(
                f"{verdict.suite}: Gym's metrics for benchmark {name} ({agent}): {shown or 'none (see the notes)'}"
            )
        if found:
            from pytest_gym.core.atomic import write_atomically

            text = json.dumps(found, indent=2, default=str)
            write_atomically(self.run_dir / BENCHMARK_METRICS_FILE, text.encode(), fsync=False)

    def _defer(self, verdicts: list[SuiteVerdict]) -> dict[str, tuple[list[str], bool]]:
        """In a shard: take the gates out of the verdicts (judged at the merge); per suite, their labels and
        whether a baseline waits too."""
        if not self.deferred:
            return {}
        deferred = {}
        for verdict in verdicts:
            settings, _ = self._suite_settings(verdict.suite)
            compares = bool(settings.baseline) and not settings.update_baseline  # the check that would be a test
            deferred[verdict.suite] = ([g.gate.label for g in verdict.gates], compares)
            verdict.gates = []
        self.deferred_gates = {suite: labels for suite, (labels, _) in deferred.items()}
        return deferred

    def _write_merged(self, results: SuiteResults) -> None:
        """--gym-merge: this run's folder gets the judged trials of the shards, in Gym's layout."""
        assert self.merged is not None
        judged = {(task_hash, repeat) for _, task_hash, repeat in results.trials}
        try:
            merged = write_merged(self.merged, self.run.run_dir, judged.__contains__)
        except OSError as exc:
            self.add_note(f"merge: the merged run folder could not be written: {exc}")
            return
        finally:
            self.merged.close()
        for note in merged.notes:
            self.add_note(note)

    def _write_html(self) -> None:
        """The run's HTML report (``report.html`` in the run folder, and at ``--gym-html``)."""
        from pytest_gym.report.html import build_report

        try:
            page = build_report(self.run.run_dir, baseline=self.settings.baseline)
            if self.settings.html:
                Path(self.settings.html).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(page, self.settings.html)
        except (OSError, ValueError) as exc:
            self.add_note(f"the HTML report could not be written: {type(exc).__name__}: {exc}")

    def _collect_run_notes(self) -> None:
        for note in self.run.notes:
            self.add_note(note)
        self.run.notes.clear()

    def _postprocess_junit(self) -> None:
        xmlpath = getattr(self.config.option, "xmlpath", None)
        if not xmlpath or not Path(xmlpath).exists():
            return
        suites = {v.suite: flat_properties(v) for v in self.verdicts or []}
        postprocess_junit(Path(xmlpath), suites, xsd_strict=True, keep_errors=True)

    def _export(self, session: pytest.Session) -> None:
        """Run the exports last, when the JUnit file, the summary and the exit status are final."""
        run_dir = self.run.run_dir
        self._scrub()  # what the exporters upload is masked by now (Gym still runs: masked again at its stop)
        artifacts = [run_dir / name for name in ARTIFACTS if (run_dir / name).is_file()]
        run = ExportRun.from_run_dir(run_dir, self.settings.model_dump(mode="json"), int(session.exitstatus), artifacts)
        for returned in self.config.hook.pytest_gym_export(run=run, config=self.config):
            self.exports.extend(_export_pairs(returned))
        failed = any(result.status == "failed" for _, result in self.exports)
        if failed and not self.settings.export_soft and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _scrub(self) -> None:
        """Mask what other processes wrote into the run folder (Gym's log, its outputs, the policy's log)."""
        if self.owner and self.run.run_dir.is_dir():
            for problem in self._step("masking the run folder", scrub_run_folder, self.run.run_dir) or []:
                self.add_note(problem)

    def _stop_gym(self) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            self._step("stopping Gym", self.run.finish)
            self._collect_run_notes()
        finally:
            self._scrub()  # again: Gym wrote to its log until it stopped

    @pytest.hookimpl(wrapper=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Generator[None, None, None]:
        result = yield
        if not self.verdicts and self.shard is not None and self.notes and terminalreporter.config.get_verbosity() >= 0:
            terminalreporter.write_sep("=", "pytest-gym")
            for note in self.notes:
                terminalreporter.write_line(f"note: {note}")
        write_section(
            terminalreporter,
            self.verdicts or [],
            str(self.run.run_dir),
            self.notes,
            self.exports,
            self.settings.baseline,
            deferred=(self.deferred, self.deferred_gates) if self.deferred else None,
            extra=self.gym_metric_lines,
        )
        return result

    def unconfigure(self) -> None:
        """Last resort (a session that never reached sessionfinish): stop what this process started."""
        if self._sigterm_installed and signal.getsignal(signal.SIGTERM) is _terminate:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self.merged is not None:
            self.merged.close()
        self._stop_gym()


def _in_a_searched_dir(dataset: str, args: Sequence[str], norecurse: Sequence[str]) -> bool:
    """Whether a directory on the command line collects ``dataset`` anyway. Naming it as well would make pytest 8
    collect nothing else from that directory (pytest-dev/pytest#12083: ``pytest . data/x.jsonl`` runs only x)."""
    path = Path(dataset).resolve()
    for arg in args:
        base = Path(arg.split("::")[0]).resolve()
        if base.is_dir() and path.is_relative_to(base):
            between = path.relative_to(base).parts[:-1]
            if not any(fnmatch.fnmatch(part, pattern) for part in between for pattern in norecurse):
                return True
    return False


def _export_pairs(returned: Any) -> list[tuple[str, ExportResult]]:
    if isinstance(returned, ExportResult):
        return [("export", returned)]
    if isinstance(returned, list):
        return [(str(name), result) for name, result in returned if isinstance(result, ExportResult)]
    return []
