"""One trial over HTTP: the row to Gym's ``/run``, retries, and a result told from an infrastructure fault.

Knows nothing of pytest nor of scheduling. A reward (any finite number) is a
result; everything else (no connection, a timeout, an HTTP error, a body that is
not JSON or has no numeric reward) is a fault, reported with a class and a
message a user can act on. ``Rollouts`` turns a ``TrialSpec`` into a
``TrialOutcome``: it builds the request, posts it, retries infrastructure faults
(``--gym-retries``) and, after a fault, asks ``Health`` whether Gym died.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Coroutine, Mapping
from typing import Any

from pytest_gym.core.access import GymAccess, access_hint
from pytest_gym.core.dataset import DatasetError, RowReader, Task
from pytest_gym.core.endpoint import GymEndpoint, GymError
from pytest_gym.core.masking import mask_secrets, strip_control
from pytest_gym.core.numbers import is_finite_number
from pytest_gym.core.outcome import TrialOutcome, TrialSpec, usage_of
from pytest_gym.core.tracing import new_traceparent
from pytest_gym.rollout.adaptive import Limit
from pytest_gym.rollout.evidence import answer_checks, unhealthy_message
from pytest_gym.rollout.health import Health
from pytest_gym.rollout.http import BodyTooLarge, HTTPPool, ProtocolError, Response, run_blocking
from pytest_gym.rollout.retry import INFRA_FAILURE_KINDS, is_retryable, retry_after_s, retry_delay_s
from pytest_gym.runfolder.records import ROLLOUT_ID_KEY, ROLLOUT_INDEX_KEY, TASK_INDEX_KEY

MAX_BODY_BYTES = 32 * 1024 * 1024
_EXCERPT = 200
#: Fault classes after which the deployment's health is checked (the call may have failed because Gym died).
_HEALTH_CLASSES = frozenset({"connection", "http_status", "timeout", "gym_failure"})


class TrialFault(Exception):
    """An infrastructure fault: the trial has no reward to judge."""

    def __init__(
        self, error_class: str, message: str, http_status: int | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.http_status = http_status
        #: Seconds a 429/503 answer's ``Retry-After`` asked to wait.
        self.retry_after_s = retry_after_s


def _excerpt(data: bytes) -> str:
    text = data[:_EXCERPT].decode("utf-8", "replace").replace("\n", " ")
    return mask_secrets(text) + ("..." if len(data) > _EXCERPT else "")


def row_agent(row: dict[str, object]) -> str | None:
    """The agent a row names itself (``agent_ref.name``), if any."""
    ref = row.get("agent_ref")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        return str(ref["name"])
    return None


def build_request(
    row: dict[str, Any], agent: str | None, task_index: int, repeat: int, rollout_id: str | None = None
) -> dict[str, Any]:
    """The body Gym's collector sends: the row, its agent, the task/rollout indices (and rollout id)."""
    body = dict(row)
    if agent is not None:
        body["agent_ref"] = {"name": agent}
    body[TASK_INDEX_KEY] = task_index
    body[ROLLOUT_INDEX_KEY] = repeat
    if rollout_id is not None:
        body[ROLLOUT_ID_KEY] = rollout_id
    return body


def encode(body: dict[str, Any]) -> bytes:
    """The request body as JSON bytes (once per trial, not per attempt); TrialFault("setup") if it cannot be."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise TrialFault("setup", f"the row cannot be sent as JSON: {exc}") from None


def parse_answer(
    status: int, data: bytes, url: str, reward_key: str, retry_after: str | None = None, location: str | None = None
) -> tuple[dict[str, Any], float]:
    """Decode Gym's answer to ``/run``; raise TrialFault for anything that is not a reward."""
    if 300 <= status < 400:
        where = f" to {mask_secrets(strip_control(location))}" if location else ""
        raise TrialFault(
            "http_status",
            f"HTTP {status} from {url}: a redirect{where}, which pytest-gym does not follow (Gym's /run never "
            "redirects: is a proxy or a login page in front of Gym? point --gym-url at Gym itself)",
            status,
        )
    if status >= 400:
        wait = retry_after_s(retry_after) if status in (429, 503) else None
        raise TrialFault("http_status", f"HTTP {status} from {url}: {_excerpt(data)}", status, wait)
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
    if not is_finite_number(reward):
        raise TrialFault("bad_reward", f"reward {reward_key!r} is {reward!r}, not a finite number", status)
    return answer, float(reward)


