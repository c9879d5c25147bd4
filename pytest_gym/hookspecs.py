"""The public hooks of pytest-gym.

Implement them in a ``conftest.py`` or a plugin. Every spec may grow new
arguments in later versions; pluggy lets an implementation accept fewer
arguments than the spec, so name only the ones you use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_gym.core.outcome import TrialOutcome
    from pytest_gym.exporters import Exporter, ExportRun


@pytest.hookspec(firstresult=True)
def pytest_gym_row(row: dict[str, Any], dataset: Path, line: int) -> dict[str, Any] | bool | None:
    """Rewrite or drop a dataset row before it becomes a task.

    Return a dict to send that row instead (its identity stays the hash of the
    original row, so baselines do not move), ``False`` to drop the row, or
    ``None`` to leave the decision to the next implementation. Changing ``row``
    in place also works.

    .. versionadded:: 0.1
    """


def pytest_gym_trial_result(trial: TrialOutcome, result: TrialOutcome) -> None:
    """Called once for each finished trial, with its outcome (reward or fault).

    ``trial`` and ``result`` are the same object today (``result`` is the name
    to prefer). Under xdist it is called on the controller, once per trial,
    from the data the workers reported.

    .. versionadded:: 0.1
    """


def pytest_gym_suite_result(suite: str, metrics: dict[str, Any]) -> None:
    """Called once per suite (dataset or suite file) with its aggregated metrics.

    .. versionadded:: 0.1
    """


def pytest_gym_export(run: ExportRun, config: pytest.Config) -> Any:
    """Export a finished run. Every implementation runs (not firstresult).

    ``run`` carries the run folder, its summary (suite metrics, gates, baseline), the
    masked settings, the artifact files and the exit status. Return an
    ``ExportResult`` or a list of ``(name, ExportResult)`` to have the outcome shown in
    the terminal summary; a ``failed`` result makes the run exit non-zero unless
    ``--gym-export-soft``. The built-in exporters (``--gym-export NAME``) run here too.

    .. versionadded:: 0.1
    """


def pytest_gym_exporters() -> list[type[Exporter]]:
    """Offer exporter classes (``pytest_gym.exporters.Exporter``) for ``--gym-export NAME``.

    Exporters can also be registered through the ``pytest_gym.exporters`` entry-point group.

    .. versionadded:: 0.1
    """
    return []
