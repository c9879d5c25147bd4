"""A suite file's gates judge a run against the real Gym, with and without xdist."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.paths import EXAMPLE
from tests.helpers.realgym import RealGym


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


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_suite_file_gates_judge_the_run(
    pytester: pytest.Pytester, suite: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    result = pytester.runpytest("--gym-url", gym.url, *xdist)
    result.assert_outcomes(passed=7, xfailed=9)
    assert result.ret == pytest.ExitCode.OK
    suite.write_text(suite.read_text().replace("mean_reward >= 0.4", "pass@3 >= 0.5"))
    failing = pytester.runpytest("--gym-url", gym.url, *xdist)
    failing.assert_outcomes(passed=6, xfailed=9, failed=1)
    failing.stdout.fnmatch_lines(["*FAILED mcqa.gym.yaml::gate?pass@3>=0.5? - gate pass@3>=0.5 failed*"])
