"""Gym's own rollout health checks on a run folder, run in Gym's interpreter (the plugin never imports Gym).

``gym eval run`` health-checks its rollouts by default (``nemo_gym/rollout_health.py``: hollow turns, failed
model calls, zero completion tokens, capture mismatches, unobserved evidence); ``gym eval health-check
RUN_DIR`` does it on a folder. pytest-gym runs the same function, ``run_health_checks``, on the run folder's
``rollouts.jsonl`` at the end of the run, with the ``python`` beside the ``gym`` CLI, in one helper process
started early (its imports overlap the trials, as the trajectory step's do). Gym writes its reports into the
folder (``quality_summary.json``, ``rollout_verdicts.jsonl``); ``runfolder.health`` reads them back.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Mapping
from pathlib import Path

from pytest_gym.core.masking import clean_text
from pytest_gym.runfolder.layout import ROLLOUTS_FILE

_TIMEOUT_S = 600.0
#: Records per worker process Gym's checks may use (one process below this: no pool to start).
_RECORDS_PER_WORKER = 5000

#: Runs in Gym's interpreter: imports Gym's checks, says "ready", then checks the folder it is sent.
_HELPER = r"""
import json, sys
from pathlib import Path
from nemo_gym.rollout_health import run_health_checks

sys.stdout.write("ready\n")
sys.stdout.flush()
line = sys.stdin.readline()
if line.strip():
    request = json.loads(line)
    result = run_health_checks(
        Path(request["rollouts"]), output_dir=Path(request["output_dir"]), workers=request["workers"]
    )
    sys.stdout.write(json.dumps({"verdicts": result.summary["run"]["verdicts"]}) + "\n")
"""


class HealthCheck:
    """One helper process in Gym's interpreter that runs Gym's health checks on a run folder, once."""

    def __init__(self, python: Path, run_dir: Path, env: Mapping[str, str] | None = None) -> None:
        self.python = python
        self.env = None if env is None else dict(env)  # Gym's code gets no --gym-header variable
        self.run_dir = run_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [str(self.python), "-c", _HELPER],
            cwd=self.run_dir,  # Gym's imports may write into the working folder: the run folder's
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def run(self, records: int) -> dict[str, int]:
        """Check the folder's rollouts (Gym writes its reports there); Gym's verdict counts, or RuntimeError."""
        if self.proc is None:
            self.start()
        assert self.proc is not None
        workers = max(1, min(4, records // _RECORDS_PER_WORKER))
        request = {"rollouts": str(self.run_dir / ROLLOUTS_FILE), "output_dir": str(self.run_dir), "workers": workers}
        try:
            out, err = self.proc.communicate((json.dumps(request) + "\n").encode(), timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.close()
            raise RuntimeError(f"Gym's health checks took more than {_TIMEOUT_S:g} s") from None
        finally:
            self.proc = None
        answers = out.decode("utf-8", "replace").splitlines()
        try:
            verdicts = json.loads(answers[-1])["verdicts"]
            return {str(k): int(v) for k, v in verdicts.items()}
        except (IndexError, ValueError, KeyError, TypeError, AttributeError):
            detail = clean_text(err.decode("utf-8", "replace").strip()[-600:], 600)
            raise RuntimeError(
                f"Gym's health checks ({self.python}) gave no verdicts: {detail or 'no output'}"
            ) from None

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.kill()  # its own session: only the helper itself
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
            proc.communicate(timeout=10)
