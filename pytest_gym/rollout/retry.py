"""Which faults are worth another attempt, and how long to wait before it.

Only infrastructure faults are retried: a connection that failed, a timeout, an
HTTP 429 or 5xx, or a Gym answer whose ``failure_kind`` names infrastructure. A low
reward is a result and is never retried, nor is a malformed answer (retrying would
not change it).
"""

from __future__ import annotations

import random

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


def is_retryable(error_class: str | None, http_status: int | None) -> bool:
    if error_class in RETRYABLE_CLASSES:
        return True
    return error_class == "http_status" and http_status is not None and (http_status == 429 or http_status >= 500)


def backoff_s(attempt: int, rng: random.Random | None = None) -> float:
    """Delay before attempt ``attempt + 1`` (attempt counts from 1): exponential, capped, full jitter."""
    ceiling = min(MAX_DELAY_S, BASE_DELAY_S * (2 ** max(0, attempt - 1)))
    return (rng or random).uniform(ceiling / 2, ceiling)
