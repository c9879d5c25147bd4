"""Run rollouts ahead of pytest, in item order, with a bounded number in flight.

pytest runs items one at a time; rollouts are slow network calls. The
dispatcher runs an asyncio loop: in one process on pytest's own thread, whenever it
waits for a result or asks for the next one; under xdist in a background thread
(another worker may wait for a rollout this one runs while this one's pytest is
idle). A feeder walks the
planned trials in item order and starts them, at most ``concurrency`` in flight
and at most ``lookahead`` trials ahead of the last one pytest reached; each
trial item waits only for its own result. A trial pytest reaches before the
feeder did is started at once, ahead of any prefetch waiting for a slot.

How the trials are shared with other processes is a ``Claims`` implementation
(``pytest_gym.rollout.claims``): alone, everything stays in memory
(``LocalClaims``); under xdist the dispatchers of all workers walk the whole
list, run only what they claimed on a board, publish what they ran, and wait for
what another worker claimed (``BoardClaims``). One trial's request, retries and
answer are ``pytest_gym.rollout.transport.Rollouts``; whether Gym still serves is
``pytest_gym.rollout.health.Health``. This module only schedules.

A finished rollout goes to the ``listeners`` on the loop (they mask it before anyone sees it), then to the
``recorders`` (the run folder's writer) on pytest's thread: the next time it asks for a result, or while it
waits for one. The loop and pytest's thread share one interpreter lock; a record's work on the loop (encoding,
masking, a locked append) took it from a busy pytest thread at every trial and handed it back at each system
call: recorded by pytest's thread, a run of 1280 trials against an instant stand-in costs about 5% less CPU
(``benchmarks/cpu.py``). A rollout pytest's thread leaves unrecorded for ``RECORD_WITHIN_S`` (it is busy with
another test) is recorded on the loop. So a trial run here is recorded before its item reports here, and no
finished rollout waits longer than that for its record. Under xdist (``Claims.shared_outcomes``) another worker
may report a trial as soon as it is published, and the controller then reads the run folder: there, a rollout is
recorded on the loop before it is published.

Why the loop runs on pytest's thread in one process: two threads share one interpreter lock, and the loop's
thread took it from a busy pytest thread and handed it back at every system call, about eight context switches a
trial. On pytest's thread the same work costs no switch at all; rollouts in flight still progress whenever pytest
waits for a result, which against a slow Gym is most of the time, and each request for a result first lets the loop
send what is due (a few passes of the loop that do not block). When pytest's thread stays away longer than
``AWAY_S`` with rollouts in flight (it runs tests of another kind, or a slow hook), a relay thread runs the loop until
it comes back: answers are read when they come, so their latency and timeouts stay true, and prefetching goes on.
One lock says which thread runs the loop; pytest's thread takes it back by stopping the relay's run.

``stop()`` (after ``-x``, ``--maxfail``, Ctrl-C) starts nothing new and cancels
what is in flight. ``close()`` at the end of the session lets the rollouts in
flight finish when another process may be waiting for them
(``Claims.drain_at_close``), and cancels them otherwise.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from pytest_gym.core.access import GymAccess
from pytest_gym.core.endpoint import GymEndpoint
from pytest_gym.core.outcome import TrialOutcome, TrialSpec
from pytest_gym.rollout.adaptive import Limit
from pytest_gym.rollout.admission import Admission, Decision, NotAdmitted
from pytest_gym.rollout.claims import Claims, LocalClaims
from pytest_gym.rollout.health import Health
from pytest_gym.rollout.http import HTTPPool
from pytest_gym.rollout.transport import Rollouts

_T = TypeVar("_T")

#: Seconds a worker waits beyond the trial timeout for a trial another live worker claimed.
CLAIM_WAIT_MARGIN_S = 30.0
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


#: Passes of the loop, at most, when pytest asks for a result that is done already (inline).
_PASSES = 6
#: Inline: seconds pytest's thread may stay away with rollouts in flight before the relay runs the loop (pytest's
#: own work between two trials takes a few milliseconds: the relay stays idle then).
AWAY_S = 0.05
#: Seconds pytest's thread waits for the relay to give the loop back (it stops after the current pass).
_TAKE_BACK_S = 60.0

#: Seconds a finished rollout waits for pytest's thread to record it before the loop records it itself.
RECORD_WITHIN_S = 0.05

#: Times pytest's thread asks the admission again for a trial whose slot came after the answer changed.
_MAX_RECONSIDER = 1000


class _ClaimedElsewhere(Exception):
    """A trial refused here was claimed by another process first: its outcome is waited for, not refused."""


class _Reconsider(Exception):
    """The admission's answer changed while a trial waited for a slot: pytest's thread asks again."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.reason)
        self.decision = decision


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
    """Schedules the session's rollouts on a background event loop; pytest's thread waits for each result."""

    def __init__(
        self,
        endpoint: GymEndpoint,
        concurrency: int,
        trial_timeout: float,
        default_agent: str | None,
        lookahead: int | None = None,
        claims: Claims | None = None,
        retries: int = 0,
        skip: frozenset[str] = frozenset(),
        access: GymAccess | None = None,
        tracestate: str | None = None,
        limit: Limit | None = None,
        check_evidence: bool = False,
        admission: Admission | None = None,
        inline: bool | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.limit = limit
        #: Budgets, adaptive repeats, sequential gates: whether a trial starts, waits or never runs.
        self.admission = admission
        #: Trials the admission holds back until their task's earlier repeats finish (in plan order).
        self._held_back: list[TrialSpec] = []
        #: Trials the feeder held back or found refused: not offered again by the plan walk.
        self._passed_over: set[str] = set()
        #: Trials pytest's thread was refused: never started here, whatever the admission says later.
        self._refused: set[str] = set()
        #: Set when a rollout finished here: pytest's thread, waiting on a held-back trial, decides again.
        self._finished = threading.Event()
        #: Trials never to roll out here (their results are reused from an earlier run).
        self.skip = skip
        self.concurrency = max(1, concurrency)
        self.lookahead = max(1, lookahead if lookahead is not None else max(64, 4 * self.concurrency))
        self._wake_step = max(1, self.lookahead // 8)
        self.trial_timeout = trial_timeout
        self.claims: Claims = claims if claims is not None else LocalClaims()
        #: Called on the loop with every finished outcome, first, before it is handed out or published.
        self.listeners: list[Callable[[TrialOutcome], None]] = []
        #: Called with the finished outcomes, in the order they finished, on pytest's thread where it can: all
        #: those not recorded yet at once (the run folder's writer then locks and writes once per batch).
        self.recorders: list[Callable[[Sequence[TrialOutcome]], None]] = []
        #: Finished outcomes not recorded yet, with when they finished (``time.monotonic``).
        self._unrecorded: collections.deque[tuple[float, TrialOutcome]] = collections.deque()
        self._recording = threading.Lock()  # one recording pass at a time: the records keep their order
        #: Set when an outcome is queued or a result is set while pytest's thread waits (``_waiter``).
        self._news = threading.Event()
        self._waiter = False
        self._late_timer: asyncio.TimerHandle | None = None
        #: Problems that did not stop a trial but should be reported (a listener or the board failed).
        self.problems: list[str] = []
        #: What happened to the trials: "ran" here, results taken "here" or "from_board", board "polls".
        self.counts: collections.Counter[str] = collections.Counter()
        self._plan: list[TrialSpec] = []
        self._index: dict[str, int] = {}
        self._lock = threading.Lock()
        # Trials this process started and whose outcome is still held; an outcome the claims keep for the
        # other processes is dropped once published unless a local item waits for it.
        self._running: dict[str, concurrent.futures.Future[TrialOutcome]] = {}
        self._waiting: set[str] = set()
        self._started: set[str] = set()
        self._mine: set[str] = set()  # started because this worker was handed them: kept until consumed
        self._position = 0
        #: A feeder with nothing to start in the lookahead waits until pytest reaches this position: woken
        #: once per ``_wake_step`` trials pytest moves on, it starts that many (a wake-up per trial would cost
        #: a system call and a pass of the loop per trial while pytest, not Gym, is the slower side). Set by the
        #: feeder as it waits; pytest's thread sets it past any position when it asks for the wake-up.
        self._wake_at = 0
        self._cursor = 0
        self._upcoming: Callable[[], Sequence[int]] | None = None
        self._feeder_waiting = False
        self._stopping = False
        self._closing = False
        #: The loop runs on pytest's thread (one process); else on its own thread (xdist: see the module).
        self.inline = (not self.claims.drain_at_close) if inline is None else inline
        self._switched = not self.inline
        if self._switched:
            _fast_switching(True)
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        #: Inline: held by the thread that runs the loop (pytest's, or the relay while pytest's is away).
        self._owner = threading.RLock()
        self._depth = 0  # pytest's thread's nesting of ``_driving``
        self._left_at = time.monotonic()
        self._relay_stop = threading.Event()
        self._relay: threading.Thread | None = None
        if not self.inline:
            self._thread = threading.Thread(target=self._loop.run_forever, name="pytest-gym-dispatch", daemon=True)
            self._thread.start()
        access = access or GymAccess()  # an auth proxy's headers and the CA of https servers
        self._http = HTTPPool(access.headers, access.ssl_context, access.origins)
        self._health = Health(endpoint, self._http, probe_timeout_s=min(5.0, trial_timeout))
        self._rollouts = Rollouts(
            endpoint,
            self._http,
            self._health,
            trial_timeout,
            default_agent,
            retries,
            self.counts,
            tracestate,
            limit,
            check_evidence,
        )
        self._slots = _Slots(self.concurrency)
        self._progress: asyncio.Event | None = None
        self._feeder: asyncio.Future[None] | concurrent.futures.Future[None] | None = None
        self._feed_task: asyncio.Task[Any] | None = None  # the feeder's own task, on the loop (cancelled at stop)
        self._watchdog: asyncio.Future[None] | concurrent.futures.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._call(self._init())

    async def _init(self) -> None:
        self._progress = asyncio.Event()

    def _alive(self) -> bool:
        """The loop can still run work: open (inline) or its thread running it."""
        return not self._loop.is_closed() if self.inline else self._loop.is_running()

    def _call(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        """Run ``coro`` on the loop and wait for its result, from pytest's thread."""
        if self.inline:
            with self._driving():
                return self._loop.run_until_complete(asyncio.wait_for(coro, timeout) if timeout is not None else coro)
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()  # as wait_for does inline: nothing it was to do starts after the wait ended
            raise

    @contextlib.contextmanager
    def _driving(self) -> Iterator[None]:
        """Inline: the loop is pytest's thread's within; taken back from the relay if it runs it."""
        self._depth += 1
        try:
            if not self._owner.acquire(blocking=False):
                self._loop.call_soon_threadsafe(self._loop.stop)  # the relay's run ends after its current pass
                if not self._owner.acquire(timeout=_TAKE_BACK_S):
                    raise RuntimeError(f"pytest-gym: the rollout relay kept the event loop for {_TAKE_BACK_S:g} s")
            try:
                yield
            finally:
                self._owner.release()
        finally:
            self._depth -= 1
            self._left_at = time.monotonic()

    def _has_work(self) -> bool:
        """Rollouts in flight, callbacks ready (a slot given back: the feeder starts the next), records due."""
        return self._slots.in_use > 0 or bool(getattr(self._loop, "_ready", None)) or bool(self._unrecorded)

    def _relay_loop(self) -> None:
        """Inline: run the loop while pytest's thread is away with rollouts in flight; until the dispatcher closes."""
        while not self._relay_stop.wait(AWAY_S):
            if self._depth or not self._has_work() or time.monotonic() - self._left_at < AWAY_S:
                continue
            if not self._owner.acquire(blocking=False):
                continue
            try:
                if self._loop.is_closed():
                    continue
                # Run even when pytest's thread came back meanwhile: it then asked this run to stop (and a stop
                # left unconsumed would end its own next run early).
                self.counts["relayed"] += 1
                self._loop.run_forever()  # until pytest's thread stops it to take the loop back
            finally:
                self._owner.release()

    def _submit(self, coro: Coroutine[Any, Any, None]) -> asyncio.Future[None] | concurrent.futures.Future[None]:
        """Start ``coro`` on the loop without waiting for it."""
        if self.inline:
            with self._driving():
                return self._loop.create_task(coro)
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _pump(self, until: concurrent.futures.Future[TrialOutcome] | None = None, timeout: float | None = None) -> None:
        """Inline: run the loop until ``until`` is done or ``timeout`` passed; when it is done already (or None), a few
        passes that do not block (what arrived is read, what is due is sent)."""
        loop = self._loop
        if loop.is_closed():
            return  # closed: nothing runs any more (a result waited for after the end of the session)
        with self._driving():
            self._run_until(until, timeout)

    def _run_until(self, until: concurrent.futures.Future[TrialOutcome] | None, timeout: float | None) -> None:
        loop = self._loop
        if until is None or until.done():
            # A few passes, while each leaves work ready: a wake-up of the feeder, its start of a rollout and that
            # rollout's request each take one.
            for _ in range(_PASSES):
                loop.call_soon(loop.stop)
                loop.run_forever()
                if not getattr(loop, "_ready", None):  # CPython's queue of callbacks ready to run
                    break
            return
        woken: asyncio.Future[None] = loop.create_future()

        def wake(_: object = None) -> None:
            if not woken.done():
                woken.set_result(None)

        until.add_done_callback(wake)  # set on the loop, so called on this thread
        timer = loop.call_later(timeout, wake) if timeout is not None else None
        try:
            loop.run_until_complete(woken)
        finally:
            if timer is not None:
                timer.cancel()

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
            self._feeder = self._submit(self._feed())
            if self._health.watches:
                self._watchdog = self._submit(self._health.watch())
            if self.inline and self._relay is None:
                self._relay = threading.Thread(target=self._relay_loop, name="pytest-gym-relay", daemon=True)
                self._relay.start()

    def result(self, spec: TrialSpec, timeout: float | None = None) -> TrialOutcome:
        """Block until this trial's rollout is done, starting it now if nobody has.

        Raises ``concurrent.futures.CancelledError`` when the run was stopped before it started.
        """
        self._advance(spec)
        return self.claims.result(spec, self, timeout)

    def stop(self) -> None:
        """Start nothing new; cancel the rollouts in flight."""
        if self._stopping:
            return
        self._stopping = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._alive():
            self._call(self._cancel_all(), timeout=30)
        if cancelled := self.counts.pop("cancelled in flight", 0):
            self.problems.append(
                f"{cancelled} rollout{'s' if cancelled != 1 else ''} cancelled in flight when the run stopped: Gym may "
                "run them to the end all the same, and the model bill them; their usage is known nowhere"
            )
        self.record_pending()

    def close(self) -> None:
        """End of the session: let the rollouts in flight finish if another process may wait for them; shut down."""
        if self.claims.drain_at_close and not self._stopping and self._alive():
            self._closing = True
            try:
                self._call(self._drain(), timeout=self.claim_wait_s)
            except (concurrent.futures.TimeoutError, asyncio.TimeoutError):
                self.problems.append("rollouts still running at the end of the session were cancelled")
        self.stop()
        self._relay_stop.set()
        if self._relay is not None:
            if self._alive():
                with self._driving():  # takes the loop back if the relay runs it: it then sees the stop and ends
                    pass
            self._relay.join(timeout=10)
        if self._alive():
            self._call(self._aclose(), timeout=10)
            if self._thread is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=10)
        if not (self._thread is not None and self._thread.is_alive()) and not self._loop.is_closed():
            self._loop.close()  # an unclosed loop keeps its selector's file descriptors until collected
            self._rollouts.close()
        self.record_pending()
        if self._switched:
            self._switched = False
            _fast_switching(False)

    @property
    def in_flight(self) -> int:
        return self._slots.in_use

    @property
    def gym_dead(self) -> str | None:
        """Why the deployment is known dead: every later trial fails at once with this."""
        return self._health.dead

    # -- what the claims ask of this process (``claims.Here``), from pytest's thread ------------

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def claim_wait_s(self) -> float:
        return self.trial_timeout + CLAIM_WAIT_MARGIN_S

    def held(self, nodeid: str) -> concurrent.futures.Future[TrialOutcome] | None:
        with self._lock:
            future = self._running.get(nodeid)
            if future is not None:
                self._waiting.add(nodeid)
            return future

    def start_now(
        self, spec: TrialSpec, taken_over: bool = False, timeout: float | None = None
    ) -> concurrent.futures.Future[TrialOutcome] | None:
        if self._stopping or not self._alive():
            return None
        started = None
        for _ in range(_MAX_RECONSIDER):
            if self.admission is not None and not taken_over:
                try:
                    held = self._admit_now(spec)
                except _ClaimedElsewhere:
                    return None  # its outcome comes from the process that claimed it
                if held is not None:
                    return held
            try:
                started = self._call(self._claim_now(spec, taken_over), timeout)
                break
            except _Reconsider:
                continue  # _admit_now skips it now, or waits while it is held back
            except asyncio.TimeoutError:  # Python 3.10: not concurrent.futures' (the same class from 3.11)
                raise concurrent.futures.TimeoutError() from None
        else:
            raise NotAdmitted(Decision("skip", "not run: held back while other rollouts took every slot", "decided"))
        if started is not None:
            if not taken_over:
                self.counts["on_demand"] += 1
            with self._lock:
                self._waiting.add(spec.nodeid)
        return started

    def _admit_now(self, spec: TrialSpec) -> concurrent.futures.Future[TrialOutcome] | None:
        """pytest's thread reached a trial nobody started: wait while the admission holds it back (bounded),
        raise ``NotAdmitted`` when it never starts; a rollout started meanwhile is returned."""
        assert self.admission is not None
        deadline = time.monotonic() + self.claim_wait_s
        while True:
            with self._lock:
                future = self._running.get(spec.nodeid)
            if future is not None:
                return future
            decision = self.admission.decide(spec)
            if decision.action == "start":
                return None
            timed_out = decision.action == "wait" and (self._stopping or time.monotonic() >= deadline)
            if decision.action == "skip" or timed_out:
                started = self._refuse(spec)
                if started is not None:
                    return started  # started here meanwhile: its result counts
                if timed_out:
                    wait_s = f"{self.claim_wait_s:g}"
                    raise NotAdmitted(
                        Decision(
                            "skip", f"not run: its task's earlier repeats gave no result within {wait_s} s", "decided"
                        )
                    )
                self.admission.note(decision)
                raise NotAdmitted(decision)
            if self.inline:
                self._call(asyncio.sleep(_QUEUE_POLL_S))  # the rollouts it waits for run meanwhile
            else:
                self._finished.wait(_QUEUE_POLL_S)
            self._finished.clear()

    def _refuse(self, spec: TrialSpec) -> concurrent.futures.Future[TrialOutcome] | None:
        """Make a refusal final: None once no process can start the trial any more. The admission's view of the
        ledger differs by a moment between the feeder and another process: one of them may have decided to
        start it before the rollout that spent the budget was counted. A rollout already started here is
        returned; ``_ClaimedElsewhere`` when another process claimed it first (its outcome is waited for)."""
        with self._lock:
            future = self._running.get(spec.nodeid)
            if future is not None:
                return future
            self._refused.add(spec.nodeid)  # the feeder, checking under the lock, starts it no more
        if self.claims.claim(spec.nodeid):
            return None  # claimed and never published: no other process starts it either
        with self._lock:
            self._refused.discard(spec.nodeid)
        raise _ClaimedElsewhere()

    def wait(self, nodeid: str, future: concurrent.futures.Future[TrialOutcome], timeout: float | None) -> TrialOutcome:
        try:
            self._wait_recording(future, timeout)
            outcome = future.result(timeout=0)  # raises the timeout if it is not done
            self.counts["here"] += 1
            return outcome
        finally:
            with self._lock:
                self._waiting.discard(nodeid)
                self._mine.discard(nodeid)
                if future.done() and self._running.get(nodeid) is future:
                    del self._running[nodeid]

    def _wait_recording(self, future: concurrent.futures.Future[TrialOutcome], timeout: float | None) -> None:
        """Until ``future`` is done (or ``timeout``), record what finishes meanwhile; then what finished before it."""
        if self.inline:
            self._pump(future, timeout)  # a few passes when it is done already: the next rollouts go out
            self.record_pending()
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        if not future.done():
            future.add_done_callback(self._signal_news)
        while True:
            done = future.done()  # seen done: its own outcome was queued before its result was set
            self.record_pending()
            if done:
                return
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            self._news.clear()
            self._waiter = True
            try:
                if not (self._unrecorded or future.done()):
                    self._news.wait(remaining)
            finally:
                self._waiter = False

    def _signal_news(self, _: object = None) -> None:
        if self._waiter:
            self._news.set()

    def record_pending(self, finished_before: float | None = None) -> None:
        """Hand the finished outcomes not recorded yet (those finished before ``finished_before``, if given) to
        the recorders, in the order they finished."""
        if not self._unrecorded:
            return
        with self._recording:
            batch = []
            while self._unrecorded:
                finished, outcome = self._unrecorded[0]
                if finished_before is not None and finished > finished_before:
                    break
                self._unrecorded.popleft()
                batch.append(outcome)
            if batch:
                for recorder in self.recorders:
                    self._guard("recording a rollout", recorder, batch)

    def _advance(self, spec: TrialSpec) -> None:
        index = self._index.get(spec.nodeid)
        if index is not None and index + 1 > self._position:
            self._position = index + 1
            if self._feeder_waiting and self._position >= self._wake_at:
                self._wake_at = sys.maxsize  # one wake-up per wait: the feeder sets the next mark when it waits again
                self._loop.call_soon_threadsafe(self._wake)  # inline too: the relay may be running the loop

    # -- the loop thread -----------------------------------------------------------------

    def _wake(self) -> None:
        if self._progress is not None:
            self._progress.set()

    def _known(self, nodeid: str) -> bool:
        """Started by this process, reused, or claimed by another process."""
        return (
            nodeid in self._started
            or nodeid in self.skip
            or nodeid in self._passed_over
            or nodeid in self._refused
            or self.claims.claimed(nodeid)
        )

    async def _feed(self) -> None:
        assert self._progress is not None
        self._feed_task = asyncio.current_task()
        while not (self._stopping or self._closing):
            await self._slots.acquire()
            spec = None if self._stopping or self._closing else self._admitted_candidate()
            if spec is not None and self._claim(spec):
                if self._start(spec, prefetched=True) is not None:
                    continue
                self._guard("the claim board", self.claims.release, spec.nodeid)  # pytest's thread refused it
            self._slots.release()
            if spec is not None:
                continue  # another process claimed it just now
            if self._cursor >= len(self._plan) and not self._held_back:
                return  # every trial was started here, claimed by another process, or refused
            # Nothing to start within the lookahead: wait until pytest moves on (or, under xdist, until the
            # controller hands this worker more items, which nothing signals: look again shortly). A trial held
            # back waits for results another process may publish: look again shortly too.
            self._progress.clear()
            self._wake_at = self._position + self._wake_step
            self._feeder_waiting = True
            if self._next_candidate(peek=True) is None:
                if self._upcoming is None and not self._held_back:
                    await self._progress.wait()
                else:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._progress.wait(), _QUEUE_POLL_S)
            self._feeder_waiting = False

    def _admitted_candidate(self) -> TrialSpec | None:
        """The next trial to prefetch that the admission lets start: held-back trials first, then the plan."""
        admission = self.admission
        if admission is None:
            return self._next_candidate()
        for spec in list(self._held_back):
            if spec.nodeid in self._started or spec.nodeid in self._refused or self.claims.claimed(spec.nodeid):
                self._held_back.remove(spec)  # started since (by pytest's thread or another process)
                continue
            decision = admission.decide(spec)
            if decision.action != "wait":
                self._held_back.remove(spec)
                if decision.action == "start":
                    return spec
        while True:
            candidate = self._next_candidate()
            if candidate is None:
                return None
            decision = admission.decide(candidate)
            if decision.action == "start":
                return candidate
            self._passed_over.add(candidate.nodeid)  # the plan walk does not offer it again
            if decision.action == "wait":
                self._held_back.append(candidate)

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
        return spec.nodeid not in self._started and self.claims.claim(spec.nodeid)

    async def _claim_now(
        self, spec: TrialSpec, taken_over: bool = False
    ) -> concurrent.futures.Future[TrialOutcome] | None:
        with self._lock:
            future = self._running.get(spec.nodeid)
        if future is not None:
            return future
        if spec.nodeid in self._started and not taken_over:
            if not self.claims.run_again(spec.nodeid):
                return None
            self._started.discard(spec.nodeid)  # asked again after it was consumed (a rerun): run it again
        await self._slots.acquire(urgent=True)
        with self._lock:
            future = self._running.get(spec.nodeid)
        if future is None and not taken_over and self.admission is not None and not self._stopping:
            # Decided before the slot was free: the rollouts that held it may have spent the budget or decided the
            # task or the suite meanwhile. Ask again now, with the slot in hand.
            decision = self.admission.decide(spec)
            if decision.action != "start":
                self._slots.release()
                raise _Reconsider(decision)
        if future is not None or self._stopping or not (taken_over or self._claim(spec)):
            self._slots.release()
            return future
        return self._start(spec)

    def _start(self, spec: TrialSpec, prefetched: bool = False) -> concurrent.futures.Future[TrialOutcome] | None:
        """Run a claimed trial; the caller holds a slot, which the rollout releases. A prefetched trial that
        pytest's thread refused since the feeder decided is not run (None): checked under the lock that
        ``_refuse`` takes."""
        future: concurrent.futures.Future[TrialOutcome] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        with self._lock:
            if prefetched and spec.nodeid in self._refused:
                return None
            self._running[spec.nodeid] = future
        self._started.add(spec.nodeid)
        self.counts["ran"] += 1
        task = self._loop.create_task(self._run(spec, future))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return future

    async def _run(self, spec: TrialSpec, future: concurrent.futures.Future[TrialOutcome]) -> None:
        try:
            slot = await self.claims.acquire_slot()
            try:
                refused = self._refused_at_start(spec, slot)
                if refused is not None:
                    self._unstart(spec, refused, future)
                    return
                try:
                    outcome = await self._rollouts.run(spec)
                except Exception as exc:  # a bug must not leave pytest waiting for this trial forever
                    outcome = TrialOutcome.for_spec(
                        spec, error_class="internal", error=f"pytest-gym failed to run this trial: {exc!r}"
                    )
                if self.admission is not None:  # in the ledger before its slot is free: the next start sees it
                    self._guard("recording a rollout in the ledger", self.admission.ledger.record, outcome)
            finally:
                self.claims.release_slot(slot)
        except asyncio.CancelledError:
            self._slots.release()
            self._guard("the claim board", self.claims.release, spec.nodeid)
            future.set_result(
                TrialOutcome.for_spec(
                    spec, error_class="cancelled", error="cancelled: the run was stopped before it finished"
                )
            )
            raise
        self._slots.release()
        # Let the next rollout go out before this one is recorded: with few slots, recording is on the
        # critical path otherwise (one pass for the feeder to start it, one for its request to be sent).
        with contextlib.suppress(asyncio.CancelledError):  # stopped now: the rollout is done, deliver it
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        for listener in self.listeners:
            self._guard("recording a rollout", listener, outcome)
        if self.recorders:
            self._unrecorded.append((time.monotonic(), outcome))
            if self.claims.shared_outcomes:  # another worker may report it once published: on file before that
                self.record_pending()
            else:
                self._signal_news()
                if self._late_timer is None:
                    self._late_timer = self._loop.call_later(RECORD_WITHIN_S, self._record_late)
        if self._guard("publishing a rollout to the other workers", self.claims.publish, outcome):
            with self._lock:
                if spec.nodeid not in self._waiting and spec.nodeid not in self._mine:
                    self._running.pop(spec.nodeid, None)
        future.set_result(outcome)
        if self.admission is not None:  # a held-back trial may start (or be settled) now
            self._finished.set()
            self._wake()

    def _record_late(self) -> None:
        """On the loop: record what pytest's thread left unrecorded for ``RECORD_WITHIN_S``; look again then."""
        self._late_timer = None
        self.record_pending(finished_before=time.monotonic() - RECORD_WITHIN_S)
        if self._unrecorded:
            wait = self._unrecorded[0][0] + RECORD_WITHIN_S - time.monotonic()
            self._late_timer = self._loop.call_later(max(0.0, wait), self._record_late)

    def _refused_at_start(self, spec: TrialSpec, slot: int | None) -> Decision | None:
        """Under xdist a run-wide slot may come long after the trial was admitted: while it waited, other
        workers' rollouts may have spent the budget or decided the task or the suite. Asked again then."""
        if self.admission is None or slot is None:
            return None
        decision = self.admission.decide(spec)
        return decision if decision.action == "skip" else None

    def _unstart(self, spec: TrialSpec, decision: Decision, future: concurrent.futures.Future[TrialOutcome]) -> None:
        """A trial refused once its slot came: not run. Its claim is given back (the worker that reports it
        asks the admission, which refuses it there too); a wait here on it raises ``NotAdmitted``."""
        self._slots.release()
        with self._lock:
            if spec.nodeid not in self._waiting and spec.nodeid not in self._mine:
                self._running.pop(spec.nodeid, None)
        self._started.discard(spec.nodeid)
        self.counts["ran"] -= 1
        self._guard("the claim board", self.claims.release, spec.nodeid)
        future.set_exception(NotAdmitted(decision))
        self._finished.set()
        self._wake()

    def _guard(self, what: str, call: Callable[..., object], *args: object) -> object:
        """``call(*args)``; a failure becomes a reported problem (and None), never a stuck trial."""
        try:
            return call(*args)
        except Exception as exc:
            self.problems.append(f"{what} failed: {type(exc).__name__}: {exc}")
            return None

    async def _drain(self) -> None:
        self._wake()
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _cancel_all(self) -> None:
        self._wake()
        tasks = list(self._tasks)
        feeder = self._feed_task
        if feeder is not None and not feeder.done():
            # Woken above, it ends at its next pass; one that took a slot given back by a cancelled rollout waits
            # again (or, inline, lost its wake-up to a pass another plugin's signal cut short): left pending, the
            # loop would close on it.
            feeder.cancel()
            tasks.append(feeder)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=10)

    async def _aclose(self) -> None:
        await self._http.aclose()
        self.claims.close()
        if self.limit is not None:
            self.limit.close()
