"""One helper process in Gym's interpreter (the ``python`` beside ``gym``) for a run's Gym steps: the plugin
never imports Gym.

The steps are Gym's own functions on the run folder: the collector's trajectory step
(``gym.trajectories``) and the rollout health checks (``gym.healthcheck``). One process serves both, in
that order, because their imports are most of their cost and mostly the same (Gym's collector imports about
what its health checks do: one process costs about 5 s of CPU, two about 7.5 s). Started early so that
the imports overlap the trials; sent its requests at the end of the run, as lines of JSON, each answered
by as many lines as it asks for. It runs in its own session (a signal to pytest's group leaves it alone),
writes its errors to a file (a chatty helper never blocks on a full pipe), and ends by itself when this
process goes away (its stdin closes).
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from pytest_gym.core.masking import clean_text

#: Gym's steps the helper can run, by name, in the order a run needs them.
STEPS = ("trajectories", "health")

#: Runs in Gym's interpreter: imports the steps named in argv[1], says "ready", then answers each line:
#: a record to finalize (one line back: the record; flushed after the ``last`` one) or a health request
#: (one line back: Gym's verdict counts).
_SCRIPT = r"""
import json, sys
from pathlib import Path

steps = sys.argv[1].split(",")
if "trajectories" in steps:
    from nemo_gym.base_responses_api_model import merge_model_call_capture_into_record
    from nemo_gym.rollout_collection import _attach_ng_perf, _attach_trajectory_record, _has_observation_gap
if "health" in steps:
    from nemo_gym.rollout_health import run_health_checks

sys.stdout.write("ready\n")
sys.stdout.flush()
for line in sys.stdin:
    if not line.strip():
        continue
    item = json.loads(line)
    if "health" in item:
        request = item["health"]
        result = run_health_checks(
            Path(request["rollouts"]), output_dir=Path(request["output_dir"]), workers=request["workers"]
        )
        sys.stdout.write(json.dumps({"verdicts": result.summary["run"]["verdicts"]}) + "\n")
        sys.stdout.flush()
        continue
    row, result = item["row"], item["result"]
    capture_dirs = [Path(item["captures"])] if item.get("captures") else []  # none: Gym observed no model call
    try:
        merge_model_call_capture_into_record(
            result, capture_dirs, include_payloads=not _has_observation_gap(result, "multimodal_history_redacted")
        )
        if "ng_model_call_capture" in result or "ng_agent_observations" in result or "ng_trajectory" in result:
            _attach_trajectory_record(row, result)
        _attach_ng_perf(result, observability_enabled=bool(capture_dirs), rollout_latency_ms=item.get("latency_ms"))
    except Exception as exc:
        sys.stderr.write(f"record {item.get('n')}: {type(exc).__name__}: {exc}\n")
    sys.stdout.write(json.dumps(result, allow_nan=False) + "\n")
    if item.get("last"):
        sys.stdout.flush()
"""


class GymHelper:
    """The helper process for the ``steps`` (names from ``STEPS``) of one run folder."""

    def __init__(self, python: Path, steps: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> None:
        unknown = set(steps) - set(STEPS)
        if unknown or not steps:
            raise ValueError(f"Gym steps {sorted(unknown) or 'none'}: expected some of {', '.join(STEPS)}")
        self.python = python
        self.steps = tuple(steps)
        self.cwd = cwd
        self.env = None if env is None else dict(env)  # Gym's code gets no --gym-header variable
        self.proc: subprocess.Popen[bytes] | None = None
        self._errors: IO[bytes] | None = None
        self._ready = False

    def start(self) -> None:
        self.cwd.mkdir(parents=True, exist_ok=True)
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 (kept open while the helper lives; closed in close())
        self._ready = False
        self.proc = subprocess.Popen(
            [str(self.python), "-c", _SCRIPT, ",".join(self.steps)],
            cwd=self.cwd,  # Gym's imports may write into the working folder: the run folder's, not the user's
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            start_new_session=True,
        )

    def request(self, data: bytes, answers: int, timeout: float, too_slow: str) -> list[bytes]:
        """Send ``data`` and return the next ``answers`` lines (fewer when the helper ended: see ``errors``);
        RuntimeError(``too_slow``) after ``timeout`` seconds. Started now if it was not; kept for the next."""
        if self.proc is None:
            self.start()
        proc = self.proc
        assert proc is not None
        assert proc.stdin is not None
        assert proc.stdout is not None
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            with contextlib.suppress(OSError):
                proc.kill()

        def write() -> None:  # beside the reading: a large request and its answers would fill both pipes
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.write(data)  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]

        timer = threading.Timer(timeout, kill)
        writer = threading.Thread(target=write, name="pytest-gym-helper-input", daemon=True)
        timer.start()
        writer.start()
        lines: list[bytes] = []
        try:
            while len(lines) < answers:
                line = proc.stdout.readline()
                if not line:
                    break
                if not self._ready and line == b"ready\n":
                    self._ready = True
                    continue
                lines.append(line)
        finally:
            timer.cancel()
            writer.join(timeout=10)
        if timed_out.is_set():
            self.close()
            raise RuntimeError(too_slow)
        return lines

    def errors(self, limit: int = 600) -> str:
        """The end of what the helper wrote to stderr, cleaned for a message."""
        if self._errors is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._errors.seek(0)
            return clean_text(self._errors.read().decode("utf-8", "replace").strip()[-limit:], limit)
        return ""

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()  # its own session: only the helper itself
            with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
                proc.communicate(timeout=10)
        errors, self._errors = self._errors, None
        if errors is not None:
            errors.close()
