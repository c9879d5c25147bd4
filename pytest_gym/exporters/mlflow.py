"""``mlflow``: params, suite metrics and run-folder artifacts as one MLflow run per pytest-gym run.

mlflow is an optional extra (``pip install pytest-gym[mlflow]``), imported only
when an export runs. Credentials for a remote server come only from MLflow's own
environment variables (``MLFLOW_TRACKING_TOKEN``, ``MLFLOW_TRACKING_USERNAME``/
``MLFLOW_TRACKING_PASSWORD``), which MLflow reads itself; a tracking URI holding
a password is refused.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from pytest_gym.exporters.api import (
    Exporter,
    ExportResult,
    ExportRun,
    ExportSettings,
    mask_data,
    mask_text,
    masked_artifact,
    plugin_version,
)
from pytest_gym.judge.summary import SuiteSummary

RUN_ID_TAG = "pytest_gym.run_id"
INSTALL_HINT = "mlflow is not installed: pip install pytest-gym[mlflow]"
_BAD_NAME_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")
#: Suite totals logged as ``<suite>/totals/<key>`` (those present: tokens need usage, cost needs a price).
_TOTALS = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "latency_p50_s",
    "latency_p90_s",
    "latency_p99_s",
    "latency_max_s",
    "retries",
    "cost",
)
_GATE_OPS = ((">=", "_ge_"), ("<=", "_le_"), (">", "_gt_"), ("<", "_lt_"), ("@", "_at_"), ("^", "_hat_"))


class MlflowSettings(ExportSettings):
    tracking_uri: str = Field(description="MLflow tracking store, e.g. sqlite:///path/mlflow.db or http://host:5000")
    experiment: str = Field("pytest-gym", description="experiment the run goes to (created when missing)")
    run_name: str | None = Field(None, description="MLflow run name (default: the pytest-gym run id)")
    artifact_location: str | None = Field(
        None,
        description="artifact root for a newly created experiment (default for sqlite: mlartifacts/ beside the "
        "database, not the current folder)",
    )

    @field_validator("tracking_uri")
    @classmethod
    def _no_password(cls, value: str) -> str:
        """A password in the URI would be logged everywhere the URI is; MLflow reads it from the environment."""
        if urlsplit(value).password:
            raise ValueError(
                "the URI holds a password: drop it and set MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD "
                "(or MLFLOW_TRACKING_TOKEN) in the environment"
            )
        return value


def mlflow_name(name: str) -> str:
    """A metric/param name MLflow accepts: its characters only, no empty, ``.`` or ``..`` path parts."""
    for op, word in _GATE_OPS:
        name = name.replace(op, word)
    parts = [p for p in _BAD_NAME_CHARS.sub("_", name).split("/") if p not in ("", ".")]
    return "/".join("__" if p == ".." else p for p in parts) or "_"


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def params_of(settings: Mapping[str, Any], max_length: int = 6000) -> dict[str, str]:
    """Run settings as MLflow params (nested keys joined with dots), masked, values cut to MLflow's limit."""
    out: dict[str, str] = {}
    for key, value in _flatten(mask_data(dict(settings))):
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out[mlflow_name(key)] = mask_text(text)[:max_length]
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def metrics_of(suites: Mapping[str, SuiteSummary]) -> dict[str, float]:
    """Suite metrics as ``<suite>/<metric>``: pass@k becomes ``pass_at_k`` and each gate 1 (passed) or 0;
    totals as ``<suite>/totals/<key>``, the baseline comparison as ``<suite>/baseline/<key>``."""
    out: dict[str, float] = {}

    def put(suite: str, key: str, value: Any) -> None:
        number = _number(value)
        if number is not None:
            out[mlflow_name(f"{suite}/{key}")] = number

    for suite, m in suites.items():
        for key in ("mean_reward", "ci_low", "ci_high", "error_rate", "tasks", "errors"):
            put(suite, key, getattr(m, key))
        put(suite, "trials", m.all_trials)  # like the terminal summary
        for k, value in m.pass_at.items():
            put(suite, f"pass_at_{k}", value)
        for k, value in m.pass_hat.items():
            put(suite, f"pass_hat_{k}", value)
        for label, gate in m.gates.items():
            put(suite, f"gate/{label}", gate.passed)
            put(suite, f"gate/{label}/value", gate.value)
        put(suite, "flaky_rate", m.flaky_rate)
        put(suite, "flaky", len(m.flaky_tasks))
        put(suite, "health_clean_rate", m.health_clean_rate)
        put(suite, "unhealthy_trials", m.unhealthy_trials)
        if m.totals is not None:
            for key in _TOTALS:
                put(suite, f"totals/{key}", getattr(m.totals, key))
        for name, figure in m.efficiency.items():
            put(suite, f"efficiency/{name}", figure)
        for kind, count in m.skipped.items():
            put(suite, f"skipped/{kind}", count)
        if m.skipped:
            put(suite, "trials_saved", m.trials_saved)
        if m.budget is not None:
            put(suite, "budget/cost", m.budget.cost)
            put(suite, "budget/tokens", m.budget.tokens)
        if m.sequential is not None:
            put(suite, "sequential/decided_at", m.sequential.decided_at)
            put(suite, "sequential/tasks", m.sequential.tasks)
        if m.baseline is not None:
            put(suite, "baseline/mean_delta", m.baseline.mean_delta)
            put(suite, "baseline/p_drop", m.baseline.p_drop)
            put(suite, "baseline/regressed", m.baseline.regressed)
            put(suite, "baseline/new_failures", len(m.baseline.new_failures))
            put(suite, "baseline/fixed", len(m.baseline.fixed))
    return out


