"""A failed start's one report: the cause from Gym's log, the fix for known causes, the log's last lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gym.gym.startfailure import fix_for, start_failure


@pytest.mark.parametrize(
    ("cause", "fix"),
    [
        ("(mcqa) /bin/bash: line 1: uv: command not found", "*--gym-server-venv auto*"),
        ("ModuleNotFoundError: No module named 'sympy'", "*lacks the module sympy: install*requirements.txt*"),
        ("ERROR: [Errno 98] ... address already in use", "*port Gym needs is taken*"),
        ("Error: config_paths entry 'a/b.yaml' was not found.", "a/b.yaml was not found: relative --gym-config*"),
    ],
)
def test_known_causes_name_their_fix(cause: str, fix: str) -> None:
    import fnmatch

    found = fix_for(cause)
    assert found is not None
    assert fnmatch.fnmatch(found, fix), found


def test_an_unknown_cause_names_no_fix() -> None:
    assert fix_for("RuntimeError: something else") is None
    assert fix_for(None) is None


def test_the_report_quotes_the_cause_once(tmp_path: Path) -> None:
    log = tmp_path / "gym_env.log"
    frames = "".join(f'  File "x.py", line {i}, in f\n    f()\n' for i in range(30))
    log.write_text(f"pytest-gym: gym env start\n(a) bash: uv: command not found\nTraceback (most recent call last):\n"
                   f"{frames}RuntimeError: Process `a` finished unexpectedly!\n")  # fmt: skip
    report = start_failure("Gym exited with code 1 during start-up.", log)
    assert report.count("uv: command not found") == 1
    assert report.splitlines() == [
        "Gym exited with code 1 during start-up.",
        "first error in the log: (a) bash: uv: command not found",
        report.splitlines()[2],
        f"log: {log}, last lines:",
        "RuntimeError: Process `a` finished unexpectedly!",
    ]
    assert report.splitlines()[2].startswith("fix: ")


def test_a_command_that_printed_nothing_is_asked_about(tmp_path: Path) -> None:
    log = tmp_path / "gym_env.log"
    log.write_text("pytest-gym: /bin/false env start\npytest-gym supervisor: /bin/false exited with code 1\n")
    report = start_failure("Gym exited with code 1 during start-up.", log)
    assert "the gym command printed nothing: is --gym-cli the `gym` of a NeMo Gym install?" in report
    assert report.endswith(f"log: {log}")
