"""The run-folder record: the one owner of its keys, of pytest-gym's ``_pytest_gym_*`` stamps, and of the way
from a record back to a trial's outcome.

A record of ``rollouts.jsonl`` is Gym's ``/run`` answer plus what Gym's collector copies from the request
(``_ng_*``) plus pytest-gym's stamps; a row of ``rollouts_failures.jsonl`` is Gym's failure row plus the same
stamps. The writer (``runfolder.rollouts``), resume (``runfolder.runinfo``), the merge, the re-score, the
trajectory step and the report all go through this module: the stamps are validated here once, so a record
written by another version, by Gym's own collector or by hand means the same thing to every reader.

Records read back may come from anywhere (an artifact of another job, a fork): every value is checked
and bounded before it is trusted, and :func:`read_records` refuses what no run could have written
(a line that does not parse in the middle of a file, nesting deeper than any answer) with the file and
line named, while skipping a torn last line (a run killed mid-write).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gym.core.masking import MAX_DEPTH, MAX_FIELD, clean_text, json_depth_exceeds
from pytest_gym.core.numbers import is_finite_number, is_int
from pytest_gym.core.outcome import TrialOutcome, TrialSpec, usage_of

# -- Gym's keys (nemo_gym/rollout_collection.py of nemo-gym 0.7.0) ---------------------------------------------
TASK_INDEX_KEY = "_ng_task_index"
ROLLOUT_INDEX_KEY = "_ng_rollout_index"
ROLLOUT_ID_KEY = "_ng_rollout_id"
AGENT_REF_KEY = "agent_ref"
ENVIRONMENT_SERVER_KEY = "_ng_environment_server"
RESULT_TYPE_KEY = "_ng_result_type"
FAILURE_CLASS_KEY = "_ng_failure_class"
FAILURE_TYPE_KEY = "_ng_failure_type"
FAILURE_MESSAGE_KEY = "_ng_failure_message"
FAILURE_STATUS_KEY = "_ng_failure_http_status"
FAILURE_BODY_KEY = "_ng_failure_response_body"
AGENT_RUN_ERROR = "agent_run_error"
AGENT_REQUEST_FAILED = "agent_request_failed"

# -- pytest-gym's stamps (underscore keys: Gym's metrics skip them) ------------------------------------------------
STAMP_PREFIX = "_pytest_gym_"
NODEID_KEY = "_pytest_gym_nodeid"
TASK_HASH_KEY = "_pytest_gym_task_hash"
ATTEMPTS_KEY = "_pytest_gym_attempts"
LATENCY_KEY = "_pytest_gym_latency_s"
#: The W3C trace id the trial's /run carried (its traceparent).
TRACE_ID_KEY = "_pytest_gym_trace_id"
#: A failure row of a trial whose answer showed broken evidence: the health checks that found it (Gym's codes).
HEALTH_KEY = "_pytest_gym_health"
#: --gym-rescore: the reward the answer had before, and why the verifier could not score it again.
OLD_REWARD_KEY = "_pytest_gym_old_reward"
RESCORE_ERROR_KEY = "_pytest_gym_rescore_error"

#: Fields the run folder adds to Gym's answer besides the stamps (not part of what Gym answered).
FOLDER_STAMPS = frozenset({ENVIRONMENT_SERVER_KEY, RESULT_TYPE_KEY})
#: Request keys Gym's collector copies onto a result after the two indices, in its order.
REQUEST_STAMPS = ("agent_ref", "task_source", "skills_ref", "_ng_attempt_index", ROLLOUT_ID_KEY)

#: Bounds on what a record read back may claim: far above any real run, far below harm.
MAX_INDEX = 10_000_000
MAX_ATTEMPTS = 1_000_000
MAX_LINE_BYTES = 256 << 20


class RecordError(ValueError):
    """A run-folder file holds what no run writes; the message names the file, the line and the fix."""

    def __init__(self, path: Path, line: int, problem: str) -> None:
        self.path, self.line, self.problem = path, line, problem
        super().__init__(
            f"{path}:{line}: {problem}; this is not a file pytest-gym or Gym wrote (edited, or from an untrusted "
            "source?): give a run folder written by a run, or remove the line"
        )


@dataclass(frozen=True)
class Stamps:
    """What a record says about its trial, checked: None where a value is missing or not what it must be."""

    nodeid: str | None
    task_hash: str | None
    task_index: int | None
    repeat: int | None
    rollout_id: str | None
    attempts: int
    latency_s: float | None
    agent: str | None

    @property
    def suite(self) -> str | None:
        """The path part of the trial's node id (its dataset or suite file), when the record has ours."""
        if self.nodeid and "::" in self.nodeid:
            return self.nodeid.split("::", 1)[0]
        return None

    @property
    def key(self) -> tuple[str, int] | None:
        """(task hash, repeat): how a trial of this plugin is found again; None in a record without our stamps."""
        if self.task_hash is None or self.repeat is None:
            return None
        return (self.task_hash, self.repeat)


