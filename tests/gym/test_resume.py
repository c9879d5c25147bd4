"""--gym-resume against a real Gym: the resume note reaches the summary also under -n 2, and resuming a real
finished run contacts no Gym."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest

from tests.helpers.paths import EXAMPLE, EXAMPLE_ANSWERS
from tests.helpers.realgym import RealGym, attach
from tests.helpers.run_records import reused_rewards
from tests.helpers.standin import RawServer

AGENT = "mcqa_simple_agent"
XDIST = pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])


@XDIST
def test_the_resume_note_reaches_the_summary_and_its_json(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    """Under -n 2 only the workers read the earlier run: their note travels back to the controller."""
    pytester.runpytest(*attach(gym, "--gym-run-dir", "run1")).assert_outcomes(passed=2, failed=3)
    gym.script(reset_stats=True)
    again = pytester.runpytest(
        *attach(gym, "--gym-repeats", "2", "--gym-resume", "run1", "--gym-run-dir", "run2"), *xdist
    )
    again.assert_outcomes(passed=4, failed=6)
    assert gym.policy_calls() == 5  # the 5 second repeats; the first ones were reused
    shown = [line.removeprefix("note: ") for line in again.stdout.lines if line.startswith("note: resume:")]
    assert len(shown) == 1, again.stdout.str()
    assert fnmatch.fnmatch(shown[0], "resume: 5 finished trials available from */run1")
    notes = json.loads((pytester.path / "run2" / "pytest_gym_summary.json").read_text())["notes"]
    assert [note for note in notes if note.startswith("resume:")] == shown


@XDIST
def test_resuming_a_finished_run_contacts_no_gym(
    pytester: pytest.Pytester,
    example: Path,
    gym: RealGym,
    listener: RawServer,
    xdist: tuple[str, ...],
) -> None:
    rows = zip(EXAMPLE.read_text().splitlines(), EXAMPLE_ANSWERS, strict=True)
    right = [line for line, answer in rows if answer == "E"]  # what the scripted policy answers
    (pytester.path / "right.jsonl").write_text("".join(line + "\n" for line in right))
    first = pytester.runpytest(*attach(gym, "--gym-repeats", "2", "--gym-run-dir", "run1", dataset="right.jsonl"))
    first.assert_outcomes(passed=4)
    gym.script(reset_stats=True)
    url = listener.base_url
    again = pytester.runpytest(
        *("--gym-url", url, "--gym-agent", AGENT, "--gym-dataset", "right.jsonl", "--gym-repeats", "2"),
        *("--gym-resume", "run1", "--gym-run-dir", "run2", "--junitxml", "r.xml", *xdist),
    )
    again.assert_outcomes(passed=4)
    assert listener.connections == 0, "resuming a finished run contacted the --gym-url head"
    assert gym.policy_calls() == 0
    assert reused_rewards(pytester, "run2") == reused_rewards(pytester, "run1") == [1.0] * 4
    assert (pytester.path / "r.xml").read_text().count("[[PROPERTY|gym_reused=True]]") == 4
