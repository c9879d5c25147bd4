"""``--gym-max-errors N|P%``: stop paying for rollouts once too many trials have errored."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_SPEC = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


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
    if percent:
        if number > 100:
            raise ValueError(f"{text!r}: a percentage must be between 0% and 100%")
        return ErrorBudget(percent=number)
    if number != int(number):
        raise ValueError(f"{text!r}: a number of errors must be a whole number")
    return ErrorBudget(count=int(number))
