"""Which faults are worth another attempt, and how long to wait before it.

Only infrastructure faults are retried: a connection that failed, a timeout, an
HTTP 429 or 5xx, or a Gym answer whose ``failure_kind`` names infrastructure. A low
reward is a result and is never retried, nor is a malformed answer (retrying would
not change it). A 429 or 503 answer's ``Retry-After`` lengthens the wait, within bounds.
"""

from __future__ import annotations

import os
import random
import time

#: Gym 0.7.0 failure kinds (nemo_gym/failure_kinds.py) that describe infrastructure, not the model.
INFRA_FAILURE_KINDS = frozenset(
    {
        "transport_unreachable",
        "transport_peer_drop",
        "transport_timeout",
        "transport_local_resource",
        "agent_request_failed",
        "agent_timeout",
        "provider_unavailable",
        "provider_quota_exhausted",
        "provider_oom_killed",
        "session_lost",
        "session_expired",
        "session_release_failed",
        "judge_failed",
        "cancelled",
        "kill_shaped",
        "shutdown",
        "persistence_failed",
    }
)
RETRYABLE_CLASSES = frozenset({"connection", "timeout", "gym_failure"})
BASE_DELAY_S = 0.5
MAX_DELAY_S = 30.0

#: The jitter's own generator. The ``random`` module's is shared: pytest-randomly reseeds it before every test,
#: so each trial's backoffs would repeat the same draws, and trials throttled together (a 429 to all at once)
#: would retry together again. Seeded from the system once (again in a forked child).
_jitter = random.Random()
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_jitter.seed)


def is_retryable(error_class: str | None, http_status: int | None) -> bool:
    if error_class in RETRYABLE_CLASSES:
        return True
    return error_class == "http_status" and http_status is not None and (http_status == 429 or http_status >= 500)


def backoff_s(attempt: int, rng: random.Random | None = None) -> float:
    """Delay before attempt ``attempt + 1`` (attempt counts from 1): exponential, capped, full jitter."""
    ceiling = min(MAX_DELAY_S, BASE_DELAY_S * (2 ** max(0, attempt - 1)))
    return (rng or _jitter).uniform(ceiling / 2, ceiling)


#: The longest wait a server's ``Retry-After`` can ask for (it is also kept within the trial timeout).
MAX_RETRY_AFTER_S = 60.0


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delay-seconds or an HTTP-date); None if unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": the RFC says UTC
        import datetime

        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_delay_s(attempt: int, retry_after: float | None, cap_s: float, rng: random.Random | None = None) -> float:
    """The wait before the next attempt: the backoff, or longer when the server asked for longer (within ``cap_s``
    and ``MAX_RETRY_AFTER_S``)."""
    delay = backoff_s(attempt, rng)
    if retry_after is not None:
        delay = max(delay, min(retry_after, MAX_RETRY_AFTER_S, cap_s))
    return delay
