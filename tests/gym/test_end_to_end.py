"""End to end against a real NeMo Gym (mcqa) with the scripted policy standing in for the LLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from tests.helpers.gym_tools import check_run_folder
from tests.helpers.junit import outcomes_by_test
from tests.helpers.paths import EXAMPLE, EXAMPLE_ANSWERS
from tests.helpers.realgym import RealGym, attach, start_mode

HASHES = [task_hash(json.loads(line))[:12] for line in EXAMPLE.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("xdist", [(), ("-n", "0"), ("-n", "2"), ("-p", "no:xdist")])
def test_answering_e_passes_the_two_rows_that_expect_e(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    result = pytester.runpytest(*attach(gym, "--gym-repeats", "2", "--junitxml", "report.xml"), *xdist)
    result.assert_outcomes(passed=4, failed=6)
    outcome = outcomes_by_test(pytester.path / "report.xml")
    for h, expected in zip(HASHES, EXAMPLE_ANSWERS, strict=False):
        for r in range(2):
            assert outcome[f"{h}[r{r}]"] == ("passed" if expected == "E" else "failure")
    assert gym.policy_calls() == 10


def test_failure_message_shows_reward_threshold_task_and_verifier_fields(
    pytester: pytest.Pytester, example: Path, gym: RealGym
) -> None:
    result = pytester.runpytest(*attach(gym), "-k", HASHES[0])
    result.assert_outcomes(failed=1, deselected=4)
    result.stdout.fnmatch_lines(
        [
            f"reward 0.0 < min_reward 1.0 for task {HASHES[0]} (*example.jsonl:1, repeat 0)",
            "  expected_answer: 'B'",
            "  extracted_answer: 'E'",
        ]
    )


def test_min_reward_threshold_decides(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    result = pytester.runpytest(*attach(gym, "--gym-min-reward", "0"))
    result.assert_outcomes(passed=5)


def test_trial_properties_are_recorded(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    pytester.makeconftest(
        """
        import json
        def pytest_runtest_logreport(report):
            if report.when == "teardown":
                with open("props.json", "w") as fh:
                    json.dump(dict(report.user_properties), fh)
        """
    )
    pytester.runpytest(*attach(gym), "-k", HASHES[3])
    props = json.loads((pytester.path / "props.json").read_text())
    full = task_hash(json.loads(EXAMPLE.read_text().splitlines()[3]))
    assert props["gym_reward"] == 1.0
    assert props["gym_task_hash"] == full
    assert props["gym_repeat"] == 0
    assert props["gym_line"] == 4
    assert props["gym_total_tokens"] == props["gym_input_tokens"] + props["gym_output_tokens"] > 0
    assert 0 < props["gym_latency_s"] < 30


def test_last_failed_reruns_only_failures(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    first = pytester.runpytest(*attach(gym))
    first.assert_outcomes(passed=2, failed=3)
    gym.script(answer="\\boxed{B}", reset_stats=True)
    again = pytester.runpytest(*attach(gym), "--lf")
    again.assert_outcomes(passed=1, failed=2, deselected=2)
    assert gym.policy_calls() == 3


def test_infra_fault_is_an_error_not_a_failure(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    result = pytester.runpytest(*attach(gym, "--gym-reward-key", "score", "--junitxml", "report.xml"), "-k", HASHES[3])
    result.assert_outcomes(errors=1, deselected=4)
    result.stdout.fnmatch_lines(["*Gym infrastructure fault (no_reward)*has no 'score' field (see --gym-reward-key)*"])
    assert outcomes_by_test(pytester.path / "report.xml") == {f"{HASHES[3]}[r0]": "error"}


def test_policy_error_surfaces_as_trial_error(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    gym.script(fault_every=1, fault_status=400)
    result = pytester.runpytest(*attach(gym), "-k", HASHES[3])
    result.assert_outcomes(errors=1, deselected=4)
    result.stdout.fnmatch_lines(["*Gym infrastructure fault (http_status)*HTTP 5*"])


def test_unknown_agent_is_an_error_listing_the_agents(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    result = pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", "nope", "--gym-dataset", "example.jsonl", "-k", HASHES[0]
    )
    result.assert_outcomes(errors=1, deselected=4)
    result.stdout.fnmatch_lines(
        ["*agent 'nope' (--gym-agent, or a suite file's agent:) is not served by this Gym deployment: its agents: "
         "mcqa_simple_agent*"]
    )  # fmt: skip


def test_the_only_agent_is_used_when_none_is_named(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    result = pytester.runpytest("--gym-url", gym.url, "--gym-dataset", "example.jsonl")
    result.assert_outcomes(passed=2, failed=3)


def test_gym_server_fixture_runs_hand_written_rows(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    row = json.loads(EXAMPLE.read_text().splitlines()[0])
    pytester.makepyfile(
        f"""
        import json
        def test_hand_row(gym_server):
            answer = gym_server.run(json.loads({json.dumps(json.dumps(row))}))
            assert answer["expected_answer"] == "B" and answer["extracted_answer"] == "E"
            assert answer["reward"] == 0.0
            assert gym_server.agents == ["mcqa_simple_agent"]
        """
    )
    result = pytester.runpytest("--gym-url", gym.url)
    result.assert_outcomes(passed=1)


@pytest.mark.usefixtures("own_ray")
def test_start_mode_runs_real_gym_and_stops_it(pytester: pytest.Pytester, example: Path, gym_cli: str) -> None:
    """Under -n 2, Gym starting its own Ray cluster: everything stopped at the end, and the run folder the two
    workers wrote together reads as one of Gym's (its trajectories, health-check, export and profile)."""
    args = start_mode(gym_cli, "--gym-shutdown-grace", "20")
    result = pytester.runpytest_subprocess(*args, "-n", "2")
    result.assert_outcomes(passed=2, failed=3)
    check_run_folder(gym_cli, pytester.path / "run", [example], 5, "mcqa_environment_server", 0)
    state = json.loads((pytester.path / "run" / "deployment.json").read_text())
    assert "started" not in state
    assert state["stopped"][0].startswith("gym: stopped")
    from pytest_gym.process.groups import group_alive

    assert (pytester.path / "run" / "gym_env.log").read_text().count("pytest-gym: ") == 1
    server_pids = [s["pid"] for s in state["endpoint"]["servers"] if s["pid"]]
    assert server_pids
    assert not any(group_alive(p) for p in server_pids)


def test_no_policy_is_a_clear_error(pytester: pytest.Pytester, example: Path, gym_cli: str) -> None:
    result = pytester.runpytest(
        "--gym-dataset", "example.jsonl", "--gym-resources-server", "mcqa", "--gym-cli", gym_cli
    )
    result.assert_outcomes(errors=5)
    result.stdout.fnmatch_lines(["*no policy model: pass --gym-model-url URL*or --gym-policy scripted*"])
