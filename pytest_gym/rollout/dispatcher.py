"""Run rollouts ahead of pytest, in item order, with a bounded number in flight.

pytest runs items one at a time; rollouts are slow network calls. The
dispatcher runs an asyncio loop in a background thread. A feeder walks the
planned trials in item order and starts them, at most ``concurrency`` in flight
and at most ``lookahead`` trials ahead of the last one pytest reached; each
trial item waits only for its own result. A trial pytest reaches before the
feeder did is started at once, ahead of any prefetch waiting for a slot.

Under xdist a ``ClaimBoard`` (see ``pytest_gym.rollout.claims``) makes the dispatchers
of all workers share the trials: each walks the whole list, runs only what it
claimed, publishes what it ran, and waits for what another worker claimed.
Without a board everything stays in memory.

``stop()`` (after ``-x``, ``--maxfail``, Ctrl-C) starts nothing new and cancels
what is in flight. ``close()`` at the end of the session lets, under xdist, the
rollouts in flight finish (another worker may be waiting for them); without a
board there is nothing left that anyone waits for, so it cancels.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pytest_gym.core.dataset import DatasetError
from pytest_gym.core.endpoint import GymEndpoint, GymError
from pytest_gym.core.outcome import TrialOutcome, TrialSpec
from pytest_gym.rollout.http import HTTPPool
from pytest_gym.rollout.retry import backoff_s, is_retryable
from pytest_gym.rollout.transport import TrialFault, build_request, post_rollout, token_usage

if TYPE_CHECKING:
    from pytest_gym.rollout.claims import ClaimBoard, GlobalSlots

#: Seconds a worker waits beyond the trial timeout for a trial another live worker claimed.
CLAIM_WAIT_MARGIN_S = 30.0
_POLL_MIN_S = 0.0005
_POLL_MAX_S = 0.02
#: How often a worker waiting for another worker's trial checks that the claimant still lives.
_ALIVE_CHECK_S = 0.25
#: How often an idle feeder looks at the xdist worker's queue again.
_QUEUE_POLL_S = 0.02
#: The interpreter's thread switch interval while rollouts run. The dispatcher thread mostly waits on
#: sockets; when an answer arrives it should not wait the default 5 ms for pytest's thread to give up the
#: GIL: with few rollouts in flight that wait is on every trial's critical path.
SWITCH_INTERVAL_S = 0.0005


_switching_lock = threading.Lock()
_switching_users = 0
_switch_interval_before = 0.005


def _fast_switching(on: bool) -> None:
    """Lower the switch interval while any dispatcher runs; restore it when the last one closes."""
    global _switching_users, _switch_interval_before
    with _switching_lock:
        if on:
            if _switching_users == 0:
                _switch_interval_before = sys.getswitchinterval()
                sys.setswitchinterval(min(_switch_interval_before, SWITCH_INTERVAL_S))
            _switching_users += 1
        else:
            _switching_users -= 1
            if _switching_users == 0:
                sys.setswitchinterval(_switch_interval_before)


class _Slots:
    """A semaphore whose urgent waiters (a trial pytest is waiting for) go before prefetches."""

    def __init__(self, size: int) -> None:
        self.free = size
        self.size = size
        self._urgent: collections.deque[asyncio.Future[None]] = collections.deque()
        self._normal: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def in_use(self) -> int:
        return self.size - self.free

    async def acquire(self, urgent: bool = False) -> None:
        if self.free > 0 and not self._urgent and (urgent or not self._normal):
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._urgent if urgent else self._normal).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as we were cancelled: pass it on
            raise

    def release(self) -> None:
        for queue in (self._urgent, self._normal):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self.free += 1


class Dispatcher:
    def __init__(
        self,
        endpoint: GymEndpoint,
        concurrency: int,
        trial_timeout: float,
        default_agent: str | None,
        lookahead: int | None = None,
        board: ClaimBoard | None = None,
        global_slots: GlobalSlots | None = None,
        retries: int = 0,
        skip: frozenset[str] = frozenset(),
    ) -> None:
        self.endpoint = endpoint
        self.retries = max(0, retries)
        #: Trials never to roll out here (their results are reused from an earlier run).
        self.skip = skip
        #: Why the deployment is known dead: every later trial fails at once with this.
        self.gym_dead: str | None = None
        self._dead_event: asyncio.Event | None = None
        self._watchdog: concurrent.futures.Future[None] | None = None
        self.concurrency = max(1, concurrency)
        self.lookahead = max(1, lookahead if lookahead is not None else max(64, 4 * self.concurrency))
        self.trial_timeout = trial_timeout
        self.default_agent = default_agent
        self.board = board
        self.global_slots = global_slots
        self.listeners: list[Callable[[TrialOutcome], None]] = []
        #: Problems that did not stop a trial but should be reported (a listener or the board failed).
        self.problems: list[str] = []
        #: What happened to the trials: "ran" here, results taken "here" or "from_board", board "polls".
        self.counts: collections.Counter[str] = collections.Counter()
        self._plan: list[TrialSpec] = []
        self._index: dict[str, int] = {}
        self._lock = threading.Lock()
        # Trials this process started and whose outcome is still held; with a board, an outcome that no
        # local item waits for is dropped once published (the board has it).
        self._running: dict[str, concurrent.futures.Future[TrialOutcome]] = {}
        self._waiting: set[str] = set()
        self._started: set[str] = set()
        self._mine: set[str] = set()  # started because this worker was handed them: kept until consumed
        self._position = 0
        self._cursor = 0
        self._upcoming: Callable[[], Sequence[int]] | None = None
        self._feeder_waiting = False
        self._stopping = False
        self._closing = False
        _fast_switching(True)
        self._switched = True
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pytest-gym-dispatch", daemon=True)
        self._thread.start()
        self._http = HTTPPool()
        self._slots = _Slots(self.concurrency)
        self._progress: asyncio.Event | None = None
        self._feeder: concurrent.futures.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        asyncio.run_coroutine_threadsafe(self._init(), self._loop).result()

    async def _init(self) -> None:
        self._progress = asyncio.Event()

    # -- called from pytest's thread -------------------------------------------------

    def plan(self, specs: Sequence[TrialSpec], upcoming: Callable[[], Sequence[int]] | None = None) -> None:
        """The trials of the session, in the order pytest runs them (under xdist: all workers' together).

        ``upcoming`` (xdist) tells which of them, by position in ``specs``, this process was handed and will
        run next; those are prefetched first.
        """
        with self._lock:
            self._plan = list(specs)
            self._index = {spec.nodeid: i for i, spec in enumerate(self._plan)}
            self._upcoming = upcoming
        if self._feeder is None and self._plan:
            self._feeder = asyncio.run_coroutine_threadsafe(self._feed(), self._loop)
            if any(server.pid for server in self.endpoint.servers):
                self._watchdog = asyncio.run_coroutine_threadsafe(self._watch(), self._loop)

    def result(self, spec: TrialSpec, timeout: float | None = None) -> TrialOutcome:
        """Block until this trial's rollout is done, starting it now if nobody has.

        Raises ``concurrent.futures.CancelledError`` when the run was stopped before it started.
        """
        self._advance(spec)
        if self.board is None:
            future = self._local(spec.nodeid) or self._start_now(spec)
            if future is None:
                raise concurrent.futures.CancelledError()
            return self._wait_local(spec.nodeid, future, timeout)
        return self._board_result(spec, timeout)

    def stop(self) -> None:
        """Start nothing new; cancel the rollouts in flight."""
        if self._stopping:
            return
        self._stopping = True
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self._loop).result(timeout=30)

    def close(self) -> None:
        """End of the session: with a board, let the rollouts in flight finish first; then shut down."""
        if self.board is not None and not self._stopping and self._loop.is_running():
            self._closing = True
            drain = asyncio.run_coroutine_threadsafe(self._drain(), self._loop)
            try:
                drain.result(timeout=self.trial_timeout + CLAIM_WAIT_MARGIN_S)
            except concurrent.futures.TimeoutError:
                self.problems.append("rollouts still running at the end of the session were cancelled")
        self.stop()
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._aclose(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if self._switched:
            self._switched = False
            _fast_switching(False)

    @property
    def in_flight(self) -> int:
        return self._slots.in_use

    # -- pytest's thread: waiting ------------------------------------------------------

    def _advance(self, spec: TrialSpec) -> None:
        index = self._index.get(spec.nodeid)
        if index is not None and index + 1 > self._position:
            self._position = index + 1
            if self._feeder_waiting:
                self._loop.call_soon_threadsafe(self._wake)

    def _local(self, nodeid: str) -> concurrent.futures.Future[TrialOutcome] | None:
        with self._lock:
            future = self._running.get(nodeid)
            if future is not None:
                self._waiting.add(nodeid)
            return future

    def _start_now(self, spec: TrialSpec) -> concurrent.futures.Future[TrialOutcome] | None:
        """Claim and start a trial pytest needs now; None if stopping or another process claimed it."""
        if self._stopping or not self._loop.is_running():
            return None
        started = asyncio.run_coroutine_threadsafe(self._claim_now(spec), self._loop).result()
        if started is not None:
            self.counts["on_demand"] += 1
            with self._lock:
                self._waiting.add(spec.nodeid)
        return started

    def _wait_local(
        self, nodeid: str, future: concurrent.futures.Future[TrialOutcome], timeout: float | None
    ) -> TrialOutcome:
        try:
            outcome = future.result(timeout=timeout)
            self.counts["here"] += 1
            return outcome
        finally:
            with self._lock:
                self._waiting.discard(nodeid)
                self._mine.discard(nodeid)
                if future.done() and self._running.get(nodeid) is future:
                    del self._running[nodeid]

    def _board_result(self, spec: TrialSpec, timeout: float | None) -> TrialOutcome:
        from pytest_gym.rollout.claims import alive

        board = self.board
        assert board is not None
        nodeid = spec.nodeid
        started = time.monotonic()
        deadline: float | None = None
        pause = _POLL_MIN_S
        checked: tuple[int, float] | None = None  # (claimant, when it was last seen alive)
        while True:
            future = self._local(nodeid)
            if future is not None:
                return self._wait_local(nodeid, future, timeout)
            owner, outcome = board.state(nodeid)
            if outcome is not None:
                self.counts["from_board"] += 1
                return outcome
            if owner is None:
                future = self._start_now(spec)
                if future is not None:
                    return self._wait_local(nodeid, future, timeout)
                if self._stopping:
                    raise concurrent.futures.CancelledError()
                continue  # another worker claimed it a moment ago
            now = time.monotonic()
            fresh = checked is not None and checked[0] == owner and now - checked[1] < _ALIVE_CHECK_S
            if owner != board.pid and not fresh and not alive(owner):
                if board.take_over(nodeid, owner):
                    future = self._take_over_now(spec)
                    if future is not None:
                        return self._wait_local(nodeid, future, timeout)
                    board.release(nodeid)
                    raise concurrent.futures.CancelledError()
                continue
            checked = (owner, now) if not fresh else checked
            if deadline is None:
                deadline = now + self.trial_timeout + CLAIM_WAIT_MARGIN_S
            if now >= deadline or (timeout is not None and now - started >= timeout):
                return self._fault(
                    spec,
                    "timeout",
                    f"the worker that claimed this trial (pid {owner}) published no result within "
                    f"{self.trial_timeout + CLAIM_WAIT_MARGIN_S:g} s",
                )
            self.counts["polls"] += 1
            time.sleep(pause)
            pause = min(_POLL_MAX_S, pause * 1.5)

    def _take_over_now(self, spec: TrialSpec) -> concurrent.futures.Future[TrialOutcome] | None:
        if self._stopping or not self._loop.is_running():
            return None
        started = asyncio.run_coroutine_threadsafe(self._claim_now(spec, claimed=True), self._loop).result()
        if started is not None:
            with self._lock:
                self._waiting.add(spec.nodeid)
        return started

    # -- the loop thread -----------------------------------------------------------------

    def _wake(self) -> None:
        if self._progress is not None:
            self._progress.set()

    def _known(self, nodeid: str) -> bool:
        """Started by this process, reused, or (with a board) claimed by any."""
        if nodeid in self._started or nodeid in self.skip:
            return True
        return self.board is not None and self.board.claimed(nodeid)

    async def _feed(self) -> None:
        assert self._progress is not None
        while not (self._stopping or self._closing):
            await self._slots.acquire()
            spec = None if self._stopping or self._closing else self._next_candidate()
            if spec is not None and self._claim(spec):
                self._start(spec)
                continue
            self._slots.release()
            if spec is not None:
                continue  # another process claimed it just now
            if self._cursor >= len(self._plan):
                return  # every trial was started here or claimed by another process
            # Nothing to start within the lookahead: wait until pytest moves on (or, under xdist, until the
            # controller hands this worker more items, which nothing signals: look again shortly).
            self._progress.clear()
            self._feeder_waiting = True
            if self._next_candidate(peek=True) is None:
                if self._upcoming is None:
                    await self._progress.wait()
                else:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._progress.wait(), _QUEUE_POLL_S)
            self._feeder_waiting = False

    def _next_candidate(self, peek: bool = False) -> TrialSpec | None:
        """The next trial to prefetch: this worker's own queued trials first, then the plan in order."""
        plan = self._plan
        if self._upcoming is not None:
            for index in self._upcoming()[: self.lookahead]:
                if 0 <= index < len(plan) and not self._known(plan[index].nodeid):
                    if not peek:
                        self._mine.add(plan[index].nodeid)
                    return plan[index]
        cursor = max(self._cursor, self._position)
        limit = min(len(plan), self._position + self.lookahead)
        while cursor < limit:
            spec = plan[cursor]
            if not self._known(spec.nodeid):
                if not peek:
                    self._cursor = cursor + 1
                return spec
            cursor += 1
        if not peek:
            self._cursor = cursor
        return None

    def _claim(self, spec: TrialSpec) -> bool:
        if spec.nodeid in self._started:
            return False
        return self.board is None or self.board.claim(spec.nodeid)

    async def _claim_now(
        self, spec: TrialSpec, claimed: bool = False
    ) -> concurrent.futures.Future[TrialOutcome] | None:
        with self._lock:
            future = self._running.get(spec.nodeid)
        if future is not None:
            return future
        if spec.nodeid in self._started and not claimed:
            if self.board is not None:
                return None  # ran here and was published: the board has it
            self._started.discard(spec.nodeid)  # asked again after it was consumed (a rerun): run it again
        await self._slots.acquire(urgent=True)
        with self._lock:
            future = self._running.get(spec.nodeid)
        if future is not None or self._stopping or not (claimed or self._claim(spec)):
            self._slots.release()
            return future
        return self._start(spec)

    def _start(self, spec: TrialSpec) -> concurrent.futures.Future[TrialOutcome]:
        """Run a claimed trial; the caller holds a slot, which the rollout releases."""
        future: concurrent.futures.Future[TrialOutcome] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        with self._lock:
            self._running[spec.nodeid] = future
        self._started.add(spec.nodeid)
        self.counts["ran"] += 1
        task = self._loop.create_task(self._run(spec, future))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return future

    async def _run(self, spec: TrialSpec, future: concurrent.futures.Future[TrialOutcome]) -> None:
        try:
            slot = await self._global_slot()
            try:
                outcome = await self._rollout(spec)
            except Exception as exc:  # a bug must not leave pytest waiting for this trial forever
                outcome = self._fault(spec, "internal", f"pytest-gym failed to run this trial: {exc!r}")
            finally:
                if slot is not None:
                    assert self.global_slots is not None
                    self.global_slots.release(slot)
        except asyncio.CancelledError:
            self._slots.release()
            if self.board is not None:
                self._guard("the claim board", self.board.release, spec.nodeid)
            future.set_result(self._fault(spec, "cancelled", "cancelled: the run was stopped before it finished"))
            raise
        self._slots.release()
        # Let the next rollout go out before this one is recorded: with few slots, recording is on the
        # critical path otherwise (one pass for the feeder to start it, one for its request to be sent).
        with contextlib.suppress(asyncio.CancelledError):  # stopped now: the rollout is done, deliver it
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        for listener in self.listeners:
            self._guard("recording a rollout", listener, outcome)
        if self.board is not None:
            self._guard("publishing a rollout to the other workers", self.board.publish, outcome)
            with self._lock:
                if spec.nodeid not in self._waiting and spec.nodeid not in self._mine:
                    self._running.pop(spec.nodeid, None)
        future.set_result(outcome)

    async def _global_slot(self) -> int | None:
        """One of the run's C slot files, when the workers outnumber the slots (else None: not needed)."""
        if self.global_slots is None:
            return None
        pause = _POLL_MIN_S
        while (slot := self.global_slots.try_acquire()) is None:
            await asyncio.sleep(pause)
            pause = min(_POLL_MAX_S, pause * 1.5)
        return slot

    def _guard(self, what: str, call: Callable[..., object], *args: object) -> None:
        try:
            call(*args)
        except Exception as exc:
            self.problems.append(f"{what} failed: {type(exc).__name__}: {exc}")

    def _fault(self, spec: TrialSpec, error_class: str, message: str) -> TrialOutcome:
        outcome = self._outcome(spec)
        outcome.error_class, outcome.error = error_class, message
        return outcome

    def _outcome(self, spec: TrialSpec) -> TrialOutcome:
        return TrialOutcome.for_spec(spec)

    async def _post(self, url: str, body: dict[str, Any], reward_key: str) -> tuple[dict[str, Any], float, float]:
        return await post_rollout(self._http, url, body, self.trial_timeout, reward_key)

    async def _rollout(self, spec: TrialSpec) -> TrialOutcome:
        outcome = self._outcome(spec)
        try:
            row = spec.task.load_row()
            own = row_agent(row)
            agent = spec.agent or own or self.default_agent
            if agent is None:
                raise GymError(
                    "no agent for this row: pass --gym-agent NAME (Gym's agents here: "
                    f"{', '.join(self.endpoint.agents) or 'none'})"
                )
            outcome.agent = agent
            url = self.endpoint.route_for(agent)
            body = build_request(row, agent if spec.agent or not own else None, spec.task_index, spec.repeat)
            outcome.request = body
            answer, reward, latency = await self._post_with_retries(url, body, spec.reward_key, outcome)
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

    async def _post_with_retries(
        self, url: str, body: dict[str, Any], reward_key: str, outcome: TrialOutcome
    ) -> tuple[dict[str, Any], float, float]:
        """POST, and again after an infrastructure fault (never after a reward), up to ``retries`` more times."""
        attempt = 1
        while True:
            outcome.attempts = attempt
            if self.gym_dead is not None:
                raise TrialFault("gym_died", self.gym_dead)
            try:
                return await self._post_unless_gym_dies(url, body, reward_key)
            except TrialFault as fault:
                if fault.error_class in ("connection", "http_status", "timeout", "gym_failure"):
                    self._check_gym_alive()
                    if self.gym_dead is not None:
                        raise TrialFault("gym_died", self.gym_dead) from None
                if attempt > self.retries or not is_retryable(fault.error_class, fault.http_status):
                    if attempt > 1:
                        fault.message = f"{fault.message} (after {attempt} attempts)"
                    raise
                self.counts["retries"] += 1
                await asyncio.sleep(backoff_s(attempt))
                attempt += 1

    def _dead(self) -> asyncio.Event:
        if self._dead_event is None:
            self._dead_event = asyncio.Event()
        return self._dead_event

    async def _post_unless_gym_dies(
        self, url: str, body: dict[str, Any], reward_key: str
    ) -> tuple[dict[str, Any], float, float]:
        """The POST, abandoned as soon as the watchdog sees a server of the deployment die."""
        post = asyncio.ensure_future(self._post(url, body, reward_key))
        dead = asyncio.ensure_future(self._dead().wait())
        try:
            await asyncio.wait({post, dead}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            dead.cancel()
            if not post.done():
                post.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await post
        if not post.cancelled() and post.done():
            return post.result()
        raise TrialFault("gym_died", self.gym_dead or "Gym stopped answering")

    async def _watch(self, interval_s: float = 1.0) -> None:
        """Look at the deployment's processes every second while this process runs trials."""
        while not (self._closing or self._stopping) and self.gym_dead is None:
            await asyncio.sleep(interval_s)
            self._check_gym_alive()
        if self.gym_dead is not None:
            self._dead().set()

    def _check_gym_alive(self) -> None:
        """After a fault, tell a dead deployment from a flaky call: name the dead server and the log."""
        dead = self.endpoint.dead_servers()
        if dead:
            names = ", ".join(f"{d.process_name} (pid {d.pid})" for d in dead)
            log = f"; see {self.endpoint.log_path}" if self.endpoint.log_path else ""
            self.gym_dead = f"Gym server {names} is no longer running{log}"

    async def _drain(self) -> None:
        self._wake()
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _cancel_all(self) -> None:
        self._wake()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=10)

    async def _aclose(self) -> None:
        await self._http.aclose()
        if self.board is not None:
            self.board.close()
        if self.global_slots is not None:
            self.global_slots.close()


def row_agent(row: dict[str, object]) -> str | None:
    ref = row.get("agent_ref")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        return str(ref["name"])
    return None
