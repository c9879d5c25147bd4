"""``--gym-config`` paths reach a fake ``gym`` as Gym's convention wants, and a failed start quotes the cause
from Gym's log.

Gym resolves a relative config under ``$NEMO_GYM_EXTRA_ROOTS`` (``--search-dir``), its working folder and
its install root; it runs in the run folder, so only a path found in the invocation folder (the rootdir for
ini values) is made absolute, and any other stays as written for Gym to find.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fake_gym_cli import install, recorded_argv, start_args

LC = "resources_servers/equivalence_rule/configs/lc.yaml"


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
            "*Gym exited with code 1 during start-up.",
            "first error in the log: pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "ServerConfig / entrypoint / Field required*",
            "log: */run/gym_env.log, last lines:",
        ]
    )


@pytest.mark.parametrize(("races", "outcome"), [(2, "passed"), (3, "errors")])
def test_a_port_taken_while_gym_starts_starts_it_again_twice_at_most(
    pytester: pytest.Pytester, fake: Path, monkeypatch: pytest.MonkeyPatch, races: int, outcome: str
) -> None:
    """Gym picks its servers' ports at random where Ray's workers also bind: a lost race is started again."""
    monkeypatch.setenv("FAKE_GYM_PORT_RACE", str(races))
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_up=HOLD)
    result = pytester.runpytest(*start_args(fake))
    result.assert_outcomes(**{outcome: 1})
    assert (pytester.path / "record" / "starts").read_text() == "start\n" * 3
    log = (pytester.path / "run" / "gym_env.log").read_text()
    assert log.count("pytest-gym: a port Gym picked was taken before its server bound it") == 2
    if outcome == "errors":
        result.stdout.fnmatch_lines(["*first error in the log: *address already in use*"])


def test_a_start_that_fails_otherwise_is_not_started_again(
    pytester: pytest.Pytester, fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GYM_FAIL", "1")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_up=HOLD)
    pytester.runpytest(*start_args(fake)).assert_outcomes(errors=1)
    assert "starting Gym again" not in (pytester.path / "run" / "gym_env.log").read_text()