def _index(value: Any) -> int | None:
    return value if is_int(value) and 0 <= value < MAX_INDEX else None


def _text(value: Any, limit: int = 4096) -> str | None:
    return value if isinstance(value, str) and value and len(value) <= limit else None


def stamps(record: Mapping[str, Any]) -> Stamps:
    """The record's stamps, validated once for every reader."""
    attempts = record.get(ATTEMPTS_KEY)
    latency = record.get(LATENCY_KEY)
    ref = record.get(AGENT_REF_KEY)
    agent = ref.get("name") if isinstance(ref, Mapping) else None
    return Stamps(
        nodeid=_text(record.get(NODEID_KEY)),
        task_hash=_text(record.get(TASK_HASH_KEY), 128),
        task_index=_index(record.get(TASK_INDEX_KEY)),
        repeat=_index(record.get(ROLLOUT_INDEX_KEY)),
        rollout_id=_text(record.get(ROLLOUT_ID_KEY), 256),
        attempts=attempts if is_int(attempts) and 0 < attempts <= MAX_ATTEMPTS else 1,
        latency_s=float(latency) if is_finite_number(latency) and latency >= 0 else None,
        agent=_text(agent, 256),
    )


def task_index_of(record: Mapping[str, Any]) -> int | None:
    """The record's task index, checked as ``stamps`` checks it (for a reader that needs nothing else)."""
    return _index(record.get(TASK_INDEX_KEY))


def trial_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """Which trial a rollout record or a materialized input belongs to.

    pytest-gym sends every trial its own ``_ng_rollout_id`` (stable across resumes); the indices alone
    repeat across the datasets of one run. A folder Gym's own collector wrote (one dataset) may have
    only the indices, unique there.
    """
    rollout_id = record.get(ROLLOUT_ID_KEY)
    if isinstance(rollout_id, str):
        return ("id", rollout_id)
    return ("index", record.get(TASK_INDEX_KEY), record.get(ROLLOUT_INDEX_KEY))


def with_task_index(record: Mapping[str, Any], task_index: int) -> dict[str, Any]:
    """The record with this run's ``_ng_task_index``: an earlier run (--gym-resume) may have given the task
    another one (its datasets in another order, or a version that restarted the index with every dataset)."""
    if record.get(TASK_INDEX_KEY) == task_index:
        return dict(record)
    return {key: (task_index if key == TASK_INDEX_KEY else value) for key, value in record.items()} | {
        TASK_INDEX_KEY: task_index
    }


def gym_answer(record: Mapping[str, Any]) -> dict[str, Any]:
    """The answer as Gym gave it: the record without what the run folder stamped on it."""
    return {k: v for k, v in record.items() if not k.startswith(STAMP_PREFIX) and k not in FOLDER_STAMPS}


def reward_of(record: Mapping[str, Any], reward_key: str) -> float | None:
    """The record's reward under ``reward_key``, when it is a finite number."""
    value = record.get(reward_key)
    return float(value) if is_finite_number(value) else None


# -- writing ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvironmentServer:
    """The environment server a trial went through; Gym stamps its name and type on every record."""

    name: str
    type: str | None = None


#: Statuses something in front of a Gym server answers with; a Gym server itself answers 500.
_SERVER_DID_NOT_RUN = frozenset({429, 502, 503, 504})
#: Our error classes for a trial that was stopped rather than failed.
_NOT_PERSISTED = frozenset({"cancelled"})
#: Gym's resolved config can hold the policy key unmasked; it never goes into a record.
CONFIG_DUMP_KEYS = frozenset({"global_config_dict", "global_config_dict_yaml"})


def without_config(data: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in CONFIG_DUMP_KEYS}


def stamp_server(record: dict[str, Any], server: EnvironmentServer | None) -> None:
    """Gym's environment server stamps (kept when the record has them already)."""
    if server is None:
        return
    record.setdefault(ENVIRONMENT_SERVER_KEY, server.name)
    if server.type is not None:
        record.setdefault(RESULT_TYPE_KEY, server.type)


