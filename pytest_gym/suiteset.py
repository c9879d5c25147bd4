"""The suites of one run: which settings and gates each is judged with, the benchmarks among them, and what
their suite files add to the run's one ``gym env start``.

A suite is a dataset given by option or ini (judged with the run's settings), a suite file (``*.gym.yaml``,
its own settings), or a benchmark (``--gym-benchmark NAME`` or a suite file's ``benchmark:``). The owner
process judges suites it may never have collected (xdist), so it finds their settings again here by name.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.endpoint import GymError
from pytest_gym.core.masking import MAX_MESSAGE, clean_text, mask_secrets
from pytest_gym.core.options import is_suite_file
from pytest_gym.core.outcome import TrialOutcome, TrialSpec
from pytest_gym.core.settings import GymSettings, SettingError, resolve
from pytest_gym.inidir import ini_dir
from pytest_gym.judge.gates import Gate
from pytest_gym.runfolder.layout import BENCHMARK_METRICS_FILE
from pytest_gym.runfolder.runinfo import TaskRanges, record_task_ranges
from pytest_gym.runner.plan import PlanError, gates_of

if TYPE_CHECKING:
    from pytest_gym.judge.known import KnownFailures
    from pytest_gym.judge.suites import SuiteResults, SuiteVerdict
    from pytest_gym.rollout.admission import Admission


def usage_gates(expressions: tuple[str, ...], where: str) -> list[Gate]:
    try:
        return gates_of(expressions, where)
    except PlanError as exc:
        raise pytest.UsageError(str(exc)) from None


class Suites:
    """The run's suites; the session owns one."""

    def __init__(
        self,
        config: pytest.Config,
        settings: GymSettings,
        gates: list[Gate],
        run_dir: Path,
        *,
        merged: bool = False,
        deferred: bool = False,
    ) -> None:
        self.config = config
        #: --gym-merge: the shards' datasets are the run (the command line's paths are not collected).
        self.merged = merged
        #: A shard: gates and baselines wait for the merge.
        self.deferred = deferred
        self.settings = settings
        self.gates = gates
        self.run_dir = run_dir
        #: What the run's ``gym env start`` gets from suite files: benchmarks, and Hydra items (key -> item, where).
        self._start_benchmarks: list[str] = []
        self._start_hydra: dict[str, tuple[str, str]] = {}
        #: Benchmark suites: data path -> (suite name, settings) for --gym-benchmark; suite -> (benchmark, agent).
        self.benchmark_files: dict[str, tuple[str, GymSettings]] = {}
        self.benchmark_suites: dict[str, tuple[str, str | None]] = {}
        #: Gym's own metrics of each benchmark suite, for the terminal.
        self.gym_metric_lines: list[str] = []
        #: Each dataset's range of ``_ng_task_index`` (the run's datasets first, in their order).
        self.task_ranges = TaskRanges()

    def task_offset(self, dataset: Path) -> int:
        """The first ``_ng_task_index`` of ``dataset``'s tasks in this run (see ``TaskRanges``)."""
        from pytest_gym.core.dataset import count_rows

        ranges = self.task_ranges
        if dataset not in ranges:
            for known in (*self.settings.dataset, *self.benchmark_files):
                if known not in ranges and Path(known).is_file():
                    ranges.start(Path(known), count_rows(Path(known)))
        return ranges.start(dataset, count_rows(dataset))

    def record_task_ranges(self) -> None:
        """Write the ranges of the datasets this process collected into the run info."""
        record_task_ranges(self.run_dir, self.task_ranges.entries(self.config.rootpath))

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

    def add_benchmark_args(self) -> None:
        """``--gym-benchmark NAME``: its prepared data is collected as the suite ``NAME``."""
        if not self.settings.benchmark:
            return
        from pytest_gym.suitefile import SuiteFileError, benchmark_overrides

        config = self.config
        for name in self.settings.benchmark:
            try:
                overrides = benchmark_overrides(
                    name, config.getoption, config.getini, config.invocation_params.dir, ini_dir(config)
                )
                settings = resolve(
                    config.getoption,
                    config.getini,
                    cli_base=config.invocation_params.dir,
                    ini_base=ini_dir(config),
                    overrides=overrides,
                )
            except (SuiteFileError, SettingError) as exc:
                raise pytest.UsageError(f"pytest-gym: --gym-benchmark {name}: {exc}") from None
            data = self.benchmark_dataset(name, settings, self.settings.benchmark_data, f"--gym-benchmark {name}")
            self.benchmark_files[str(data)] = (name, settings)
            self.benchmark_suites[name] = (name, settings.agent)
            if str(data) not in config.args:
                config.args.append(str(data))

    def add_dataset_args(self) -> None:
        """Make sure every dataset is collected; alone, when the command line named datasets but no paths."""
        config = self.config
        self.add_benchmark_args()
        if self.benchmark_files and config.args_source != pytest.Config.ArgsSource.ARGS:
            # Named on the command line, no paths: run the benchmarks (and --gym-dataset's datasets) alone.
            config.args[:] = [*self.benchmark_files, *self.settings.dataset]
        datasets = list(self.settings.dataset)
        if not datasets:
            return
        for dataset in datasets:
            if not Path(dataset).is_file():
                raise pytest.UsageError(
                    f"pytest-gym: dataset {dataset} does not exist (from --gym-dataset or gym_dataset); "
                    "check the path (relative paths: command line from the current folder, ini from the ini file's "
                    "folder)"
                )
        from_cli = bool(config.getoption("gym_dataset")) or self.merged  # a merge judges only them
        if from_cli and config.args_source != pytest.Config.ArgsSource.ARGS:
            config.args[:] = [*self.benchmark_files, *datasets]
            return
        # A node id on the command line (``d.jsonl::<task>[r1]``, pasted from a failure) names its dataset already.
        known = {str(Path(arg.split("::")[0]).resolve()) for arg in config.args}
        norecurse = config.getini("norecursedirs")
        config.args.extend(
            d
            for d in datasets
            if str(Path(d).resolve()) not in known and not _in_a_searched_dir(d, config.args, norecurse)
        )

    def update_command(self) -> str:
        """This run's command with ``--gym-update-baseline``: what writes (or updates) its baselines. Masked: it is
        printed, and reaches JUnit in the baseline check's failure, which pytest's own writer does not mask."""
        import shlex

        args = [str(arg) for arg in self.config.invocation_params.args]
        command = ["pytest", *args, *(["--gym-update-baseline"] * ("--gym-update-baseline" not in args))]
        return mask_secrets(shlex.join(command))

    def check_baseline_paths(self, suites: Iterable[Any]) -> None:
        """``--gym-update-baseline``: every collected suite (a ``GymDatasetFile``) needs a file to write, from
        ``--gym-baseline`` or its suite file's ``baseline:`` (known only now: suite files are collected)."""
        if not self.settings.update_baseline or self.deferred:
            return
        missing = sorted({f.nodeid for f in suites if not getattr(f, "baseline", None)})
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise pytest.UsageError(
                f"pytest-gym: --gym-update-baseline has nowhere to write the baseline of {shown}: pass "
                "--gym-baseline PATH, or add 'baseline: PATH' to its suite file (*.gym.yaml)"
            )

    def results(self, known: KnownFailures | None, seed: int) -> SuiteResults:
        """The owner's collector of trial outcomes, judged per suite with each suite's own settings at the end."""
        from pytest_gym.judge.suites import SuiteResults

        settings, option = self.settings, self.config.getoption
        judged = settings.model_copy(update={"baseline": None, "update_baseline": False}) if self.deferred else settings
        results = SuiteResults(
            judged,
            self.gates,
            settings_for=self.judged_settings,
            known=known,
            limits_for=self.suite_limits,
            seed=seed,
            update_hint=self.update_command(),
        )
        # Only the selected trials count: the summary says when a selection narrowed the suite.
        narrowing = (option("keyword"), option("markexpr"), option("deselect", None), option("lf", False))
        results.narrowed = any(narrowing)
        return results

    def judged_settings(self, suite: str) -> tuple[GymSettings, list[Gate]]:
        """A suite's settings as the owner judges it: without its baseline while verdicts are deferred."""
        settings, gates = self.suite_settings(suite)
        if self.deferred:
            settings = settings.model_copy(update={"baseline": None, "update_baseline": False})
        return settings, gates

    def suite_settings(self, suite: str) -> tuple[GymSettings, list[Gate]]:
        """How the owner finds a suite's settings and gates (it may not have collected: xdist)."""
        config = self.config
        path = config.rootpath / suite
        for bench_settings in (s for name, s in self.benchmark_files.values() if name == suite):
            return bench_settings, usage_gates(bench_settings.gate, f"--gym-benchmark {suite}")
        if not is_suite_file(path):
            return self.settings, self.gates
        from pytest_gym.suitefile import suite_settings

        settings, _ = suite_settings(
            path, config.getoption, config.getini, config.invocation_params.dir, ini_dir(config)
        )
        return settings, usage_gates(settings.gate, f"suite file {path}")

    def suite_limits(self, suite: str) -> tuple[float | None, int | None, str] | None:
        """A suite file's own budget (``max_cost``, ``max_tokens``, where), apart from the run's."""
        path = self.config.rootpath / suite
        if not is_suite_file(path):
            return None
        from pytest_gym.suitefile import load_suite_file

        found = load_suite_file(path)
        return found.max_cost, found.max_tokens, f"suite file {suite}: max_cost/max_tokens"

    def admission(self, planned: Sequence[TrialSpec], known: Sequence[TrialOutcome]) -> Admission | None:
        """Which of ``planned`` start (budgets, adaptive repeats, sequential gates); None: all of them."""
        from pytest_gym.judge.sequential import run_seed
        from pytest_gym.runner.admit import build_admission, sequential_stopper

        seed = run_seed(self.settings.seed, str(self.run_dir))
        return build_admission(
            self.run_dir,
            self.settings,
            planned,
            lambda suite: self.suite_settings(suite)[0],
            self.suite_limits,
            known,
            lambda suite, own: sequential_stopper(suite, own, self.suite_settings(suite)[1], planned, seed),
        )

    def defer(self, verdicts: list[SuiteVerdict]) -> dict[str, tuple[list[str], bool]]:
        """In a shard: take the gates out of the verdicts (judged at the merge); per suite, their labels and
        whether a baseline waits too."""
        deferred = {}
        for verdict in verdicts:
            settings, _ = self.suite_settings(verdict.suite)
            compares = bool(settings.baseline) and not settings.update_baseline  # the check that would be a test
            deferred[verdict.suite] = ([g.gate.label for g in verdict.gates], compares)
            verdict.gates = []
        return deferred

    def benchmark_of(self, suite: str) -> tuple[str, str | None] | None:
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
        return suite_file.benchmark, self.suite_settings(suite)[0].agent

    def write_benchmark_metrics(self, verdicts: list[SuiteVerdict], entries: list[dict[str, Any]]) -> None:
        """Gym's own aggregate metrics of each benchmark suite (its agent's): terminal lines and a run-folder file."""
        found: dict[str, Any] = {}
        for verdict in verdicts:
            bench = self.benchmark_of(verdict.suite)
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
            text = json.dumps(found, indent=2, default=str)
            write_atomically(self.run_dir / BENCHMARK_METRICS_FILE, text.encode(), fsync=False)


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
