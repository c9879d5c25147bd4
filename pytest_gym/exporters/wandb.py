"""``wandb``: one Weights & Biases run per pytest-gym run: suite scalars, a per-task table, the gates, and the run
folder as an artifact.

wandb is an optional extra (``pip install pytest-gym[wandb]``), imported only when an export runs. Offline mode
needs no server: the run directory wandb writes (``<dir>/wandb/offline-run-*``) is the export, to upload later
with ``wandb sync``. Online mode needs ``WANDB_API_KEY`` in the environment (wandb reads it itself; it is never
taken from the command line); ``mode=auto`` (the default) is online exactly when it is set. Everything written
is masked: the settings, every text, and the run folder's files (a masked copy where one holds a secret).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from pytest_gym.core.numbers import is_finite_number
from pytest_gym.exporters.api import (
    Exporter,
    ExportResult,
    ExportRun,
    ExportSettings,
    env_setting,
    mask_data,
    mask_text,
    masked_artifact,
    plugin_version,
)
from pytest_gym.exporters.mlflow import metrics_of
from pytest_gym.runfolder.layout import FAILURES_FILE, ROLLOUTS_FILE
from pytest_gym.runfolder.records import RecordError, read_records, stamps

INSTALL_HINT = "wandb is not installed: pip install pytest-gym[wandb]"
API_KEY_ENV = "WANDB_API_KEY"
TASK_COLUMNS: list[str | int] = [
    "suite",
    "task",
    "trials",
    "rewarded",
    "errors",
    "mean_reward",
    "passed",
    "latency_mean_s",
]
GATE_COLUMNS: list[str | int] = ["suite", "gate", "passed", "value", "reason"]
_RUN_ID = re.compile(r"[^A-Za-z0-9_-]")


class WandbSettings(ExportSettings):
    project: str = Field("pytest-gym", description="W&B project the run goes to")
    entity: str | None = Field(None, description="W&B entity (team or user); default: the API key's")
    mode: Literal["auto", "online", "offline"] = Field(
        "auto",
        description=f"'online' (needs ${API_KEY_ENV}), 'offline' (no server), 'auto': online when the key is set",
    )
    dir: str | None = Field(None, description="folder wandb writes its run directory into (default: the current one)")
    run_name: str | None = Field(None, description="W&B run name (default: the pytest-gym run id)")
    api_key: str | None = env_setting(API_KEY_ENV, "W&B API key for online mode")


def wandb_run_id(run_id: str) -> str:
    """The W&B run id of a pytest-gym run: its id in W&B's characters, so a second export finds the first."""
    return (_RUN_ID.sub("-", run_id).strip("-") or "pytest-gym")[:64]


def _tasks(run: ExportRun) -> list[list[Any]]:
    """One row per task of the run folder: suite, hash, trials, rewarded, errored, mean reward, passed, latency."""
    reward_key = str(run.settings.get("reward_key") or "reward")
    min_rewards = {name: suite.min_reward for name, suite in run.suites.items()}
    rows: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"rewards": [], "errors": 0, "latency": []})
    for name, ok in ((ROLLOUTS_FILE, True), (FAILURES_FILE, False)):
        try:
            records = read_records(run.run_dir / name)
        except (RecordError, OSError):
            continue
        for record in records:
            found = stamps(record)
            if found.task_hash is None:
                continue
            row = rows[(found.suite or found.agent or "rollouts", found.task_hash)]
            reward = record.get(reward_key)
            if ok and is_finite_number(reward):
                row["rewards"].append(float(reward))
            else:
                row["errors"] += 1
            if found.latency_s is not None:
                row["latency"].append(found.latency_s)
    table = []
    for (suite, task), row in sorted(rows.items()):
        rewards, latency = row["rewards"], row["latency"]
        mean = sum(rewards) / len(rewards) if rewards else None
        passed = sum(r >= min_rewards.get(suite, 1.0) for r in rewards)
        table.append(
            [
                mask_text(suite),
                task[:12],
                len(rewards) + row["errors"],
                len(rewards),
                row["errors"],
                mean,
                passed,
                round(sum(latency) / len(latency), 4) if latency else None,
            ]
        )
    return table


