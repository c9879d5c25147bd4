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

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.endpoint import ENVIRONMENT_TYPE, GymEndpoint
from pytest_gym.core.masking import Masker
from pytest_gym.gym.helperproc import GymHelper
from pytest_gym.runfolder.layout import CAPTURE_DIR, MATERIALIZED_FILE, ROLLOUTS_FILE
from pytest_gym.runfolder.records import (
    ROLLOUT_INDEX_KEY,
    TASK_INDEX_KEY,
    EnvironmentServer,
    read_records,
    stamp_server,
    stamps,
    trial_key,
)
from pytest_gym.runfolder.rollouts import masked_record

#: Keys a finalized record carries; a record that has them is left alone (reused by --gym-resume).
FINALIZED_KEY = "ng_model_call_capture"
_TIMEOUT_S = 600.0


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
    """

    def __init__(self, helper: GymHelper, folder: Path | None) -> None:
        self.helper = helper
        self.folder = folder
        #: The records as ``finalize`` wrote them (masked), for the next step to use without reading them again.
        self.records: list[Any] | None = None

    def finalize(self, run_dir: Path, servers: Mapping[str, EnvironmentServer]) -> str:
        """Finalize ``run_dir``'s rollouts in place; a one-line account of what was done."""
        path = run_dir / ROLLOUTS_FILE
        records = read_records(path)
        inputs = {trial_key(r): r for r in read_records(run_dir / MATERIALIZED_FILE)}
        todo = [n for n, record in enumerate(records) if FINALIZED_KEY not in record]
        captures = str(self.folder) if self.folder is not None else None
        lines = []
        for n in todo:
            record = records[n]
            agent = stamps(record).agent
            stamp_server(record, servers.get(agent) if agent else None)
            row = inputs.get(trial_key(record)) or {
                TASK_INDEX_KEY: record.get(TASK_INDEX_KEY),
                ROLLOUT_INDEX_KEY: record.get(ROLLOUT_INDEX_KEY),
            }
            latency = stamps(record).latency_s
            latency_ms = round(latency * 1000, 3) if latency is not None else None
            item = {"n": n, "row": row, "result": record, "latency_ms": latency_ms, "captures": captures}
            if n == todo[-1]:
                item["last"] = True
            lines.append(json.dumps(item) + "\n")
        if not todo:
            return "0 records finalized"
        started = time.monotonic()
        too_slow = f"Gym's trajectory step took more than {_TIMEOUT_S:g} s; raw records kept"
        answers = self.helper.request("".join(lines).encode(), len(todo), _TIMEOUT_S, too_slow)
        if len(answers) != len(todo):
            raise RuntimeError(
                f"Gym's trajectory step ({self.helper.python}) returned {len(answers)} of {len(todo)} records; raw "
                f"records kept: {self.helper.errors() or 'no error output'}"
            )
        for n, answer in zip(todo, answers, strict=True):
            records[n] = json.loads(answer)
        masker = Masker()
        written = [masked_record(masker, record) for record in records]
        write_atomically(path, b"".join(line for _, line in written))
        self.records = [record for record, _ in written]
        return f"{len(todo)} records finalized in {time.monotonic() - started:.1f} s"