def _filter_value(value: str) -> str | None:
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    return None


def _artifact_files(run: ExportRun) -> Iterator[tuple[Path, str | None]]:
    """(file, artifact folder) pairs; a file keeps its place relative to the run folder."""
    for path in run.artifacts:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            try:
                folder = file.parent.relative_to(run.run_dir).as_posix()
            except ValueError:
                folder = "."
            yield file, None if folder == "." else folder


class MlflowExporter(Exporter):
    """One MLflow run per pytest-gym run, tagged ``pytest_gym.run_id``: a finished run with that tag means
    the export already happened, so a second export is skipped; a half-done one is marked FAILED and redone."""

    name = "mlflow"
    Settings = MlflowSettings
    settings: MlflowSettings

    def export(self, run: ExportRun) -> ExportResult:
        try:
            from mlflow.entities import Metric, Param, RunTag
            from mlflow.tracking import MlflowClient
        except ImportError:
            return ExportResult("failed", INSTALL_HINT)
        import mlflow.utils.validation as validation

        max_param = int(getattr(validation, "MAX_PARAM_VAL_LENGTH", 500))
        s = self.settings
        where = f"{mask_text(s.tracking_uri)} (experiment {s.experiment!r})"
        try:
            client = MlflowClient(tracking_uri=s.tracking_uri)
            experiment_id = self._experiment(client)
            done = self._finished_run(client, experiment_id, run.run_id)
        except _Refused as exc:
            return ExportResult("failed", str(exc), where)
        except Exception as exc:
            return ExportResult("failed", f"cannot use MLflow at {where}: {type(exc).__name__}: {exc}", where)
        if done is not None:
            return ExportResult("skipped", f"run {run.run_id} is already MLflow run {done} in {where}", f"runs:/{done}")

        tags = {
            RUN_ID_TAG: run.run_id,
            "pytest_gym.exit_status": str(run.exit_status),
            "pytest_gym.version": plugin_version(),
        }
        mlflow_run = client.create_run(experiment_id, run_name=s.run_name or run.run_id, tags=tags)
        run_id = mlflow_run.info.run_id
        try:
            now = int(time.time() * 1000)
            params = [Param(k, v) for k, v in params_of(run.settings, max_param).items()]
            metrics = [Metric(k, v, now, 0) for k, v in metrics_of(run.suites).items()]
            for i in range(0, len(params), 100):
                client.log_batch(run_id, params=params[i : i + 100])
            for i in range(0, len(metrics), 1000):
                client.log_batch(run_id, metrics=metrics[i : i + 1000])
            client.log_batch(run_id, tags=[RunTag("pytest_gym.run_dir", mask_text(str(run.run_dir)))])
            uploaded = 0
            with tempfile.TemporaryDirectory(prefix="pytest-gym-mlflow-") as staging:
                for file, folder in _artifact_files(run):
                    client.log_artifact(run_id, str(masked_artifact(file, Path(staging))), folder)
                    uploaded += 1
            client.set_terminated(run_id, "FINISHED")
        except Exception as exc:
            with contextlib.suppress(Exception):
                client.set_terminated(run_id, "FAILED")  # so the next export redoes it instead of skipping
            return ExportResult(
                "failed", f"logging to MLflow run {run_id} in {where} failed: {type(exc).__name__}: {exc}", where
            )
        return ExportResult(
            "succeeded",
            f"logged {len(params)} params, {len(metrics)} metrics and {uploaded} artifacts "
            f"as MLflow run {run_id} in {where}",
            f"runs:/{run_id}",
        )

    def _experiment(self, client: Any) -> str:
        s = self.settings
        experiment = client.get_experiment_by_name(s.experiment)
        if experiment is None:
            try:
                return str(client.create_experiment(s.experiment, artifact_location=self._artifact_location()))
            except Exception:
                experiment = client.get_experiment_by_name(s.experiment)  # created meanwhile by another process
                if experiment is None:
                    raise
        if experiment.lifecycle_stage == "deleted":
            raise _Refused(
                f"MLflow experiment {s.experiment!r} is deleted: restore it (mlflow experiments restore) "
                "or choose another with --gym-export-opt mlflow.experiment=NAME"
            )
        return str(experiment.experiment_id)

    def _artifact_location(self) -> str | None:
        """MLflow's default for a sqlite store is ./mlruns in the current folder; keep artifacts beside the database."""
        if self.settings.artifact_location:
            return self.settings.artifact_location
        uri = self.settings.tracking_uri
        if uri.startswith("sqlite:///") and not uri.startswith("sqlite:///:memory:"):
            return (Path(uri[len("sqlite:///") :]).absolute().parent / "mlartifacts").as_uri()
        return None

    @staticmethod
    def _finished_run(client: Any, experiment_id: str, run_id: str) -> str | None:
        quoted = _filter_value(run_id)
        if quoted is not None:
            query = f"tags.`{RUN_ID_TAG}` = {quoted} and attributes.status = 'FINISHED'"
            found = client.search_runs([experiment_id], query, max_results=1)
            return str(found[0].info.run_id) if found else None
        token = None
        while True:  # a run id no filter can quote: compare tags here
            page = client.search_runs([experiment_id], "attributes.status = 'FINISHED'", page_token=token)
            for r in page:
                if r.data.tags.get(RUN_ID_TAG) == run_id:
                    return str(r.info.run_id)
            token = page.token
            if not token:
                return None


class _Refused(Exception):
    """A store state the user must fix (reported as a failed export, not raised)."""
