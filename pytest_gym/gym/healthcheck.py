"""Gym's own rollout health checks on a run folder, run in Gym's interpreter (the plugin never imports Gym).

``gym eval run`` health-checks its rollouts by default (``nemo_gym/rollout_health.py``: hollow turns, failed
model calls, zero completion tokens, capture mismatches, unobserved evidence); ``gym eval health-check
RUN_DIR`` does it on a folder. pytest-gym runs the same function, ``run_health_checks``, on the run folder's
``rollouts.jsonl`` at the end of the run, with the ``python`` beside the ``gym`` CLI, in the run's helper
process (``gym.helperproc``: after the trajectory step, in the same process), started early (its imports
overlap the trials). Gym writes its reports into the folder (``quality_summary.json``,
``rollout_verdicts.jsonl``); ``runfolder.health`` reads them back.
"""

from __future__ import annotations

import json
from pathlib import Path

from pytest_gym.gym.helperproc import GymHelper
from pytest_gym.runfolder.layout import ROLLOUTS_FILE

_TIMEOUT_S = 600.0
#: Records per worker process Gym's checks may use (one process below this: no pool to start).
_RECORDS_PER_WORKER = 5000


class HealthCheck:
    """Gym's health checks on a run folder, once, by the run's helper process in Gym's interpreter."""

    def __init__(self, helper: GymHelper, run_dir: Path) -> None:
        self.helper = helper
        self.run_dir = run_dir

    def run(self, records: int) -> dict[str, int]:
        """Check the folder's rollouts (Gym writes its reports there); Gym's verdict counts, or RuntimeError."""
        workers = max(1, min(4, records // _RECORDS_PER_WORKER))
        request = {"rollouts": str(self.run_dir / ROLLOUTS_FILE), "output_dir": str(self.run_dir), "workers": workers}
        answers = self.helper.request(
            (json.dumps({"health": request}) + "\n").encode(),
            1,
            _TIMEOUT_S,
            f"Gym's health checks took more than {_TIMEOUT_S:g} s",
        )
        try:
            verdicts = json.loads(answers[-1])["verdicts"]
            return {str(k): int(v) for k, v in verdicts.items()}
        except (IndexError, ValueError, KeyError, TypeError, AttributeError):
            raise RuntimeError(
                f"Gym's health checks ({self.helper.python}) gave no verdicts: {self.helper.errors() or 'no output'}"
            ) from None
