"""The run as pytest sees it: one ``GymSession`` per process, registered once; its methods are the hooks.

The session holds the hooks and their order; the work is elsewhere: the run plan (``runner.plan``, checked
before anything starts), the suites (``suiteset``), where each trial's outcome comes from (``runner.sources``,
chosen once), the rollouts (``runner.run``), the judge and the reports. The end of the session is one ordered
method, ``pytest_sessionfinish``: close the rollouts, judge the suites and report gates and baselines as tests
(before pytest writes JUnit), then post-process JUnit, run the exports and stop Gym (after).

Under xdist the controller owns the run (it judges, exports and stops Gym) and each worker runs trials;
workers send their notes back through ``workeroutput`` (see ``pytest_gym.xdist_hooks``).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_gym.collect import (
    GymDatasetFile,
    GymSuiteFile,
    GymTask,
    GymTrial,
    raise_fault,
    sequential_order,
    suite_coverage,
    trial_specs,
)
from pytest_gym.core.endpoint import GymError, UnknownAgent
from pytest_gym.core.masking import MAX_MESSAGE, add_secret, clean_text
from pytest_gym.core.options import is_suite_file
from pytest_gym.core.outcome import TrialOutcome, TrialSpec, from_properties, task_trials
from pytest_gym.core.settings import GymSettings, SettingError, resolve
from pytest_gym.current import SESSION_KEY, SESSION_PLUGIN
from pytest_gym.inidir import ini_dir
from pytest_gym.judge.sequential import run_seed
from pytest_gym.report.progress import Progress
from pytest_gym.report.synthetic import deferred_reports, end_line, fresh_line, log_report, synthetic_reports
from pytest_gym.rollout.budget import SharedErrorCount, parse_error_budget
from pytest_gym.runfolder.records import RecordError
from pytest_gym.runfolder.runinfo import write_shard_info
from pytest_gym.runfolder.scrub import scrub_run_folder
from pytest_gym.runner.plan import PlanError, RunPlan, build_plan
from pytest_gym.runner.run import GymRun
from pytest_gym.runner.server import GymServer
from pytest_gym.runner.sources import Fresh, Merged, NotRun, Rescored, Resumed, TrialSource
from pytest_gym.suiteset import Suites
from pytest_gym.xdist_hooks import WORKER_OUTPUT, worker_owner_pid, worker_queue, worker_run_dir, worker_slot

if TYPE_CHECKING:
    from pytest_gym.exporters.api import Exporter, ExportResult
    from pytest_gym.judge.suites import SuiteResults, SuiteVerdict
    from pytest_gym.judge.summary import RunSummary
    from pytest_gym.runfolder.merge import ShardRecords

T = TypeVar("T")


def settings_of(config: pytest.Config) -> GymSettings:
    try:
        return resolve(config.getoption, config.getini, cli_base=config.invocation_params.dir, ini_base=ini_dir(config))
    except SettingError as exc:
        raise pytest.UsageError(str(exc)) from None


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a CI job cancelled, a container stopped) ends the run like Ctrl-C: pytest reports what
    # finished and every sessionfinish runs, so Gym and the policy are stopped and the run folder is whole.
    raise KeyboardInterrupt(f"pytest-gym: stopped by signal {signum}")


class GymSession:
    """pytest-gym's state and hooks for one pytest process."""

    def __init__(self, config: pytest.Config, plan: RunPlan) -> None:
        self.config = config
        self.settings = settings = plan.settings
        self.owner = plan.owner
        self.shard = plan.shard
        self.merged: ShardRecords | None = plan.merged
        self.gates = list(plan.gates)
        self.reusable = plan.reusable
        self.known = plan.known
        #: In a shard: per suite, the labels of the gates left to the merge.
        self.deferred_gates: dict[str, list[str]] = {}
        workerinput = getattr(config, "workerinput", None)
        self.run = GymRun(
            settings=settings,
            run_dir=plan.run_dir,
            owner=plan.owner,
            worker=worker_slot(workerinput),
            owner_pid=worker_owner_pid(workerinput),
        )
        self.suites = Suites(
            config, settings, self.gates, plan.run_dir, merged=plan.merged is not None, deferred=bool(self.deferred)
        )
        #: Notes for the terminal section and the summary: this process's, and (controller) the workers'.
        self.notes: list[str] = []
        self.source: TrialSource | None = None
        self.results: SuiteResults | None = None
        self.progress = Progress(interval_s=settings.progress_interval)
        self.verdicts: list[SuiteVerdict] | None = None
        self.summary: RunSummary | None = None
        self.exports: list[tuple[str, ExportResult]] = []
        self.exporters: list[Exporter] = []
        self._setup_errors: dict[str, str] = {}
        #: --gym-rescore (owner): what the verifier change moved, for the summary.
        self.rescore_report: dict[str, Any] | None = None
        #: xdist controller: ask Gym for the aggregate metrics as soon as the last trial reported.
        self.early_aggregate = False
        self._finished = self._sigterm_installed = False
        self._errors = SharedErrorCount(plan.run_dir, counted=bool(settings.max_errors))
        for name in settings.secret_env:
            add_secret(os.environ.get(name, ""))
        if self.owner:
            self.results = self.suites.results(plan.known, run_seed(settings.seed, str(plan.run_dir)))
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
        """Plan the run, create the session and register it (once; later calls return it)."""
        existing = config.stash.get(SESSION_KEY, None)
        if existing is not None:
            assert isinstance(existing, GymSession)
            return existing
        workerinput = getattr(config, "workerinput", None)
        owner = workerinput is None
        try:
            plan = build_plan(
                settings_of(config),
                owner=owner,
                rootdir=config.rootpath,
                run_dir=run_dir if owner else worker_run_dir(workerinput),
                shard_on_command_line=config.getoption("gym_shard") is not None,
                collect_only=bool(config.option.collectonly),
                bases=(config.invocation_params.dir, ini_dir(config)),
            )
        except PlanError as exc:
            raise pytest.UsageError(str(exc)) from None
        session = cls(config, plan)
        if owner and plan.settings.run_timeout is not None:
            session.run.mark_started()
        config.stash[SESSION_KEY] = session
        config.pluginmanager.register(session, SESSION_PLUGIN)
        session._install_sigterm()
        if owner and plan.shard is not None and not config.option.collectonly:
            write_shard_info(plan.run_dir, plan.settings, str(plan.shard), config.rootpath)
        return session

    def _configured_exporters(self) -> list[Exporter]:
        from pytest_gym.exporters.api import ExportConfigError
        from pytest_gym.exporters.registry import configured_exporters

        try:
            return configured_exporters(self.settings, self.config.hook.pytest_gym_exporters, self.config.pluginmanager)
        except ExportConfigError as exc:
            raise pytest.UsageError(f"pytest-gym: {exc}") from None

    def _install_sigterm(self) -> None:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _terminate)
            self._sigterm_installed = True

    def add_dataset_args(self) -> None:
        self.suites.add_dataset_args()

    # -- collection ---------------------------------------------------------------------------------

    def collect_file(self, file_path: Path, parent: pytest.Collector) -> GymDatasetFile | None:
        if is_suite_file(file_path):
            suite: GymSuiteFile = GymSuiteFile.from_parent(parent, path=file_path)
            return suite
        if str(file_path) in self.suites.benchmark_files:
            name, settings = self.suites.benchmark_files[str(file_path)]
            bench: GymDatasetFile = GymDatasetFile.from_parent(parent, path=file_path, settings=settings, nodeid=name)
            return bench
        if str(file_path) not in self.settings.dataset:
            return None
        collector: GymDatasetFile = GymDatasetFile.from_parent(parent, path=file_path, settings=self.settings)
        return collector

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
        """--gym-sequential: suites in their seeded order. --gym-merge: every selected trial must come from a shard;
        else refuse, or deselect them when allowed."""
        sequential_order(items, run_seed(self.settings.seed, str(self.run_dir)))
        merged = self.merged
        if merged is None:
            return
        gym_items = [i for i in items if isinstance(i, (GymTrial, GymTask)) and not i.skipped_before_setup]
        lacking = [(i, s) for i in gym_items for s in i.specs if s.key not in merged]  # a skipped trial is run by none
        missing = list({id(item): item for item, _ in lacking}.values())
        if not missing:
            return
        from pytest_gym.runfolder.merge import MissingTrial, missing_message

        trials = [MissingTrial(s.nodeid, s.task.hash, s.repeat) for _, s in lacking]
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
        self.progress.total = len(self.plan(session))
        self.run.coverage = suite_coverage(session.items)  # which part of each suite runs: baselines need to know
        if self.owner:
            self.suites.check_baseline_paths(i.parent for i in session.items if isinstance(i, (GymTrial, GymTask)))
        if self.progress.total and not self.config.option.collectonly:
            self._step("recording the task ranges", self.suites.record_task_ranges)
            if self.owner:
                self.run.start_gym_steps()

    # -- re-scoring an earlier run -------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """--gym-rescore: the owner re-verifies every saved answer once, before any trial (and before xdist
        starts its workers): the trials, wherever they run, only read the verdicts from the run folder."""
        if not self.owner or not self.settings.rescore or self.config.option.collectonly:
            return
        from pytest_gym.gym.rescore import UnsafeRescore, moved_note

        source = Path(self.settings.rescore)
        try:
            report = self.run.rescore_all(source, self.settings.min_reward, self.settings.task_pass)
        except (UnsafeRescore, RecordError) as exc:
            raise pytest.UsageError(f"pytest-gym: --gym-rescore {source}: {exc}") from None
        if report is not None:
            self.rescore_report = {"source": str(source), **report}
            self.add_note(moved_note(source, report))

    # -- trials ------------------------------------------------------------------------------------

    def plan(self, session: pytest.Session) -> list[TrialSpec]:
        """Every selected trial, in run order (identical on all xdist workers, which claim them from one another)."""
        return trial_specs(session.items)

    def _source(self, session: pytest.Session) -> TrialSource:
        """Where this process's trials get their outcomes: chosen once, with the first trial."""
        if self.source is not None:
            return self.source
        settings = self.settings
        fresh = Fresh(
            self.run,
            lambda: self.open_gym(session),
            parse_error_budget(settings.max_errors),
            self._errors,
            self.progress.total or 0,  # len(self.plan(session)), counted once at the end of collection
            self.run.deadline(),
        )
        source: TrialSource = fresh
        if self.merged is not None:
            self.add_note(self.merged.note)
            source = Merged(self.merged)
        elif settings.rescore:
            from pytest_gym.gym.rescore import load_rescored

            source = Rescored(load_rescored(self.run.run_dir, Path(settings.rescore)), self.run)
        elif self.reusable is not None:
            self.add_note(self.reusable.note)
            source = Resumed(self.reusable, self.run, fresh)
        self.source = source
        return source

    def open_gym(self, session: pytest.Session, early: bool = False) -> GymServer:
        """The deployment, acquired once per process; ``early``: an xdist worker's prefetch (a trial reports it)."""
        # Once acquired, or known unreachable, no plan is made again: per trial that would be O(trials^2).
        if self.run.server is not None:
            return self.run.server
        try:
            if self.run.error is not None:
                raise GymError(self.run.error)
            source = self._source(session)
            planned = self.plan(session)
            self.run.settings = self.suites.start_settings()
            admission = self.suites.admission(planned, source.known(planned))
            return self.run.open(planned, worker_queue(session, planned), source.answered_here(planned), admission)
        except GymError as exc:
            message = clean_text(self.run.unavailable(exc, report=not early), MAX_MESSAGE)
            if isinstance(exc, UnknownAgent):  # every trial would fail alike: this one says why, no other runs
                session.shouldstop = clean_text(f"pytest-gym: {exc}", MAX_MESSAGE)
        pytest.fail(message, pytrace=False)  # outside the except block: no chained traceback

    def spec_outcome(self, session: pytest.Session, spec: TrialSpec) -> TrialOutcome:
        """One trial's outcome from this run's source (``NotRun`` when it has none): a task item's trials."""
        return self._source(session).outcome(spec)

    def trial_outcome(self, item: GymTrial) -> TrialOutcome:
        """The outcome of ``item`` from this run's source; a fault fails the setup phase."""
        try:
            outcome = self._source(item.session).outcome(item.spec)
        except NotRun as exc:
            if exc.fault is not None:
                item.user_properties.extend(exc.fault.to_properties())
            if exc.skipped:
                pytest.skip(exc.message)
            message = exc.message
        else:
            item.user_properties.extend(outcome.to_properties(item.spec.trace_url))
            if outcome.ok:
                return outcome
            self._errors.add()
            raise_fault(outcome, item.spec.trace_url)
        pytest.fail(message, pytrace=False)  # outside the except block: no chained traceback in the report

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
        for trial in task_trials(report.nodeid, report.user_properties):  # a task's (--gym-verdict task)
            self._add_trial(trial, errored=False)
        outcome = from_properties(report.nodeid, report.user_properties)
        if outcome is None:
            return
        if setup_error is not None:
            outcome.error, outcome.error_class = setup_error, outcome.error_class or "setup"
        self._add_trial(outcome, errored=setup_error is not None)

    def _add_trial(self, outcome: TrialOutcome, errored: bool) -> None:
        assert self.results is not None
        self.results.add(outcome, errored=errored)
        self.progress.add(outcome)
        if self.early_aggregate and self.progress.done == self.progress.total:
            self.run.start_aggregate()
        self.config.hook.pytest_gym_trial_result(trial=outcome, result=outcome)
        self.progress.print_if_due(self.config)

    def add_note(self, note: object) -> None:
        """Keep a note for the terminal section and the summary: masked, bounded, once."""
        text = clean_text(str(note), MAX_MESSAGE)
        if text not in self.notes:
            self.notes.append(text)

    def add_worker_notes(self, notes: Sequence[object], state: Mapping[str, Any] | None = None) -> None:
        """Notes from a worker or the run (the controller keeps one copy of each); a worker's run ``state``."""
        self.run.take_worker_state(state or {})
        for note in notes:
            self.add_note(note)

    def worker_payload(self) -> dict[str, Any]:
        """What a worker sends the controller at its end (builtins only: xdist serialises it)."""
        return {"notes": list(self.notes), **self.run.worker_state()}

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
                if (workeroutput := getattr(self.config, "workeroutput", None)) is not None:
                    workeroutput[WORKER_OUTPUT] = self.worker_payload()
        except BaseException:
            self._stop_gym()
            raise
        try:
            return (yield)
        finally:
            try:
                if self.owner:
                    self._step("adding the suite results to the JUnit report", self._postprocess_junit, session)
                    if self.verdicts is not None:
                        self._step("exporting the run", self._export, session)
            finally:
                self._stop_gym()

    def _close_rollouts(self) -> None:
        try:
            self.run.close()  # every rollout of this process is in the run folder now
        finally:
            self.add_worker_notes(self.run.take_notes())

    def _judge(self, session: pytest.Session) -> None:
        """Judge the suites and write the summary, whatever Gym answered: each step may fail on its own."""
        from pytest_gym.judge.summary import RunSummary
        from pytest_gym.judge.verdict_word import annotate
        from pytest_gym.review import compare_answers
        from pytest_gym.runfolder.summary import write_summary

        results = self.results
        if results is None or not (results.trials or results.skips):
            return
        if self.merged is not None:
            from pytest_gym.runfolder.merge import write_merged_run

            judged = {(task_hash, repeat) for _, task_hash, repeat in results.trials}
            merged = self._step("writing the merged run folder", write_merged_run, self.merged, self.run_dir, judged)
            self.add_worker_notes(merged or [])
        else:
            self.run.start_aggregate()  # in the background: Gym computes them while its health checks run
        if self.settings.health_check == "on":
            results.health_on = True
            health, results.health_note = self._step("Gym's health checks", self.run.health_checks) or ({}, None)
            results.apply_health(health)
        entries = None if self.merged else self._step("Gym's /aggregate_metrics", self.run.aggregate_metrics)
        unjudged = self.run.stopped or results.unpaid_errors() or self.run.recorded_more_than(len(results.trials))
        if unjudged and not (self.merged or self.settings.rescore):  # paid for, and judged nowhere?
            self._step("counting the rollouts' usage", lambda: results.apply_usage(self.run.recorded_usage()))
        self.add_worker_notes(self.run.take_notes())
        results.stopped, results.coverage = self.run.stopped, self.run.coverage  # what of each suite ran
        verdicts = self._step("judging the suites", results.judge, self.config.rootpath)
        if verdicts is None and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # no verdict is not a pass
        self.verdicts = verdicts = verdicts or []
        deferred = self.suites.defer(verdicts) if self.deferred else {}
        self.deferred_gates = {suite: labels for suite, (labels, _) in deferred.items()}
        if self.shard is not None and not self.deferred:
            self.add_note(
                f"gates and baselines judged on shard {self.shard}'s part of the suite (--gym-shard-verdicts)"
            )
        suites = {v.suite: v.summary() for v in verdicts}
        for v in (v for v in verdicts if v.suite in deferred):
            suites[v.suite].gates_deferred = dict.fromkeys(deferred[v.suite][0], self.deferred or "")
            annotate(suites[v.suite], v.mode, v.strict_known)  # its words say the gates wait
        settings_of = lambda name: self.suites.suite_settings(name)[0]  # noqa: E731
        compared = self._step("comparing answers", compare_answers, self.run_dir, verdicts, suites, settings_of,
                              self.config.rootpath)  # fmt: skip
        sources, notes = compared or ({}, [])
        self.add_worker_notes(notes)
        summary = RunSummary(
            run_dir=str(self.run_dir), suites=suites, notes=list(self.notes), trace_url=self.settings.trace_url,
            concurrency=self.run.concurrency_summary(), baseline_run=str(next(iter(sources.values()), "")) or None,
            finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), rescore=self.rescore_report,
        )  # fmt: skip
        if self.shard is not None:
            summary.shard, summary.verdicts = str(self.shard), "deferred" if self.deferred else "judged"
        if self.merged is not None:
            summary.merged_from = [f.label for f in self.merged.folders]
        summary.budget, summary.unjudged = results.run_budget(), results.unjudged
        self.summary = summary
        self._step("writing the summary", write_summary, self.run_dir, summary, self.settings.summary)
        self._step("Gym's benchmark metrics", self.suites.write_benchmark_metrics, verdicts, entries or [])
        from pytest_gym.report.html import write_html

        used = {v.suite: v.baseline_path for v in verdicts if v.baseline_path} or self.settings.baseline
        html_note = write_html(self.run_dir, used, self.settings.html, sources, self.run.rollouts_written)
        if html_note:
            self.add_note(html_note)
        failed = fresh_line(self.config)  # the gates' line starts at the file's name, with its own percentages
        session.testscollected += sum(len(v.gates) + (v.baseline_check() is not None) + v.expired for v in verdicts)
        session.testscollected += sum(len(labels) + has_baseline for labels, has_baseline in deferred.values())
        for verdict in verdicts:
            self._step(
                "the pytest_gym_suite_result hook",
                lambda v: self.config.hook.pytest_gym_suite_result(suite=v.suite, metrics=suites[v.suite].model_dump()),
                verdict,
            )
            reports = self._step("reporting the gates", lambda v: list(synthetic_reports(v)), verdict) or []
            if verdict.suite in deferred and self.deferred:
                labels, has_baseline = deferred[verdict.suite]
                path = str(self.config.rootpath / verdict.suite)
                reports += deferred_reports(verdict.suite, path, labels, has_baseline, self.deferred)
            for report in reports:
                self._step("reporting a gate", log_report, self.config, report)
                failed = failed or report.failed
        end_line(self.config)
        if failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _postprocess_junit(self, session: pytest.Session) -> None:
        """Suite results into the JUnit file; a file that cannot be made valid fails the run (masked as text)."""
        xmlpath = getattr(self.config.option, "xmlpath", None)
        if not xmlpath or not Path(xmlpath).exists():
            return
        from pytest_gym.report.junit import (  # junitparser: only here
            JUnitUnusable,
            postprocess_junit,
            summary_properties,
        )

        try:
            suites, health = summary_properties(self.summary), self.results.health_properties() if self.results else {}
            postprocess_junit(Path(xmlpath), suites, xsd_strict=True, keep_errors=True, case_properties=health)
        except JUnitUnusable as exc:
            self.add_note(str(exc))
            if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _export(self, session: pytest.Session) -> None:
        """Run the exports last, when the JUnit file, the summary and the exit status are final."""
        from pytest_gym.exporters.registry import export_run_folder

        hook, status = self.config.hook.pytest_gym_export, int(session.exitstatus)
        if hook.get_hookimpls():  # what the exporters upload is masked by now (Gym still runs: again at its stop)
            self._scrub()
        settings = self.settings.model_dump(mode="json")
        self.exports = export_run_folder(hook, self.config, self.run_dir, settings, status)
        failed = any(result.status == "failed" for _, result in self.exports)
        if failed and not self.settings.export_soft and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _scrub(self, final: bool = False) -> None:
        """Mask what other processes wrote into the run folder (Gym's log, its outputs, the policy's log)."""
        if self.owner and self.run.run_dir.is_dir():
            for problem in self._step("masking the run folder", scrub_run_folder, self.run.run_dir, final) or []:
                self.add_note(problem)

    def _stop_gym(self) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            self._step("stopping Gym", self.run.finish)
            self.add_worker_notes(self.run.take_notes())
        finally:
            self._scrub(final=True)  # again: Gym wrote to its log until it stopped

    @pytest.hookimpl(wrapper=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Generator[None, None, None]:
        from pytest_gym.report.terminal import run_lines, write_section

        result = yield
        if not self.verdicts and self.shard is not None and self.notes and terminalreporter.config.get_verbosity() >= 0:
            terminalreporter.write_sep("=", "pytest-gym")
            for note in self.notes:
                terminalreporter.write_line(f"note: {note}")
        write_section(
            terminalreporter,
            self.summary.suites if self.summary is not None else {},
            str(self.run.run_dir),
            self.notes,
            self.exports,
            self.settings.baseline,
            deferred=(self.deferred, self.deferred_gates) if self.deferred else None,
            extra=[*run_lines(self.summary), *self.suites.gym_metric_lines],
            update=self.suites.update_command(),
        )
        return result

    def unconfigure(self) -> None:
        """Last resort (a session that never reached sessionfinish): stop what this process started."""
        if self._sigterm_installed and signal.getsignal(signal.SIGTERM) is _terminate:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self.merged is not None:
            self.merged.close()
        self._stop_gym()
