"""POST one row to Gym's ``/run`` and tell a result from an infrastructure fault.

Knows nothing of pytest. A reward (any finite number) is a result; everything
else (no connection, a timeout, an HTTP error, a body that is not JSON or has
no numeric reward) is a fault, reported with a class and a message a user can
act on.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from pytest_gym.core.masking import mask_secrets
from pytest_gym.rollout.http import BodyTooLarge, HTTPPool, ProtocolError
from pytest_gym.rollout.retry import INFRA_FAILURE_KINDS

MAX_BODY_BYTES = 32 * 1024 * 1024
_EXCERPT = 200


class TrialFault(Exception):
    """An infrastructure fault: the trial has no reward to judge."""

    def __init__(self, error_class: str, message: str, http_status: int | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.http_status = http_status


def _excerpt(data: bytes) -> str:
    text = data[:_EXCERPT].decode("utf-8", "replace").replace("\n", " ")
    return mask_secrets(text) + ("..." if len(data) > _EXCERPT else "")


def build_request(row: dict[str, Any], agent: str | None, task_index: int, repeat: int) -> dict[str, Any]:
    """The body Gym's collector sends: the row, its agent, and the task/rollout indices."""
    body = dict(row)
    if agent is not None:
        body["agent_ref"] = {"name": agent}
    body["_ng_task_index"] = task_index
    body["_ng_rollout_index"] = repeat
    return body


def parse_answer(status: int, data: bytes, url: str, reward_key: str) -> tuple[dict[str, Any], float]:
    """Decode Gym's answer to ``/run``; raise TrialFault for anything that is not a reward."""
    if status >= 400:
        raise TrialFault("http_status", f"HTTP {status} from {url}: {_excerpt(data)}", status)
    try:
        answer = json.loads(data)
    except (ValueError, RecursionError):
        raise TrialFault("bad_body", f"Gym's answer from {url} is not JSON: {_excerpt(data)!r}", status) from None
    if not isinstance(answer, dict):
        raise TrialFault("bad_body", f"Gym's answer from {url} is a {type(answer).__name__}, not an object", status)
    if reward_key not in answer:
        keys = ", ".join(sorted(answer)[:12])
        raise TrialFault(
            "no_reward",
            f"Gym's answer has no {reward_key!r} field (see --gym-reward-key); its fields: {keys}",
            status,
        )
    kind = answer.get("failure_kind")
    if isinstance(kind, str) and kind in INFRA_FAILURE_KINDS:
        reason = mask_secrets(str(answer.get("failure_reason") or ""))[:_EXCERPT]
        raise TrialFault("gym_failure", f"Gym reported an infrastructure failure ({kind}): {reason}", status)
    reward = answer[reward_key]
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise TrialFault("bad_reward", f"reward {reward_key!r} is {reward!r}, not a finite number", status)
    return answer, float(reward)


async def post_rollout(
    http: HTTPPool, url: str, body: dict[str, Any], timeout: float, reward_key: str
) -> tuple[dict[str, Any], float, float]:
    """One rollout over the keep-alive pool: (answer, reward, latency in seconds), or TrialFault."""
    started = time.perf_counter()
    try:
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise TrialFault("setup", f"the row cannot be sent as JSON: {exc}") from None
    try:
        status, data = await asyncio.wait_for(http.post(url, payload, MAX_BODY_BYTES), timeout)
    except asyncio.TimeoutError:
        raise TrialFault("timeout", f"no answer from {url} within {timeout:g} s (--gym-trial-timeout)") from None
    except BodyTooLarge as exc:
        raise TrialFault(
            "bad_body",
            f"Gym's answer from {url} exceeds {MAX_BODY_BYTES // (1024 * 1024)} MiB; refusing to read it",
            exc.status,
        ) from None
    except asyncio.IncompleteReadError:
        raise TrialFault("connection", f"cannot reach {url}: the server closed the connection mid-answer") from None
    except (OSError, ProtocolError) as exc:
        raise TrialFault("connection", f"cannot reach {url}: {type(exc).__name__}: {mask_secrets(str(exc))}") from None
    answer, reward = parse_answer(status, data, url, reward_key)
    return answer, reward, time.perf_counter() - started


def post_rollout_once(
    url: str, body: dict[str, Any], timeout: float, reward_key: str
) -> tuple[dict[str, Any], float, float]:
    """``post_rollout`` from synchronous code (``gym_server.run``): its own pool, closed afterwards."""

    async def once() -> tuple[dict[str, Any], float, float]:
        http = HTTPPool()
        try:
            return await post_rollout(http, url, body, timeout, reward_key)
        finally:
            await http.aclose()

    return asyncio.run(once())


def token_usage(answer: dict[str, Any]) -> dict[str, int]:
    response = answer.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return {}
    return {
        k: int(v) for k, v in usage.items() if k.endswith("tokens") and isinstance(v, int) and not isinstance(v, bool)
    }