def _stamp(record: dict[str, Any], outcome: TrialOutcome, server: EnvironmentServer | None) -> None:
    """Copy what Gym's collector copies from the row onto a result or failure row, in the same order; then ours."""
    request = outcome.request or {}
    if TASK_INDEX_KEY in request:
        record[TASK_INDEX_KEY] = request[TASK_INDEX_KEY]
    record[ROLLOUT_INDEX_KEY] = request.get(ROLLOUT_INDEX_KEY, outcome.repeat)
    for key in REQUEST_STAMPS:
        if key in request:
            record[key] = request[key]
    if AGENT_REF_KEY not in record and outcome.agent:
        # A fault before the request was built still names its agent, which Gym's readers group by.
        record[AGENT_REF_KEY] = {"name": outcome.agent}
    if server is not None:
        record[ENVIRONMENT_SERVER_KEY] = server.name
        if server.type is not None:
            record[RESULT_TYPE_KEY] = server.type
    record[NODEID_KEY] = outcome.nodeid
    record[TASK_HASH_KEY] = outcome.task_hash
    record[ATTEMPTS_KEY] = outcome.attempts
    record[LATENCY_KEY] = round(outcome.latency_s, 4)
    if outcome.trace_id:
        record[TRACE_ID_KEY] = outcome.trace_id
    if outcome.health:
        record[HEALTH_KEY] = list(outcome.health)


def rollout_record(outcome: TrialOutcome, server: EnvironmentServer | None = None) -> dict[str, Any] | None:
    """The ``rollouts.jsonl`` record of a trial with a reward; None for a fault."""
    if not outcome.ok:
        return None
    if outcome.answer is None or TASK_INDEX_KEY not in (outcome.request or {}):
        raise ValueError(f"{outcome.nodeid}: a rewarded trial needs its answer and the request with {TASK_INDEX_KEY}")
    record = without_config(outcome.answer)
    _stamp(record, outcome, server)
    return record


