"""The first error line of a failed start's log, which a start-up error quotes (through pytest:
tests/session/test_gym_config_paths.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gym.process.groups import first_error


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


@pytest.mark.parametrize(
    ("cause", "consequence"),
    [
        ("(mcqa) /bin/bash: line 1: uv: command not found", "RuntimeError: Process `mcqa` finished unexpectedly!"),
        ("ModuleNotFoundError: No module named 'sympy'", "RuntimeError: Process `x` finished unexpectedly!"),
        ("(policy_model) ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 18249): "
         "address already in use", "RuntimeError: Process `policy_model` finished unexpectedly!"),
    ],
)  # fmt: skip
def test_a_root_cause_is_quoted_before_the_error_it_caused(tmp_path: Path, cause: str, consequence: str) -> None:
    """Gym's own traceback ("finished unexpectedly") comes first in the log when a server's output lags."""
    path = tmp_path / "gym_env.log"
    frames = '  File "nemo_gym/cli/env.py", line 619, in poll\n    raise RuntimeError(print_str)\n'
    path.write_text(f"INFO starting\nTraceback (most recent call last):\n{frames}{consequence}\n{cause}\nbye\n")
    assert first_error(path) == cause
