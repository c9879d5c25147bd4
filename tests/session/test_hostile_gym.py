"""A hostile Gym never kills the end of the run, and what it says reaches no terminal or report unbounded.

A fake Gym head on 127.0.0.1 (one threaded HTTP server: ``/readyz``, ``/server_instances``,
``/global_config_dict_yaml``, and an agent's ``/run`` and ``/aggregate_metrics``) answers what each test
scripts; the run attaches to it with ``--gym-url`` (or starts it through a fake ``gym`` command).
Whatever it answers: no traceback, exit 0 or 1, a JUnit file that parses, the secret it echoes nowhere,
and every line of output below a fixed length.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

MARKER = "sk-pytestgym-MARKER-7f3a9c"
OTHER_SECRET = "hunter2-not-in-the-environment"
OSC52 = "\x1b]52;c;ZXZpbA==\x07"
#: No output line may be longer: pytest-gym's messages stay under 8000 characters.
MAX_LINE = 10_000
AGENT = "fake_agent"
ROW = '{"responses_create_params": {"input": [{"role": "user", "content": "q%d"}]}}\n'

Answer = Callable[[dict[str, Any]], tuple[int, bytes]]


def _json(data: Any) -> tuple[int, bytes]:
    return 200, json.dumps(data).encode()


def servers_of(url: str) -> list[dict[str, Any]]:
    return [{"process_name": AGENT, "server_type": "responses_api_agents", "name": "simple_agent", "url": url}]


class FakeGym(ThreadingHTTPServer):
    """Gym's head server and one agent in one process, answering what the test put in ``routes``."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.calls: dict[str, int] = {}
        self.routes: dict[str, Answer] = {
            "/readyz": lambda _: _json({"status": "ready"}),
            "/server_instances": lambda _: _json(servers_of(self.url)),
            "/global_config_dict_yaml": lambda _: _json(f"{AGENT}:\n  responses_api_agents: {{}}\n"),
            "/run": lambda _: _json({"reward": 1.0}),
            "/aggregate_metrics": lambda _: _json({"agent_metrics": {"mean/reward": 1.0}}),
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeGym

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _answer(self, body: dict[str, Any]) -> None:
        route = self.path.split("?", 1)[0]
        self.server.calls[route] = self.server.calls.get(route, 0) + 1
        answer = self.server.routes.get(route)
        status, data = answer(body) if answer else (400, b'{"error": "unknown route"}')
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer({})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        self._answer(json.loads(raw or b"{}"))


@contextlib.contextmanager
def serving() -> Iterator[FakeGym]:
    """A FakeGym answering on its own thread until the block ends."""
    server = FakeGym()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def fake_gym() -> Iterator[FakeGym]:
    with serving() as server:
        yield server


@pytest.fixture
def dataset(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)
    pytester.makeini("[pytest]\n")
    path = pytester.path / "data.jsonl"
    path.write_text("".join(ROW % i for i in range(3)), encoding="utf-8")
    return path


def run(pytester: pytest.Pytester, gym: FakeGym, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", "run",
        "--junitxml", "report.xml", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args, timeout=300,
    )  # fmt: skip


def assert_contained(pytester: pytest.Pytester, result: pytest.RunResult) -> str:
    """The run ended cleanly whatever Gym said; returns stdout for the test's own checks."""
    out, err = result.stdout.str(), result.stderr.str()
    assert result.ret in (0, 1), out + err
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
    pytester: pytest.Pytester, dataset: Path, fake_gym: FakeGym, name: str
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
    pytester: pytest.Pytester, dataset: Path, fake_gym: FakeGym
) -> None:
    def answer(body: dict[str, Any]) -> tuple[int, bytes]:
        task = body["_ng_task_index"]
        if task == 0:  # a reward that is a 2 MB string: a fault whose message quotes it
            return _json({"reward": f"{OSC52}{MARKER}" + "9" * 2_000_000})
        if task == 1:  # a low reward with verifier fields echoing credentials and terminal escapes
            return _json(
                {
                    "reward": 0.0,
                    "expected_answer": f"B {MARKER}",
                    "extracted_answer": f"{OSC52}pwned\r\x1b[2J",
                    "api_key": OTHER_SECRET,
                    "failure_reason": "y" * 2_000_000,
                }
            )
        return 500, json.dumps({"error": f"Authorization: Bearer {OTHER_SECRET} {MARKER}" + "z" * 2_000_000}).encode()

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
    pytester: pytest.Pytester, dataset: Path, fake_gym: FakeGym, instances: Any
) -> None:
    fake_gym.routes["/server_instances"] = lambda _: _json(instances)
    result = run(pytester, fake_gym)
    out = assert_contained(pytester, result)
    assert result.ret == 1
    result.assert_outcomes(errors=3)
    assert "server_instances answer is malformed" in out
    assert "is this a NeMo Gym head server" in out


