"""Credentials only to their origin: ``--gym-header`` values go to the ``--gym-url`` origin alone (issue 20).

A stand-in Gym head behind an "authenticating proxy" (it answers 401 without the header) lists its agent
and resources server on another origin: a second stub, on another port, that logs the headers of every
request it gets. The run's ``/run`` calls, the health probes after a failed call, ``/aggregate_metrics``
and a re-score's ``/reverify_mode`` and ``/verify`` reach that server without the header, unless
``--gym-header-origin`` names it. An https head listing an http server is refused, naming both URLs.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.session.test_remote_gym import self_signed
from tests.session.test_rescore import AGENT, CONFIG, earlier_run

TOKEN = "Bearer tok-origin-9c41e7ab"
TOKEN_VAR = "ORIGIN_TEST_AUTH"


class Logged(ThreadingHTTPServer):
    """One stub server: answers from ``answer(method, route, body)``, logs (method, route, Authorization)."""

    daemon_threads = True

    def __init__(self, owner: Stubs, role: str, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server_address[1]}"
        self.owner = owner
        self.role = role
        self.log: list[tuple[str, str, str | None]] = []
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Logged

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _reply(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        route = self.path.split("?", 1)[0]
        auth = self.headers.get("Authorization")
        with self.server.lock:
            self.server.log.append((method, route, auth))
        status, payload = self.server.owner.answer(self.server.role, route, body, auth)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._reply("GET")

    def do_POST(self) -> None:
        self._reply("POST")


class Stubs:
    """Gym's head (behind the proxy) and, on another origin, its agent and resources server."""

    def __init__(self, head_tls: ssl.SSLContext | None = None) -> None:
        self.head = Logged(self, "head", head_tls)
        self.servers = Logged(self, "servers")
        self.runs = 0
        self.lock = threading.Lock()

    def answer(self, role: str, route: str, body: dict[str, Any], auth: str | None) -> tuple[int, Any]:
        if role == "head":
            if auth != TOKEN:
                return 401, {"detail": "Not authenticated"}
            if route == "/server_instances":
                return 200, [
                    {"process_name": AGENT, "server_type": "responses_api_agents", "url": self.servers.url},
                    {"process_name": "mcqa", "server_type": "resources_servers", "url": self.servers.url},
                ]
            if route == "/global_config_dict_yaml":
                return 200, CONFIG
            return 200, {"status": "ok"}
        if route == "/run":
            with self.lock:
                self.runs += 1
                first = self.runs == 1
            if first:  # one infrastructure fault: the run probes every server's health, then retries
                return 500, {"detail": "try again"}
            return 200, {"reward": 1.0, "response": {"usage": {"input_tokens": 1, "output_tokens": 1}}}
        if route == "/aggregate_metrics":
            return 200, {"agent_metrics": {"mean/reward": 1.0}, "key_metrics": {}, "group_level_metrics": []}
        if route == "/reverify_mode":
            return 200, "stateless"
        if route == "/verify":
            return 200, {**body, "reward": 1.0}
        return 200, {"status": "ok"}

    def routes(self, server: Logged, with_token: bool) -> set[str]:
        with server.lock:
            return {route for _, route, auth in server.log if (auth == TOKEN) is with_token}


@contextlib.contextmanager
def running(stubs: Stubs) -> Iterator[Stubs]:
    threads = [
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        for s in (stubs.head, stubs.servers)
    ]
    for thread in threads:
        thread.start()
    try:
        yield stubs
    finally:
        for server in (stubs.head, stubs.servers):
            server.shutdown()
            server.server_close()
        for thread in threads:
            thread.join(timeout=10)


@pytest.fixture
def stubs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubs]:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    pytester.makeini("[pytest]\n")
    with running(Stubs()) as running_stubs:
        yield running_stubs


def run(pytester: pytest.Pytester, stubs: Stubs, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--gym-url", stubs.head.url, "--gym-header", f"Authorization={TOKEN_VAR}", "--gym-run-dir", "run",
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args,
    )  # fmt: skip