def rollout_record_text(outcome: TrialOutcome, server: EnvironmentServer | None = None) -> str | None:
    """The compact JSON text of ``rollout_record(outcome, server)``, made from the answer's JSON made before
    (``outcome.answer_text``, by the masking check) and its stamps' own: a large answer is not serialised again.
    None when there is no such text or the answer holds a key the stamps write or Gym's config dump (then
    serialise the record: the stamps overwrite such a key in place, and ``without_config`` drops the dump)."""
    cached, answer = outcome.answer_text, outcome.answer
    if not outcome.ok or cached is None or cached[0] is not answer or not answer:
        return None
    if TASK_INDEX_KEY not in (outcome.request or {}) or not answer.keys().isdisjoint(CONFIG_DUMP_KEYS):
        return None
    stamps: dict[str, Any] = {}
    _stamp(stamps, outcome, server)  # the keys it adds come after the answer's, as in rollout_record's dict
    if not answer.keys().isdisjoint(stamps):
        return None
    try:
        text = json.dumps(stamps, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return None
    return f"{cached[1][:-1]},{text[1:]}"


def failure_record(outcome: TrialOutcome, server: EnvironmentServer | None = None) -> dict[str, Any] | None:
    """The ``rollouts_failures.jsonl`` row of a faulted trial; None for a reward or a cancelled trial.

    One row per failed dispatch (Gym's resume counts rows as spent attempts); ``_ng_failure_class`` is
    ``agent_run_error`` when a server answered with a status other than 429/502/503/504, else
    ``agent_request_failed``.
    """
    if outcome.ok or outcome.error_class in _NOT_PERSISTED:
        return None
    status = outcome.http_status
    ran = status is not None and status not in _SERVER_DID_NOT_RUN
    record: dict[str, Any] = {
        FAILURE_CLASS_KEY: AGENT_RUN_ERROR if ran else AGENT_REQUEST_FAILED,
        FAILURE_TYPE_KEY: outcome.error_class or "unknown",
        FAILURE_MESSAGE_KEY: clean_text(outcome.error or "", MAX_FIELD),
        FAILURE_STATUS_KEY: status,
        FAILURE_BODY_KEY: None,
    }
    _stamp(record, outcome, server)
    return record


def rescored_line(
    record: Mapping[str, Any], answer: Mapping[str, Any] | None, old_reward: float | None
) -> dict[str, Any]:
    """A ``rescored.jsonl`` line: the verifier's new answer, with the trial's indices and stamps."""
    line: dict[str, Any] = {
        TASK_INDEX_KEY: record.get(TASK_INDEX_KEY),
        ROLLOUT_INDEX_KEY: record.get(ROLLOUT_INDEX_KEY),
    }
    line.update(answer or {})
    if isinstance(record.get(ROLLOUT_ID_KEY), str):
        line[ROLLOUT_ID_KEY] = record[ROLLOUT_ID_KEY]  # pairs the line with its request
    line[OLD_REWARD_KEY] = old_reward
    line[NODEID_KEY] = record.get(NODEID_KEY) if isinstance(record.get(NODEID_KEY), str) else None
    line[TASK_HASH_KEY] = record.get(TASK_HASH_KEY) if isinstance(record.get(TASK_HASH_KEY), str) else None
    return line


# -- reading back ------------------------------------------------------------------------------------------------


def outcome_from_rollout(
    spec: TrialSpec, record: Mapping[str, Any], *, reused: bool = True, keep_latency: bool = False
) -> TrialOutcome | None:
    """The outcome a finished record gives this trial; None when the record cannot be trusted.

    ``reused``: an earlier run's trial (--gym-resume), reported as such. ``keep_latency``: this run's own
    trial run elsewhere (a shard, --gym-merge): it keeps its latency, so merged totals equal an unsharded run's.
    """
    reward = reward_of(record, spec.reward_key)
    if reward is None or json_depth_exceeds(record):
        return None
    found = stamps(record)
    latency = found.latency_s if keep_latency and found.latency_s is not None else 0.0
    answer = gym_answer(record)
    return TrialOutcome.for_spec(
        spec,
        reward=reward,
        answer=answer,
        attempts=found.attempts,
        agent=found.agent or spec.agent,
        tokens=usage_of(answer),
        latency_s=latency,
        reused=reused,
    )


@dataclass(frozen=True)
class Failure:
    """A failure row's meaning, checked."""

    message: str
    type: str
    http_status: int | None
    attempts: int


def failure_of(record: Mapping[str, Any]) -> Failure:
    status = record.get(FAILURE_STATUS_KEY)
    message = record.get(FAILURE_MESSAGE_KEY)
    kind = record.get(FAILURE_TYPE_KEY)
    return Failure(
        message=clean_text(message, MAX_FIELD) if isinstance(message, str) and message else "the rollout failed",
        type=clean_text(kind, 100) if isinstance(kind, str) and kind else "unknown",
        http_status=status if is_int(status) and 100 <= status < 600 else None,
        attempts=stamps(record).attempts,
    )


def outcome_from_failure(spec: TrialSpec, record: Mapping[str, Any], *, default_type: str = "shard") -> TrialOutcome:
    """A trial whose earlier run recorded a fault: the same error here, so it counts as an error again."""
    failure = failure_of(record)
    return TrialOutcome.for_spec(
        spec,
        error=failure.message,
        error_class=failure.type if failure.type != "unknown" else default_type,
        http_status=failure.http_status,
        attempts=failure.attempts,
        reused=True,
    )


def parse_record(path: Path, number: int, line: bytes) -> dict[str, Any] | None:
    """Line ``number`` of a run folder's jsonl file as a record; None for a blank line or a torn last line.

    A torn last line (no newline at its end: a run killed mid-write) is no record; a line that does not
    parse in the middle of a file, nests deeper than any answer, is larger than any answer or is not an
    object raises ``RecordError`` naming the file and line.
    """
    if not line.strip():
        return None
    torn = not line.endswith(b"\n")
    if len(line) > MAX_LINE_BYTES:
        raise RecordError(path, number, f"a line of {len(line)} bytes, more than the {MAX_LINE_BYTES} pytest-gym reads")
    try:
        value = json.loads(line)
    except RecursionError:
        raise RecordError(path, number, f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:  # UnicodeDecodeError too
        if torn:
            return None
        raise RecordError(path, number, "a line that is not JSON") from None
    # A line with no more brackets than the limit cannot nest deeper: most records are answered without a walk.
    if line.count(b"[") + line.count(b"{") > MAX_DEPTH and json_depth_exceeds(value):
        raise RecordError(path, number, f"JSON nested deeper than {MAX_DEPTH} levels")
    if not isinstance(value, dict):
        raise RecordError(path, number, f"a JSON {type(value).__name__}, not a record object")
    return value


def iter_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a run folder's jsonl file (see :func:`parse_record`); none if it does not exist."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below; a generator keeps it open between records
    except (FileNotFoundError, NotADirectoryError):
        return
    with handle:
        for number, line in enumerate(handle, start=1):
            record = parse_record(path, number, line)
            if record is not None:
                yield number, record


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a run folder's jsonl file (see :func:`iter_records`)."""
    return [record for _, record in iter_records(path)]


def finite(value: Any) -> Any:
    """NaN and infinities become null, as Gym's orjson writes them: a file stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value
