"""Claims: how the processes of a run share its trials and its rollout budget without running any twice.

The dispatcher sees this through one protocol, ``Claims`` (like pytest-xdist's
``scheduler/protocol.py``), with two implementations: ``LocalClaims`` (one
process, everything in memory) and ``BoardClaims`` (xdist workers sharing the
claim files below).

Every worker sees the same ``session.items`` but does not know in advance which
of them the controller will hand it. So each worker's dispatcher prefetches the
trials it was handed (read from xdist's queue), then the rest of the list in
item order, and *claims* a trial before it runs it: an ``O_CREAT | O_EXCL``
claim file in the run folder, named by a hash of the node id and holding the
claimer's pid. Exactly one process wins a claim. The winner runs the rollout,
records it in its own run-folder writer, and appends the outcome as a JSON line
to the claim file. A worker that reaches a trial someone else claimed waits for
that line; if the claimer died, one waiter takes the trial over (an ``O_EXCL``
takeover file per dead pid decides which). Without xdist none of this exists:
results stay in memory.

A worker that needs a trial another worker claimed polls the board for its
outcome (``BoardClaims.result``), for at most one trial timeout plus a margin.

``--gym-concurrency C`` is the budget of the whole run: worker ``i`` of ``n``
gets ``C // n``, plus one for the first ``C % n`` workers. With fewer slots than
workers (C < n) each worker gets one, and a rollout must also hold one of C
lock files in the run folder (``GlobalSlots``), so C still bounds the run.

Plain files, no pytest and no xdist: ``pytest_gym.xdist_hooks`` wires them to xdist.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Protocol

from pytest_gym.core.outcome import TrialOutcome, TrialSpec
from pytest_gym.core.pids import pid_alive

#: A claim file still empty after this long belongs to a process that died while writing it.
_EMPTY_CLAIM_GRACE_S = 5.0
_POLL_MIN_S = 0.0005
_POLL_MAX_S = 0.02
#: How often a worker waiting for another worker's trial checks that the claimant still lives.
_ALIVE_CHECK_S = 0.25


def worker_share(concurrency: int, workers: int, index: int) -> int:
    """Worker ``index``'s part of a run-wide budget: floor or ceil of C/n, summing to C, at least 1."""
    workers = max(1, workers)
    share = concurrency // workers + (1 if index % workers < concurrency % workers else 0)
    return max(1, share)


