"""Whether Gym still serves: start-mode pids with start times, attach-mode health from HTTP only.

The attach tests use a fake Gym (head, agent and resources server on 127.0.0.1) whose
``/server_instances`` reports pids that are not its own: one that does not exist here and one of an
unrelated live process (this test process). The real-Gym variant puts a proxy in front of the shared
Gym's head that rewrites the pids it reports the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml  # noqa: F401  (imported before pytester's in-process runs, which drop modules they imported)

from pytest_gym.core.endpoint import GymEndpoint, ServerInstance
from pytest_gym.core.pids import pid_alive, process_start_time
from pytest_gym.rollout.health import FAILED_CHECKS, Health
from pytest_gym.rollout.http import HTTPPool
from tests.helpers.realgym import RealGym, attach


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# -- start mode: local pids, compared with their start times ---------------------------------------


def test_a_pid_names_one_process_only_with_its_start_time() -> None:
    me = os.getpid()
    started = process_start_time(me)
    assert started is not None
    assert started == process_start_time(me)
    assert pid_alive(me)
    assert pid_alive(me, started)
    assert not pid_alive(me, started + 1)  # the pid now names another process: a recycled pid
    gone = dead_pid()
    assert process_start_time(gone) is None
    assert not pid_alive(gone)


def test_only_pids_this_run_started_are_checked() -> None:
    servers = [ServerInstance("gone", "t", "g", "http://127.0.0.1:1", dead_pid())]
    servers.append(ServerInstance("me", "t", "m", "http://127.0.0.1:2", os.getpid()))
    attached = GymEndpoint("http://127.0.0.1:3", servers, {})
    assert attached.dead_servers() == []  # attach mode: the pids are Gym's host's, not ours
    started = GymEndpoint.from_json(json.loads(json.dumps(attached.to_json())))
    started.mark_local()
    assert started.servers[1].start_time == process_start_time(os.getpid())
    assert [s.process_name for s in started.dead_servers()] == ["gone"]
    started.servers[1].start_time = (started.servers[1].start_time or 0) + 1  # as if the pid were reused
    assert [s.process_name for s in started.dead_servers()] == ["gone", "me"]
    assert GymEndpoint.from_json(started.to_json()) == started  # shared with xdist workers as JSON


# -- a fake Gym to attach to ------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeGym, role: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake
        self.role = role
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(self, status: int, data: Any) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        fake = self.server.fake
        if self.server.role == "head" and self.path == "/server_instances":
            self._send(200, fake.instances())
        elif self.server.role == "head" and self.path == "/global_config_dict_yaml":
            self._send(200, "{}\n")
        else:
            self._send(200, {"status": "ok"})  # /readyz, /health, /

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        fake = self.server.fake
        with fake.lock:
            fake.runs += 1
            if fake.stop_resources_at is not None and fake.runs >= fake.stop_resources_at and fake.resources_up:
                fake.resources_up = False
                fake.resources.stop()
        time.sleep(fake.delay)
        if not fake.resources_up:  # the agent could not reach its resources server to verify
            self._send(500, {"detail": "verifier unreachable"})
        else:
            self._send(200, {"reward": 1.0, "response": {"usage": {"total_tokens": 3}}})


class FakeGym:
    """A head reporting an agent and a resources server with pids that are not theirs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.delay = 0.0
        self.runs = 0
        self.stop_resources_at: int | None = None
        self.resources_up = True
        self.pids = {"fake_agent": dead_pid(), "fake_resources": os.getpid()}
        self.head = _Server(self, "head")
        self.agent = _Server(self, "agent")
        self.resources = _Server(self, "resources")

    def instances(self) -> list[dict[str, Any]]:
        return [
            {"process_name": "fake_agent", "server_type": "responses_api_agents", "name": "fake_agent",
             "url": self.agent.url, "pid": self.pids["fake_agent"]},
            {"process_name": "fake_resources", "server_type": "resources_servers", "name": "fake_resources",
             "url": self.resources.url, "pid": self.pids["fake_resources"]},
        ]  # fmt: skip

    def close(self) -> None:
        for server in (self.head, self.agent, self.resources):
            if server is not self.resources or self.resources_up:
                server.stop()


@pytest.fixture
def fake_gym(pytester: pytest.Pytester) -> Iterator[FakeGym]:
    rows = "".join(json.dumps({"responses_create_params": {"input": f"q{i}"}}) + "\n" for i in range(8))
    (pytester.path / "data.jsonl").write_text(rows)
    pytester.makeini("[pytest]\n")
    fake = FakeGym()
    yield fake
    fake.close()


def attach_fake(fake: FakeGym, *args: str) -> tuple[str, ...]:
    return ("--gym-url", fake.head.url, "--gym-agent", "fake_agent", "--gym-dataset", "data.jsonl", *args)


