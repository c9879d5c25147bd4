"""The run's state in ``config.stash``: one key per piece, shared by the modules that need it."""

from __future__ import annotations

import pytest

from pytest_gym.exporters import ExportResult
from pytest_gym.gymrun import GymRun
from pytest_gym.trial import TrialContext
from pytest_gym.verdicts import RunResults, SuiteVerdict

RUN_KEY = pytest.StashKey[GymRun]()
TRIALS_KEY = pytest.StashKey[TrialContext]()
RESULTS_KEY = pytest.StashKey[RunResults]()
VERDICTS_KEY = pytest.StashKey[list[SuiteVerdict]]()
EXPORTS_KEY = pytest.StashKey[list[tuple[str, ExportResult]]]()
#: workerinput key carrying the run folder to xdist workers.
WORKER_RUN_DIR = "pytest_gym_run_dir"
