"""``--gym-max-errors N|P%``: stop paying for rollouts once too many trials have errored."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pytest_gym.runfolder.layout import ERRORS_FILE

_SPEC = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(%?)\s*$")  # ASCII digits: float() also reads "٣"


@dataclass(frozen=True)
class ErrorBudget:
    """At most ``count`` errors, or ``percent`` of the run's trials (rounded down)."""

    count: int | None = None
    percent: float | None = None

    def limit(self, total_trials: int) -> int | None:
        if self.count is not None:
            return self.count
        if self.percent is not None:
            return math.floor(total_trials * self.percent / 100.0)
        return None

    def exceeded(self, errors: int, total_trials: int) -> bool:
        limit = self.limit(total_trials)
        return limit is not None and errors > limit


def parse_error_budget(text: str | None) -> ErrorBudget:
    """``"5"`` (errors) or ``"10%"`` (of the run's trials); ValueError says what is accepted."""
    if text is None or text == "":
        return ErrorBudget()
    match = _SPEC.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a number of errors (e.g. 5) or a percentage of trials (e.g. 10%)")
    number, percent = float(match.group(1)), match.group(2) == "%"
    if not math.isfinite(number):  # hundreds of digits: int() of it would raise OverflowError
        shown = f"{text.strip()[:12]}... ({len(text.strip())} characters)"
        raise ValueError(f"{shown} is too large for a number of errors (e.g. 5) or a percentage of trials (e.g. 10%)")
    if percent:
        if number > 100:
            raise ValueError(f"{text!r}: a percentage must be between 0% and 100%")
        return ErrorBudget(percent=number)
    if number != int(number):
        raise ValueError(f"{text!r}: a number of errors must be a whole number")
    return ErrorBudget(count=int(number))


class SharedErrorCount:
    """Errored trials of the whole run, shared by xdist workers: one byte appended per error."""

    def __init__(self, run_dir: Path, counted: bool = True) -> None:
        self.path = run_dir / ERRORS_FILE
        #: Whether errors are counted at all: only --gym-max-errors reads the count (a file append per error).
        self.counted = counted

    def add(self) -> None:
        if not self.counted:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)

    def count(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0
