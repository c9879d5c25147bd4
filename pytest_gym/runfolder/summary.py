"""The run's summary file: every suite's numbers, gates and baseline comparison (``judge.summary.RunSummary``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.masking import MAX_MESSAGE, clean_text, mask_data
from pytest_gym.judge.summary import RunSummary, SummaryError, parse_summary
from pytest_gym.runfolder.layout import SUMMARY_FILE

#: A summary is a few KB per suite; a file far larger than any run writes is not read.
MAX_SUMMARY_BYTES = 64 << 20


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
    run_dir: Path, summary: RunSummary | Mapping[str, Any], extra_target: str | None = None, **fields: Any
) -> dict[str, Any]:
    """``pytest_gym_summary.json`` in the run folder (and at ``extra_target``), written atomically, masked.

    ``summary``: the run's summary, or its suites as JSON (suite name -> ``SuiteSummary`` fields) with the run's
    other ``fields`` (notes, ...), checked as a summary read back is."""
    if not isinstance(summary, RunSummary):
        summary = parse_summary({"run_dir": str(run_dir), "suites": dict(summary), **fields})
    data: dict[str, Any] = _bounded(mask_data(summary.to_json()))
    targets = [run_dir / SUMMARY_FILE]
    if extra_target:
        targets.append(Path(extra_target))
    text = json.dumps(data, indent=2, default=str).encode("utf-8")
    for target in targets:
        write_atomically(target, text, fsync=False)
    return data


def read_summary(run_dir: Path) -> RunSummary | None:
    """The run folder's summary; None when it has none; ``SummaryError`` when it is not one pytest-gym wrote."""
    path = run_dir / SUMMARY_FILE
    try:
        if path.stat().st_size > MAX_SUMMARY_BYTES:
            raise SummaryError(f"{path}: larger than the {MAX_SUMMARY_BYTES} bytes pytest-gym reads")
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise SummaryError(f"{path}: not readable JSON ({type(exc).__name__})") from None
    try:
        return parse_summary(data, strict=True)
    except SummaryError as exc:
        raise SummaryError(f"{path}: {exc}") from None
