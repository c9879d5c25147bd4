"""Suite files (*.gym.yaml): collected like tests, validated with errors naming file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from tests.helpers.paths import EXAMPLE

NO_GYM = ("--gym-cli=/bin/false", "--gym-resources-server", "mcqa", "--gym-policy", "scripted")


@pytest.fixture
def suite(pytester: pytest.Pytester) -> Path:
    data = pytester.mkdir("data") / "mcqa.jsonl"
    data.write_text(EXAMPLE.read_text())
    pytester.makeini("[pytest]\n")
    path = pytester.path / "mcqa.gym.yaml"
    path.write_text(
        "dataset: data/mcqa.jsonl\nagent: mcqa_simple_agent\nrepeats: ${oc.env:SUITE_REPEATS,3}\n"
        'gates: ["mean_reward >= 0.4"]\nverdict: gate\n'
    )
    return path


def test_suite_file_collects_its_dataset_with_its_repeats(pytester: pytest.Pytester, suite: Path) -> None:
    result = pytester.runpytest("--co", "-q", *NO_GYM)
    first = task_hash(json.loads(EXAMPLE.read_text().splitlines()[0]))[:12]
    assert f"mcqa.gym.yaml::{first}[r2]" in result.stdout.lines
    result.stdout.fnmatch_lines(["15 tests collected*"])


def test_env_interpolation_and_cli_override(
    pytester: pytest.Pytester, suite: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUITE_REPEATS", "2")
    pytester.runpytest("--co", "-q", *NO_GYM).stdout.fnmatch_lines(["10 tests collected*"])
    pytester.runpytest("--co", "-q", "--gym-repeats", "1", *NO_GYM).stdout.fnmatch_lines(["5 tests collected*"])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("repeats: many", "*mcqa.gym.yaml: key repeats: Input should be a valid integer*keys a suite file may hold*"),
        ("repeat: 2", "*mcqa.gym.yaml: key repeat: Extra inputs are not permitted*"),
        ("gates: [5", "*mcqa.gym.yaml: cannot read the suite file*"),
        ("repeats: 0", "*mcqa.gym.yaml: key repeats: Input should be greater than or equal to 1*"),
        ("verdict: maybe", "*invalid value 'maybe' for verdict from suite file */mcqa.gym.yaml (key verdict)*"),
        ("gates: [mean_reward ~ 1]", "*bad gate from suite file */mcqa.gym.yaml (key gates)*mean_reward ~ 1*"),
    ],
)
def test_bad_suite_file_names_file_and_key(pytester: pytest.Pytester, suite: Path, line: str, message: str) -> None:
    text = "\n".join(entry for entry in suite.read_text().splitlines() if not entry.startswith(line.split(":")[0][:6]))
    suite.write_text(text + "\n" + line + "\n")
    result = pytester.runpytest(*NO_GYM)
    result.stdout.fnmatch_lines(["*ERROR collecting mcqa.gym.yaml*", message])
    assert result.ret == pytest.ExitCode.INTERRUPTED


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("repeats: true", "*mcqa.gym.yaml: key repeats: Value error, expected a number, got true*"),
        ("min_reward: true", "*mcqa.gym.yaml: key min_reward: Value error, expected a number, got true*"),
        ("min_reward: .nan", "*invalid value nan for min_reward from suite file *(key min_reward)*finite*"),
        ("max_regression: .inf", "*invalid value inf for max_regression from suite file *(key max_regression)*finite*"),
    ],
)
def test_a_switch_or_a_non_finite_number_in_a_suite_file_is_no_number(
    pytester: pytest.Pytester, suite: Path, line: str, message: str
) -> None:
    """pydantic read ``repeats: true`` as 1 trial and ``min_reward: .nan`` as a threshold no reward reaches."""
    text = "\n".join(entry for entry in suite.read_text().splitlines() if not entry.startswith(line.split(":")[0][:6]))
    suite.write_text(text + "\n" + line + "\n")
    result = pytester.runpytest("--co", *NO_GYM)
    result.stdout.fnmatch_lines(["*ERROR collecting mcqa.gym.yaml*", message])
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_missing_dataset_names_the_key(pytester: pytest.Pytester, suite: Path) -> None:
    suite.write_text("dataset: nope.jsonl\n")
    result = pytester.runpytest(*NO_GYM)
    result.stdout.fnmatch_lines(["*mcqa.gym.yaml: key dataset: */nope.jsonl does not exist*"])
