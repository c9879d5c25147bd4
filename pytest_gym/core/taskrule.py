"""``--gym-task-pass``: when a task passes, from how many of its trials reached ``--gym-min-reward``.

A rule is ``all`` (every trial), ``majority`` (more than half), ``any`` (at least one), or a share of
the trials: a decimal (``0.8``) or a fraction (``4/5``), both meaning "at least that share of the task's
trials", computed exactly (``4/5`` of 5 trials is 4, of 4 trials 4, of 10 trials 8). Pure, no I/O: the
settings validate it here, the judge and the dispatcher's adaptive repeats use it.

For a task of ``k`` repeats every rule is "at least ``m`` successes" (``needed(k)``), so a task's verdict
is settled before all its repeats ran once ``m`` succeeded (it passes whatever the rest do) or ``k - m + 1``
failed (it fails whatever the rest do): ``decided``. An errored trial is neither: it could have gone
either way, so it settles nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

NAMED = ("all", "majority", "any")
ACCEPTED = "all, majority, any, a share of the trials such as 0.8, or a count such as 4/5"
_FRACTION = re.compile(r"^\s*(\d{1,9})\s*/\s*(\d{1,9})\s*$")
_DECIMAL = re.compile(r"^\s*(0?\.\d{1,9}|1(\.0{0,9})?)\s*$")


class TaskRuleError(ValueError):
    """A ``--gym-task-pass`` value that is not a rule; the message shows what is accepted."""


@dataclass(frozen=True)
class TaskRule:
    """A parsed ``--gym-task-pass``: ``share`` is the least share of trials that passes (None: majority)."""

    text: str
    share: Fraction | None

    @property
    def named(self) -> bool:
        return self.text in NAMED

    def passes(self, trials: int, successes: int) -> bool:
        """``successes`` of ``trials`` reached min_reward: does the task pass? No trial: it does not."""
        if trials <= 0:
            return False
        if self.share is None:  # majority: more than half
            return 2 * successes > trials
        if self.text == "any":
            return successes > 0
        return successes * self.share.denominator >= self.share.numerator * trials

    def needed(self, repeats: int) -> int:
        """The fewest successes out of ``repeats`` trials that pass the task (at least 1)."""
        if repeats <= 0:
            return 1
        if self.share is None:
            return repeats // 2 + 1
        if self.text == "any":
            return 1
        return max(1, math.ceil(self.share * repeats))

    def decided(self, repeats: int, successes: int, failures: int) -> bool | None:
        """True: passes whatever its other trials do; False: fails whatever they do; None: still open.

        ``successes`` and ``failures`` are trials with a reward; errored trials are neither (they could
        have gone either way) and count only as trials no longer to come.
        """
        needed = self.needed(repeats)
        if successes >= needed:
            return True
        if failures > repeats - needed:
            return False
        return None

    def can_start(self, repeats: int, successes: int, failures: int, unfinished: int) -> bool:
        """Whether one more trial is needed whatever the ``unfinished`` ones (running or queued) return.

        The fewest further results that could settle the task is ``min(needed - successes, repeats - needed
        + 1 - failures)``; while fewer than that are unfinished, one more is never wasted.
        """
        needed = self.needed(repeats)
        return unfinished + 1 <= min(needed - successes, repeats - needed + 1 - failures)


@lru_cache(maxsize=64)
def parse_task_rule(text: str) -> TaskRule:
    """The rule ``text`` names; ``TaskRuleError`` saying what is accepted."""
    raw = str(text).strip()
    if raw == "all":
        return TaskRule("all", Fraction(1))
    if raw == "majority":
        return TaskRule("majority", None)
    if raw == "any":
        return TaskRule("any", Fraction(0))
    fraction = _FRACTION.match(raw)
    if fraction:
        count, of = int(fraction.group(1)), int(fraction.group(2))
        if of < 1 or not 1 <= count <= of:
            raise TaskRuleError(f"{raw!r}: a count M/K needs 1 <= M <= K (e.g. 4/5: at least 4 of 5 trials)")
        return TaskRule(f"{count}/{of}", Fraction(count, of))
    decimal = _DECIMAL.match(raw)
    if decimal:
        share = Fraction(decimal.group(1))
        if share <= 0:
            raise TaskRuleError(f"{raw!r}: a share of the trials must be above 0 (0.8: at least 80% of them)")
        return TaskRule(raw, share)
    raise TaskRuleError(f"{raw!r} is not a task-pass rule; use {ACCEPTED}")
