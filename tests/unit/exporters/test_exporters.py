"""Exporters: config validation, the built-ins (summary, github, mlflow end to end) and secret hygiene."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import Field

from pytest_gym.exporters import (
    ExportConfigError,
    Exporter,
    ExportResult,
    ExportRun,
    ExportSettings,
    available_exporters,
    configure_exporters,
    env_setting,
    run_exports,
)
from pytest_gym.exporters.github import GithubExporter, marker
from pytest_gym.exporters.mlflow import INSTALL_HINT, RUN_ID_TAG, MlflowExporter, metrics_of, mlflow_name, params_of
from pytest_gym.judge.summary import parse_summary

SECRET = "sekrit-marker-123"
RUN_ID = "20260101-120000-abc123"
SUITE = "evals/mcqa.jsonl"


class CustomSettings(ExportSettings):
    endpoint: str = Field(description="where results go")
    retries: int = 3
    token: str | None = env_setting("CUSTOM_EXPORT_TOKEN", "API token")


class CustomExporter(Exporter):
    name = "custom"
    Settings = CustomSettings
    calls: ClassVar[list[str]] = []

    def export(self, run: ExportRun) -> ExportResult:
        self.calls.append(run.run_id)
        return ExportResult("succeeded", "ok")


class RaisingExporter(Exporter):
    name = "raising"

    def export(self, run: ExportRun) -> ExportResult:
        raise RuntimeError(f"server said: bad key {SECRET}")


def _metrics() -> dict[str, Any]:
    return {
        "tasks": 5,
        "trials": 9,
        "errors": 1,
        "error_rate": 0.1,
        "mean_reward": 0.4,
        "ci_low": 0.1,
        "ci_high": 0.7,
        "min_reward": 1.0,
        "pass_at": {"1": 0.4, "2": 0.6},
        "pass_hat": {"1": 0.4, "2": 0.2},
        "gates": {
            "mean_reward>=0.3": {"value": 0.4, "passed": True, "reason": "0.400 >= 0.3"},
            "pass@2>=0.9": {"value": 0.6, "passed": False, "reason": "0.600 < 0.9"},
        },
        "baseline": {
            "mean_delta": -0.2,
            "ci_low": -0.5,
            "ci_high": 0.1,
            "p_drop": 0.125,
            "shared_tasks": 5,
            "new_failures": ["ab"],
            "fixed": [],
        },
        "flaky_rate": 0.2,
        "flaky_tasks": [{"hash": "0123456789ab", "line": 3, "successes": 1, "repeats": 2}],
        "totals": {
            "trials": 10,
            "trials_with_usage": 9,
            "input_tokens": 900,
            "output_tokens": 90,
            "total_tokens": 990,
            "latency_p50_s": 0.5,
            "latency_p90_s": 1.25,
            "latency_p99_s": 2.0,
            "latency_max_s": 2.0,
            "latency_sum_s": 6.5,
            "retries": 2,
            "cost": 0.0027,
        },
    }


@pytest.fixture
def run(tmp_path: Path) -> ExportRun:
    run_dir = tmp_path / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    summary = {"run_dir": str(run_dir), "suites": {SUITE: _metrics()}}
    (run_dir / "pytest_gym_summary.json").write_text(json.dumps(summary), encoding="utf-8")
    (run_dir / "rollouts.jsonl").write_text('{"reward": 1.0}\n{"reward": 0.0}\n', encoding="utf-8")
    (run_dir / "gym_env.log").write_text("gym started\n", encoding="utf-8")
    (run_dir / "sub").mkdir()
    (run_dir / "sub" / "notes.txt").write_text("nested\n", encoding="utf-8")
    settings = {"repeats": 2, "model": "policy-m", "gate": ["mean_reward>=0.3", "pass@2>=0.9"], "summary": None}
    return ExportRun.from_run_dir(run_dir, settings, exit_status=1)


def registry(*extra: type[Exporter]) -> dict[str, type[Exporter]]:
    return available_exporters(extra=(CustomExporter, RaisingExporter, *extra))


# --- configuration --------------------------------------------------------------------------------------------------


def test_every_config_problem_is_listed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUSTOM_EXPORT_TOKEN", raising=False)
    with pytest.raises(ExportConfigError) as info:
        configure_exporters(
            ["summary", "sumary", "custom"],
            [
                "summary.dri=out",  # unknown key (and summary.dir stays missing)
                "custom.retries=many",  # bad value (custom.endpoint stays missing)
                "custom.token=abcdef",  # a credential on the command line
                "custom.password=abcdef",  # looks like a credential, is no setting
                "mlflow.tracking_uri=sqlite:///x.db",  # exporter not selected
                "nope.key=1",  # unknown exporter
                "bogus",  # malformed
            ],
            registry(),
        )
    problems = info.value.problems
    text = str(info.value)
    assert isinstance(info.value, ValueError)
    assert len(problems) == 10, text
    assert "--gym-export sumary: unknown exporter (did you mean 'summary'?); available: " in text
    assert "available: custom, github, mlflow, raising, summary" in text
    assert "summary has no setting 'dri' (did you mean 'dir'?); summary settings: dir (required)" in text
    assert "summary.dir is required (folder the summary goes to, as <dir>/<run id>.json): add --gym-export-opt" in text
    assert "--gym-export-opt custom.retries=...: bad value 'many': Input should be a valid integer" in text
    assert "custom.endpoint is required (where results go): add --gym-export-opt custom.endpoint=VALUE" in text
    assert "custom.token holds a credential and is read only from $CUSTOM_EXPORT_TOKEN" in text
    assert "--gym-export-opt custom.password=...: credentials are never taken from the command line" in text
    assert "exporter 'mlflow' is not selected; add --gym-export mlflow or drop the option" in text
    assert "--gym-export-opt nope.key=...: unknown exporter 'nope'" in text
    assert "--gym-export-opt bogus: expected NAME.KEY=VALUE" in text
    assert "abcdef" not in text  # values of credential-looking keys are never echoed


def test_valid_config_builds_typed_exporters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CUSTOM_EXPORT_TOKEN", "tok-from-env")
    monkeypatch.chdir(tmp_path)
    exporters = configure_exporters(
        ["custom", "summary", "custom", "github"],
        ["custom.endpoint=http://x", "custom.retries=5", "summary.dir=out", "custom.retries=5"],
        registry(),
    )
    assert [e.name for e in exporters] == ["custom", "summary", "github"]
    custom, summary, _ = exporters
    assert custom.settings == CustomSettings(endpoint="http://x", retries=5, token="tok-from-env")
    assert summary.settings.dir == tmp_path / "out"  # type: ignore[attr-defined]  # resolved at startup


def test_config_env_credential_missing_and_conflicting_values(monkeypatch: pytest.MonkeyPatch) -> None:
    class Needy(Exporter):
        name = "needy"

        class Settings(ExportSettings):
            key: str = env_setting("NEEDY_KEY", "service key", default=...)

        def export(self, run: ExportRun) -> ExportResult:
            raise AssertionError

    monkeypatch.delenv("NEEDY_KEY", raising=False)
    with pytest.raises(ExportConfigError) as info:
        configure_exporters(["needy", "custom"], ["custom.endpoint=a", "custom.endpoint=b"], registry(Needy))
    assert info.value.problems == [
        "--gym-export-opt custom.endpoint=...: custom.endpoint is given twice with different values; keep one",
        "needy.key is required (service key (from $NEEDY_KEY, never the command line)): set $NEEDY_KEY",
    ]


def test_mlflow_settings_refuse_a_password_in_the_uri() -> None:
    with pytest.raises(ExportConfigError, match="MLFLOW_TRACKING_PASSWORD") as info:
        configure_exporters(["mlflow"], ["mlflow.tracking_uri=https://me:hunter22@mlflow.example/"], registry())
    assert "hunter22" not in str(info.value)


# --- registry ---------------------------------------------------------------------------------------------------


def _dist(site: Path, name: str, entry_points: str, module: str) -> None:
    (site / f"{name}.py").write_text(textwrap.dedent(module), encoding="utf-8")
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points), encoding="utf-8")


def test_entry_points_are_discovered_and_broken_ones_reported_only_when_selected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = """
        from pytest_gym.exporters import Exporter, ExportResult

        class Tracker(Exporter):
            name = "tracker"

            def export(self, run):
                return ExportResult("succeeded", "tracked " + run.run_id)

        class Misnamed(Tracker):
            name = "other"

        class Summary(Tracker):
            name = "summary"
    """
    entry_points = """
        [pytest_gym.exporters]
        tracker = gymext:Tracker
        misnamed = gymext:Misnamed
        missing = gymext_not_there:Nothing
        summary = gymext:Summary
    """
    _dist(tmp_path, "gymext", entry_points, module)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    found = available_exporters()
    assert {"tracker", "github", "mlflow"} <= set(found)
    assert set(found.broken) == {"misnamed", "missing", "summary"}
    assert "ModuleNotFoundError" in found.broken["missing"]
    assert (
        "defined twice, by pytest_gym.exporters.summary.SummaryExporter and gymext.Summary" in found.broken["summary"]
    )

    (_tracker,) = configure_exporters(["tracker"], [], found)  # broken ones do not matter when not selected
    with pytest.raises(ExportConfigError) as info:
        configure_exporters(["tracker", "missing", "misnamed"], ["missing.x=1"], found)
    assert len(info.value.problems) == 2
    assert "could not be loaded from entry point 'gymext_not_there:Nothing'" in str(info.value)
    assert "names a class whose name is 'other'; they must match" in str(info.value)


def test_extra_classes_from_a_conftest_hook_are_checked() -> None:
    class NoSettings:
        name = "nosettings"
        Settings = dict

        def export(self, run: ExportRun) -> ExportResult:
            raise AssertionError

    found = available_exporters(entry_point_group="pytest_gym.no_such_group", extra=[CustomExporter, NoSettings])  # type: ignore[list-item]
    assert set(found) == {"summary", "mlflow", "github", "wandb", "custom"}
    assert "Settings is not a pydantic model" in found.broken["nosettings"]


# --- running --------------------------------------------------------------------------------------------------------


def test_exceptions_become_failed_results_and_the_rest_still_run(
    run: ExportRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", SECRET)

    class Wrong(CustomExporter):
        name = "wrong"

        def export(self, run: ExportRun) -> ExportResult:
            return "done"  # type: ignore[return-value]

    custom = CustomExporter(CustomSettings(endpoint="x"))
    CustomExporter.calls.clear()
    results = run_exports([RaisingExporter(ExportSettings()), Wrong(CustomSettings(endpoint="x")), custom], run)
    assert [(name, r.status) for name, r in results] == [
        ("raising", "failed"),
        ("wrong", "failed"),
        ("custom", "succeeded"),
    ]
    assert results[0][1].message == "RuntimeError: server said: bad key ***"
    assert "returned str, not an ExportResult" in results[1][1].message
    assert CustomExporter.calls == [RUN_ID]


def test_run_from_run_dir(run: ExportRun) -> None:
    assert run.run_id == RUN_ID
    assert run.summary["suites"][SUITE]["tasks"] == 5
    assert [p.relative_to(run.run_dir).as_posix() for p in run.artifacts] == [
        "gym_env.log",
        "pytest_gym_summary.json",
        "rollouts.jsonl",
        "sub/notes.txt",
    ]


# --- summary ----------------------------------------------------------------------------------------------------


def test_summary_export_writes_once_atomically(run: ExportRun, tmp_path: Path) -> None:
    (exporter,) = configure_exporters(["summary"], [f"summary.dir={tmp_path / 'out'}"], registry())
    result = exporter.export(run)
    target = tmp_path / "out" / f"{RUN_ID}.json"
    assert (result.status, result.location) == ("succeeded", str(target))
    data = json.loads(target.read_text(encoding="utf-8"))
    assert data["run_id"] == RUN_ID
    assert data["exit_status"] == 1
    assert data["suites"][SUITE]["gates"]["pass@2>=0.9"]["passed"] is False
    assert data["settings"]["gate"] == ["mean_reward>=0.3", "pass@2>=0.9"]
    assert os.listdir(tmp_path / "out") == [f"{RUN_ID}.json"]

    before = target.read_bytes()
    again = exporter.export(run)
    assert again.status == "skipped"
    assert "already exists" in again.message
    assert target.read_bytes() == before


def test_summary_export_leaves_nothing_half_written(
    run: ExportRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (exporter,) = configure_exporters(["summary"], [f"summary.dir={tmp_path / 'out'}"], registry())

    def replace_fails(src: str, dst: str) -> None:
        assert Path(src).read_text(encoding="utf-8").endswith("}\n")  # the whole text is in the tmp file first
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", replace_fails)
    result = exporter.export(run)
    assert result.status == "failed"
    assert "No space left on device" in result.message
    assert os.listdir(tmp_path / "out") == []  # no target, no leftover tmp
    monkeypatch.undo()
    assert exporter.export(run).status == "succeeded"


def test_summary_export_reports_an_unwritable_folder(run: ExportRun, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (exporter,) = configure_exporters(["summary"], [f"summary.dir={tmp_path / 'file'}"], registry())
    result = exporter.export(run)
    assert result.status == "failed"
    assert "cannot write" in result.message


# --- github -----------------------------------------------------------------------------------------------------


def test_github_appends_a_table_once(run: ExportRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    step_summary = tmp_path / "step_summary.md"
    step_summary.write_text("## earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    (exporter,) = configure_exporters(["github"], [], registry())
    result = exporter.export(run)
    assert result.status == "succeeded", result.message
    text = step_summary.read_text(encoding="utf-8")
    assert text.startswith("## earlier step\n")
    assert marker(RUN_ID) in text
    assert f"### pytest-gym: run `{RUN_ID}` (❌ exit status 1)" in text
    assert "| suite | tasks | trials | errors | mean reward (95% CI) | pass@k | gates |" in text
    row = next(line for line in text.splitlines() if line.startswith(f"| {SUITE} "))
    assert row == (
        f"| {SUITE} | 5 | 10 | 1 | 0.400 (0.100..0.700) | pass@1 0.400, pass@2 0.600 "
        "| ✅ `mean_reward>=0.3` (0.400)<br>❌ `pass@2>=0.9` (0.600) |"
    )
    assert "mean reward delta -0.200 (one-sided p = 0.125) over 5 shared tasks, 1 new failure, 0 fixed" in text
    assert "| suite | tokens in / out / total | latency p50 / p90 / p99 / max (s) | retries | cost |" in text
    assert f"| {SUITE} | 900 / 90 / 990 | 0.500 / 1.250 / 2.000 / 2.000 | 2 | 0.0027 |" in text
    assert f"- `{SUITE}`: 1 flaky tasks (passed/trials): `0123456789ab` (line 3) 1/2" in text

    again = exporter.export(run)
    assert again.status == "skipped"
    assert step_summary.read_text(encoding="utf-8") == text


def test_github_says_what_a_stopped_run_paid_for_and_judged_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    unjudged = {"rollouts": 7, "tokens": 14, "cost": 0.0021}
    summary = {"run_dir": str(run_dir), "suites": {SUITE: _metrics()}, "unjudged": unjudged}
    (run_dir / "pytest_gym_summary.json").write_text(json.dumps(summary), encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "step_summary.md"))
    (exporter,) = configure_exporters(["github"], [], registry())
    run = ExportRun.from_run_dir(run_dir, {}, exit_status=1)
    assert run.unjudged is not None
    assert exporter.export(run).status == "succeeded"
    text = (tmp_path / "step_summary.md").read_text(encoding="utf-8")
    assert "- not judged: 7 rollouts finished for trials that did not run or count (14 tokens, $0.0021 spent" in text


def test_github_says_a_missing_baseline_failed_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not "mean reward delta n/a over 0 shared tasks, 0 new failures": no comparison was made."""
    run_dir = tmp_path / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    reason = "no baseline at /ci/base.json: create it with pytest --gym-update-baseline"
    metrics = {**_metrics(), "baseline": {"file": "/ci/base.json", "missing": True, "passed": False, "reason": reason}}
    summary = {"run_dir": str(run_dir), "suites": {SUITE: metrics}}
    (run_dir / "pytest_gym_summary.json").write_text(json.dumps(summary), encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "step_summary.md"))
    (exporter,) = configure_exporters(["github"], [], registry())
    assert exporter.export(ExportRun.from_run_dir(run_dir, {}, exit_status=1)).status == "succeeded"
    text = (tmp_path / "step_summary.md").read_text(encoding="utf-8")
    assert f"- `{SUITE}`: **baseline check failed**: {reason}" in text
    assert "shared tasks" not in text