def rows(pytester: pytest.Pytester) -> None:
    pytester.path.joinpath("data.jsonl").write_text(
        "".join(json.dumps({"responses_create_params": {"input": f"q{n}"}}) + "\n" for n in range(3))
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_server_on_another_origin_gets_no_header(pytester: pytest.Pytester, stubs: Stubs, workers: list[str]) -> None:
    rows(pytester)
    result = run(pytester, stubs, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-retries", "1", *workers)
    result.assert_outcomes(passed=3)
    assert stubs.routes(stubs.head, with_token=False) == set()  # the head (the proxy's origin) always had it
    assert {"/server_instances", "/global_config_dict_yaml", "/readyz"} <= stubs.routes(stubs.head, with_token=True)
    assert stubs.routes(stubs.servers, with_token=True) == set()
    assert {"/run", "/health", "/aggregate_metrics"} <= stubs.routes(stubs.servers, with_token=False)


def test_gym_header_origin_names_another_origin_that_gets_it(pytester: pytest.Pytester, stubs: Stubs) -> None:
    rows(pytester)
    origin = stubs.servers.url + "/any/path"  # only scheme, host and port count
    result = run(pytester, stubs, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-retries", "1",
                 "--gym-header-origin", origin)  # fmt: skip
    result.assert_outcomes(passed=3)
    assert stubs.routes(stubs.servers, with_token=False) == set()
    assert {"/run", "/health", "/aggregate_metrics"} <= stubs.routes(stubs.servers, with_token=True)


def test_a_rescore_sends_no_header_to_another_origin(pytester: pytest.Pytester, stubs: Stubs) -> None:
    earlier_run(pytester.path, ["\\boxed{E}"] * 3, [1.0, 1.0, 1.0], repeats=1)
    result = run(pytester, stubs, "--gym-dataset", "dataset.jsonl", "--gym-rescore", "earlier")
    result.assert_outcomes(passed=3)
    assert stubs.runs == 0
    assert stubs.routes(stubs.servers, with_token=True) == set()
    assert {"/reverify_mode", "/verify"} <= stubs.routes(stubs.servers, with_token=False)
    assert "/global_config_dict_yaml" in stubs.routes(stubs.head, with_token=True)


def test_an_https_head_listing_an_http_server_is_refused(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    pytester.makeini("[pytest]\n")
    rows(pytester)
    cert, key = self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with running(Stubs(head_tls=tls)) as stubs:
        result = run(pytester, stubs, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-ca-file", str(cert))
        assert stubs.servers.log == []  # not one byte in clear text
    assert result.ret == 1
    out = result.stdout.str()
    assert f"Gym's head {stubs.head.url} (https) lists a server at {stubs.servers.url} (plain http)" in out, out[-3000:]
    assert TOKEN.split()[1] not in out + result.stderr.str()


def test_origins_of_urls() -> None:
    from pytest_gym.core.access import GymAccess, downgrade_problem, header_origins, origin

    assert origin("https://Gym.Example/x?y") == ("https", "gym.example", 443)
    assert origin("http://127.0.0.1:11000/") == ("http", "127.0.0.1", 11000)
    assert origin("ftp://h/") is None
    access = GymAccess({"X": "v"}, None, header_origins("https://gym.example", ["http://127.0.0.1:8"]))
    assert dict(access.headers_for("https://gym.example:443/run")) == {"X": "v"}
    assert dict(access.headers_for("http://127.0.0.1:8/run")) == {"X": "v"}
    for elsewhere in ("http://gym.example/run", "https://gym.example:8443/run", "https://evil.example/run"):
        assert dict(access.headers_for(elsewhere)) == {}
    assert downgrade_problem("https://h:1", "http://h:2") is not None
    assert downgrade_problem("http://h:1", "http://h:2") is None
    assert downgrade_problem("https://h:1", "https://other:2") is None