def test_agent_from_a_suite_file_holding_the_key_is_masked_in_the_error(
    pytester: pytest.Pytester, dataset: Path, fake_gym: FakeGym
) -> None:
    pytester.path.joinpath("leak.gym.yaml").write_text(
        "dataset: data.jsonl\nagent: ${oc.env:GYM_POLICY_API_KEY}\n", encoding="utf-8"
    )
    result = pytester.runpytest_subprocess(
        "--gym-url", fake_gym.url, "--gym-run-dir", "run", "--junitxml", "report.xml", "-p", "no:cacheprovider",
        "leak.gym.yaml", "-rA", timeout=300,
    )  # fmt: skip
    out = assert_contained(pytester, result)
    result.assert_outcomes(errors=3)
    assert "agent '***' is not served by this Gym deployment" in out


def test_nan_reward_in_a_resumed_run_is_run_again(pytester: pytest.Pytester, dataset: Path, fake_gym: FakeGym) -> None:
    first = run(pytester, fake_gym)
    assert first.ret == 0
    rollouts = pytester.path / "run" / "rollouts.jsonl"
    records = [json.loads(line) for line in rollouts.read_text().splitlines()]
    text = json.dumps(records[0]).replace('"reward": 1.0', '"reward": NaN')
    rollouts.write_text("\n".join([text, *map(json.dumps, records[1:])]) + "\n")
    calls = fake_gym.calls["/run"]
    result = pytester.runpytest_subprocess(
        "--gym-url", fake_gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", "run2",
        "--gym-resume", "run", "--junitxml", "report.xml", "-p", "no:cacheprovider", timeout=300,
    )  # fmt: skip
    assert_contained(pytester, result)
    result.assert_outcomes(passed=3)
    assert fake_gym.calls["/run"] == calls + 1  # the NaN trial ran again, the two others were reused
    assert "records without a finite 'reward' are run again" in result.stdout.str()


def test_non_object_run_info_in_a_resumed_run_is_a_note(
    pytester: pytest.Pytester, dataset: Path, fake_gym: FakeGym
) -> None:
    assert run(pytester, fake_gym).ret == 0
    (pytester.path / "run" / "pytest_gym_run.json").write_text('"hello"')
    result = pytester.runpytest_subprocess(
        "--gym-url", fake_gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", "run2",
        "--gym-resume", "run", "--junitxml", "report.xml", "-p", "no:cacheprovider", timeout=300,
    )  # fmt: skip
    assert_contained(pytester, result)
    result.assert_outcomes(passed=3)
    assert "holds a JSON str, not the object pytest-gym writes" in result.stdout.str()


FAKE_GYM_CLI = '''#!{python}
"""A fake ``gym env start``: a head server whose /server_instances is malformed; counts its starts."""
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

with open(os.environ["FAKE_GYM_STARTS"], "a") as fh:
    fh.write("start\\n")
port = int(next(a for a in sys.argv if a.startswith("++head_server.port=")).split("=", 1)[1])

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        data = json.dumps({{"servers": "none"}} if "server_instances" in self.path else "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
try:
    server.serve_forever(poll_interval=0.05)
except KeyboardInterrupt:
    pass
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_malformed_server_instances_in_start_mode_is_recorded_once(
    pytester: pytest.Pytester, dataset: Path, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    """The start's failure is recorded with the deployment: no process (no xdist worker) starts Gym again."""
    cli = pytester.path / "fake-gym"
    cli.write_text(FAKE_GYM_CLI.format(python=sys.executable), encoding="utf-8")
    cli.chmod(0o755)
    starts = pytester.path / "starts.txt"
    monkeypatch.setenv("FAKE_GYM_STARTS", str(starts))
    result = pytester.runpytest_subprocess(
        "--gym-dataset", "data.jsonl", "--gym-resources-server", "mcqa", "--gym-model-url", "http://127.0.0.1:9/v1",
        f"--gym-cli={cli}", "--gym-agent", AGENT, "--gym-run-dir", "run", "--gym-shutdown-grace", "5",
        "--junitxml", "report.xml", "-p", "no:cacheprovider", *workers, timeout=300,
    )  # fmt: skip
    out = assert_contained(pytester, result)
    result.assert_outcomes(errors=3)
    assert "server_instances answer is malformed" in out
    assert starts.read_text().count("start") == 1
    assert os.path.exists(pytester.path / "run" / "deployment.json")