def test_attached_trials_pass_whatever_pids_gym_reports(pytester: pytest.Pytester, fake_gym: FakeGym) -> None:
    """Pids of another machine: one that does not exist here, one of an unrelated live process."""
    fake_gym.delay = 0.2  # 8 trials one at a time: the run outlasts a watchdog's first look (1 s)
    result = pytester.runpytest(*attach_fake(fake_gym, "--gym-concurrency", "1"))
    result.assert_outcomes(passed=8)
    assert "no longer running" not in result.stdout.str()


def test_an_attached_server_that_stops_answering_fails_the_rest_fast_naming_it(
    pytester: pytest.Pytester, fake_gym: FakeGym
) -> None:
    """Detected through HTTP: the pids reported are of a live local process, which would hide a dead server."""
    fake_gym.pids = {"fake_agent": os.getpid(), "fake_resources": os.getpid()}
    fake_gym.stop_resources_at = 3
    started = time.monotonic()
    result = pytester.runpytest(*attach_fake(fake_gym, "--gym-concurrency", "1", "--gym-trial-timeout", "60", "-v"))
    assert time.monotonic() - started < 20
    result.assert_outcomes(passed=2, errors=6)
    url = fake_gym.resources.url
    result.stdout.fnmatch_lines([f"*Gym server fake_resources at {url} (connection refused) is not answering*"])
    assert result.stdout.str().count("is not answering") >= 6
    assert fake_gym.runs == 3  # after the first failure no trial was sent to the broken deployment


# -- Health on its own: refusals and repeated failures -------------------------------------------------


def _silent_listener() -> socket.socket:
    """Accepts connections (the kernel does) and never answers: a hung server."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def test_a_server_that_keeps_failing_its_probe_is_dead_after_repeated_checks(fake_gym: FakeGym) -> None:
    hung = _silent_listener()
    try:
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        servers = [ServerInstance("hung", "t", "hung", url, 1), ServerInstance("ok", "t", "ok", fake_gym.agent.url, 1)]
        endpoint = GymEndpoint(fake_gym.head.url, servers, {})

        async def checks() -> list[str | None]:
            pool = HTTPPool()
            health = Health(endpoint, pool, probe_timeout_s=0.2)
            assert not health.watches  # attach mode: no pid watchdog
            try:
                return [await health.check() for _ in range(FAILED_CHECKS)]
            finally:
                await pool.aclose()

        results = asyncio.run(checks())
    finally:
        hung.close()
    assert results[:-1] == [None] * (FAILED_CHECKS - 1)
    assert results[-1] == (
        f"Gym server hung at {url} (no answer within 0.2 s; {FAILED_CHECKS} checks in a row) is not answering"
    )


def test_concurrent_checks_share_one_round_of_probes(fake_gym: FakeGym) -> None:
    fake_gym.resources.stop()
    fake_gym.resources_up = False
    endpoint = GymEndpoint(fake_gym.head.url, [ServerInstance("r", "t", "r", fake_gym.resources.url, None)], {})

    async def checks() -> tuple[list[str | None], bool]:
        pool = HTTPPool()
        health = Health(endpoint, pool)
        signal = health.signal()
        try:
            results = await asyncio.gather(*(health.check() for _ in range(20)))
            return list(results), signal.done()
        finally:
            await pool.aclose()

    started = time.monotonic()
    results, signalled = asyncio.run(checks())
    assert time.monotonic() - started < 2  # one round (a refusal, 0.25 s, a refusal), not twenty
    assert len(set(results)) == 1
    assert results[0] is not None
    assert "connection refused" in results[0]
    assert signalled


# -- the real Gym behind a proxy that reports pids that are not Gym's -------------------------------


class _PidProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, target: str) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.target = target
        self.fake_pids = [dead_pid(), os.getpid(), 1]
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _PidProxy

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        with urllib.request.urlopen(self.server.target + self.path, timeout=30) as upstream:
            status, body = upstream.status, upstream.read()
        if self.path == "/server_instances":
            instances = json.loads(body)
            for i, instance in enumerate(instances):
                instance["pid"] = self.server.fake_pids[i % len(self.server.fake_pids)]
            body = json.dumps(instances).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.gym
def test_attaching_to_a_real_gym_whose_pids_are_not_ours(
    pytester: pytest.Pytester, example: Path, gym: RealGym
) -> None:
    gym.script(latency_ms=300)  # 5 trials one at a time: longer than a watchdog's first look (1 s)
    proxy = _PidProxy(gym.url)
    try:
        args = attach(gym, "--gym-concurrency", "1")
        result = pytester.runpytest("--gym-url", f"http://127.0.0.1:{proxy.server_address[1]}", *args[2:])
    finally:
        proxy.shutdown()
        proxy.server_close()
    result.assert_outcomes(passed=2, failed=3)
    assert gym.policy_calls() == 5
