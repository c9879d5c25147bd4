"""Claims: how xdist workers share one rollout budget and one set of trials without running any twice.

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

``--gym-concurrency C`` is the budget of the whole run: worker ``i`` of ``n``
gets ``C // n``, plus one for the first ``C % n`` workers. With fewer slots than
workers (C < n) each worker gets one, and a rollout must also hold one of C
lock files in the run folder (``GlobalSlots``), so C still bounds the run.

Plain files, no pytest and no xdist: ``pytest_gym.xdist_hooks`` wires them to xdist.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.core.pids import pid_alive

BOARD_DIR = ".xdist-trials"
#: A claim file still empty after this long belongs to a process that died while writing it.
_EMPTY_CLAIM_GRACE_S = 5.0


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
        if not newline or not head.isdigit():
            with contextlib.suppress(OSError):
                if time.time() - os.stat(path).st_mtime > _EMPTY_CLAIM_GRACE_S:
                    return 0, None
            return -1, None
        outcome = None
        if rest.endswith(b"\n"):
            with contextlib.suppress(ValueError):
                outcome = TrialOutcome.from_json(json.loads(rest))
        return int(head), outcome

    def claimant(self, nodeid: str) -> int | None:
        return self.state(nodeid)[0]

    def read(self, nodeid: str) -> TrialOutcome | None:
        """The published outcome of a trial, or None while it has none."""
        return self.state(nodeid)[1]

    def claimed(self, nodeid: str) -> bool:
        return os.path.exists(self._path(nodeid))

    def release(self, nodeid: str) -> None:
        """Give a claim back (a cancelled rollout): whoever needs the trial may claim it again."""
        fd = self._fds.pop(nodeid, None)
        if fd is None:
            return
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
