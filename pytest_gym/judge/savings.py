"""What a run did not run, and what that does to its verdicts: trials skipped by a budget, by adaptive repeats,
by sequential gates; spend against budgets.

A suite a budget cut short is judged on part of itself, chosen by the order the trials ran in, not at random:
every gate of it (and its baseline check) is *undecided*, which fails the run; it never passes. Trials skipped
because their task (adaptive repeats) or their suite's gates (sequential) were already decided change nothing:
the verdicts stand on what ran. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from pytest_gym.judge.gates import GateResult
from pytest_gym.judge.summary import SpendSummary

#: Why trials were skipped, as the summary names each kind.
KINDS = {
    "budget": "the budget ran out",
    "decided": "their task's verdict was decided (--gym-repeats-adaptive)",
    "sequential": "their suite's gates were decided (--gym-sequential)",
}


def skipped_text(skipped: Mapping[str, int]) -> str:
    """``12 trials not run: 10 because ..., 2 because ...``; empty when none were skipped."""
    total = sum(skipped.values())
    if not total:
        return ""
    parts = [f"{count} because {KINDS.get(kind, kind)}" for kind, count in sorted(skipped.items()) if count]
    return f"{total} trial{'s' * (total != 1)} not run: {', '.join(parts)}"


def cut_short(ran: int, skipped: Mapping[str, int]) -> str | None:
    """Why a suite's verdicts are undecided: the budget stopped it before all its trials ran; None otherwise."""
    stopped = skipped.get("budget", 0)
    if not stopped:
        return None
    planned = ran + sum(skipped.values())
    return (
        f"the budget stopped this suite after {ran} of its {planned} trials ({stopped} not run): "
        "its verdicts need the rest (raise the budget, or --gym-resume this run folder)"
    )


def undecided(gates: Sequence[GateResult], why: str) -> list[GateResult]:
    """The gates as undecided (failed) for ``why``, whatever they measured on the part that ran."""
    return [
        replace(g, passed=False, undecided=True, tasks_needed=None, reason=f"{g.reason}; undecided: {why}")
        for g in gates
    ]


def spend(
    max_cost: float | None,
    max_tokens: int | None,
    cost: float | None,
    tokens: int | None,
    trials: int,
    skipped: int,
) -> SpendSummary | None:
    """Spend against a budget, for the summary; None without a budget."""
    if max_cost is None and max_tokens is None:
        return None
    return SpendSummary(
        max_cost=max_cost, max_tokens=max_tokens, cost=cost, tokens=tokens, trials=trials, skipped=skipped
    )
