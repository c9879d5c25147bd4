"""What only the owner uses (judging, reports, exports, merges, starting Gym) is not imported with the plugin.

Every process imports ``pytest_gym.plugin`` and ``pytest_gym.session``: pytest's controller and each xdist
worker, which only runs trials. Checked in a fresh interpreter, as a worker starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers.paths import ROOT

#: Imported where the owner (or the process that starts Gym) uses them, never at start-up.
OWNER_ONLY = (
    "jinja2",
    "pytest_gym.exporters.api",
    "pytest_gym.exporters.github",
    "pytest_gym.exporters.mlflow",
    "pytest_gym.exporters.registry",
    "pytest_gym.exporters.summary",
    "pytest_gym.exporters.wandb",
    "pytest_gym.gym.kept",
    "pytest_gym.gym.preflight",
    "pytest_gym.gym.startargs",
    "pytest_gym.judge.baseline",
    "pytest_gym.judge.known",
    "pytest_gym.judge.paired",
    "pytest_gym.judge.stats",
    "pytest_gym.judge.suites",
    "pytest_gym.judge.summary",
    "pytest_gym.judge.verdict_word",
    "pytest_gym.process.groups",
    "pytest_gym.report.html",
    "pytest_gym.review",
    "pytest_gym.runfolder.diff",
    "pytest_gym.runfolder.merge",
    "pytest_gym.runfolder.summary",
    "pytest_gym.standins.launch",
    "pytest_gym.suitefile",
)

PROBE = "import json, sys; import pytest_gym.plugin, pytest_gym.session; print(json.dumps(sorted(sys.modules)))"


def test_importing_the_plugin_and_its_session_loads_nothing_only_the_owner_uses() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert "pytest_gym.session" in loaded
    assert sorted(loaded.intersection(OWNER_ONLY)) == []
