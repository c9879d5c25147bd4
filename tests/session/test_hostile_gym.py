"""A hostile Gym never kills the end of the run, and what it says reaches no terminal or report unbounded.

The stand-in Gym (tests/helpers/standin.py: a head and an agent's ``/run`` and ``/aggregate_metrics`` on
127.0.0.1) answers what each test scripts; the run attaches to it with ``--gym-url`` (or starts it through
the fake ``gym`` command).
Whatever it answers: no traceback, exit 0 or 1, a JUnit file that parses, the secret it echoes nowhere,
and every line of output below a fixed length.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fake_gym_cli import install
from tests.helpers.standin import Answer, Request, StandinGym, reply, serving

pytestmark = pytest.mark.runtime

MARKER = "sk-pytestgym-MARKER-7f3a9c"
OTHER_SECRET = "hunter2-not-in-the-environment"
OSC52 = "\x1b]52;c;ZXZpbA==\x07"
#: No output line may be longer: pytest-gym's messages stay under 8000 characters.
MAX_LINE = 10_000
AGENT = "fake_agent"
ROW = '{"responses_create_params": {"input": [{"role": "user", "content": "q%d"}]}}\n'


@pytest.fixture
def fake_gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:
        yield server


@pytest.fixture
def dataset(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)
    pytester.makeini("[pytest]\n")
    path = pytester.path / "data.jsonl"
    path.write_text("".join(ROW % i for i in range(3)), encoding="utf-8")
    return path


def run(pytester: pytest.Pytester, gym: StandinGym, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", "run",
        "--junitxml", "report.xml", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args,
    )  # fmt: skip


def assert_contained(pytester: pytest.Pytester, result: pytest.RunResult, codes: tuple[int, ...] = (0, 1)) -> str:
    """The run ended cleanly whatever Gym said; returns stdout for the test's own checks."""
    out, err = result.stdout.str(), result.stderr.str()
    assert result.ret in codes, out + err
    for text in (out, err):
        assert "Traceback" not in text, text[-5000:]
        assert "INTERNALERROR" not in text, text[-5000:]
        assert "\x1b" not in text
        assert "\x07" not in text
        assert max(map(len, text.splitlines() or [""])) < MAX_LINE
    junit = pytester.path / "report.xml"
    ET.parse(junit)  # exists and parses
    files = [p for p in pytester.path.rglob("*") if p.is_file() and not p.is_symlink()]
    for secret in (MARKER, OTHER_SECRET):
        assert secret not in out + err
        assert [str(p) for p in files if secret.encode() in p.read_bytes()] == []
    assert b"\x1b" not in junit.read_bytes()
    return out


HOSTILE_AGGREGATES: dict[str, bytes] = {
    "list": json.dumps([{"agent_metrics": {}}]).encode(),
    "wrong types": json.dumps({"agent_metrics": [1, 2], "key_metrics": "x", "group_level_metrics": {}}).encode(),
    "deeply nested": b'{"agent_metrics": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
    "nested below the parser's limit": b'{"agent_metrics": {"a": ' + b"[" * 500 + b"]" * 500 + b"}}",
    "not json": b"<html>" + OSC52.encode() + MARKER.encode(),
    "a string": json.dumps(f"{OSC52} {MARKER} " + "x" * 2_000_000).encode(),
}


@pytest.mark.parametrize("name", list(HOSTILE_AGGREGATES))
def test_hostile_aggregate_metrics_answer(
    pytester: pytest.Pytester, dataset: Path, fake_gym: StandinGym, name: str
) -> None:
    fake_gym.routes["/aggregate_metrics"] = lambda _: (200, HOSTILE_AGGREGATES[name])
    result = run(pytester, fake_gym, "--gym-gate", "mean_reward>=0.5", "--gym-summary", "summary.json")
    out = assert_contained(pytester, result)
    assert result.ret == 0
    assert "passed" in out
    assert "gate mean_reward>=0.5: PASS" in out
    assert "note: Gym's /aggregate_metrics failed" in out
    assert json.loads((pytester.path / "summary.json").read_text())["suites"]  # the summary was written


def test_hostile_run_answers_are_bounded_masked_and_stripped(
    pytester: pytest.Pytester, dataset: Path, fake_gym: StandinGym
) -> None:
    def answer(request: Request) -> Answer:
        task = request.json()["_ng_task_index"]
        if task == 0:  # a reward that is a 2 MB string: a fault whose message quotes it
            return reply({"reward": f"{OSC52}{MARKER}" + "9" * 2_000_000})
        if task == 1:  # a low reward with verifier fields echoing credentials and terminal escapes
            return reply(
                {
                    "reward": 0.0,
                    "expected_answer": f"B {MARKER}",
                    "extracted_answer": f"{OSC52}pwned\r\x1b[2J",
                    "api_key": OTHER_SECRET,
                    "failure_reason": "y" * 2_000_000,
                }
            )
        return reply({"error": f"Authorization: Bearer {OTHER_SECRET} {MARKER}" + "z" * 2_000_000}, 500)

    fake_gym.routes["/run"] = answer
    result = run(pytester, fake_gym, "-rA")
    out = assert_contained(pytester, result)
    assert result.ret == 1
    result.assert_outcomes(failed=1, errors=2)
    assert "expected_answer: 'B ***'" in out
    assert "api_key: '***'" in out
    junit = (pytester.path / "report.xml").read_bytes()
    failures = (pytester.path / "run" / "rollouts_failures.jsonl").read_bytes()
    assert len(junit) < 100_000
    assert len(failures) < 20_000
    assert len(out) < 100_000


