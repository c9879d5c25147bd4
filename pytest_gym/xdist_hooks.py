"""pytest-xdist wiring: registered only when xdist is installed; everything that reads xdist lives here.

- ``workerinput`` carries the run folder to every worker, so all of them share one deployment;
- ``workeroutput`` carries each worker's notes back; the controller merges them (``pytest_testnodedown``);
- a worker reaches Gym and starts prefetching as soon as it collected;
- the controller learns the number of trials from a worker's collection and, once every trial
  reported, asks Gym for the aggregate metrics while the workers shut down.

The controller does not collect. When nothing on its command line or ini file shows pytest-gym in
use (a suite file found by the workers), it reserves a run folder path for the workers anyway and
starts its session with the first trial report.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.outcome import TrialSpec, is_trial, is_trial_nodeid
from pytest_gym.current import SessionView, current_session
from pytest_gym.runfolder.location import new_run_dir

#: workerinput key carrying the run folder to xdist workers.
WORKER_RUN_DIR = "pytest_gym_run_dir"
#: workeroutput key carrying a worker's notes back to the controller.
WORKER_OUTPUT = "pytest_gym"


def worker_slot(workerinput: dict[str, Any] | None) -> tuple[int, int] | None:
    """(index, count) of an xdist worker from its ``workerinput`` (``gw3`` is index 3); None elsewhere."""
    if workerinput is None:
        return None
    count = int(workerinput.get("workercount", 1))
    workerid = str(workerinput.get("workerid", "gw0"))
    digits = "".join(ch for ch in workerid if ch.isdigit())
    return (int(digits) if digits else 0), max(1, count)


def worker_owner_pid(workerinput: dict[str, Any] | None) -> int | None:
    """The controller's pid on an xdist worker (xdist starts workers as its children); None elsewhere.

    What a worker starts (Gym, the policy) must outlive the worker: the controller still asks Gym for its
    aggregate metrics and stops it after the workers have ended.
    """
    return None if workerinput is None else os.getppid()


def worker_run_dir(workerinput: dict[str, Any] | None) -> Path | None:
    value = (workerinput or {}).get(WORKER_RUN_DIR)
    return Path(value) if value else None


def worker_queue(session: pytest.Session, planned: Sequence[TrialSpec]) -> Callable[[], Sequence[int]] | None:
    """Which of ``planned`` (by position) this worker was handed, next first; None off xdist.

    Reads xdist's queue of item indices (``WorkerInteractor.torun``, not a public API: None when it changes).
    """
    config = session.config
    if not hasattr(config, "workerinput"):
        return None
    interactor = next((p for p in config.pluginmanager.get_plugins() if type(p).__name__ == "WorkerInteractor"), None)
    if interactor is None or not hasattr(interactor, "torun"):
        return None
    position = {spec.nodeid: i for i, spec in enumerate(planned)}
    plan_index = {}
    for i, item in enumerate(session.items):  # a trial item, or a task item (--gym-verdict task): its first trial
        first = next(iter(getattr(item, "specs", ())), None)
        if first is not None and first.nodeid in position:
            plan_index[i] = position[first.nodeid]

    def upcoming() -> Sequence[int]:
        torun: Any = getattr(interactor, "torun", None)
        try:
            if hasattr(torun, "lock"):
                with torun.lock() as queue:
                    pending = list(queue)
            else:
                pending = list(getattr(torun, "queue", ()))
        except Exception:  # whatever a future xdist keeps there: prefetch in plan order instead
            return ()
        following = getattr(interactor, "nextitem_index", None)
        if isinstance(following, int):
            pending.insert(0, following)
        return [plan_index[i] for i in pending if isinstance(i, int) and i in plan_index]

    return upcoming


class XdistHooks:
    def __init__(self, config: pytest.Config, install: Callable[[Path], SessionView]) -> None:
        self.config = config
        self._install = install
        self._counted = False
        self._reserved: Path | None = None

    def _session(self) -> SessionView | None:
        return current_session(self.config)

    def _controller_session(self) -> SessionView:
        """The controller's session, started now if the command line did not show pytest-gym in use."""
        return self._session() or self._install(self._reserved_run_dir())

    def _reserved_run_dir(self) -> Path:
        if self._reserved is None:
            self._reserved = new_run_dir(self.config.rootpath)
        return self._reserved

    @pytest.hookimpl
    def pytest_configure_node(self, node: Any) -> None:
        """Send the run folder to each worker: they share the controller's deployment."""
        session = self._session()
        run_dir = session.run_dir if session is not None else self._reserved_run_dir()
        node.workerinput[WORKER_RUN_DIR] = str(run_dir)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """A worker waits now until every worker collected and the controller hands out items: use that
        time to reach Gym and start prefetching (claims keep the workers from running a trial twice)."""
        config = session.config
        gym = self._session()
        if gym is None or not hasattr(config, "workerinput"):
            return
        if config.option.collectonly or getattr(config.option, "setupplan", 0) or gym.resume:
            return  # with --gym-resume, which trials are reused is decided with the first trial
        if gym.plan(session):
            with contextlib.suppress(pytest.fail.Exception):  # recorded: the trials report it
                gym.open_gym(session, early=True)

    @pytest.hookimpl
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """On the controller, which does not collect: the number of trials, from the first worker's ids.

        Once that many trials reported, every rollout is in the run folder: the session then lets Gym
        start on the aggregate metrics while the workers shut down (``early_aggregate``).
        """
        if self._counted:
            return
        self._counted = True
        trials = sum(1 for nodeid in ids if is_trial_nodeid(nodeid))
        if trials:
            gym = self._controller_session()
            gym.progress.total = trials
            gym.early_aggregate = True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """On the controller, a trial report before any session (workers found a suite file): start one."""
        if hasattr(self.config, "workerinput") or self._session() is not None:
            return
        if is_trial(report.user_properties):
            self._controller_session().pytest_runtest_logreport(report)

    @pytest.hookimpl
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """On the controller: a worker finished; keep its notes for the summary, and whether its rollouts stopped."""
        payload = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
        gym = self._session()
        if gym is not None and isinstance(payload, dict):
            gym.add_worker_notes(payload.get("notes") or [], payload)
