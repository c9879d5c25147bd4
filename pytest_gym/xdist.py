"""xdist: how workers share one rollout budget and one set of trials without running any twice.

Every worker sees the same ``session.items`` but does not know which of them
the controller will hand it. So each worker's dispatcher walks the whole list
in item order and *claims* a trial before it runs it: an ``O_CREAT | O_EXCL``
claim file in the run folder, named by a hash of the node id and holding the
claimer's pid. Exactly one process wins a claim. The winner runs the rollout,
records it in its own run-folder writer, and publishes the outcome as a JSON
file (written to a temporary name, then renamed: readers see all or nothing).
A worker that reaches a trial someone else claimed waits for that file; if the
claimer died, one waiter takes the trial over (an ``O_EXCL`` takeover file per
dead pid decides which). Without xdist none of this exists: results stay in
memory.

``--gym-concurrency C`` is the budget of the whole run: worker ``i`` of ``n``
gets ``C // n``, plus one for the first ``C % n`` workers (at least one each).

This module imports no xdist: ``XdistHooks`` is registered only when xdist is
installed, the rest is plain files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.processes import pid_alive
from pytest_gym.results import TrialOutcome

BOARD_DIR = ".xdist-trials"
#: A claim file still empty after this long belongs to a process that died while writing it.
_EMPTY_CLAIM_GRACE_S = 5.0


def worker_share(concurrency: int, workers: int, index: int) -> int:
    """Worker ``index``'s part of a run-wide budget: floor or ceil of C/n, summing to C, at least 1."""
    workers = max(1, workers)
    share = concurrency // workers + (1 if index % workers < concurrency % workers else 0)
    return max(1, share)


def worker_slot(workerinput: dict[str, Any] | None) -> tuple[int, int] | None:
    """(index, count) of an xdist worker from its ``workerinput`` (``gw3`` is index 3); None elsewhere."""
    if workerinput is None:
        return None
    count = int(workerinput.get("workercount", 1))
    workerid = str(workerinput.get("workerid", "gw0"))
    digits = "".join(ch for ch in workerid if ch.isdigit())
    return (int(digits) if digits else 0), max(1, count)


class ClaimBoard:
    """Claims and published outcomes of the trials, shared by the processes of one run.

    A claim is taken once a rollout slot is held, so a claimed trial is running
    (or done): a waiter need only allow one trial timeout.
    """

    def __init__(self, folder: Path, pid: int | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.pid = os.getpid() if pid is None else pid

    def _base(self, nodeid: str) -> str:
        return str(self.folder / hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:32])

    def claim(self, nodeid: str) -> bool:
        """Claim a trial for this process; False when another process holds it."""
        try:
            fd = os.open(self._base(nodeid) + ".claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, str(self.pid).encode())
        finally:
            os.close(fd)
        return True

    def claimant(self, nodeid: str) -> int | None:
        """The pid holding the claim; None when nobody does; 0 for a claim whose writer died."""
        path = self._base(nodeid) + ".claim"
        try:
            with open(path, "rb") as fh:
                text = fh.read().strip()
        except FileNotFoundError:
            return None
        if text.isdigit():
            return int(text)
        with contextlib.suppress(OSError):  # being written right now, or its writer died mid-write
            if time.time() - os.stat(path).st_mtime > _EMPTY_CLAIM_GRACE_S:
                return 0
        return -1

    def claimed(self, nodeid: str) -> bool:
        return os.path.exists(self._base(nodeid) + ".claim")

    def release(self, nodeid: str) -> None:
        """Give a claim back (a cancelled rollout): whoever needs the trial may claim it again."""
        if self.claimant(nodeid) == self.pid:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._base(nodeid) + ".claim")

    def take_over(self, nodeid: str, dead_pid: int) -> bool:
        """Claim a trial whose claimant ``dead_pid`` died; exactly one taker wins per dead claimant."""
        base = self._base(nodeid)
        try:
            fd = os.open(f"{base}.takeover.{dead_pid}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        os.close(fd)
        tmp = f"{base}.claim.{self.pid}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(str(self.pid).encode())
        os.replace(tmp, base + ".claim")
        return True

    def publish(self, outcome: TrialOutcome) -> None:
        """Make a finished trial's outcome readable by every process, atomically."""
        base = self._base(outcome.nodeid)
        tmp = f"{base}.json.{self.pid}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(json.dumps(outcome.to_json(), ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass"))
        os.replace(tmp, base + ".json")

    def read(self, nodeid: str) -> TrialOutcome | None:
        """The published outcome of a trial, or None while it has none."""
        try:
            with open(self._base(nodeid) + ".json", "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        return TrialOutcome.from_json(json.loads(data))

    @staticmethod
    def remove_folder(folder: Path) -> None:
        """Remove a run's claims and published outcomes (the run folder's jsonl files keep the rollouts)."""
        shutil.rmtree(folder, ignore_errors=True)


def alive(pid: int) -> bool:
    """Whether a claimant still runs (-1: a claim being written counts as alive; a zombie does not)."""
    if pid < 0:
        return True
    if pid == 0 or not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


class XdistHooks:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl
    def pytest_configure_node(self, node: Any) -> None:
        """Send the run folder to each worker: they share the controller's deployment."""
        from pytest_gym.plugin import RUN_KEY, WORKER_RUN_DIR

        run = self.config.stash[RUN_KEY]
        node.workerinput[WORKER_RUN_DIR] = str(run.run_dir)
        count = int(node.workerinput.get("workercount", 1))
        concurrency = run.settings.concurrency
        note = (
            f"--gym-concurrency {concurrency} is below the {count} xdist workers: each worker still runs one "
            f"rollout at a time, so up to {count} are in flight"
        )
        if count > concurrency and note not in run.notes:
            run.notes.append(note)