def _gates(run: ExportRun) -> list[list[Any]]:
    return [
        [mask_text(suite), label, gate.passed, gate.value, mask_text(gate.reason)]
        for suite, summary in run.suites.items()
        for label, gate in summary.gates.items()
    ]


def _files(run: ExportRun) -> Iterator[tuple[Path, str]]:
    """(file, its name in the artifact): a file keeps its place relative to the run folder."""
    for path in run.artifacts:
        for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
            try:
                name = file.relative_to(run.run_dir).as_posix()
            except ValueError:
                name = file.name
            yield file, name


class WandbExporter(Exporter):
    """One W&B run per pytest-gym run, with the id ``wandb_run_id(run id)``: a second export finds the first
    (offline: its run directory; online: the finished run) and is skipped."""

    name = "wandb"
    Settings = WandbSettings
    settings: WandbSettings

    def export(self, run: ExportRun) -> ExportResult:
        try:
            import wandb
        except ImportError:
            return ExportResult("failed", INSTALL_HINT)
        s = self.settings
        mode = s.mode if s.mode != "auto" else ("online" if os.environ.get(API_KEY_ENV) else "offline")
        if mode == "online" and not os.environ.get(API_KEY_ENV):
            return ExportResult(
                "failed", f"wandb.mode=online needs ${API_KEY_ENV} in the environment (or mode=offline)"
            )
        folder = Path(s.dir) if s.dir else Path.cwd()
        run_id = wandb_run_id(run.run_id)
        done = self._exported(folder, run_id, mode)
        if done is not None:
            return ExportResult("skipped", f"run {run.run_id} is already W&B run {run_id} ({done})", done)
        folder.mkdir(parents=True, exist_ok=True)
        metrics = metrics_of(run.suites)
        settings = wandb.Settings(
            mode=mode, console="off", silent=True, x_disable_stats=True, x_disable_meta=True, save_code=False,
            disable_git=True, x_save_requirements=False,
        )  # fmt: skip
        config = mask_data({**run.settings, "pytest_gym_version": plugin_version(), "exit_status": run.exit_status})
        try:
            with tempfile.TemporaryDirectory(prefix="pytest-gym-wandb-") as staging:
                wb = wandb.init(
                    project=s.project, entity=s.entity, name=s.run_name or run.run_id, id=run_id, dir=str(folder),
                    config=config, tags=["pytest-gym"], settings=settings, reinit="create_new",
                )  # fmt: skip
                try:
                    tasks = _tasks(run)
                    wb.log({**metrics, "tasks": wandb.Table(columns=TASK_COLUMNS, data=tasks)})
                    wb.log({"gates": wandb.Table(columns=GATE_COLUMNS, data=_gates(run))})
                    wb.summary.update(metrics)
                    artifact = wandb.Artifact(f"run-folder-{run_id}", type="pytest-gym-run")
                    uploaded = 0
                    for file, name in _files(run):
                        artifact.add_file(str(masked_artifact(file, Path(staging))), name=name)
                        uploaded += 1
                    wb.log_artifact(artifact)
                    where = str(getattr(wb, "url", None) or "") if mode == "online" else str(Path(wb.dir).parent)
                finally:
                    wb.finish(exit_code=0 if run.exit_status == 0 else 1)
        except Exception as exc:
            return ExportResult("failed", f"W&B ({mode}) failed: {type(exc).__name__}: {exc}")
        finally:
            with contextlib.suppress(Exception):
                wandb.teardown()  # stop wandb's service process: nothing the run starts outlives it
        return ExportResult(
            "succeeded",
            f"logged {len(metrics)} suite scalars, {len(tasks)} tasks, the gates and {uploaded} files as W&B run "
            f"{run_id} ({mode}: {where})",
            where or None,
        )

    def _exported(self, folder: Path, run_id: str, mode: str) -> str | None:
        """Where this run was exported before, or None."""
        if mode == "offline":
            found = sorted((folder / "wandb").glob(f"offline-run-*-{run_id}"))
            return str(found[-1]) if found else None
        try:
            import wandb

            api = wandb.Api()
            entity = self.settings.entity or api.default_entity
            existing = api.run(f"{entity}/{self.settings.project}/{run_id}")
            return str(existing.url) if existing.state == "finished" else None
        except Exception:
            return None  # no such run (or the check failed: exporting again is harmless)
