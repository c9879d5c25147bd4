"""The run's summary file: every suite's numbers, gates and baseline comparison, as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.masking import MAX_MESSAGE, clean_text, mask_data
from pytest_gym.runfolder.layout import SUMMARY_FILE


def _bounded(data: Any) -> Any:
    """Strings (notes, gate reasons: partly Gym's text) cleaned and bounded; the rest as it is."""
    if isinstance(data, str):
        return clean_text(data, MAX_MESSAGE)
    if isinstance(data, Mapping):
        return {key: _bounded(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_bounded(item) for item in data]
    return data


def write_summary(
    run_dir: Path, suites: Mapping[str, Any], extra_target: str | None = None, **fields: Any
) -> dict[str, Any]:
    """``pytest_gym_summary.json`` in the run folder (and at ``extra_target``), written atomically, masked."""
    data: dict[str, Any] = _bounded(mask_data({"run_dir": str(run_dir), "suites": dict(suites), **fields}))
    targets = [run_dir / SUMMARY_FILE]
    if extra_target:
        targets.append(Path(extra_target))
    text = json.dumps(data, indent=2, default=str).encode("utf-8")
    for target in targets:
        write_atomically(target, text, fsync=False)
    return data
