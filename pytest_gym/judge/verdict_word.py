"""A suite's verdict in one word and a few words of what happened: what the report's badge, the terminal and the
pull-request comment say, so that "6 of 10 trials failed, no gates" is never shown as PASSED.

The words are the vocabulary of Gym's planned release policy (Gym #1493):

``FAIL``
    what makes pytest exit non-zero: a gate that failed and was decided, a regression against the baseline, an
    errored trial, an expired known-failure entry, a fixed known failure under ``--gym-known-failures-strict``,
    or (``--gym-verdict trial``) a failed trial of a task that is not quarantined;
``INCONCLUSIVE``
    nothing failed for sure, but a gate on an interval bound is undecided (more tasks would decide it);
``WARN``
    the suite passes, but only because failures are quarantined (known failures) or tracked (xfail under
    ``--gym-verdict gate`` with no gate to decide), or a known failure now passes and should leave the list;
``PASS``
    everything else.
"""

from __future__ import annotations

from pytest_gym.core.words import counted
from pytest_gym.judge.summary import SuiteSummary


def _first(labels: list[str]) -> str:
    return labels[0] + (f" and {len(labels) - 1} more" if len(labels) > 1 else "")


def verdict_of(s: SuiteSummary, mode: str = "trial", strict_known: bool = False) -> tuple[str, str]:
    """(word, what happened) of one suite summary; ``mode`` is ``--gym-verdict`` (``trial`` or ``gate``)."""
    total = s.all_trials
    failed = s.failed_trials or 0
    known = s.known_failures
    held = known.failed_trials if known is not None else 0
    open_failed = max(0, failed - held)
    decided = [label for label, g in s.gates.items() if not g.passed and not g.undecided]
    undecided = [label for label, g in s.gates.items() if not g.passed and g.undecided]
    regressed = s.baseline is not None and s.baseline.regressed
    # The <suite>::baseline check that failed without a regression shown: no evidence, or undecided over errors.
    baseline_undecided = s.baseline is not None and not s.baseline.passed and s.baseline.undecided
    baseline_failed = s.baseline is not None and not s.baseline.passed and not regressed and not baseline_undecided
    expired = len(known.expired) if known is not None else 0
    fixed_known = len(known.fixed) if known is not None else 0
    failing_known = len(known.failing) if known is not None else 0

    parts: list[str] = []
    if total == 0:
        parts.append("no trial ran")
    else:
        verb = "failed" if mode == "trial" else "below min reward (xfail)"
        if open_failed:
            parts.append(f"{open_failed} of {counted(total, 'trial')} {verb}")
        elif total - held - s.errors > 0:
            parts.append(f"all {counted(total - held - s.errors, 'other trial' if held else 'trial')} passed")
        if s.errors:
            parts.append(f"{counted(s.errors, 'trial')} errored")
    if failing_known:
        parts.append(f"{counted(failing_known, 'quarantined task')} failed (known failures)")
    if fixed_known:
        parts.append(f"{counted(fixed_known, 'known failure')} now pass: remove from the list")
    if expired:
        parts.append(f"{counted(expired, 'known-failure entry', 'known-failure entries')} expired")
    if s.gates_deferred:
        parts.append("gates deferred to the merge")
    elif not s.gates:
        parts.append("no gates")
    elif decided:
        parts.append(f"gate {_first(decided)} failed")
    elif undecided:
        parts.append(f"gate {_first(undecided)} undecided")
    else:
        parts.append(f"{counted(len(s.gates), 'gate')} passed")
    if regressed:
        parts.append("regression against the baseline")
    elif baseline_undecided:
        parts.append("baseline check undecided")
    elif baseline_failed:
        parts.append("baseline check failed")

    fails = (
        decided
        or regressed
        or baseline_failed
        or s.errors
        or expired
        or total == 0
        or (mode == "trial" and open_failed)
        or (strict_known and fixed_known)
    )
    if fails:
        word = "FAIL"
    elif undecided or baseline_undecided:
        word = "INCONCLUSIVE"
    elif failing_known or fixed_known or (open_failed and not s.gates and not s.gates_deferred):
        word = "WARN"
    else:
        word = "PASS"
    return word, ", ".join(parts)


def annotate(summary: SuiteSummary, mode: str = "trial", strict_known: bool = False) -> SuiteSummary:
    """Set the summary's ``verdict`` and ``verdict_text`` (the judge's; readers show them)."""
    summary.verdict, summary.verdict_text = verdict_of(summary, mode, strict_known)
    return summary
