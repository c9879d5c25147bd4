"""Gym's own rollout health checks on a run folder, run in Gym's interpreter (the plugin never imports Gym).

``gym eval run`` health-checks its rollouts by default (``nemo_gym/rollout_health.py``: hollow turns, failed
model calls, zero completion tokens, capture mismatches, unobserved evidence); ``gym eval health-check
RUN_DIR`` does it on a folder. pytest-gym runs the same function, ``run_health_checks``, on the run folder's
``rollouts.jsonl`` at the end of the run, with the ``python`` beside the ``gym`` CLI, in one helper process
started early (its imports overlap the trials, as the trajectory step's do). Gym writes its reports into the
folder (``quality_summary.json``, ``rollout_verdicts.jsonl``); ``runfolder.health`` reads them back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from pytest_gym.core.masking import clean_text
from pytest_gym.gym.helperproc import GymHelper
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
        self.run_dir = run_dir
        self.helper = GymHelper(python, _HELPER, run_dir, env)

    def start(self) -> None:
        self.helper.start()

    def run(self, records: int) -> dict[str, int]:
        """Check the folder's rollouts (Gym writes its reports there); Gym's verdict counts, or RuntimeError."""
        workers = max(1, min(4, records // _RECORDS_PER_WORKER))
        request = {"rollouts": str(self.run_dir / ROLLOUTS_FILE), "output_dir": str(self.run_dir), "workers": workers}
        out, err = self.helper.exchange(
            (json.dumps(request) + "\n").encode(), _TIMEOUT_S, f"Gym's health checks took more than {_TIMEOUT_S:g} s"
        )
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
        self.helper.close()
