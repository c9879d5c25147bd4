"""``--gym-config`` follows Gym's path convention, and a failed start quotes the cause from Gym's log.

Gym resolves a relative config under ``$NEMO_GYM_EXTRA_ROOTS`` (``--search-dir``), its working folder and
its install root; it runs in the run folder, so only a path found in the invocation folder (the rootdir for
ini values) is made absolute, and any other stays as written for Gym to find.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_gym.core.settings import gym_config_path
from pytest_gym.process.groups import first_error
from tests.helpers.fake_gym_cli import install, recorded_argv, start_args

LC = "resources_servers/equivalence_rule/configs/lc.yaml"
MODEL = "responses_api_models/openai_model/configs/openai_model.yaml"


def test_a_path_found_nowhere_here_stays_as_written_for_gym(tmp_path: Path) -> None:
    assert gym_config_path(LC, tmp_path) == LC


def test_a_path_found_in_the_base_folder_becomes_absolute(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.yaml").write_text("{}\n")
    assert gym_config_path("configs/mine.yaml", tmp_path) == str(tmp_path / "configs" / "mine.yaml")
    assert gym_config_path(str(tmp_path / "configs" / ".." / "configs" / "mine.yaml"), Path("/")) == str(
        tmp_path / "configs" / "mine.yaml"
    )


def test_a_path_under_an_extra_root_stays_as_written_even_if_also_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Gym looks in the extra roots first: the same path in the invocation folder would shadow it.
    for root in ("extra", "here"):
        (tmp_path / root / "configs").mkdir(parents=True)
        (tmp_path / root / "configs" / "x.yaml").write_text("{}\n")
    monkeypatch.setenv("NEMO_GYM_EXTRA_ROOTS", f"/nonexistent:{tmp_path / 'extra'}")
    assert gym_config_path("configs/x.yaml", tmp_path / "here") == "configs/x.yaml"


@pytest.fixture
def fake(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FAKE_GYM_RECORD", str(pytester.path / "record"))
    return install(pytester.path / "bin")


HOLD = "def test_up(gym_server):\n    assert gym_server.agents == ['fake_agent']\n"


def test_gym_gets_relative_configs_as_written_and_local_ones_absolute(pytester: pytest.Pytester, fake: Path) -> None:
    pytester.makeini(f"[pytest]\ngym_config =\n    {LC}\n    mine/env.yaml\n")
    (pytester.path / "mine").mkdir()
    (pytester.path / "mine" / "env.yaml").write_text("{}\n")
    pytester.makepyfile(test_up=HOLD)
    sub = pytester.path / "sub"
    sub.mkdir()
    args = [a for a in start_args(fake) if a not in ("--gym-resources-server", "fake")]
    result = pytester.runpytest("--rootdir", str(pytester.path), "-c", str(pytester.path / "tox.ini"), *args)
    result.assert_outcomes(passed=1)
    argv = recorded_argv(pytester.path / "record")
    configs = [argv[i + 1] for i, a in enumerate(argv) if a == "--config"]
    assert configs == [LC, str(pytester.path / "mine" / "env.yaml")]


def test_command_line_configs_are_from_the_invocation_folder(pytester: pytest.Pytester, fake: Path) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_up=HOLD)
    (pytester.path / "local.yaml").write_text("{}\n")
    args = [a for a in start_args(fake) if a not in ("--gym-resources-server", "fake")]
    result = pytester.runpytest(*args, "--gym-config", LC, "--gym-config", "local.yaml")
    result.assert_outcomes(passed=1)
    argv = recorded_argv(pytester.path / "record")
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--config"] == [LC, str(pytester.path / "local.yaml")]


def test_a_start_error_quotes_the_first_error_line_of_the_log(
    pytester: pytest.Pytester, fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GYM_FAIL", "1")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_up=HOLD)
    result = pytester.runpytest(*start_args(fake))
    result.assert_outcomes(errors=1)
    # The error is 70 lines before the end: out of the 20-line tail, but quoted.
    result.stdout.fnmatch_lines(
        [
            "*Gym exited with code 1 during start-up; log */run/gym_env.log, last lines:*",
            "*first error in the log: pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "ServerConfig / entrypoint / Field required*",
        ]
    )


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("pytest-gym: gym env start\nok\nValueError: bad port\nmore\n", "ValueError: bad port"),
        ("a\nTraceback (most recent call last):\n  File 'x'\n    y()\nKeyError: 'name'\nz\n", "KeyError: 'name'"),
        ("x\n2 validation errors for Cfg\nport\n  Input should be an integer\nafter\n",
         "2 validation errors for Cfg / port / Input should be an integer"),
        ("starting\nError: config_paths entry 'x.yaml' was not found\n",
         "Error: config_paths entry 'x.yaml' was not found"),
        ("Error: entry 'x.yaml' \nwas not found. Looked in:\n  - \n/a/x.yaml\n",
         "Error: entry 'x.yaml' was not found. Looked in:"),
        ("INFO all good\nINFO still good\n", None),
    ],
)  # fmt: skip
def test_first_error_finds_the_cause(tmp_path: Path, log: str, expected: str | None) -> None:
    path = tmp_path / "gym_env.log"
    path.write_text(log)
    assert first_error(path) == expected


# -- against a real Gym -------------------------------------------------------------------------


def _gym_site(gym_cli: str) -> Path:
    site = next(Path(gym_cli).resolve().parent.parent.glob("lib/python3*/site-packages"))
    assert (site / LC).is_file(), f"{LC} is not in Gym's install root {site}"
    return site


@pytest.mark.gym
def test_gyms_own_relative_config_starts_and_runs_trials(pytester: pytest.Pytester, gym_cli: str) -> None:
    # equivalence_rule's example rows name their agent; "exact" grading: the last two rows expect "6".
    site = _gym_site(gym_cli)
    shutil.copy(site / "resources_servers/equivalence_rule/data/example.jsonl", pytester.path / "lc.jsonl")
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(
        "--gym-dataset", "lc.jsonl", "--gym-config", LC, "--gym-config", MODEL, "--gym-policy", "scripted",
        "--gym-policy-answer", "6", "--gym-model", "lc,test 'model'", f"--gym-cli={gym_cli}",
        "--gym-server-venv", "auto", "--gym-run-dir", "run", "--gym-shutdown-grace", "20",
    )  # fmt: skip
    result.assert_outcomes(passed=2, failed=3)
    log = (pytester.path / "run" / "gym_env.log").read_text()
    assert f"--config {LC} --config {MODEL}" in log
    assert "++head_server.host=127.0.0.1" in log
    state = json.loads((pytester.path / "run" / "deployment.json").read_text())
    assert state["stopped"][0].startswith("gym: stopped")
    assert "lc_equivalence_rule_simple_agent" in {s["process_name"] for s in state["endpoint"]["servers"]}


@pytest.mark.gym
def test_a_real_start_failure_quotes_gyms_cause(pytester: pytest.Pytester, gym_cli: str) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_up=HOLD.replace("['fake_agent']", "[]"))
    typo = LC.replace("lc.yaml", "lcc.yaml")
    result = pytester.runpytest_subprocess(
        "--gym-config", typo, "--gym-config", MODEL, "--gym-policy", "scripted", f"--gym-cli={gym_cli}",
        "--gym-server-venv", "auto", "--gym-run-dir", "run", "--gym-startup-timeout", "120",
    )  # fmt: skip
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*first error in the log: *config_paths entry '{typo}' was not found*"])
