"""Run rollouts ahead of pytest, in item order, with a bounded number in flight.

pytest runs items one at a time; rollouts are slow network calls. The
dispatcher runs an asyncio loop in a background thread: it starts the planned
trials in item order, at most ``concurrency`` in flight and at most
``lookahead`` finished-but-unreported results held, while each trial item
waits only for its own result. ``stop()`` (after ``-x``, Ctrl-C, or the end of
the session) starts nothing new and cancels what is in flight.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence

import httpx

from pytest_gym.client import TrialFault, build_request, post_run, token_usage
from pytest_gym.dataset import DatasetError
from pytest_gym.deployment import GymEndpoint, GymError
from pytest_gym.results import TrialOutcome, TrialSpec


class Dispatcher:
    def __init__(
        self,
        endpoint: GymEndpoint,
        concurrency: int,
        trial_timeout: float,
        default_agent: str | None,
        lookahead: int | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.concurrency = max(1, concurrency)
        self.lookahead = lookahead if lookahead is not None else max(64, 4 * self.concurrency)
        self.trial_timeout = trial_timeout
        self.default_agent = default_agent
        self.listeners: list[Callable[[TrialOutcome], None]] = []
        self._plan: list[TrialSpec] = []
        self._futures: dict[str, concurrent.futures.Future[TrialOutcome]] = {}
        self._lock = threading.Lock()
        self._consumed = 0
        self._stopping = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pytest-gym-dispatch", daemon=True)
        self._thread.start()
        self._client: httpx.AsyncClient | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._progress: asyncio.Event | None = None
        self._feeder: concurrent.futures.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        asyncio.run_coroutine_threadsafe(self._init(), self._loop).result()

    async def _init(self) -> None:
        limits = httpx.Limits(max_connections=self.concurrency + 4, max_keepalive_connections=self.concurrency + 4)
        self._client = httpx.AsyncClient(limits=limits, trust_env=False, timeout=self.trial_timeout)
        self._semaphore = asyncio.Semaphore(self.concurrency)
        self._progress = asyncio.Event()

    # -- called from pytest's thread -------------------------------------------------

    def plan(self, specs: Sequence[TrialSpec]) -> None:
        """The trials this process will report, in the order it will report them."""
        with self._lock:
            self._plan = list(specs)
        if self._feeder is None and self._plan:
            self._feeder = asyncio.run_coroutine_threadsafe(self._feed(), self._loop)

    def result(self, spec: TrialSpec, timeout: float | None = None) -> TrialOutcome:
        """Block until this trial's rollout is done (starting it now if it was not planned)."""
        future = self._future_for(spec)
        if not future.running() and not future.done():
            asyncio.run_coroutine_threadsafe(self._launch_now(spec), self._loop)
        outcome = future.result(timeout=timeout)
        with self._lock:
            self._consumed += 1
        self._loop.call_soon_threadsafe(self._wake)
        return outcome

    def stop(self) -> None:
        """Start nothing new; cancel the rollouts in flight."""
        if self._stopping:
            return
        self._stopping = True
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self._loop).result(timeout=10)

    def close(self) -> None:
        self.stop()
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._aclose(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    # -- internals ---------------------------------------------------------------------

    def _future_for(self, spec: TrialSpec) -> concurrent.futures.Future[TrialOutcome]:
        with self._lock:
            future = self._futures.get(spec.nodeid)
            if future is None:
                future = self._futures[spec.nodeid] = concurrent.futures.Future()
            return future

    def _wake(self) -> None:
        assert self._progress is not None
        self._progress.set()

    async def _feed(self) -> None:
        assert self._semaphore is not None
        assert self._progress is not None
        for index, spec in enumerate(self._plan):
            while not self._stopping and index >= self._consumed + self.lookahead:
                self._progress.clear()
                await self._progress.wait()
            if self._stopping:
                return
            future = self._future_for(spec)
            if future.running() or future.done():
                continue
            await self._semaphore.acquire()
            if self._stopping:
                self._semaphore.release()
                return
            self._start(spec, future, acquired=True)

    async def _launch_now(self, spec: TrialSpec) -> None:
        future = self._future_for(spec)
        if future.running() or future.done():
            return
        self._start(spec, future, acquired=False)

    def _start(self, spec: TrialSpec, future: concurrent.futures.Future[TrialOutcome], acquired: bool) -> None:
        if not future.set_running_or_notify_cancel():
            if acquired:
                assert self._semaphore is not None
                self._semaphore.release()
            return
        task = self._loop.create_task(self._run(spec, future, acquired))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, spec: TrialSpec, future: concurrent.futures.Future[TrialOutcome], acquired: bool) -> None:
        assert self._semaphore is not None
        if not acquired:
            await self._semaphore.acquire()
        try:
            outcome = await self._rollout(spec)
        except asyncio.CancelledError:
            outcome = self._outcome(
                spec, error=("cancelled", "cancelled: the run was stopped before this rollout finished")
            )
            future.set_result(outcome)
            raise
        finally:
            self._semaphore.release()
        for listener in self.listeners:
            listener(outcome)
        future.set_result(outcome)

    def _outcome(
        self, spec: TrialSpec, error: tuple[str, str] | None = None, http_status: int | None = None
    ) -> TrialOutcome:
        return TrialOutcome(
            nodeid=spec.nodeid,
            task_hash=spec.task.hash,
            repeat=spec.repeat,
            line=spec.task.line,
            dataset=str(spec.task.path),
            error_class=error[0] if error else None,
            error=error[1] if error else None,
            http_status=http_status,
            agent=spec.agent,
        )

    async def _rollout(self, spec: TrialSpec) -> TrialOutcome:
        assert self._client is not None
        outcome = self._outcome(spec)
        try:
            row = spec.task.load_row()
            agent = spec.agent or row_agent(row) or self.default_agent
            if agent is None:
                raise GymError(
                    "no agent for this row: pass --gym-agent NAME (Gym's agents here: "
                    f"{', '.join(self.endpoint.agents) or 'none'})"
                )
            outcome.agent = agent
            url = self.endpoint.route_for(agent)
            body = build_request(row, agent if spec.agent or not row_agent(row) else None, spec.task_index, spec.repeat)
            outcome.request = body
            answer, reward, latency = await post_run(self._client, url, body, self.trial_timeout, spec.reward_key)
        except TrialFault as fault:
            outcome.error_class, outcome.error, outcome.http_status = (
                fault.error_class,
                fault.message,
                fault.http_status,
            )
            return outcome
        except (GymError, DatasetError, OSError) as exc:
            outcome.error_class, outcome.error = "setup", str(exc)
            return outcome
        outcome.answer, outcome.reward, outcome.latency_s = answer, reward, latency
        outcome.tokens = token_usage(answer)
        return outcome

    async def _cancel_all(self) -> None:
        if self._progress is not None:
            self._progress.set()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        with self._lock:
            pending = [f for f in self._futures.values() if not f.done()]
        for future in pending:
            future.cancel()

    async def _aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def row_agent(row: dict[str, object]) -> str | None:
    ref = row.get("agent_ref")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        return str(ref["name"])
    return None
