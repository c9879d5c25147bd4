"""Every /run carries a W3C traceparent, one trace per trial; the trial records the trace id (JUnit, run folder)
and --gym-trace-url makes it a link in failure messages, JUnit properties and the report.

A stand-in Gym (tests/helpers/standin.py) logs the headers of every request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.tracing import TRACEPARENT
from tests.helpers.standin import StandinGym, serving

AGENT = "fake_agent"
TEMPLATE = "https://jaeger.example/trace/{trace_id}"


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:
        server.rewards = {1: 0.0}  # the second row's trials fail: their messages carry the link
        yield server


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_one_trace_per_trial_seen_by_gym_and_named_in_junit(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}} for i in range(4)]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-repeats", "3",
        "--gym-trace-url", TEMPLATE, "--gym-tracestate", "pytestgym=ci-42", "--gym-run-dir", "run",
        "--junitxml", "report.xml", "-p", "no:cacheprovider", "-p", "no:randomly", *xdist,
    )  # fmt: skip
    result.assert_outcomes(passed=9, failed=3)
    runs = [r for r in gym.log if r.route == "/run"]
    assert len(runs) == 12
    parents = [r.headers["traceparent"] for r in runs]
    assert len(set(parents)) == 12
    assert all(TRACEPARENT.fullmatch(p) for p in parents)
    assert {r.headers["tracestate"] for r in runs} == {"pytestgym=ci-42"}
    sent = {TRACEPARENT.fullmatch(p)["trace_id"] for p in parents}  # type: ignore[index]

    junit = (pytester.path / "report.xml").read_text()
    in_junit = set(re.findall(r"\[\[PROPERTY\|gym_trace_id=([0-9a-f]{32})\]\]", junit))
    assert in_junit == sent
    links = set(re.findall(r"\[\[PROPERTY\|gym_trace_url=(\S+?)\]\]", junit))
    assert links == {TEMPLATE.format(trace_id=t) for t in sent}
    failed = [line for line in result.stdout.lines if line.strip().startswith("trace: https://jaeger.example/")]
    assert len(failed) >= 3  # each failure message links its trace
    records = read_jsonl(pytester.path / "run" / "rollouts.jsonl")
    assert {r["_pytest_gym_trace_id"] for r in records} == sent
    report = (pytester.path / "run" / "report.html").read_text()
    assert all(TEMPLATE.format(trace_id=t) in report for t in sent)


def test_a_trace_url_without_the_trace_id_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "data.jsonl").write_text('{"responses_create_params": {"input": "q"}}\n')
    result = pytester.runpytest(
        "--gym-url", "http://127.0.0.1:9", "--gym-dataset", "data.jsonl", "--gym-trace-url", "https://j.example/t"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gym-trace-url*{trace_id}*"])
