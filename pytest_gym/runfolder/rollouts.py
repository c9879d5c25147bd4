"""A run folder in the layout Gym's own collector writes, so Gym's tools read a pytest-gym run as their own.

``gym eval run -o D/rollouts.jsonl`` leaves four files in ``D``; this module writes the same four from
trial outcomes. The formats copy ``nemo_gym/rollout_collection.py`` of nemo-gym 0.7.0
(``RolloutCollectionHelper._run_from_config``, ``_agent_request_failure_row``, ``_call_aggregate_metrics``):

``rollouts.jsonl``
    Gym's ``/run`` answer as it came back, plus what the collector copies from the request, in its order:
    ``_ng_task_index``, ``_ng_rollout_index``, then ``agent_ref``, ``task_source``, ``skills_ref``,
    ``_ng_attempt_index``, ``_ng_rollout_id`` when the request has them, then ``_ng_environment_server`` and
    ``_ng_result_type`` when the caller names the environment server. Compact JSON, one line per rollout.
``rollouts_failures.jsonl``
    One row per failed dispatch (Gym's resume counts rows as spent attempts, so transport retries inside
    one trial are not rows of their own): ``_ng_failure_class`` (``agent_run_error`` when a server answered
    with a status other than 429/502/503/504, else ``agent_request_failed``), ``_ng_failure_type``,
    ``_ng_failure_message``, ``_ng_failure_http_status``, ``_ng_failure_response_body``, the same request
    stamps, and pytest-gym's own ``_pytest_gym_nodeid``, ``_pytest_gym_task_hash``, ``_pytest_gym_attempts``,
    ``_pytest_gym_latency_s`` (underscore keys: Gym's metrics skip them; rewarded records carry the same four).
    A cancelled trial writes no row, as Gym writes none for a rollout that was stopped: the absence is the signal.
``rollouts_materialized_inputs.jsonl``
    The request body as POSTed (the row, ``agent_ref``, ``_ng_task_index``, ``_ng_rollout_index``), written
    when the trial finishes rather than before the run, so it lists the trials that ran, in completion order.
``rollouts_aggregate_metrics.json``
    The list of per-environment-server entries built from ``/aggregate_metrics`` answers.

With Gym's ``observability_enabled`` the collector also merges model-call captures from disk into each
record and re-projects ``ng_trajectory`` and ``ng_perf``: ``pytest_gym.gym.trajectories`` does that step
with Gym's own code at the end of the run (``--gym-trajectories``); the records here are the raw ones.

xdist workers append to the same files: each record is one complete line written to an ``O_APPEND``
descriptor under an exclusive ``flock``, so no line tears, interleaves or is lost, whatever its size.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.jsonl import AppendLog
from pytest_gym.core.masking import MAX_DEPTH, Masker, json_depth_exceeds
from pytest_gym.core.numbers import is_int
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.runfolder.layout import AGGREGATE_FILE, FAILURES_FILE, MATERIALIZED_FILE, ROLLOUTS_FILE
from pytest_gym.runfolder.records import (
    AGENT_REF_KEY,
    CONFIG_DUMP_KEYS,
    ENVIRONMENT_SERVER_KEY,
    ROLLOUT_INDEX_KEY,
    TASK_INDEX_KEY,
    EnvironmentServer,
    failure_record,
    finite,
    rollout_record,
    rollout_record_text,
    without_config,
)


def _json_bytes(data: Any, indent: int | None = None) -> bytes:
    separators = (",", ":") if indent is None else (",", ": ")
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, indent=indent, separators=separators)
    except ValueError:
        data = finite(data)
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, indent=indent, separators=separators)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escaped, the line is still valid JSON
        return json.dumps(data, ensure_ascii=True, allow_nan=False, indent=indent, separators=separators).encode()


def encode_record(masker: Masker, data: Mapping[str, Any]) -> bytes:
    """One masked jsonl line of a record, as every run-folder file holds it."""
    return masked_record(masker, data)[1]


def masked_record(masker: Masker, data: Mapping[str, Any]) -> tuple[Any, bytes]:
    """(the record as written, masked; its jsonl line): for a writer that goes on using what it wrote."""
    masked, text = masker.record(data)
    if text is not None:
        try:
            return masked, text.encode("utf-8") + b"\n"  # the serialisation the check made: the usual case
        except UnicodeEncodeError:
            pass
    return masked, _json_bytes(masked) + b"\n"


class RunFolderWriter:
    """Appends finished trials to the run folder's jsonl files, as Gym's collector would have.

    One writer per process (the controller and each xdist worker); several writers on one folder are safe.
    ``servers`` maps an agent name to the environment server its ``/run`` went through, so records carry
    Gym's ``_ng_environment_server``/``_ng_result_type`` stamps; without it they are left out, and Gym's
    readers fall back to the agent's one environment server. ``fsync`` makes every record durable before
    ``record`` returns (each write is visible to readers at once either way).
    """

    def __init__(
        self, run_dir: Path, *, servers: Mapping[str, EnvironmentServer] | None = None, fsync: bool = False
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._servers = dict(servers or {})
        # The known secrets are read once; every record is masked (answers echo what they were sent).
        self._masker = Masker()
        self._lock = threading.Lock()  # flock does not separate threads that share a descriptor
        self._files: dict[str, AppendLog] = {}
        try:
            for name in (MATERIALIZED_FILE, ROLLOUTS_FILE, FAILURES_FILE):
                self._files[name] = AppendLog(self.run_dir / name, fsync)
        except BaseException:
            self.close()
            raise
        self._closed = False

    def __enter__(self) -> RunFolderWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def add_servers(self, servers: Mapping[str, EnvironmentServer]) -> None:
        """Name the environment servers once the deployment is known (the writer may open before it)."""
        with self._lock:
            self._servers.update(servers)

    def server_for(self, outcome: TrialOutcome) -> EnvironmentServer | None:
        return self._servers.get(outcome.agent) if outcome.agent else None

    def record(self, outcome: TrialOutcome) -> None:
        """Append a finished trial: its request, then its rollout or its failure row."""
        self.record_all((outcome,))

    def record_all(self, outcomes: Iterable[TrialOutcome]) -> None:
        """Append finished trials in order, with one locked write per file for all of them (a lock and a write
        per trial and file cost more than the lines' encoding). A trial whose lines cannot be encoded is left
        out and raised after the others are written."""
        batches: dict[str, list[bytes]] = {}
        failure: Exception | None = None
        for outcome in outcomes:
            try:
                lines = self.lines_of(outcome)  # before any lock
            except Exception as exc:
                failure = failure or exc
                continue
            for name, line in lines:
                batches.setdefault(name, []).append(line)
        with self._lock:
            if self._closed:
                raise ValueError(f"the run folder writer for {self.run_dir} is closed")
            for name, parts in batches.items():
                self._files[name].append_bytes(b"".join(parts))
        if failure is not None:
            raise failure

    def lines_of(self, outcome: TrialOutcome) -> list[tuple[str, bytes]]:
        """(file, line) of one trial: its request, then its rollout or its failure row. The JSON made before (the
        POST's body, the answer's masking check) is reused where it is the record's, and checked again whole."""
        server = self.server_for(outcome)
        lines: list[tuple[str, bytes]] = []
        request = outcome.request
        if request is not None:
            sent = outcome.request_bytes
            made = sent[1] if sent is not None and sent[0] is request and CONFIG_DUMP_KEYS.isdisjoint(request) else None
            lines.append((MATERIALIZED_FILE, self._checked(made) or self._line(without_config(request))))
        if outcome.ok:
            line = self._checked(rollout_record_text(outcome, server))
            if line is None:
                record = rollout_record(outcome, server)
                assert record is not None  # a rewarded trial has one (rollout_record raises otherwise)
                line = self._line(record)
            lines.append((ROLLOUTS_FILE, line))
        else:
            failure = failure_record(outcome, server)
            if failure is not None:
                lines.append((FAILURES_FILE, self._line(failure)))
        return lines

    def _checked(self, made: str | bytes | None) -> bytes | None:
        """A record's compact JSON made before, as a line: if it is UTF-8 with nothing to mask (checked whole)."""
        if made is None:
            return None
        try:
            text = made.decode("utf-8") if isinstance(made, bytes) else made
            data = made if isinstance(made, bytes) else made.encode("utf-8")
        except UnicodeError:
            return None
        return None if self._masker.suspicious(text) else data + b"\n"

    def append_rollout(self, record: Mapping[str, Any]) -> None:
        """Copy a finished record (reused from an earlier run by --gym-resume) into this run's rollouts."""
        line = self._line(record)
        with self._lock:
            if not self._closed:
                self._files[ROLLOUTS_FILE].append_bytes(line)

    def _line(self, data: Mapping[str, Any]) -> bytes:
        return encode_record(self._masker, data)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for file in self._files.values():
                file.close()


#: Fields Gym strips before POSTing results to ``/aggregate_metrics`` (``response`` keeps usage only).
_AGGREGATE_STRIPPED = frozenset(
    {"response", "responses_create_params", "ng_agent_observations", "ng_model_call_capture", "ng_trajectory"}
)


def order_key(record: Mapping[str, Any]) -> tuple[int, int]:
    """Task then repeat; an index that is not a whole number (a hand-edited record: ``"3"``) sorts as 0."""
    task, repeat = record.get(TASK_INDEX_KEY), record.get(ROLLOUT_INDEX_KEY)
    return (task if is_int(task) else 0, repeat if is_int(repeat) else 0)


def aggregate_request_from_records(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``/aggregate_metrics`` body Gym's collector sends for these ``rollouts.jsonl`` records.

    Pass the records of one environment server (Gym posts once per server). Records are sorted by task then
    repeat, because Gym's metrics read a task's repeats by position; heavy fields are stripped, and
    ``response`` keeps only ``usage`` and ``incomplete_details``.
    """
    stripped = []
    for record in sorted(records, key=order_key):
        entry = {key: value for key, value in record.items() if key not in _AGGREGATE_STRIPPED}
        response = record.get("response")
        response = response if isinstance(response, Mapping) else {}
        kept = {key: response[key] for key in ("usage", "incomplete_details") if response.get(key) is not None}
        if kept:
            entry["response"] = kept
        stripped.append(entry)
    return {"verify_responses": stripped}


def aggregate_request(
    outcomes: Iterable[TrialOutcome], *, servers: Mapping[str, EnvironmentServer] | None = None
) -> dict[str, Any]:
    """The ``/aggregate_metrics`` body for the rewarded trials among ``outcomes`` (faults are not scores)."""
    servers = servers or {}
    records = []
    for outcome in outcomes:
        record = rollout_record(outcome, servers.get(outcome.agent) if outcome.agent else None)
        if record is not None:
            records.append(record)
    return aggregate_request_from_records(records)


#: The largest ``/aggregate_metrics`` answer read (Gym's per-task metrics of 100k tasks stay far below).
MAX_AGGREGATE_BYTES = 64 * 1024 * 1024
_AGGREGATE_OBJECTS = ("agent_metrics", "key_metrics")
_AGGREGATE_LISTS = ("group_level_metrics", "repeat_level_metrics")


def aggregate_answer(data: bytes) -> dict[str, Any]:
    """Gym's ``/aggregate_metrics`` answer, checked: a JSON object of bounded size and depth whose known
    fields have the types Gym gives them. Anything else raises ValueError saying what was wrong."""
    if len(data) > MAX_AGGREGATE_BYTES:
        raise ValueError(f"the answer is {len(data)} bytes, more than the {MAX_AGGREGATE_BYTES >> 20} MiB read")
    try:
        answer = json.loads(data)
    except RecursionError:
        raise ValueError(f"the answer nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise ValueError(f"the answer is not JSON ({exc})") from None
    if not isinstance(answer, dict):
        raise ValueError(f"the answer is a JSON {type(answer).__name__}, not an object")
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH and json_depth_exceeds(answer):
        raise ValueError(f"the answer nests deeper than {MAX_DEPTH} levels")
    for name in _AGGREGATE_OBJECTS:
        if answer.get(name) is not None and not isinstance(answer[name], dict):
            raise ValueError(f"{name!r} is a JSON {type(answer[name]).__name__}, not an object")
    for name in _AGGREGATE_LISTS:
        if answer.get(name) is not None and not isinstance(answer[name], list):
            raise ValueError(f"{name!r} is a JSON {type(answer[name]).__name__}, not a list")
    return answer


def aggregate_entry(agent: str, metrics: Mapping[str, Any], environment_server: str | None = None) -> dict[str, Any]:
    """One ``rollouts_aggregate_metrics.json`` entry from an ``/aggregate_metrics`` answer, as Gym builds it."""
    entry: dict[str, Any] = {AGENT_REF_KEY: {"name": agent}}
    if environment_server is not None:
        entry[ENVIRONMENT_SERVER_KEY] = environment_server
    entry["agent_metrics"] = dict(metrics.get("agent_metrics") or {})
    entry["key_metrics"] = dict(metrics.get("key_metrics") or {})
    entry["group_level_metrics"] = list(metrics.get("group_level_metrics") or [])
    entry["repeat_level_metrics"] = list(metrics.get("repeat_level_metrics") or [])
    if metrics.get("perf_summary") is not None:
        entry["perf_summary"] = metrics["perf_summary"]
    return entry


def write_aggregate_metrics(run_dir: Path, gym_metrics: list[dict[str, Any]]) -> Path:
    """Replace ``rollouts_aggregate_metrics.json`` in one step: readers see the old file or the new, whole.

    ``gym_metrics`` is the list of entries (see :func:`aggregate_entry`), one per environment server.
    """
    for entry in gym_metrics:
        ref = entry.get(AGENT_REF_KEY) if isinstance(entry, dict) else None
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
            raise ValueError(f"an aggregate metrics entry needs agent_ref.name: {entry!r:.200}")
        if not isinstance(entry.get("agent_metrics"), dict):
            raise ValueError(f"an aggregate metrics entry needs an agent_metrics object: {entry!r:.200}")
    data = _json_bytes(Masker().record(gym_metrics)[0], indent=2)  # one check of the whole, most need no more
    target = Path(run_dir) / AGGREGATE_FILE
    write_atomically(target, data)
    return target