async def post_rollout(
    http: HTTPPool,
    url: str,
    payload: bytes,
    timeout: float,
    reward_key: str,
    dead: asyncio.Future[None] | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], float, float]:
    """One POST over the keep-alive pool: (answer, reward, latency in seconds), or TrialFault.

    Abandoned ("gym_died") as soon as ``dead`` is done: Gym will not answer any more. ``headers``: the
    trial's own (its ``traceparent``).
    """
    started = time.perf_counter()
    try:
        status, data, retry_after, location = await _bounded(
            http.request("POST", url, payload, MAX_BODY_BYTES, headers), timeout, dead
        )
    except _Interrupted as interrupted:
        if interrupted.reason == "dead":
            raise TrialFault("gym_died", "Gym stopped answering") from None
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
        text = f"{type(exc).__name__}: {mask_secrets(str(exc))}"
        raise TrialFault("connection", f"cannot reach {url}: {text}{access_hint(text)}") from None
    answer, reward = parse_answer(status, data, url, reward_key, retry_after, location)
    return answer, reward, time.perf_counter() - started


class _Interrupted(Exception):
    """A request this trial stopped waiting for: ``reason`` "timeout" or "dead" (Gym died)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _bounded(
    request: Coroutine[Any, Any, Response], timeout: float, dead: asyncio.Future[None] | None
) -> Response:
    """``request`` awaited in the trial's own task, cancelled after ``timeout`` or once ``dead`` is done (then
    ``_Interrupted``). No task, waiter and callbacks of its own per request, as ``asyncio.wait`` would make:
    this runs once per trial on the loop that pytest's thread shares the interpreter with."""
    task = asyncio.current_task()
    assert task is not None
    why: list[str] = []  # the first interruption; "" once the request is over (a late one is no longer ours)

    def interrupt(reason: str) -> None:
        if not why:
            why.append(reason)
            task.cancel()

    def on_dead(_: object) -> None:
        interrupt("dead")

    timer = asyncio.get_running_loop().call_later(timeout, interrupt, "timeout")
    if dead is not None:
        dead.add_done_callback(on_dead)
    try:
        return await request
    except asyncio.CancelledError:
        uncancel = getattr(task, "uncancel", None)  # Python 3.11+: was this cancel ours alone?
        if why and (uncancel is None or uncancel() == 0):
            raise _Interrupted(why[0]) from None
        raise
    finally:
        why.append("")  # Gym's death may have queued on_dead already: removing it below does not unqueue it
        timer.cancel()
        if dead is not None:
            dead.remove_done_callback(on_dead)


def post_rollout_once(
    url: str, body: dict[str, Any], timeout: float, reward_key: str, access: GymAccess | None = None
) -> tuple[dict[str, Any], float, float]:
    """``post_rollout`` from synchronous code (``gym_server.run``): its own pool, closed afterwards."""

    async def once() -> tuple[dict[str, Any], float, float]:
        http = HTTPPool(access.headers, access.ssl_context, access.origins) if access else HTTPPool()
        try:
            return await post_rollout(http, url, encode(body), timeout, reward_key)
        finally:
            await http.aclose()

    return run_blocking(once())


#: How many rows (of the tasks started last) a ``Rollouts`` keeps.
_ROWS_KEPT = 8