def test_github_skips_outside_github_actions(run: ExportRun, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    result = GithubExporter(GithubExporter.Settings()).export(run)
    assert result.status == "skipped"
    assert "$GITHUB_STEP_SUMMARY is not set" in result.message


# --- mlflow -----------------------------------------------------------------------------------------------------


def test_mlflow_names_are_valid_for_mlflow() -> None:
    assert mlflow_name("evals/mcqa.jsonl/gate/pass@2>=0.9") == "evals/mcqa.jsonl/gate/pass_at_2_ge_0.9"
    assert mlflow_name("/abs//x/../ci_low(mean_reward)<0.5") == "abs/x/__/ci_low_mean_reward__lt_0.5"
    metrics = metrics_of(parse_summary({"suites": {SUITE: _metrics()}}).suites)
    assert metrics[f"{SUITE}/pass_at_2"] == 0.6
    assert metrics[f"{SUITE}/gate/pass_at_2_ge_0.9"] == 0.0
    assert metrics[f"{SUITE}/gate/mean_reward_ge_0.3"] == 1.0
    assert metrics[f"{SUITE}/flaky_rate"] == 0.2
    assert metrics[f"{SUITE}/flaky"] == 1
    assert metrics[f"{SUITE}/totals/input_tokens"] == 900
    assert metrics[f"{SUITE}/totals/latency_p99_s"] == 2.0
    assert metrics[f"{SUITE}/totals/retries"] == 2
    assert metrics[f"{SUITE}/totals/cost"] == 0.0027
    assert metrics[f"{SUITE}/baseline/p_drop"] == 0.125
    assert metrics[f"{SUITE}/baseline/fixed"] == 0
    assert params_of({"a": {"b": None, "c": [1, 2]}, "api_key": "sk-x1y2z3w4"}) == {
        "a.b": "null",
        "a.c": "[1, 2]",
        "api_key": "***",
    }


def test_mlflow_missing_is_a_failed_export_with_the_install_hint(
    run: ExportRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("mlflow", "mlflow.entities", "mlflow.tracking"):
        monkeypatch.setitem(sys.modules, module, None)
    exporter = MlflowExporter(MlflowExporter.Settings(tracking_uri="sqlite:///unused.db"))
    result = exporter.export(run)
    assert (result.status, result.message) == ("failed", INSTALL_HINT)
    assert "pip install pytest-gym[mlflow]" in INSTALL_HINT


@pytest.fixture
def mlflow_client_cls(monkeypatch: pytest.MonkeyPatch) -> Any:
    """MLflow's client class; without mlflow the test skips locally and fails in CI, where it must run."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "true")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("mlflow is not installed; CI must run the MLflow end-to-end test (pip install -e .[test])")
        pytest.skip("mlflow is not installed (pip install pytest-gym[mlflow])")
    return MlflowClient


@pytest.mark.runtime
def test_mlflow_end_to_end(run: ExportRun, tmp_path: Path, mlflow_client_cls: Any) -> None:
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    (exporter,) = configure_exporters(
        ["mlflow"], [f"mlflow.tracking_uri={uri}", "mlflow.experiment=evals", "mlflow.run_name=nightly"], registry()
    )
    [(name, result)] = run_exports([exporter], run)
    assert (name, result.status) == ("mlflow", "succeeded"), result.message
    assert "logged 4 params" in result.message

    client = mlflow_client_cls(tracking_uri=uri)
    experiment = client.get_experiment_by_name("evals")
    assert experiment.artifact_location == (tmp_path / "store" / "mlartifacts").as_uri()  # not the current folder
    [logged] = client.search_runs([experiment.experiment_id])
    assert result.location == f"runs:/{logged.info.run_id}"
    assert logged.info.status == "FINISHED"
    assert logged.info.run_name == "nightly"
    assert logged.data.tags[RUN_ID_TAG] == RUN_ID
    assert logged.data.tags["pytest_gym.exit_status"] == "1"
    assert logged.data.params == {
        "repeats": "2",
        "model": "policy-m",
        "gate": '["mean_reward>=0.3", "pass@2>=0.9"]',
        "summary": "null",
    }
    m = logged.data.metrics
    assert m[f"{SUITE}/mean_reward"] == 0.4
    assert (m[f"{SUITE}/ci_low"], m[f"{SUITE}/ci_high"]) == (0.1, 0.7)
    assert (m[f"{SUITE}/pass_at_1"], m[f"{SUITE}/pass_at_2"]) == (0.4, 0.6)
    assert m[f"{SUITE}/error_rate"] == 0.1
    assert m[f"{SUITE}/trials"] == 10
    assert m[f"{SUITE}/gate/mean_reward_ge_0.3"] == 1.0
    assert m[f"{SUITE}/gate/pass_at_2_ge_0.9"] == 0.0
    assert m[f"{SUITE}/baseline/mean_delta"] == -0.2
    run_id = logged.info.run_id
    top = {a.path for a in client.list_artifacts(run_id)}
    assert top == {"gym_env.log", "pytest_gym_summary.json", "rollouts.jsonl", "sub"}
    assert [a.path for a in client.list_artifacts(run_id, "sub")] == ["sub/notes.txt"]
    local = Path(client.download_artifacts(run_id, "rollouts.jsonl", str(tmp_path / "dl")))
    assert local.read_bytes() == (run.run_dir / "rollouts.jsonl").read_bytes()

    again = exporter.export(run)
    assert again.status == "skipped"
    assert again.location == f"runs:/{run_id}"
    assert len(client.search_runs([experiment.experiment_id])) == 1


@pytest.mark.runtime  # drives MLflow (a third party; not installed on the oldest setup)
def test_mlflow_half_done_export_is_redone(
    run: ExportRun, tmp_path: Path, mlflow_client_cls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exporter = MlflowExporter(MlflowExporter.Settings(tracking_uri=uri))

    def upload_fails(self: Any, *args: Any, **kwargs: Any) -> None:
        raise ConnectionError("artifact store went away")

    monkeypatch.setattr(mlflow_client_cls, "log_artifact", upload_fails)
    first = exporter.export(run)
    assert first.status == "failed"
    assert "ConnectionError: artifact store went away" in first.message
    monkeypatch.undo()
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    assert exporter.export(run).status == "succeeded"  # the FAILED run does not count as exported
    client = mlflow_client_cls(tracking_uri=uri)
    experiment_id = client.get_experiment_by_name("pytest-gym").experiment_id
    statuses = sorted(r.info.status for r in client.search_runs([experiment_id]))
    assert statuses == ["FAILED", "FINISHED"]


# --- secrets ----------------------------------------------------------------------------------------------------


@pytest.mark.runtime  # drives MLflow (a third party; not installed on the oldest setup)
def test_no_secret_reaches_any_export(run: ExportRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key that slipped into the settings or a run-folder file is masked in everything exported."""
    monkeypatch.setenv("GYM_POLICY_API_KEY", SECRET)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    (run.run_dir / "gym_env.log").write_text(f"request with Authorization: Bearer {SECRET}\n", encoding="utf-8")
    leaky = ExportRun(
        run_id=run.run_id,
        run_dir=run.run_dir,
        summary={**run.summary, "note": f"policy key {SECRET}"},
        settings={
            "model_url": f"http://policy/v1?key={SECRET}",
            "extra": {"headers": [f"X-Key: {SECRET}"], "policy_api_key": SECRET},
            "note": SECRET,
            "store": "https://ci:url-pass-4567@store.example/db",
        },
        artifacts=run.artifacts,
        exit_status=run.exit_status,
    )
    step_summary = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    names = ["summary", "github"]
    options = [f"summary.dir={tmp_path / 'out'}"]
    try:
        import mlflow  # noqa: F401

        names.append("mlflow")
        options.append(f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}")
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("mlflow is not installed; CI must check it too")
    results = run_exports(configure_exporters(names, options, registry()), leaky)
    assert [r.status for _, r in results] == ["succeeded"] * len(names), results

    written = [p for p in tmp_path.rglob("*") if p.is_file() and run.run_dir not in p.parents]
    assert tmp_path / "out" / f"{RUN_ID}.json" in written
    assert step_summary in written
    for path in written:
        if path.suffix != ".db":
            assert SECRET.encode() not in path.read_bytes(), path
            assert b"url-pass-4567" not in path.read_bytes(), path
    exported = json.loads((tmp_path / "out" / f"{RUN_ID}.json").read_text(encoding="utf-8"))
    assert exported["settings"]["extra"]["policy_api_key"] == "***"
    assert exported["summary"]["note"] == "policy key ***"
    assert exported["settings"]["store"] == "https://ci:***@store.example/db"
    if "mlflow" in names:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
        [logged] = client.search_runs([client.get_experiment_by_name("pytest-gym").experiment_id])
        assert logged.data.params["note"] == "***"
        assert logged.data.params["store"] == "https://ci:***@store.example/db"
        assert all(SECRET not in v for v in [*logged.data.params.values(), *logged.data.tags.values()])
        log = Path(client.download_artifacts(logged.info.run_id, "gym_env.log", str(tmp_path / "dl")))
        assert log.read_text(encoding="utf-8") == "request with Authorization: Bearer ***\n"
        assert (run.run_dir / "gym_env.log").read_text(encoding="utf-8").endswith(f"{SECRET}\n")  # source untouched


def _outside_code_spans(line: str) -> str:
    """The text of a Markdown line outside its code spans (a run of n backticks up to the next run of n)."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\":  # an escaped character, a backtick included
            out.append(line[i : i + 2])
            i += 2
            continue
        if line[i] != "`":
            out.append(line[i])
            i += 1
            continue
        n = len(line[i:]) - len(line[i:].lstrip("`"))
        close = re.compile(rf"(?<!`)`{{{n}}}(?!`)").search(line, i + n)
        if close is None:
            out.append(line[i : i + n])
            i += n
        else:
            i = close.end()
    return "".join(out)


def test_github_summary_writes_names_as_text_not_markup(
    run: ExportRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset (or suite file) from a pull request names its suite: no image, no hidden rest, no broken code span."""
    hostile = {
        '<img src="https://tracker.example/p.png">.jsonl': _metrics(),
        "<!-- the rest is hidden.jsonl": _metrics(),
        "a`b``c|d.jsonl": _metrics(),
        "**bold** [link](https://x.example)\n# heading.jsonl": _metrics(),
    }
    run.summary["suites"] = hostile
    run = dataclasses.replace(run, run_id="x--><img src=y>")
    step_summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    (exporter,) = configure_exporters(["github"], [], registry())
    assert exporter.export(run).status == "succeeded"
    text = step_summary.read_text(encoding="utf-8")
    assert "### pytest-gym: run `x--><img src=y>` (" in text  # in a code span: shown, not rendered
    outside_code = "".join(_outside_code_spans(line) for line in text.splitlines()[1:]).replace("<br>", "")
    assert re.findall(r"(?<!\\)[<>]", outside_code) == []  # every other < and > is escaped text
    assert "| \\<\\!-- the rest is hidden.jsonl |" in text
    assert "- ```a`b``c|d.jsonl```: 1 flaky tasks" in text
    assert "\\*\\*bold\\*\\* \\[link\\](https://x.example) \\# heading.jsonl" in text
    assert all(line.count(" | ") >= 1 for line in text.splitlines() if line.startswith("| "))
    for line in text.splitlines():
        if line.startswith("| ") and "tasks" not in line and "tokens in" not in line:
            assert len(re.findall(r"(?<!\\)\|", line)) in (8, 6), line  # no name adds a cell