class ClaimBoard:
    """Claims and published outcomes of the trials, shared by the processes of one run.

    One file per trial, ``<hash of node id>.trial``: created with ``O_EXCL`` by the claimer, holding
    its pid on the first line; the claimer keeps it open and appends the outcome as one JSON line when
    the rollout is done. A reader takes the outcome only once its line is complete (ends in a newline
    and parses). A claim is taken once a rollout slot is held, so a claimed trial is running (or done):
    a waiter need only allow one trial timeout.
    """

    def __init__(self, folder: Path, pid: int | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.pid = os.getpid() if pid is None else pid
        self._prefix = str(self.folder) + os.sep
        self._paths: dict[str, str] = {}
        self._fds: dict[str, int] = {}  # open claim files of this process, until the outcome is in
        #: Trials seen claimed: ``claimed`` answers these without a ``stat`` (the feeder asks again for each trial
        #: of its worker's queue another worker holds, at every pass). A claim given back later still reads as
        #: claimed here; that only keeps the feeder from prefetching it: ``state`` reads the board itself.
        self._seen_claimed: set[str] = set()

    def _path(self, nodeid: str) -> str:
        path = self._paths.get(nodeid)
        if path is None:
            digest = hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:32]
            path = self._paths[nodeid] = self._prefix + digest + ".trial"
        return path

    def claim(self, nodeid: str) -> bool:
        """Claim a trial for this process; False when another process holds it."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(self._path(nodeid), flags, 0o644)
        except FileExistsError:
            self._seen_claimed.add(nodeid)
            return False
        os.write(fd, b"%d\n" % self.pid)
        self._fds[nodeid] = fd
        return True

    def state(self, nodeid: str) -> tuple[int | None, TrialOutcome | None]:
        """(claimant pid, published outcome). Pid None: nobody claimed it; 0: its claimer died writing
        the claim; -1: the claim is being written."""
        path = self._path(nodeid)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None, None
        head, newline, rest = data.partition(b"\n")
        # A pid has a few digits: a longer head is no claim this plugin wrote (``int`` refuses > 4300 digits).
        if not newline or not head.isdigit() or len(head) > 20:
            with contextlib.suppress(OSError):
                if time.time() - os.stat(path).st_mtime > _EMPTY_CLAIM_GRACE_S:
                    return 0, None
            return -1, None
        outcome = None
        if rest.endswith(b"\n"):
            # A line that is not an outcome this plugin published (an array, an object without its fields): none.
            with contextlib.suppress(ValueError, TypeError, AttributeError, RecursionError):
                outcome = TrialOutcome.from_json(json.loads(rest))
        return int(head), outcome

    def claimant(self, nodeid: str) -> int | None:
        return self.state(nodeid)[0]

    def read(self, nodeid: str) -> TrialOutcome | None:
        """The published outcome of a trial, or None while it has none."""
        return self.state(nodeid)[1]

    def claimed(self, nodeid: str) -> bool:
        """Whether a trial was claimed, by any process: for what to prefetch (see ``_seen_claimed``)."""
        if nodeid in self._seen_claimed:
            return True
        if os.path.exists(self._path(nodeid)):
            self._seen_claimed.add(nodeid)
            return True
        return False

    def release(self, nodeid: str) -> None:
        """Give a claim back (a cancelled rollout): whoever needs the trial may claim it again."""
        fd = self._fds.pop(nodeid, None)
        if fd is None:
            return
        self._seen_claimed.discard(nodeid)
        path = self._path(nodeid)
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                os.unlink(path)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)

    def take_over(self, nodeid: str, dead_pid: int) -> bool:
        """Claim a trial whose claimant ``dead_pid`` died; exactly one taker wins per dead claimant."""
        path = self._path(nodeid)
        try:
            marker = os.open(f"{path}.takeover.{dead_pid}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        os.close(marker)
        tmp = f"{path}.{self.pid}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        os.write(fd, b"%d\n" % self.pid)
        os.replace(tmp, path)
        self._fds[nodeid] = fd
        return True

    def publish(self, outcome: TrialOutcome) -> None:
        """Append a finished trial's outcome to its claim file, for every process to read."""
        data = outcome.to_json()
        data["request"] = None  # only the claimer records the request (in its rollouts files)
        line = json.dumps(data, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass") + b"\n"
        fd = self._fds.pop(outcome.nodeid, None)
        if fd is None:  # not claimed through this board object: append through the path
            fd = os.open(self._path(outcome.nodeid), os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def close(self) -> None:
        """Close the claim files still open (claims stay: their trials were neither finished nor given back)."""
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    @staticmethod
    def remove_folder(folder: Path) -> None:
        """Remove a run's claims and published outcomes (the run folder's jsonl files keep the rollouts)."""
        shutil.rmtree(folder, ignore_errors=True)


class GlobalSlots:
    """C slots shared by the processes of a run: a rollout holds an ``flock`` on one of C files.

    Only used when there are more xdist workers than slots; otherwise the static split is exact and free.
    """

    def __init__(self, folder: Path, size: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._fds = [
            os.open(folder / f"slot-{i}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644) for i in range(size)
        ]
        self._held: set[int] = set()

    def try_acquire(self) -> int | None:
        """A free slot, now held by this process; None when all are held."""
        for index, fd in enumerate(self._fds):
            if index in self._held:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            self._held.add(index)
            return index
        return None

    def release(self, index: int) -> None:
        self._held.discard(index)
        fcntl.flock(self._fds[index], fcntl.LOCK_UN)

    def close(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the file drops its lock
        self._fds = []
        self._held.clear()


def alive(pid: int) -> bool:
    """Whether a claimant still runs (-1: a claim being written counts as alive; a zombie does not)."""
    return pid < 0 or (pid > 0 and pid_alive(pid))


class Here(Protocol):
    """What a ``Claims`` implementation may ask of this process's dispatcher, from pytest's thread."""

    counts: collections.Counter[str]

    @property
    def stopping(self) -> bool:
        """The run was stopped: nothing new starts."""
        ...

    @property
    def claim_wait_s(self) -> float:
        """How long a trial another process claimed may take to show its outcome."""
        ...

    def held(self, nodeid: str) -> concurrent.futures.Future[TrialOutcome] | None:
        """This process's rollout of the trial, if it started one whose outcome it still holds."""
        ...

    def start_now(
        self, spec: TrialSpec, taken_over: bool = False, timeout: float | None = None
    ) -> concurrent.futures.Future[TrialOutcome] | None:
        """Claim (unless ``taken_over``: already claimed) and start the trial now, ahead of any prefetch; None
        when stopping or another process claimed it first; ``concurrent.futures.TimeoutError`` when no slot came
        free within ``timeout`` (the run's deadline: every slot may be held by rollouts waiting out a rate limit)."""
        ...

    def wait(self, nodeid: str, future: concurrent.futures.Future[TrialOutcome], timeout: float | None) -> TrialOutcome:
        """Wait for this process's rollout of the trial and hand its outcome out."""
        ...


class Claims(Protocol):
    """How this process shares the run's trials and rollout budget with other processes (or does not)."""

    #: Whether the rollouts in flight at the end of the session must finish: another process may wait for them.
    drain_at_close: bool
    #: Whether another process may report a trial this one ran as soon as it is published: then its record must
    #: be in the run folder first (the xdist controller asks Gym for its metrics once the last trial reported).
    shared_outcomes: bool

    def claim(self, nodeid: str) -> bool:
        """Take a trial for this process; False when another process has it."""
        ...

    def claimed(self, nodeid: str) -> bool:
        """Whether some process claimed it (the dispatcher itself knows what this process started)."""
        ...

    def run_again(self, nodeid: str) -> bool:
        """Whether a trial this process ran and handed out runs again when asked for once more (a rerun)."""
        ...

    def release(self, nodeid: str) -> None:
        """Give back the claim of a rollout that was cancelled: whoever needs the trial may claim it."""
        ...

    def publish(self, outcome: TrialOutcome) -> bool:
        """Offer a finished outcome to the other processes; True when they keep it (this process may drop it)."""
        ...

    async def acquire_slot(self) -> int | None:
        """A run-wide rollout slot, held for one rollout; None when this process's own budget is enough."""
        ...

    def release_slot(self, slot: int | None) -> None: ...

    def result(self, spec: TrialSpec, here: Here, timeout: float | None) -> TrialOutcome:
        """The trial's outcome, for pytest's thread: this process's rollout (started now if nobody started
        one) or another process's. Raises ``concurrent.futures.CancelledError`` if the run stopped first."""
        ...

    def close(self) -> None:
        """End of the session (on the dispatcher's loop, after the last rollout)."""
        ...


class LocalClaims:
    """One process: every trial is this process's, and outcomes stay in memory."""

    drain_at_close = False  # nobody else waits for a rollout: what is in flight at the end is cancelled
    shared_outcomes = False

    def claim(self, nodeid: str) -> bool:
        return True

    def claimed(self, nodeid: str) -> bool:
        return False

    def run_again(self, nodeid: str) -> bool:
        return True

    def release(self, nodeid: str) -> None:
        pass

    def publish(self, outcome: TrialOutcome) -> bool:
        return False

    async def acquire_slot(self) -> int | None:
        return None

    def release_slot(self, slot: int | None) -> None:
        pass

    def result(self, spec: TrialSpec, here: Here, timeout: float | None) -> TrialOutcome:
        started = time.monotonic()
        future = here.held(spec.nodeid) or here.start_now(spec, timeout=timeout)
        if future is None:
            raise concurrent.futures.CancelledError()
        return here.wait(spec.nodeid, future, _left(timeout, started))

    def close(self) -> None:
        pass


def _left(timeout: float | None, started: float) -> float | None:
    """What is left of ``timeout`` (seconds from ``started``, ``time.monotonic``); None: no timeout."""
    return None if timeout is None else max(0.0, timeout - (time.monotonic() - started))


class BoardClaims:
    """xdist workers: claims and outcomes on a ``ClaimBoard``; with more workers than slots, ``GlobalSlots``."""

    drain_at_close = True  # another worker may be waiting for a rollout in flight here
    shared_outcomes = True

    def __init__(self, board: ClaimBoard, global_slots: GlobalSlots | None = None) -> None:
        self.board = board
        self.global_slots = global_slots

    def claim(self, nodeid: str) -> bool:
        return self.board.claim(nodeid)

    def claimed(self, nodeid: str) -> bool:
        return self.board.claimed(nodeid)

    def run_again(self, nodeid: str) -> bool:
        return False  # it ran here and was published: the board has its outcome

    def release(self, nodeid: str) -> None:
        self.board.release(nodeid)

    def publish(self, outcome: TrialOutcome) -> bool:
        self.board.publish(outcome)
        return True

    async def acquire_slot(self) -> int | None:
        if self.global_slots is None:
            return None
        import asyncio  # here: the xdist controller imports this module and runs no event loop

        pause = _POLL_MIN_S
        while (slot := self.global_slots.try_acquire()) is None:
            await asyncio.sleep(pause)
            pause = min(_POLL_MAX_S, pause * 1.5)
        return slot

    def release_slot(self, slot: int | None) -> None:
        if slot is not None and self.global_slots is not None:
            self.global_slots.release(slot)

    def result(self, spec: TrialSpec, here: Here, timeout: float | None) -> TrialOutcome:
        """This process's rollout, or the outcome another worker publishes; takes over a dead worker's claim."""
        board = self.board
        nodeid = spec.nodeid
        started = time.monotonic()
        deadline: float | None = None
        wait_s = 0.0
        pause = _POLL_MIN_S
        checked: tuple[int, float] | None = None  # (claimant, when it was last seen alive)
        while True:
            future = here.held(nodeid)
            if future is not None:
                return here.wait(nodeid, future, timeout)
            owner, outcome = board.state(nodeid)
            if outcome is not None:
                here.counts["from_board"] += 1
                return outcome
            if owner is None:
                future = here.start_now(spec, timeout=_left(timeout, started))
                if future is not None:
                    return here.wait(nodeid, future, _left(timeout, started))
                if here.stopping:
                    raise concurrent.futures.CancelledError()
                continue  # another worker claimed it a moment ago
            now = time.monotonic()
            fresh = checked is not None and checked[0] == owner and now - checked[1] < _ALIVE_CHECK_S
            if owner != board.pid and not fresh and not alive(owner):
                if board.take_over(nodeid, owner):
                    future = here.start_now(spec, taken_over=True)
                    if future is not None:
                        return here.wait(nodeid, future, timeout)
                    board.release(nodeid)
                    raise concurrent.futures.CancelledError()
                continue
            checked = (owner, now) if not fresh else checked
            if deadline is None:
                wait_s = here.claim_wait_s
                deadline = now + wait_s
            if now >= deadline or (timeout is not None and now - started >= timeout):
                return TrialOutcome.for_spec(
                    spec,
                    error_class="timeout",
                    error=f"the worker that claimed this trial (pid {owner}) published no result within {wait_s:g} s",
                )
            here.counts["polls"] += 1
            time.sleep(pause)
            pause = min(_POLL_MAX_S, pause * 1.5)

    def close(self) -> None:
        self.board.close()
        if self.global_slots is not None:
            self.global_slots.close()
