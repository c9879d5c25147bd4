"""``--gym-concurrency-adaptive``: the run's concurrency limit follows the rate limits its rollouts meet.

Against a provider with a requests- or tokens-per-minute limit a fixed concurrency alternates bursts and 429s.
Here every ``/run`` request (each attempt) holds a permit of the run's limit. An answer 429 or 503 halves the
limit (multiplicative decrease, never below 1), once per window: only an answer to a request sent under the
current limit lowers it again, so a burst of 429s from one window counts once. Every answered request then
adds ``1/limit`` (additive increase: one more permit per window of answers) up to ``--gym-concurrency``, but
not before the wait the last ``Retry-After`` asked for has passed.

One process keeps the limit in memory (``LocalLimit``). xdist workers share it through the run folder
(``SharedLimit``): the limit in a small state file updated under a lock, and permits as ``flock``s on the
first ``limit`` of ``--gym-concurrency`` slot files, taken only while the limit is below the ceiling (at the
ceiling each worker's own share of ``--gym-concurrency`` already bounds the run, as without adaptation).
Every 429/503 and every change of the limit is appended to ``concurrency.jsonl`` in the run folder; the owner
summarizes it for the summary (``summarize``). ``off`` keeps a fixed concurrency and only counts the 429s.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.locks import held
from pytest_gym.core.numbers import is_finite_number, is_int
from pytest_gym.runfolder.layout import CONCURRENCY_LOG, CONCURRENCY_STATE

if TYPE_CHECKING:
    from pytest_gym.judge.summary import ConcurrencySummary

#: Statuses that say "fewer at once, please".
THROTTLE_STATUSES = frozenset({429, 503})
#: The factor a throttled window leaves of the limit.
DECREASE = 0.5
_POLL_MIN_S = 0.0005
_POLL_MAX_S = 0.005
_MAX_LOG_BYTES = 64 << 20


@dataclass
class Aimd:
    """The limit's state machine (no I/O): ``limit`` permits, ``epoch`` counts the decreases."""

    ceiling: int
    limit: float = 0.0
    epoch: int = 0
    #: Epoch seconds before which the limit does not grow (the last Retry-After).
    hold_until: float = 0.0

    def __post_init__(self) -> None:
        if self.limit <= 0:
            self.limit = float(self.ceiling)

    @property
    def permits(self) -> int:
        return max(1, min(self.ceiling, math.floor(self.limit + 1e-9)))

    def throttled(self, epoch: int, retry_after: float | None, now: float) -> bool:
        """A 429/503 to a request sent in ``epoch``; whether the limit changed."""
        if retry_after is not None:
            self.hold_until = max(self.hold_until, now + retry_after)
        if epoch != self.epoch:
            return False  # sent before the last decrease: that window was already counted
        before = self.permits
        self.limit = max(1.0, self.limit * DECREASE)
        self.epoch += 1
        return self.permits != before

    def answered(self, now: float) -> bool:
        """A request answered without throttling; whether the number of permits changed."""
        if self.limit >= self.ceiling or now < self.hold_until:
            return False
        before = self.permits
        self.limit = min(float(self.ceiling), self.limit + 1.0 / self.limit)
        return self.permits != before

    def to_json(self) -> dict[str, Any]:
        return {"ceiling": self.ceiling, "limit": self.limit, "epoch": self.epoch, "hold_until": self.hold_until}

    @classmethod
    def from_json(cls, data: Any, ceiling: int) -> Aimd:
        try:
            limit, epoch, hold_until = data["limit"], data["epoch"], data["hold_until"]
        except (TypeError, KeyError, IndexError):
            return cls(ceiling)
        # Numbers as this plugin writes them: ``true`` is no limit of 1, an epoch of Infinity no OverflowError.
        if not (is_finite_number(limit) and is_int(epoch) and is_finite_number(hold_until)):
            return cls(ceiling)
        if not 1.0 <= limit <= ceiling:
            return cls(ceiling)
        return cls(ceiling, float(limit), epoch, float(hold_until))


@dataclass(frozen=True)
class Permit:
    """One request's share of the limit: the window it was sent in, and the shared slot it holds (if any)."""

    epoch: int
    slot: int | None = None


class Limit(Protocol):
    """The run's concurrency limit as one process's rollouts use it (on the dispatcher's event loop)."""

    async def acquire(self) -> Permit: ...

    def release(self, permit: Permit, status: int | None, retry_after: float | None) -> None:
        """The request ended; ``status``: its HTTP status when it was not answered with a reward."""
        ...

    def close(self) -> None: ...


class _Log:
    """``concurrency.jsonl``: one line per 429/503 and per change of the limit, from every process."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / CONCURRENCY_LOG

    def write(self, **event: Any) -> None:
        line = json.dumps({"t": round(time.time(), 4), **event}).encode() + b"\n"
        with contextlib.suppress(OSError):
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)


class CountingLimit:
    """``--gym-concurrency-adaptive off``: no limit beyond the dispatcher's; 429s and 503s are counted."""

    def __init__(self, run_dir: Path) -> None:
        self._log = _Log(run_dir)

    async def acquire(self) -> Permit:
        return Permit(0)

    def release(self, permit: Permit, status: int | None, retry_after: float | None) -> None:
        if status in THROTTLE_STATUSES:
            self._log.write(status=status)

    def close(self) -> None:
        pass