@pytest.mark.parametrize(
    "instances",
    [
        {"servers": []},
        ["fake_agent"],
        [{"process_name": AGENT, "server_type": "responses_api_agents"}],
        [{"process_name": AGENT, "server_type": "responses_api_agents", "url": "ftp://x", "pid": "1"}],
        [{"process_name": f"{OSC52}{MARKER}" * 1000, "server_type": "x", "url": "http://127.0.0.1:1"}],
    ],
    ids=["object", "strings", "no url", "bad url", "hostile name"],
)
def test_malformed_server_instances_is_a_clear_error(
    pytester: pytest.Pytester, dataset: Path, fake_gym: StandinGym, instances: Any
) -> None:
    fake_gym.routes["/server_instances"] = lambda _: reply(instances)
    result = run(pytester, fake_gym)
    out = assert_contained(pytester, result)
    assert result.ret == 1
    result.assert_outcomes(errors=3)
    assert "server_instances answer is malformed" in out
    assert "is this a NeMo Gym head server" in out


def test_agent_from_a_suite_file_holding_the_key_is_masked_in_the_error(
    pytester: pytest.Pytester, dataset: Path, fake_gym: StandinGym
) -> None:
    pytester.path.joinpath("leak.gym.yaml").write_text(
        "dataset: data.jsonl\nagent: ${oc.env:GYM_POLICY_API_KEY}\n", encoding="utf-8"
    )
    result = pytester.runpytest(
        "--gym-url", fake_gym.url, "--gym-run-dir", "run", "--junitxml", "report.xml", "-p", "no:cacheprovider",
        "leak.gym.yaml", "-rA",
    )  # fmt: skip
    # An agent Gym does not serve stops the run at its first trial (pytest's "Interrupted", exit 2), one error.
    out = assert_contained(pytester, result, codes=(pytest.ExitCode.INTERRUPTED,))
    result.assert_outcomes(errors=1)
    assert "agent '***' (--gym-agent, or a suite file's agent:) is not served by this Gym deployment" in out


def test_nan_reward_in_a_resumed_run_is_run_again(
    pytester: pytest.Pytester, dataset: Path, fake_gym: StandinGym
) -> None:
    first = run(pytester, fake_gym)
    assert first.ret == 0
    rollouts = pytester.path / "run" / "rollouts.jsonl"
    records = [json.loads(line) for line in rollouts.read_text().splitlines()]
    text = json.dumps(records[0]).replace('"reward": 1.0', '"reward": NaN')
    rollouts.write_text("\n".join([text, *map(json.dumps, records[1:])]) + "\n")
    calls = fake_gym.calls["/run"]
    result = pytester.runpytest(
        "--gym-url", fake_gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", "run2",
        "--gym-resume", "run", "--junitxml", "report.xml", "-p", "no:cacheprovider",
    )  # fmt: skip
    assert_contained(pytester, result)
    result.assert_outcomes(passed=3)
    assert fake_gym.calls["/run"] == calls + 1  # the NaN trial ran again, the two others were reused
    assert "records without a finite 'reward' are run again" in result.stdout.str()


