"""Trajectories: the records Gym's collector would have written, so Gym's own tools read them whole.

With ``observability_enabled`` and an absolute ``model_call_capture_dir``, Gym's model server writes
every model call of a rollout to ``<dir>/<task>-<rollout>.capture.jsonl``; Gym's collector
(``nemo_gym/rollout_collection.py``, ``_run_from_config``) then folds those calls into the rollout's
record (``merge_model_call_capture_into_record``), projects ``ng_trajectory`` and ``ng_perf`` from them
and stamps the environment server's name and type. ``gym eval health-check`` and ``gym eval export
--format atif`` read exactly these fields.

pytest-gym never imports ``nemo_gym``: that step runs Gym's own functions in Gym's own interpreter (the
``python`` beside the ``gym`` CLI), in the run's helper process (``gym.helperproc``, shared with Gym's
health checks), started early so that its imports (seconds) overlap the trials and fed the finished records at
the end. The raw records stay in ``rollouts.jsonl`` as they were written until the finalized file replaces it
in one step (``write_atomically``): a crash at any point leaves one or the other, whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.endpoint import ENVIRONMENT_TYPE, GymEndpoint
from pytest_gym.core.jsonl import AppendedLines, iter_lines
from pytest_gym.core.masking import Masker
from pytest_gym.gym.helperproc import GymHelper
from pytest_gym.runfolder.layout import CAPTURE_DIR, MATERIALIZED_FILE, ROLLOUTS_FILE
from pytest_gym.runfolder.records import (
    ROLLOUT_INDEX_KEY,
    TASK_INDEX_KEY,
    EnvironmentServer,
    RecordError,
    parse_record,
    read_records,
    stamp_server,
    stamps,
    trial_key,
)
from pytest_gym.runfolder.rollouts import masked_record

#: Keys a finalized record carries; a record that has them is left alone (reused by --gym-resume).
FINALIZED_KEY = "ng_model_call_capture"
_TIMEOUT_S = 600.0
Servers = Mapping[str, EnvironmentServer]


def capture_dir(run_dir: Path) -> Path:
    return Path(run_dir).resolve() / CAPTURE_DIR


def attached_capture_dir(config: Any) -> str | None:
    """Where an attached Gym captures model calls (from its resolved config); None when it does not."""
    if not isinstance(config, Mapping) or config.get("observability_enabled") not in (True, "true", "True"):
        return None
    folder = config.get("model_call_capture_dir")
    return str(folder) if isinstance(folder, str) and Path(folder).is_absolute() else None


def environment_servers(endpoint: GymEndpoint) -> dict[str, EnvironmentServer]:
    """agent -> the environment server its ``/run`` goes through (name and implementation, Gym's stamps)."""
    by_url = {s.url + "/run": s for s in endpoint.servers if s.server_type == ENVIRONMENT_TYPE}
    servers = {}
    for agent, route in endpoint.run_routes.items():
        server = by_url.get(route)
        if server is not None:
            servers[agent] = EnvironmentServer(server.process_name, server.name or None)
    return servers


def gym_python(gym_cli: str) -> Path | None:
    """The interpreter of the venv Gym is installed in: beside its ``gym`` CLI."""
    import shutil

    found = shutil.which(gym_cli)
    if found is None:
        return None
    for candidate in (Path(found).parent / "python", Path(found).resolve().parent / "python"):
        if candidate.exists():
            return candidate
    return None


class Finalizer:
    """Gym's collector step for a run folder, run by the run's helper process in Gym's interpreter.

    ``finalize`` sends the helper the run folder's records and replaces ``rollouts.jsonl`` with the finalized
    records. ``folder`` None: no model calls were captured for this run (an attached Gym), and the step is
    Gym's collector's without observability: the agent's trajectory projected, ``model_calls_unavailable``
    among its gaps, so Gym's checks on model calls are unobserved rather than "missing captured call".

    ``finalize_new``, called while the trials run, sends the records written since its last call, as Gym's own
    collector finalizes each rollout when it returns (its model calls are captured by then); ``finalize`` then
    sends only the rest, so the step no longer waits for the end of the run.
    """

    def __init__(self, helper: GymHelper, folder: Path | None) -> None:
        self.helper = helper
        self.folder = folder
        #: The records as ``finalize`` wrote them (masked), for the next step to use without reading them again.
        self.records: list[Any] | None = None
        #: The step's answers for records finalized early, by a digest of the record's line as written.
        self._early: dict[bytes, bytes] = {}
        #: What ``finalize_new`` reads (the lines written since it last looked), and the rows it found.
        self._appended: dict[Path, AppendedLines] = {}
        self._rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._sent = 0

    def _item(self, n: int, record: dict[str, Any], row: Mapping[str, Any] | None, servers: Servers) -> dict[str, Any]:
        found = stamps(record)
        stamp_server(record, servers.get(found.agent) if found.agent else None)
        if not row:  # no row written for it: Gym's collector needs its indices
            row = {TASK_INDEX_KEY: record.get(TASK_INDEX_KEY), ROLLOUT_INDEX_KEY: record.get(ROLLOUT_INDEX_KEY)}
        latency_ms = round(found.latency_s * 1000, 3) if found.latency_s is not None else None
        captures = str(self.folder) if self.folder is not None else None
        return {"n": n, "row": row, "result": record, "latency_ms": latency_ms, "captures": captures}

    def _run(self, items: list[dict[str, Any]]) -> list[bytes]:
        """The helper's answers to ``items`` (RuntimeError when it did not answer each)."""
        items[-1]["last"] = True
        data = "".join(json.dumps(item) + "\n" for item in items).encode()
        too_slow = f"Gym's trajectory step took more than {_TIMEOUT_S:g} s; raw records kept"
        answers = self.helper.request(data, len(items), _TIMEOUT_S, too_slow)
        if len(answers) != len(items):
            raise RuntimeError(
                f"Gym's trajectory step ({self.helper.python}) returned {len(answers)} of {len(items)} records; raw "
                f"records kept: {self.helper.errors() or 'no error output'}"
            )
        return answers

    def _new_lines(self, path: Path) -> list[bytes]:
        return self._appended.setdefault(path, AppendedLines(path)).read()

    def finalize_new(self, run_dir: Path, servers: Servers) -> int:
        """The step for the records written since the last call whose rows are written too; how many."""
        rows, rollouts = run_dir / MATERIALIZED_FILE, run_dir / ROLLOUTS_FILE
        for line in self._new_lines(rows):
            with contextlib.suppress(RecordError):  # the end reads it again, and says what is wrong with it
                if (row := parse_record(rows, 0, line)) is not None:
                    self._rows[trial_key(row)] = row
        todo: list[tuple[bytes, dict[str, Any]]] = []
        for line in self._new_lines(rollouts):
            with contextlib.suppress(RecordError):
                record = parse_record(rollouts, 0, line)
                if record is not None and FINALIZED_KEY not in record and trial_key(record) in self._rows:
                    todo.append((_digest(line), record))
        if not todo:
            return 0
        # A row is taken when its record is (each trial has its own): the rows held are those of trials not back yet.
        items = [self._item(self._sent + i, r, self._rows.pop(trial_key(r)), servers) for i, (_, r) in enumerate(todo)]
        self._sent += len(items)
        for (digest, _), answer in zip(todo, self._run(items), strict=True):
            self._early[digest] = answer
        return len(todo)

    def finalize(self, run_dir: Path, servers: Servers) -> str:
        """Finalize ``run_dir``'s rollouts in place; a one-line account of what was done."""
        path = run_dir / ROLLOUTS_FILE
        records: list[dict[str, Any]] = []
        early: list[bytes | None] = []
        for number, line in iter_lines(path):
            answer = self._early.get(_digest(line)) if self._early else None
            if answer is not None:  # read when it was finalized early, and replaced by its answer below
                records.append({})
                early.append(answer)
                continue
            record = parse_record(path, number, line)
            if record is not None:
                records.append(record)
                early.append(None)
        todo = [n for n, record in enumerate(records) if FINALIZED_KEY not in record and early[n] is None]
        started = time.monotonic()
        if todo:  # the rows of the rest (read whole only then: the early step took the others' rows as they came)
            inputs = {trial_key(r): r for r in read_records(run_dir / MATERIALIZED_FILE)}
            items = [self._item(n, records[n], inputs.get(trial_key(records[n])), servers) for n in todo]
            for n, answer in zip(todo, self._run(items), strict=True):
                early[n] = answer
        done = 0
        for n, finalized in enumerate(early):
            if finalized is not None:
                records[n] = json.loads(finalized)
                done += 1
        if not done:
            return "0 records finalized"
        masker = Masker()
        written = [masked_record(masker, record) for record in records]
        write_atomically(path, b"".join(line for _, line in written))
        self.records = [record for record, _ in written]
        ahead = done - len(todo)
        return f"{done} records finalized ({ahead} while the trials ran) in {time.monotonic() - started:.1f} s"


def _digest(line: bytes) -> bytes:
    return hashlib.blake2b(line.rstrip(b"\n"), digest_size=16).digest()