class LocalLimit:
    """The limit of a run in one process, in memory."""

    def __init__(self, run_dir: Path, ceiling: int) -> None:
        self.state = Aimd(max(1, ceiling))
        self.in_use = 0
        self._log = _Log(run_dir)
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def acquire(self) -> Permit:
        while self.in_use >= self.state.permits:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken just as we were cancelled: pass it on
                raise
        self.in_use += 1
        return Permit(self.state.epoch)

    def release(self, permit: Permit, status: int | None, retry_after: float | None) -> None:
        self.in_use -= 1
        now = time.time()
        if status in THROTTLE_STATUSES:
            changed = self.state.throttled(permit.epoch, retry_after, now)
            self._log.write(status=status, **({"limit": self.state.permits} if changed else {}))
        elif self.state.answered(now):
            self._log.write(limit=self.state.permits)
        self._wake()

    def _wake(self) -> None:
        free = self.state.permits - self.in_use
        while free > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def close(self) -> None:
        for waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()


class SharedLimit:
    """The limit of a run shared by its xdist workers: state and permits in files of the run folder."""

    def __init__(self, run_dir: Path, ceiling: int) -> None:
        self.ceiling = max(1, ceiling)
        self.path = run_dir / CONCURRENCY_STATE
        self._log = _Log(run_dir)
        slots = run_dir / f"{CONCURRENCY_STATE}-slots"
        slots.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        self._lock_fd = os.open(run_dir / f"{CONCURRENCY_STATE}.lock", flags, 0o644)
        self._slots = [os.open(slots / f"slot-{i}.lock", flags, 0o644) for i in range(self.ceiling)]
        self._held: set[int] = set()

    def _read(self) -> Aimd:
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError, RecursionError):
            return Aimd(self.ceiling)
        return Aimd.from_json(data, self.ceiling)

    async def acquire(self) -> Permit:
        pause = _POLL_MIN_S
        while True:
            state = self._read()
            if state.permits >= self.ceiling:
                return Permit(state.epoch)  # at the ceiling: each worker's own share bounds the run
            slot = self._try_slot(state.permits)
            if slot is not None:
                return Permit(state.epoch, slot)
            await asyncio.sleep(pause)
            pause = min(_POLL_MAX_S, pause * 1.5)

    def _try_slot(self, permits: int) -> int | None:
        for index in range(permits):
            if index in self._held:
                continue
            try:
                fcntl.flock(self._slots[index], fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            self._held.add(index)
            return index
        return None

    def release(self, permit: Permit, status: int | None, retry_after: float | None) -> None:
        if permit.slot is not None and permit.slot in self._held:
            self._held.discard(permit.slot)
            fcntl.flock(self._slots[permit.slot], fcntl.LOCK_UN)
        throttled = status in THROTTLE_STATUSES
        if not throttled and self._read().limit >= self.ceiling:
            return  # the usual case: nothing to change, no lock taken
        now = time.time()
        with held(self._lock_fd):
            state = self._read()
            changed = state.throttled(permit.epoch, retry_after, now) if throttled else state.answered(now)
            if throttled or changed:
                write_atomically(self.path, json.dumps(state.to_json()).encode(), fsync=False)
        if throttled:
            self._log.write(status=status, **({"limit": state.permits} if changed else {}))
        elif changed:
            self._log.write(limit=state.permits)

    def close(self) -> None:
        for fd in (self._lock_fd, *self._slots):
            with contextlib.suppress(OSError):
                os.close(fd)  # closing drops the locks
        self._slots = []
        self._held.clear()


def make_limit(run_dir: Path, ceiling: int, *, adaptive: bool, shared: bool) -> Limit:
    """The run's limit for this process: counting only (``off``), in memory, or shared by xdist workers."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if not adaptive:
        return CountingLimit(run_dir)
    return SharedLimit(run_dir, ceiling) if shared else LocalLimit(run_dir, ceiling)


def _timeline(points: list[list[float]]) -> list[list[float]]:
    """At most ``MAX_TIMELINE`` points: the first, the last and evenly spaced ones between."""
    from pytest_gym.judge.summary import MAX_TIMELINE

    if len(points) <= MAX_TIMELINE:
        return points
    step = (len(points) - 1) / (MAX_TIMELINE - 1)
    return [points[round(i * step)] for i in range(MAX_TIMELINE)]


def summarize(run_dir: Path, ceiling: int, adaptive: bool) -> ConcurrencySummary | None:
    """The run's rate limits and limit over time, from ``concurrency.jsonl``; None when it met none."""
    from pytest_gym.judge.summary import ConcurrencySummary

    path = run_dir / CONCURRENCY_LOG
    try:
        if path.stat().st_size > _MAX_LOG_BYTES:
            return None
        lines = path.read_bytes().splitlines()
    except OSError:
        return None
    events = []
    for line in lines:
        with contextlib.suppress(ValueError, RecursionError):
            event = json.loads(line)
            if isinstance(event, dict) and is_finite_number(event.get("t")):
                events.append(event)
    if not events:
        return None
    events.sort(key=lambda e: e["t"])
    start = events[0]["t"]
    statuses = collections.Counter(e.get("status") for e in events if e.get("status") in THROTTLE_STATUSES)
    points = [[0.0, float(ceiling)]] if adaptive else []
    for event in events:
        limit = event.get("limit")
        if adaptive and is_int(limit) and 1 <= limit <= ceiling:  # ``true`` is no limit of 1
            points.append([round(event["t"] - start, 3), float(limit)])
    limits = [int(p[1]) for p in points]
    return ConcurrencySummary(
        adaptive=adaptive,
        ceiling=ceiling,
        throttled=sum(statuses.values()),
        status_429=statuses[429],
        status_503=statuses[503],
        lowest=min(limits) if limits else None,
        final=limits[-1] if limits else None,
        timeline=_timeline(points),
    )
