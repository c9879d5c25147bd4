"""--gym-rescore RUN_DIR through the session, without Gym: a stand-in head + resources server, and the refusals.

The real Gym (a changed mcqa grading mode moving rewards): tests/gym/test_rescore.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import read_tasks
from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.rollout.transport import build_request
from pytest_gym.runfolder.layout import MATERIALIZED_FILE, ROLLOUTS_FILE
from pytest_gym.runfolder.rollouts import RunFolderWriter
from pytest_gym.standins.policy import Script, responses_object
from tests.helpers.standin import StandinGym, reply

AGENT = "my_agent"
CONFIG = (
    "mcqa:\n  resources_servers:\n    mcqa: {}\n"
    f"{AGENT}:\n  responses_api_agents:\n    simple_agent:\n      resources_server: {{name: mcqa}}\n"
)


def standin_gym() -> StandinGym:
    """The stand-in Gym as head, agent and resources server in one. The verifier: reward 1.0 when the saved
    answer holds the row's expected letter. ``/run`` is refused (and counted): a re-score must never roll out
    (the model behind it would be called)."""
    gym = StandinGym(AGENT)
    gym.config_yaml = CONFIG
    gym.instances = lambda server: [
        {"process_name": "mcqa", "server_type": "resources_servers", "url": server.url},
        {"process_name": AGENT, "server_type": "responses_api_agents", "url": server.url},
    ]
    gym.routes["/run"] = lambda _: reply({"detail": "no rollouts in a re-score"}, 400)
    return gym


@pytest.fixture
def fake() -> Iterator[StandinGym]:
    gym = standin_gym()
    yield gym
    gym.close()


ROWS = [{"responses_create_params": {"input": f"question {n}"}, "expected_answer": "E"} for n in range(3)]


def earlier_run(
    root: Path, answers: list[str], rewards: list[float], repeats: int = 2, rows: list[dict[str, Any]] = ROWS
) -> Path:
    """A finished run's folder for ``dataset.jsonl``: each row answered ``answers[n]``, rewarded ``rewards[n]``."""
    dataset = root / "dataset.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasks = read_tasks(dataset)
    run_dir = root / "earlier"
    with RunFolderWriter(run_dir) as writer:
        for index, task in enumerate(tasks):
            for repeat in range(repeats):
                row = rows[index]
                response = responses_object(Script(answer=answers[index]), row["responses_create_params"])
                writer.record(
                    TrialOutcome(
                        nodeid=f"dataset.jsonl::{task.short_hash}[r{repeat}]",
                        task_hash=task.hash,
                        repeat=repeat,
                        line=index + 1,
                        dataset="dataset.jsonl",
                        reward=rewards[index],
                        answer={"reward": rewards[index], "response": response, "expected_answer": "E"},
                        request=build_request(row, AGENT, index, repeat),
                        agent=AGENT,
                    )
                )
    return run_dir


def rescore_args(fake: StandinGym, *args: str) -> tuple[str, ...]:
    return ("--gym-url", fake.url, "--gym-dataset", "dataset.jsonl", "--gym-repeats", "2", "--gym-run-dir", "run",
            "--gym-rescore", "earlier", "-p", "no:cacheprovider", *args)  # fmt: skip


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "n2"])
def test_rescore_reports_the_new_verdicts_without_a_rollout(
    pytester: pytest.Pytester, fake: StandinGym, xdist: bool
) -> None:
    pytester.makeini("[pytest]\n")
    # Row 0's answer was judged right and is wrong now; row 1 the reverse; row 2 stays right.
    earlier_run(pytester.path, ["\\boxed{B}", "\\boxed{E}", "\\boxed{E}"], [1.0, 0.0, 1.0])
    args = rescore_args(fake, "--junitxml", "junit.xml", "-rA", *(["-n", "2"] if xdist else []))
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=4, failed=2)
    assert fake.calls.get("/run", 0) == 0  # nothing was rolled out: the model behind Gym was never asked
    assert fake.calls["/verify"] == 6  # each saved answer verified once (the controller does it, before the workers)
    text = result.stdout.str()
    assert "rescore: re-verified 6 saved answers of" in text
    assert "4 rewards moved" in text
    assert "tasks whose pass/fail flipped" in text
    run = pytester.path / "run"
    rollouts = read_jsonl(run / ROLLOUTS_FILE)
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"], r["reward"]) for r in rollouts) == [
        (0, 0, 0.0), (0, 1, 0.0), (1, 0, 1.0), (1, 1, 1.0), (2, 0, 1.0), (2, 1, 1.0),
    ]  # fmt: skip
    assert len(read_jsonl(run / MATERIALIZED_FILE)) == 6  # Gym's layout: later tools read the new rewards
    summary = json.loads((run / "pytest_gym_summary.json").read_text())
    rescore = summary["rescore"]
    assert [(m["task_index"], m["old"], m["new"]) for m in rescore["moved"]] == [
        (0, 1.0, 0.0), (0, 1.0, 0.0), (1, 0.0, 1.0), (1, 0.0, 1.0),
    ]  # fmt: skip
    flips = sorted((f["before"], f["after"]) for f in rescore["flipped_tasks"])
    assert flips == [("fail", "pass"), ("pass", "fail")]
    junit = (pytester.path / "junit.xml").read_text()
    assert len(re.findall(r'gym_rescored(=|" value=")True', junit)) == 6  # as a property, whatever junit_family


