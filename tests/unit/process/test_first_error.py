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