class Rollouts:
    """Runs one trial's rollout from its spec to its outcome, on the dispatcher's event loop."""

    def __init__(
        self,
        endpoint: GymEndpoint,
        http: HTTPPool,
        health: Health,
        trial_timeout: float,
        default_agent: str | None,
        retries: int,
        counts: collections.Counter[str],
        tracestate: str | None = None,
        limit: Limit | None = None,
        check_evidence: bool = False,
    ) -> None:
        self.endpoint = endpoint
        self.http = http
        self.health = health
        self.trial_timeout = trial_timeout
        self.default_agent = default_agent
        self.retries = max(0, retries)
        self.counts = counts
        self.tracestate = tracestate
        #: The run's concurrency limit, one permit per request (--gym-concurrency-adaptive); None: none.
        self.limit = limit
        #: --gym-health-check: an answer whose evidence is broken makes the trial an error (``evidence``).
        self.check_evidence = check_evidence
        #: The rows read last (by task), a few: a task's repeats start close together.
        self._rows: dict[int, tuple[Task, dict[str, Any]]] = {}
        self._reader = RowReader()

    def close(self) -> None:
        """Close the datasets read: once the loop that reads them has stopped."""
        self._reader.close()

    def trace_headers(self, outcome: TrialOutcome) -> dict[str, str]:
        """The trial's W3C trace context, one trace per trial (every attempt carries it); its id on the outcome."""
        traceparent, outcome.trace_id = new_traceparent()
        headers = {"traceparent": traceparent}
        if self.tracestate:
            headers["tracestate"] = self.tracestate
        return headers

    async def run(self, spec: TrialSpec) -> TrialOutcome:
        """The trial's outcome: a reward, or a fault with its class (never raises for a fault)."""
        outcome = TrialOutcome.for_spec(spec)
        headers = self.trace_headers(outcome)
        try:
            row = self._row(spec.task)
            own = row_agent(row)
            agent = spec.agent or own or self.default_agent
            if agent is None:
                raise GymError(
                    "no agent for this row: pass --gym-agent NAME (Gym's agents here: "
                    f"{', '.join(self.endpoint.agents) or 'none'})"
                )
            outcome.agent = agent
            url = self.endpoint.route_for(agent)
            body = build_request(
                row, agent if spec.agent or not own else None, spec.task_index, spec.repeat, spec.rollout_id
            )
            payload = encode(body)
            outcome.request, outcome.request_bytes = body, (body, payload)
            answer, reward, latency = await self._post(url, payload, spec.reward_key, outcome, headers)
        except TrialFault as fault:
            outcome.error_class, outcome.error, outcome.http_status = (
                fault.error_class,
                fault.message,
                fault.http_status,
            )
            return outcome
        except (GymError, DatasetError, OSError) as exc:
            outcome.error_class, outcome.error = "setup", str(exc)
            return outcome
        outcome.latency_s, outcome.tokens = latency, usage_of(answer)
        checks = answer_checks(answer) if self.check_evidence else ()
        if checks:
            outcome.health, outcome.error_class, outcome.error = checks, "unhealthy", unhealthy_message(checks)
            outcome.answer = answer  # for the diagnostics; a fault has no reward
            return outcome
        outcome.answer, outcome.reward = answer, reward
        return outcome

    def _row(self, task: Task) -> dict[str, Any]:
        """The task's row as sent: read from the dataset once for repeats started close together, not per trial.
        Each trial's request is a copy of it (``build_request``), as it would be of a freshly read row."""
        kept = self._rows.get(id(task))
        if kept is not None and kept[0] is task:
            return kept[1]
        row = self._reader.load(task)
        if len(self._rows) >= _ROWS_KEPT:
            del self._rows[next(iter(self._rows))]  # the oldest
        self._rows[id(task)] = (task, row)
        return row

    async def _post(
        self, url: str, payload: bytes, reward_key: str, outcome: TrialOutcome, headers: Mapping[str, str]
    ) -> tuple[dict[str, Any], float, float]:
        """POST, and again after an infrastructure fault (never after a reward), up to ``retries`` more times."""
        health = self.health
        attempt = 1
        while True:
            outcome.attempts = attempt
            if health.dead is not None:
                raise TrialFault("gym_died", health.dead)
            try:
                return await self._send(url, payload, reward_key, headers)
            except TrialFault as fault:
                if fault.error_class == "gym_died" or (
                    fault.error_class in _HEALTH_CLASSES
                    and fault.http_status != 429  # a rate limit: the server is there, and busy
                    and await health.check() is not None
                ):
                    raise TrialFault("gym_died", health.dead or fault.message) from None
                if attempt > self.retries or not is_retryable(fault.error_class, fault.http_status):
                    if attempt > 1:
                        fault.message = f"{fault.message} (after {attempt} attempts)"
                    raise
                self.counts["retries"] += 1
                await asyncio.sleep(retry_delay_s(attempt, fault.retry_after_s, self.trial_timeout))
                attempt += 1

    async def _post_counted(
        self, url: str, payload: bytes, reward_key: str, headers: Mapping[str, str]
    ) -> tuple[dict[str, Any], float, float]:
        """``post_rollout``; one cancelled while its request was out counts in ``counts["cancelled in flight"]``:
        Gym may run it to the end all the same, and the model bill it (a wait for a permit or a backoff does not)."""
        try:
            return await post_rollout(
                self.http, url, payload, self.trial_timeout, reward_key, self.health.signal(), headers
            )
        except asyncio.CancelledError:
            self.counts["cancelled in flight"] += 1
            raise

    async def _send(
        self, url: str, payload: bytes, reward_key: str, headers: Mapping[str, str]
    ) -> tuple[dict[str, Any], float, float]:
        """One attempt, holding a permit of the run's limit while it is in flight."""
        if self.limit is None:
            return await self._post_counted(url, payload, reward_key, headers)
        permit = await self.limit.acquire()
        status: int | None = None
        retry_after: float | None = None
        try:
            return await self._post_counted(url, payload, reward_key, headers)
        except TrialFault as fault:
            status, retry_after = fault.http_status, fault.retry_after_s
            raise
        finally:
            self.limit.release(permit, status, retry_after)