def test_rescore_with_a_baseline_of_the_earlier_run_shows_what_moved(
    pytester: pytest.Pytester, fake: StandinGym
) -> None:
    pytester.makeini("[pytest]\n")
    five = [{"responses_create_params": {"input": f"question {n}"}, "expected_answer": "E"} for n in range(5)]
    earlier_run(
        pytester.path, ["\\boxed{E}", "\\boxed{E}", "\\boxed{B}", "\\boxed{E}", "\\boxed{E}"], [1.0] * 5, rows=five
    )
    # Row 2's saved answer is wrong under today's verifier: a first re-score writes the baseline, a second
    # compares with it (no regression; five tasks, as a comparison needs at least five) while still naming
    # what moved against the earlier run.
    first = pytester.runpytest(*rescore_args(fake, "--gym-baseline", "base.json", "--gym-update-baseline"))
    first.assert_outcomes(passed=8, failed=2)
    second = pytester.runpytest(
        *rescore_args(fake, "--gym-baseline", "base.json"), "--gym-run-dir", "run2", "--gym-verdict", "gate"
    )
    text = second.stdout.str()
    assert "2 rewards moved" in text  # against the earlier run's own rewards
    assert "baseline" in text.lower()
    assert second.ret == 0, text  # same verdicts as the baseline: no regression


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (None, ("--gym-rescore", "missing"), "--gym-rescore .*missing is not a folder"),
        ("empty", ("--gym-rescore", "earlier"), "is not a run folder: it has no rollouts.jsonl"),
        ("no-response", ("--gym-rescore", "earlier"), "holds no rollout with a saved response"),
        ("run", ("--gym-rescore", "earlier", "--gym-resume", "earlier"), "cannot go with --gym-resume"),
        ("run", ("--gym-rescore", "earlier", "--gym-policy", "record"), "--gym-policy record has nothing to do"),
        (None, ("--gym-rescore-force",), "--gym-rescore-force goes with --gym-rescore RUN_DIR"),
    ],
)
def test_rescore_refuses_what_it_cannot_re_verify(
    pytester: pytest.Pytester, setup: str | None, args: tuple[str, ...], message: str
) -> None:
    pytester.makeini("[pytest]\n")
    if setup == "run":
        earlier_run(pytester.path, ["\\boxed{E}"] * 3, [1.0] * 3)
    elif setup == "empty":
        (pytester.path / "earlier").mkdir()
    elif setup == "no-response":
        earlier = pytester.path / "earlier"
        earlier.mkdir()
        (earlier / ROLLOUTS_FILE).write_text('{"reward": 1.0}\n')
        (earlier / MATERIALIZED_FILE).write_text("{}\n")
    (pytester.path / "dataset.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    result = pytester.runpytest("--gym-url", "http://127.0.0.1:9", "--gym-dataset", "dataset.jsonl", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.re_match_lines([f".*{message}.*"])


def test_rescore_refuses_a_verifier_that_is_not_stateless_unless_forced(
    pytester: pytest.Pytester, fake: StandinGym
) -> None:
    pytester.makeini("[pytest]\n")
    earlier_run(pytester.path, ["\\boxed{E}"] * 3, [1.0] * 3)
    fake.reverify_mode = "unsupported"
    refused = pytester.runpytest(*rescore_args(fake))
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.re_match_lines([".*mcqa cannot be re-verified safely.*--gym-rescore-force.*"])
    assert fake.calls.get("/verify", 0) == 0
    forced = pytester.runpytest(*rescore_args(fake, "--gym-rescore-force"), "--gym-run-dir", "run2")
    forced.assert_outcomes(passed=6)
    assert fake.calls.get("/run", 0) == 0


def test_rescore_of_two_datasets_verifies_each_answer_against_its_own_row(
    pytester: pytest.Pytester, fake: StandinGym
) -> None:
    """Two datasets in one run share their rows' positions (both 0..2): a rollout found by its indices would
    be verified against the other dataset's row. Each trial's own ``_ng_rollout_id`` pairs them."""
    pytester.makeini("[pytest]\n")
    run_dir = pytester.path / "earlier"
    expected = {"a.jsonl": "E", "b.jsonl": "B"}
    with RunFolderWriter(run_dir) as writer:
        for name, letter in expected.items():
            rows = [{"responses_create_params": {"input": f"{name} question {n}"}, "expected_answer": letter}
                    for n in range(3)]  # fmt: skip
            (pytester.path / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
            for index, task in enumerate(read_tasks(pytester.path / name)):
                for repeat in range(2):
                    nodeid = f"{name}::{task.short_hash}[r{repeat}]"
                    rollout_id = f"{task.short_hash}-r{repeat}-{index}{name[0]}"
                    response = responses_object(Script(answer="\\boxed{E}"), rows[index]["responses_create_params"])
                    writer.record(
                        TrialOutcome(
                            nodeid=nodeid, task_hash=task.hash, repeat=repeat, line=index + 1, dataset=name,
                            reward=0.5,
                            answer={"reward": 0.5, "response": response, "expected_answer": letter},
                            request=build_request(rows[index], AGENT, index, repeat, rollout_id),
                            agent=AGENT,
                        )
                    )  # fmt: skip
    result = pytester.runpytest(
        "--gym-url", fake.url, "--gym-dataset", "a.jsonl", "--gym-dataset", "b.jsonl", "--gym-repeats", "2",
        "--gym-run-dir", "run", "--gym-rescore", "earlier", "-p", "no:cacheprovider", "-rA",
    )  # fmt: skip
    result.assert_outcomes(passed=6, failed=6)  # every answer is E: right for a.jsonl's rows, wrong for b.jsonl's
    assert fake.calls["/verify"] == 12
    outcomes = {line.split()[1].split("::")[0] + line.split()[0] for line in result.stdout.lines
                if line.startswith(("PASSED ", "FAILED "))}  # fmt: skip
    assert outcomes == {"a.jsonlPASSED", "b.jsonlFAILED"}


def test_a_rescore_compared_with_the_run_it_rescored_shows_the_same_answer_judged_otherwise(
    pytester: pytest.Pytester, fake: StandinGym
) -> None:
    """--gym-baseline-run with a re-score: the answers are the saved ones on both sides; the Changes name the
    tasks whose verdict the verifier changed, each with the one answer it judged otherwise."""
    pytester.makeini("[pytest]\n")
    earlier_run(pytester.path, ["\\boxed{B}", "\\boxed{E}", "\\boxed{E}"], [1.0, 0.0, 1.0])
    result = pytester.runpytest(*rescore_args(fake, "--gym-baseline-run", "earlier"))
    result.assert_outcomes(passed=4, failed=2)
    hashes = [task.short_hash for task in read_tasks(pytester.path / "dataset.jsonl")]
    result.stdout.fnmatch_lines(
        [
            "  changes against the baseline run */earlier: 1 new failure, 1 fixed, 0 moved "
            "(of 3 tasks both runs measured)",
            f"    new failure {hashes[0]} (line 1): mean reward 1.000 -> 0.000",
            "      baseline r0: \\boxed{B}",
            "      this run r0: \\boxed{B}",
            f"    fixed {hashes[1]} (line 2): mean reward 0.000 -> 1.000",
            "      baseline r0: \\boxed{E}",
            "      this run r0: \\boxed{E}",
        ]
    )
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())
    changes = summary["suites"]["dataset.jsonl"]["changes"]
    assert [(t["hash"], t["kind"], t["before_rewards"], t["after_rewards"]) for t in changes["tasks"]] == [
        (hashes[0], "new_failure", [1.0, 1.0], [0.0, 0.0]),
        (hashes[1], "fixed", [0.0, 0.0], [1.0, 1.0]),
    ]
