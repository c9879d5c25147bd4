"""The run's finished trials, shared by the processes of a run: what budgets, adaptive repeats and sequential
gates decide from.

One JSON line per finished trial, appended (``O_APPEND``, one ``write`` per line: lines of different
processes never interleave) by the process that rolled it out, as the error budget's file is. Every process
reads the lines it has not read yet when it decides (``refresh``), so each sees the whole run's spend and
results, within the time one line takes to be written. Trials reused from an earlier run (``--gym-resume``)
are known to every process from the start (``preload``) and cost nothing. No pytest here.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_gym.core.jsonl import AppendedLines
from pytest_gym.core.numbers import is_finite_number, is_int
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.runfolder.layout import LEDGER_FILE

#: A ledger line is far shorter: a longer one is not ours and is skipped.
_MAX_LINE = 4096


def suite_of(nodeid: str) -> str:
    """A trial's suite: the path part of its node id (as the judge groups them)."""
    return nodeid.split("::", 1)[0]


@dataclass(frozen=True)
class Result:
    """One finished trial as the ledger keeps it: its reward (None: it errored), and whether it is reused."""

    reward: float | None
    reused: bool = False


@dataclass
class Spend:
    """What the trials rolled out in this run (not reused) used, in one suite or the whole run."""

    trials: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def add(self, tokens: dict[str, int]) -> None:
        self.trials += 1
        input_tokens, output_tokens = tokens.get("input_tokens", 0), tokens.get("output_tokens", 0)
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.total_tokens += tokens.get("total_tokens", input_tokens + output_tokens)

    def cost(self, price_in: float | None, price_out: float | None) -> float:
        """Money spent at these prices (per million tokens; a price not given counts 0)."""
        return (self.input_tokens * (price_in or 0.0) + self.output_tokens * (price_out or 0.0)) / 1_000_000


@dataclass
class Ledger:
    """Reads and appends the run folder's ledger; thread-safe (the dispatcher's loop and pytest's thread use it)."""

    run_dir: Path
    #: suite -> what its fresh trials used; and the whole run's.
    spend: dict[str, Spend] = field(default_factory=dict)
    total: Spend = field(default_factory=Spend)
    #: (suite, task hash) -> repeat -> result.
    results: dict[tuple[str, str], dict[int, Result]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _appended: AppendedLines = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._appended = AppendedLines(self.path)

    @property
    def path(self) -> Path:
        return self.run_dir / LEDGER_FILE

    def record(self, outcome: TrialOutcome) -> None:
        """Append one trial this process rolled out (a dispatcher listener); read back by ``refresh``."""
        entry = {
            "s": suite_of(outcome.nodeid),
            "t": outcome.task_hash,
            "r": outcome.repeat,
            "v": outcome.reward if outcome.ok else None,
            "u": {k: v for k, v in outcome.tokens.items() if k.endswith("tokens")},
        }
        line = json.dumps(entry, separators=(",", ":")).encode() + b"\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def preload(self, outcomes: Iterable[TrialOutcome]) -> None:
        """Trials this run reuses (they cost nothing here): known before any is reported."""
        with self._lock:
            for outcome in outcomes:
                key = (suite_of(outcome.nodeid), outcome.task_hash)
                self.results.setdefault(key, {}).setdefault(outcome.repeat, Result(outcome.reward, reused=True))

    def refresh(self) -> None:
        """Take in the lines appended since the last call (by any process)."""
        with self._lock:
            for line in self._appended.read():
                self._take(line.rstrip(b"\n"))

    def _take(self, line: bytes) -> None:
        if not line or len(line) > _MAX_LINE:
            return
        # A line another program wrote (or a torn one): skipped, never an error in the run that reads it.
        with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError, RecursionError):
            entry = json.loads(line)
            suite, task, repeat = str(entry["s"]), str(entry["t"]), entry["r"]
            if not is_int(repeat) or repeat < 0:
                return  # not a line this plugin wrote (``true`` or "1" is no repeat index)
            value = entry.get("v")
            reward = float(value) if is_finite_number(value) else None
            # A token count is a whole number >= 0: ``true`` is not one token.
            usage = {str(k): v for k, v in (entry.get("u") or {}).items() if is_int(v) and v >= 0}
            repeats = self.results.setdefault((suite, task), {})
            if repeat in repeats:
                return  # one line per trial; a copy changes nothing
            repeats[repeat] = Result(reward)
            self.spend.setdefault(suite, Spend()).add(usage)
            self.total.add(usage)

    def task(self, suite: str, task_hash: str) -> dict[int, Result]:
        """The finished repeats of one task (a copy)."""
        with self._lock:
            return dict(self.results.get((suite, task_hash), {}))