def test_non_object_run_info_in_a_resumed_run_is_a_note(
    pytester: pytest.Pytester, dataset: Path, fake_gym: StandinGym
) -> None:
    assert run(pytester, fake_gym).ret == 0
    (pytester.path / "run" / "pytest_gym_run.json").write_text('"hello"')
    result = pytester.runpytest(
        "--gym-url", fake_gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", "run2",
        "--gym-resume", "run", "--junitxml", "report.xml", "-p", "no:cacheprovider",
    )  # fmt: skip
    assert_contained(pytester, result)
    result.assert_outcomes(passed=3)
    assert "holds a JSON str, not the object pytest-gym writes" in result.stdout.str()


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_malformed_server_instances_in_start_mode_is_recorded_once(
    pytester: pytest.Pytester, dataset: Path, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    """The start's failure is recorded with the deployment: no process (no xdist worker) starts Gym again."""
    cli = install(pytester.path / "bin")  # the fake ``gym env start``, its /server_instances malformed
    monkeypatch.setenv("FAKE_GYM_RECORD", str(pytester.path / "record"))
    monkeypatch.setenv("FAKE_GYM_INSTANCES", json.dumps({"servers": "none"}))
    starts = pytester.path / "record" / "starts"
    result = pytester.runpytest(
        "--gym-dataset", "data.jsonl", "--gym-resources-server", "mcqa", "--gym-model-url", "http://127.0.0.1:9/v1",
        f"--gym-cli={cli}", "--gym-agent", AGENT, "--gym-run-dir", "run", "--gym-shutdown-grace", "5",
        "--junitxml", "report.xml", "-p", "no:cacheprovider", *workers,
    )  # fmt: skip
    out = assert_contained(pytester, result)
    result.assert_outcomes(errors=3)
    assert "server_instances answer is malformed" in out
    assert starts.read_text().count("start") == 1
    assert os.path.exists(pytester.path / "run" / "deployment.json")


# --- smaller points of issue 20 -------------------------------------------------------------------------------


def test_a_redirect_from_run_is_reported_as_one(pytester: pytest.Pytester, dataset: Path, fake_gym: StandinGym) -> None:
    """A proxy's login page answers 302: the trial says so, not "answer has no 'reward' field"."""
    location = "https://sso.example/login?next=/run&token=abc123def456"
    fake_gym.routes["/run"] = lambda _: reply({"detail": "see other"}, status=302, headers={"Location": location})
    result = run(pytester, fake_gym)
    out = assert_contained(pytester, result)
    result.assert_outcomes(errors=3)
    assert "HTTP 302 from" in out
    assert "a redirect to https://sso.example/login?next=/run&token=***, which pytest-gym does not follow" in out
    assert "no 'reward' field" not in out


def test_huge_rewards_and_a_lone_surrogate_metric_name_still_give_a_report(
    pytester: pytest.Pytester, dataset: Path, fake_gym: StandinGym
) -> None:
    rewards = iter([1.7e308, -1.7e308, 1.7e308])
    fake_gym.routes["/run"] = lambda _: reply({"reward": next(rewards)})
    fake_gym.routes["/aggregate_metrics"] = lambda _: (
        200,
        b'{"agent_metrics": {"mean/reward": 1.0}, "key_metrics": {"mean/\\ud800x": 1.0, "\\udfff": 2}}',
    )
    result = run(pytester, fake_gym, "--gym-repeats", "1", "--gym-min-reward", "0")
    out = assert_contained(pytester, result)
    assert "could not be written" not in out
    page = (pytester.path / "run" / "report.html").read_text(encoding="utf-8")
    assert "mean/x" in page
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())
    assert summary["suites"]


#: A key only its shape and place give away: no variable holds it, Gym echoes it from an upstream error.
GOOGLE_KEY = "AIzaSyD-" + "Qw3rTy7uIo0pAs5dFg8hJk2lZx4cVb6nM1"
WRAPPED_KEY = "sk-" + "Wr4pP3dK3yZy9xWv8uTs7rQp6oNm5lKj4iHg3fEd"
#: An upstream error body quoted as text inside Gym's JSON error, as Gym wraps what its model call returned.
UPSTREAM = json.dumps({"error": {"message": "invalid key", "api_key": WRAPPED_KEY}})
GOOGLE_URL = f"https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?key={GOOGLE_KEY}&alt=sse"
#: A judge's password holding an unencoded "@", in the URL a connection error prints.
JUDGE_PASSWORD = "p@ss-9f8e7d6c5b4a"
JUDGE_ERROR = f"ConnectError: https://judge:{JUDGE_PASSWORD}@judge.example.com/v1 refused"


def test_a_wrapped_upstream_error_a_query_key_and_a_password_with_an_at_echoed_by_gym_are_masked(
    pytester: pytest.Pytester, dataset: Path, fake_gym: StandinGym
) -> None:
    def answer(request: Request) -> Answer:
        said = f"model call to {GOOGLE_URL} failed: {UPSTREAM}; judge: {JUDGE_ERROR}"
        if request.json()["_ng_task_index"] == 0:  # an error: its message quotes Gym's body as text
            return reply({"detail": said}, 500)
        return reply({"reward": 0.0, "failure_reason": said, "log": json.dumps({"line": said})})

    fake_gym.routes["/run"] = answer
    result = run(pytester, fake_gym, "-rA", "-v", "--gym-summary", "summary.json")
    out = assert_contained(pytester, result)
    result.assert_outcomes(failed=2, errors=1)
    files = [p for p in pytester.path.rglob("*") if p.is_file() and not p.is_symlink()]
    for secret in (GOOGLE_KEY, WRAPPED_KEY, JUDGE_PASSWORD, JUDGE_PASSWORD.split("@")[1]):
        assert secret not in out + result.stderr.str()
        assert [str(p) for p in files if secret.encode() in p.read_bytes()] == []
    # What is no credential stays: the URL, its other query key, the upstream's message.
    rollouts = (pytester.path / "run" / "rollouts.jsonl").read_text()
    assert "generateContent?key=***&alt=sse" in rollouts
    assert '\\\\\\"api_key\\\\\\": \\\\\\"***\\\\\\"' in rollouts  # the log: JSON in JSON in the record
    assert "invalid key" in rollouts
    assert "https://judge:***@judge.example.com/v1" in rollouts
