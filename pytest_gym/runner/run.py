"""The rollout side of one run in one process: settings, run folder, deployment, dispatcher.

No pytest here: ``pytest_gym.session`` holds one ``GymRun``. The process that owns the run (the only process, or
the xdist controller) chose the run folder and stops the deployment at the end;
xdist workers get the folder through ``workerinput`` and share the deployment
recorded there.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gym.core.access import GymAccess, access_hint, without_header_variables
from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.endpoint import GymEndpoint, GymError, unknown_agents
from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.masking import MAX_MESSAGE, POLICY_KEY_ENV, Masker, clean_text
from pytest_gym.core.numbers import is_int
from pytest_gym.core.outcome import TrialSpec, token_usage
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.acquire import acquire, release
from pytest_gym.gym.deployment import read_state
from pytest_gym.gym.helperproc import GymHelper
from pytest_gym.gym.trajectories import Finalizer, environment_servers, gym_python
from pytest_gym.judge.messages import clean_outcome
from pytest_gym.rollout.claims import BoardClaims, ClaimBoard, Claims, GlobalSlots, LocalClaims, worker_share
from pytest_gym.runfolder.health import read_run_health
from pytest_gym.runfolder.layout import ATTACHED_FILE, BOARD_DIR, ROLLOUTS_FILE, RUN_STARTED_FILE, UNAVAILABLE_REPORTED
from pytest_gym.runfolder.records import ROLLOUT_ID_KEY, RecordError, read_records, stamps
from pytest_gym.runfolder.rollouts import (
    RunFolderWriter,
    aggregate_answer,
    aggregate_entry,
    aggregate_request_from_records,
    write_aggregate_metrics,
)
from pytest_gym.runfolder.runinfo import write_run_info
from pytest_gym.runner.server import GymServer

if TYPE_CHECKING:
    from pytest_gym.gym.rescore import RescoreResult
    from pytest_gym.judge.summary import ConcurrencySummary
    from pytest_gym.rollout.admission import Admission
    from pytest_gym.rollout.dispatcher import Dispatcher


#: How often the trajectory step takes the rollouts recorded since it last looked, while the trials run.
EARLY_TRAJECTORIES_S = 1.0

#: A trial left without Gym when the cause is reported already (by the first trial that needed it).
NOT_RUN = (
    "pytest-gym: not run: Gym is unavailable (it did not start, or could not be reached); the cause is reported "
    "once, with the first trial that needed it"
)


@dataclass
class GymRun:
    """Deployment, dispatcher and run-folder writer of one process; the owner also stops the deployment."""

    settings: GymSettings
    run_dir: Path
    owner: bool
    #: (index, count) of this xdist worker; None without xdist and on the controller.
    worker: tuple[int, int] | None = None
    #: Run the rollouts' event loop in pytest's thread (None: the dispatcher's choice; False under pytest-timeout).
    inline_loop: bool | None = None
    #: The process whose end ends the run when it is not this one (an xdist worker's controller): what this
    #: process starts lives until that one ends. Decided at the top, where xdist is known.
    owner_pid: int | None = None
    server: GymServer | None = None
    dispatcher: Dispatcher | None = None  # imported when a process opens Gym: the xdist controller never does
    writer: RunFolderWriter | None = None
    error: str | None = None
    #: Whether a trial of this process reported ``error`` already (or learnt that another one did).
    error_reported: bool = False
    gym_dead: str | None = None
    #: Dispatching was stopped before the end (``stop_dispatch``), here or (controller) in a worker.
    stopped: bool = False
    #: Per suite: [its trials in the dataset, those selected to run] (``collect.suite_coverage``; the controller
    #: hears the workers').
    coverage: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The helper process running Gym's steps on the run folder (trajectories, then health checks).
    gym_helper: GymHelper | None = None
    trajectories_done: bool = False
    _aggregate: concurrent.futures.Future[list[dict[str, Any]] | None] | None = field(
        default=None, init=False, repr=False
    )
    _trajectory_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    #: The rollouts once final: as the trajectory step wrote them, or as read once after it (``rollouts_written``).
    _finalized: list[Any] | None = field(default=None, init=False, repr=False)
    _records_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _trajectories: Finalizer | None = field(default=None, init=False, repr=False)
    _stop_early: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _access: GymAccess | None = field(default=None, init=False, repr=False)

    @property
    def access(self) -> GymAccess:
        """Headers (values read from the environment once) and TLS trust for every request to Gym."""
        if self._access is None:
            try:
                self._access = self.settings.access()
            except ValueError as exc:  # checked at start (a usage error): only a changed environment gets here
                raise GymError(str(exc)) from None
        return self._access

    @property
    def concurrency(self) -> int:
        """This process's part of the run's rollout budget (all of it without xdist)."""
        if self.worker is None:
            return self.settings.concurrency
        index, count = self.worker
        return worker_share(self.settings.concurrency, count, index)

    def open(
        self,
        planned: Sequence[TrialSpec],
        upcoming: Callable[[], Sequence[int]] | None = None,
        skip: frozenset[str] = frozenset(),
        admission: Admission | None = None,
    ) -> GymServer:
        """Acquire the deployment and start dispatching ``planned`` but ``skip`` (once per process); ``admission``
        decides which trials start (budgets, adaptive repeats, sequential gates), from the run's ledger."""
        if self.error is not None:
            raise GymError(self.error)
        if self.server is None:
            try:
                endpoint = acquire(self.settings, self.run_dir, self.access, self.owner_pid)
            except GymError as exc:
                self.error = str(exc)
                raise
            if self.settings.url and self.worker is not None:
                self._record_attached(endpoint)
            unknown = unknown_agents((spec.agent for spec in planned), endpoint.agents)
            if unknown is not None:  # before any rollout: Gym's head answered, the agent is not there
                self.error = str(unknown)
                raise unknown
            default_agent = self.settings.agent or (endpoint.agents[0] if len(endpoint.agents) == 1 else None)
            self.server = GymServer(endpoint, self.settings, default_agent, self.access)
            from pytest_gym.rollout.adaptive import make_limit
            from pytest_gym.rollout.dispatcher import Dispatcher

            self.dispatcher = Dispatcher(
                endpoint,
                concurrency=self.concurrency,
                trial_timeout=self.settings.trial_timeout,
                default_agent=default_agent,
                lookahead=max(64, 4 * self.settings.concurrency),
                claims=self._claims(),
                retries=self.settings.retries,
                skip=skip,
                access=self.access,
                tracestate=self.settings.tracestate,
                limit=make_limit(
                    self.run_dir,
                    self.settings.concurrency,
                    adaptive=self.settings.concurrency_adaptive == "on",
                    shared=self.worker is not None,
                ),
                check_evidence=self.settings.health_check == "on",
                admission=admission,
                inline=self.inline_loop,
            )
            writer = self.open_writer()
            writer.add_servers(environment_servers(endpoint))  # Gym's _ng_environment_server/_ng_result_type
            # First: masked and bounded before the writer records it and the claim board publishes it.
            masker = Masker()
            self.dispatcher.listeners.append(lambda outcome: clean_outcome(outcome, masker))
            self.dispatcher.recorders.append(writer.record_all)  # on pytest's thread
            self.dispatcher.plan(planned, upcoming)
        return self.server

    def unavailable(self, exc: GymError, report: bool = True) -> str:
        """What a trial that needed Gym reports when it is unavailable: one trial of the run (of any xdist
        worker: the first to claim it) the cause, every other one line; the same traceback per trial buries it.
        ``report``: the message is shown (an xdist worker's early start shows nothing)."""
        if self.error_reported:
            return NOT_RUN
        if report:
            self.error_reported = True
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                os.close(os.open(self.run_dir / UNAVAILABLE_REPORTED, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return NOT_RUN
            except OSError:
                pass  # said twice rather than never
        return f"pytest-gym: {exc}\n(every other trial that needed Gym is reported as not run because of this)"

    def rescore(self, source: Path) -> RescoreResult:
        """--gym-rescore: acquire the deployment (no dispatcher: nothing is rolled out) and re-verify every
        saved answer of ``source``; the new verdicts go to this run folder's ``rescored.jsonl``."""
        from pytest_gym.gym.rescore import rescore
        from pytest_gym.runfolder.layout import RESCORED_FILE

        if self.server is None:
            endpoint = acquire(self.settings, self.run_dir, self.access)
            default_agent = self.settings.agent or (endpoint.agents[0] if len(endpoint.agents) == 1 else None)
            # for the aggregate metrics at the end
            self.server = GymServer(endpoint, self.settings, default_agent, self.access)
        return rescore(
            source,
            self.server.endpoint,
            reward_key=self.settings.reward_key,
            concurrency=self.settings.concurrency,
            timeout=self.settings.trial_timeout,
            force=self.settings.rescore_force,
            output=self.run_dir / RESCORED_FILE,
            access=self.access,
        )

    def rescore_all(self, source: Path, min_reward: float, task_pass: str) -> dict[str, Any] | None:
        """--gym-rescore, before any trial: re-verify ``source``'s answers and record what moved (``rescore.json``);
        None when Gym could not be reached (recorded too: the trials then report it). ``UnsafeRescore`` and
        ``RecordError`` are the user's to fix."""
        from pytest_gym.gym.rescore import UnsafeRescore, moved, write_rescore_info

        try:
            result = self.rescore(source)
        except UnsafeRescore:
            raise  # a GymError, but the user's to fix: a usage error, not one per trial
        except GymError as exc:
            write_rescore_info(self.run_dir, source, None, clean_text(f"pytest-gym: --gym-rescore: {exc}", MAX_MESSAGE))
            return None
        report = moved(result, min_reward, task_pass)
        write_rescore_info(self.run_dir, source, report)
        return report

    def _claims(self) -> Claims:
        """How this process shares the trials: alone, all in memory; xdist workers, through claim files."""
        if self.worker is None:
            return LocalClaims()
        # More workers than slots: each worker has one, and C lock files keep the whole run within C.
        shared = self.worker[1] > self.settings.concurrency
        global_slots = GlobalSlots(self.run_dir / BOARD_DIR, self.settings.concurrency) if shared else None
        return BoardClaims(ClaimBoard(self.run_dir / BOARD_DIR), global_slots)

    def open_writer(self) -> RunFolderWriter:
        """The run folder's writer of this process (the run info is written with it)."""
        if self.writer is None:
            write_run_info(self.run_dir, self.settings)
            self.writer = RunFolderWriter(self.run_dir)
        return self.writer

    def take_notes(self) -> list[str]:
        """The notes gathered since the last call, for the session's note list (each once)."""
        notes, self.notes = self.notes, []
        return notes

    def mark_started(self) -> None:
        """Owner, with --gym-run-timeout: the run's start, from which every process of the run counts it."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / RUN_STARTED_FILE).write_text(repr(time.time()), encoding="utf-8")

    def deadline(self) -> float | None:
        """When --gym-run-timeout ends the run (epoch seconds), from the owner's start; None without it."""
        timeout = self.settings.run_timeout
        if timeout is None:
            return None
        try:
            started = float((self.run_dir / RUN_STARTED_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            started = time.time()
        if not math.isfinite(started):  # "nan" or "inf" read back would turn the timeout off
            started = time.time()
        return started + timeout

    def concurrency_summary(self) -> ConcurrencySummary | None:
        """Rate limits the run met and its concurrency limit over time (from the run folder: every process's)."""
        from pytest_gym.rollout.adaptive import summarize

        return summarize(self.run_dir, self.settings.concurrency, self.settings.concurrency_adaptive == "on")

    def _record_attached(self, endpoint: GymEndpoint) -> None:
        target = self.run_dir / ATTACHED_FILE
        if target.exists():
            return
        with contextlib.suppress(OSError):  # without it the controller skips Gym's aggregate metrics
            write_atomically(target, json.dumps(endpoint.to_json()).encode(), fsync=False)

    def worker_state(self) -> dict[str, Any]:
        """What the controller must know of this worker's run (builtins: xdist serialises it)."""
        return {"stopped": self.stopped, "coverage": self.coverage}

    def take_worker_state(self, state: Mapping[str, Any]) -> None:
        """A worker's ``worker_state``: one stopped run stops the whole; every worker selects the same trials."""
        self.stopped = self.stopped or state.get("stopped") is True
        coverage = state.get("coverage")
        if isinstance(coverage, dict):
            for suite, counts in coverage.items():
                if isinstance(counts, list) and len(counts) == 2 and all(map(is_int, counts)):
                    self.coverage.setdefault(str(suite), [int(counts[0]), int(counts[1])])

    def stop_dispatch(self) -> None:
        """Start no rollout more (-x, Ctrl-C, --gym-max-errors, --gym-run-timeout); cancel those in flight."""
        self.stopped = True  # rollouts may have finished ahead of trials that now never run: paid, judged nowhere
        if self.dispatcher is not None:
            self.dispatcher.stop()

    def close(self) -> None:
        if self.dispatcher is not None:
            if self.dispatcher.gym_dead:
                self.gym_dead = self.dispatcher.gym_dead
            self.dispatcher.close()
            self.notes.extend(self.dispatcher.problems)
            self.dispatcher = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def endpoint(self) -> GymEndpoint | None:
        """The deployment, from any process: ours, the record in the run folder, or --gym-url."""
        if self.server is not None:
            return self.server.endpoint
        if self.settings.url:
            # Recorded by the xdist workers that reached Gym. None did (every trial was reused from --gym-resume):
            # then this run does not contact Gym at all, as in start mode, where no deployment state means none.
            try:
                return GymEndpoint.from_json(json.loads((self.run_dir / ATTACHED_FILE).read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, TypeError):
                return None
        state = read_state(self.run_dir) or {}
        return GymEndpoint.from_json(state["endpoint"]) if "endpoint" in state else None

    def start_aggregate(self) -> None:
        """Ask Gym for the aggregate metrics in the background, now that every rollout is recorded.

        The xdist controller calls it when the last trial reported, so Gym computes them while the
        workers shut down; ``aggregate_metrics`` then waits for this answer instead of asking again.
        """
        if self._aggregate is not None:
            return
        future: concurrent.futures.Future[list[dict[str, Any]] | None] = concurrent.futures.Future()
        self._aggregate = future

        def work() -> None:
            try:
                future.set_result(self._aggregate_now())
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=work, name="pytest-gym-aggregate", daemon=True).start()

    def aggregate_metrics(self) -> list[dict[str, Any]] | None:
        """Ask Gym's own ``/aggregate_metrics`` for this run's rollouts, per agent; write Gym's file.

        Never raises: Gym's metrics are an extra, and whatever Gym answered, the run still ends with its
        JUnit report and summary. What went wrong becomes a note.
        """
        try:
            if self._aggregate is not None:
                return self._aggregate.result(timeout=300)
            return self._aggregate_now()
        except Exception as exc:
            self.notes.append(clean_text(f"Gym's /aggregate_metrics failed: {type(exc).__name__}: {exc}"))
            return None

    def recorded_more_than(self, trials: int) -> bool:
        """Whether the run folder, as read at the end, holds more rollouts than ``trials`` (the judged ones): some were
        paid for and judged nowhere. False when it was not read (no health check, no aggregate)."""
        return self._finalized is not None and len(self._finalized) > trials

    @property
    def rollouts_written(self) -> list[Any] | None:
        """The records of ``rollouts.jsonl`` once final (None: not known, read the file), until ``finish``: the
        health checks, Gym's /aggregate_metrics and the page use them without reading the file again."""
        return self._finalized

    def _final_records(self) -> list[Any]:
        """After the trajectory step: the records of ``rollouts.jsonl``, the step's own or read once (by the owner's
        codec: ``RecordError`` for a broken file), whichever of the end's readers comes first."""
        with self._records_lock:
            if self._finalized is None:
                self._finalized = read_records(self.run_dir / ROLLOUTS_FILE)
            return self._finalized

    def _gym_env(self) -> dict[str, str]:
        """The environment of a process running Gym's code: ours without the --gym-header variables."""
        return without_header_variables(
            os.environ, self.settings.header, keep=(POLICY_KEY_ENV, *self.settings.secret_env)
        )

    def _steps_on(self) -> list[str]:
        """Gym's steps this run takes on its folder, in their order (``--gym-trajectories``, ``--gym-health-check``)."""
        on = (("trajectories", self.settings.trajectories), ("health", self.settings.health_check))
        return [step for step, setting in on if setting == "on"]

    def start_gym_steps(self) -> None:
        """Owner: start the helper for Gym's steps now, so that Gym's imports overlap the trials, and the
        trajectory step on the rollouts as they are recorded."""
        steps = self._steps_on()
        if not self.owner or not steps or self.gym_helper is not None:
            return
        try:
            self._gym_helper(*steps)
        except OSError as exc:
            self.notes.append(clean_text(f"Gym's interpreter did not start: {exc}"))
            return
        if "trajectories" in steps and self.gym_helper is not None:  # None: no Gym interpreter here
            threading.Thread(target=self._finalize_early, name="pytest-gym-trajectories", daemon=True).start()

    def _gym_helper(self, *steps: str) -> GymHelper | None:
        """The run's helper for Gym's steps: the one started early, else one started now for ``steps``; None
        when Gym's interpreter is not here (the caller says so). OSError when it does not start."""
        if self.gym_helper is not None:
            return self.gym_helper
        python = gym_python(self.settings.cli)
        if python is None:
            return None
        helper = GymHelper(python, steps, self.run_dir, self._gym_env())
        helper.start()
        self.gym_helper = helper
        return helper

    def _close_gym_helper(self) -> None:
        self._stop_early.set()  # the early trajectory step never starts a helper again
        helper, self.gym_helper = self.gym_helper, None
        if helper is not None:
            helper.close()

    def recorded_usage(self) -> dict[tuple[str, str, int], dict[str, int]]:
        """Owner, at the end: the token usage of every recorded rollout, by (suite, task hash, repeat). A trial another
        plugin ended (pytest-timeout's) may have had its rollout finish later, paid for: the verdicts count it. Read
        afresh: under xdist the workers recorded such rollouts at their end, after the early read for Gym's metrics."""
        try:
            records = read_records(self.run_dir / ROLLOUTS_FILE)
        except (OSError, RecordError):
            return {}
        found = {}
        for record in records:
            found_stamps = stamps(record)
            suite, key = found_stamps.suite, found_stamps.key
            if suite is not None and key is not None:
                found[(suite, key[0], key[1])] = token_usage(record)
        return found

    def health_checks(self) -> tuple[dict[tuple[str, str, int], tuple[str, tuple[str, ...]]], str | None]:
        """Owner, at the end: Gym's health checks on the run folder; (verdict and checks by (suite, task hash,
        repeat), why they did not run). Never raises: what went wrong is the second value."""
        self.finalize_trajectories()  # first (once, whichever thread comes first): Gym's checks read its records
        with self._trajectory_lock:  # the helper answers one request at a time
            return self._health_checks()

    def _health_checks(self) -> tuple[dict[tuple[str, str, int], tuple[str, tuple[str, ...]]], str | None]:
        rollouts = self._final_records()
        try:
            if not rollouts:
                return {}, None
            helper = self._gym_helper("health")
            if helper is None:
                why = (
                    f"Gym's health checks did not run: Gym's interpreter was not found beside {self.settings.cli!r} "
                    "(--gym-cli; in attach mode, install Gym here or point --gym-cli at it)"
                )
                self.notes.append(why)
                return {}, why
            from pytest_gym.gym.healthcheck import HealthCheck

            counts = HealthCheck(helper, self.run_dir).run(len(rollouts))
        except (OSError, RuntimeError) as exc:
            why = clean_text(f"Gym's health checks did not run: {exc}")
            self.notes.append(why)
            return {}, why
        finally:
            self._close_gym_helper()
        health = read_run_health(self.run_dir)
        found = {}
        for record in rollouts:
            mine = stamps(record)
            verdict = health.trials.get(str(record.get(ROLLOUT_ID_KEY)))
            if verdict is not None and mine.suite and mine.task_hash and mine.repeat is not None:
                found[(mine.suite, mine.task_hash, mine.repeat)] = (verdict.verdict, verdict.checks)
        shown = ", ".join(f"{counts.get(v, 0)} {v}" for v in ("healthy", "unhealthy", "unobserved"))
        self.notes.append(f"Gym's health checks: {sum(counts.values())} rollouts checked, {shown}")
        return found, None

    def finalize_trajectories(self) -> None:
        """Owner, once, when every rollout is in the run folder: Gym's collector step over its records.

        Never raises: the raw records stay as written and a note says why.
        """
        self._stop_early.set()
        with self._trajectory_lock:
            if self.trajectories_done or not self.owner or self.settings.trajectories != "on":
                return
            self.trajectories_done = True
            try:
                self._finalize_trajectories()
            except Exception as exc:
                self.notes.append(clean_text(f"trajectories: {type(exc).__name__}: {exc}"))
                self._close_gym_helper()  # the health checks, if on, start a helper of their own
            else:
                if self.settings.health_check != "on":
                    self._close_gym_helper()

    def _finalize_trajectories(self) -> None:
        finalizer = self._finalizer(self.notes)
        if finalizer is None:
            return
        endpoint = self.endpoint()
        assert endpoint is not None  # a finalizer is made only for one
        finalizer.finalize(self.run_dir, environment_servers(endpoint))
        self._finalized = finalizer.records
        if finalizer.folder is None:
            # An attached Gym: its capture folder (if any) is shared by every run against it, and capture ids
            # are "<task>-<rollout>", the same in each run, so its files would mix runs. Only a Gym this run
            # started captures into a folder of this run alone; here Gym's collector step runs without captures
            # (as `gym eval run` against a Gym without observability), so Gym's checks see no model call.
            self.notes.append(
                f"trajectories: the attached Gym's model calls are not captured for this run ({endpoint.head_url}): "
                "records got Gym's collector step without them (ng_trajectory gap model_calls_unavailable; Gym's "
                "checks on model calls are unobserved); a Gym pytest-gym starts captures into this run's folder; "
                "--gym-trajectories off silences this"
            )

    def _finalizer(self, notes: list[str]) -> Finalizer | None:
        """The run's trajectory step (one: it keeps what it finalized while the trials ran); None, and why in
        ``notes``, when it cannot run (or nothing ran against Gym yet). Caller holds ``_trajectory_lock``."""
        if self._trajectories is not None:
            return self._trajectories
        if not (self.run_dir / ROLLOUTS_FILE).is_file():
            return None
        endpoint = self.endpoint()
        if endpoint is None:
            return None  # nothing ran against Gym here (every trial reused)
        if endpoint.local_pids and endpoint.capture_dir is None:
            notes.append(
                "trajectories: Gym was started without observability_enabled/model_call_capture_dir (a --gym-set "
                "overrode them?): records keep Gym's answers as they are"
            )
            return None
        helper = self._gym_helper(*self._steps_on())  # the health checks, if on, use it next
        if helper is None:
            notes.append(
                f"trajectories: Gym's interpreter was not found beside {self.settings.cli!r} (--gym-cli): "
                "records kept as Gym answered"
            )
            return None
        capture = endpoint.capture_dir if endpoint.local_pids else None  # None: an attached Gym, no captures here
        self._trajectories = Finalizer(helper, Path(capture) if capture is not None else None)
        return self._trajectories

    def _finalize_early(self) -> None:
        """While the trials run: the trajectory step for the rollouts recorded so far, every
        ``EARLY_TRAJECTORIES_S``. Any problem ends it: the end of the run does the rest, and says what is wrong."""
        while not self._stop_early.wait(EARLY_TRAJECTORIES_S):
            with self._trajectory_lock:
                if self._stop_early.is_set():  # set before the end's own step takes this lock
                    return
                try:
                    finalizer, endpoint = self._finalizer([]), self.endpoint()
                    if finalizer is not None and endpoint is not None:
                        finalizer.finalize_new(self.run_dir, environment_servers(endpoint))
                except Exception:
                    return

    def _aggregate_now(self) -> list[dict[str, Any]] | None:
        from pytest_gym.rollout.http import FetchError, fetch  # imported when used (asyncio: start-up time)

        self.finalize_trajectories()  # first: Gym's perf_summary is made of the records' ng_perf
        if self.gym_dead is not None:
            self.notes.append(clean_text(f"Gym's /aggregate_metrics skipped: {self.gym_dead}"))
            return None
        path = self.run_dir / ROLLOUTS_FILE
        if not path.exists():
            return None
        try:
            records = self._final_records()  # read once for the health checks and the page too
        except RecordError:
            records = read_jsonl(path)  # Gym's metrics of the whole lines all the same
        endpoint = self.endpoint()
        if not records or endpoint is None:
            return None
        by_agent: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            ref = record.get("agent_ref")
            agent = ref.get("name") if isinstance(ref, dict) else None
            by_agent.setdefault(str(agent or (endpoint.agents[0] if endpoint.agents else "")), []).append(record)
        entries = []
        for agent, group in by_agent.items():
            try:
                url = endpoint.route_for(agent).rsplit("/run", 1)[0] + "/aggregate_metrics"
                body = json.dumps(aggregate_request_from_records(group)).encode()
                headers, context = self.access.headers_for(url), self.access.ssl_context
                status, data = fetch("POST", url, body, 120, headers=headers, ssl_context=context)
                if status >= 400:
                    raise FetchError(f"HTTP {status}: {data[:200].decode('utf-8', 'replace')}")
                entries.append(aggregate_entry(agent, aggregate_answer(data)))
            except (FetchError, GymError, ValueError) as exc:
                hint = access_hint(str(exc))
                self.notes.append(clean_text(f"Gym's /aggregate_metrics failed for {agent}: {exc}{hint}"))
        if entries:
            write_aggregate_metrics(self.run_dir, entries)
        return entries

    def finish(self) -> None:
        """End of the run: close the dispatcher; the owner stops the deployment."""
        self._finalized = None
        self.close()
        self._close_gym_helper()
        if self.owner:
            self.notes.extend(release(self.settings, self.run_dir))
            ClaimBoard.remove_folder(self.run_dir / BOARD_DIR)
