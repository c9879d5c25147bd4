"""The dispatcher's keep-alive HTTP/1.1 client, against a raw socket server that answers as scripted."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import Task
from pytest_gym.core.endpoint import GymEndpoint
from pytest_gym.core.outcome import TrialSpec
from pytest_gym.gym.deployment import free_port
from pytest_gym.rollout.dispatcher import Dispatcher
from pytest_gym.rollout.http import BodyTooLarge, HTTPPool, ProtocolError

Answer = Callable[[bytes], bytes]


def response(body: bytes, status: str = "200 OK", headers: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body


class RawServer:
    """Reads one request at a time per connection and writes whatever ``answer(request)`` returns."""

    def __init__(self) -> None:
        self.answer: Answer = lambda request: response(b'{"reward": 1.0}')
        self.close_after = False
        self.connections = 0
        self.requests: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/run"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                request, buffer = head + b"\r\n\r\n" + rest[:length], rest[length:]
                self.requests.append(request)
                try:
                    conn.sendall(self.answer(request))
                except OSError:
                    return
                if self.close_after:
                    return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server() -> Iterator[RawServer]:
    raw = RawServer()
    yield raw
    raw.close()


def post(url: str, body: bytes = b"{}", max_body: int = 1 << 20, times: int = 1) -> list[tuple[int, bytes]]:
    async def go() -> list[tuple[int, bytes]]:
        pool = HTTPPool()
        try:
            return [(await pool.request("POST", url, body, max_body))[:2] for _ in range(times)]
        finally:
            await pool.aclose()

    return asyncio.run(go())


def test_content_length_answers_reuse_one_connection(server: RawServer) -> None:
    assert post(server.url, b'{"a": 1}', times=3) == [(200, b'{"reward": 1.0}')] * 3
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /run HTTP/1.1\r\n")
    assert b"Content-Type: application/json\r\n" in first
    assert first.endswith(b'\r\n\r\n{"a": 1}')


def test_chunked_answers_are_joined(server: RawServer) -> None:
    server.answer = lambda request: (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n"
    )
    assert post(server.url, times=2) == [(200, b"hello world")] * 2
    assert server.connections == 1


def test_connection_close_is_honoured(server: RawServer) -> None:
    server.answer = lambda request: response(b"{}", headers="Connection: close\r\n")
    server.close_after = True
    assert post(server.url, times=3) == [(200, b"{}")] * 3
    assert server.connections == 3


def test_a_connection_the_server_closed_while_idle_is_not_reused(server: RawServer) -> None:
    server.close_after = True  # closes after answering, without saying so
    assert post(server.url, times=3) == [(200, b'{"reward": 1.0}')] * 3
    assert server.connections == 3


def test_close_delimited_body_and_informational_answers(server: RawServer) -> None:
    server.answer = lambda request: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 500 Oops\r\n\r\nboom"
    server.close_after = True
    assert post(server.url) == [(500, b"boom")]


@pytest.mark.parametrize(
    "answer",
    [
        response(b"x" * 2048),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + b"x" * 2048 + b"\r\n0\r\n\r\n",
    ],
    ids=["content-length", "chunked"],
)
def test_a_body_over_the_limit_is_refused(server: RawServer, answer: bytes) -> None:
    server.answer = lambda request: answer
    with pytest.raises(BodyTooLarge) as excinfo:
        post(server.url, max_body=1024)
    assert excinfo.value.status == 200


def test_garbage_is_a_protocol_error(server: RawServer) -> None:
    server.answer = lambda request: b"SSH-2.0-OpenSSH\r\n\r\n"
    with pytest.raises(ProtocolError, match="bad status line"):
        post(server.url)


def test_a_refused_connection_is_an_os_error() -> None:
    with pytest.raises(ConnectionRefusedError):
        post(f"http://127.0.0.1:{free_port()}/run")


# -- the dispatcher's faults over this client ------------------------------------------------------


def run_one(url: str, tmp_path: Path, row: dict[str, Any] | None = None, timeout: float = 10) -> Any:
    data = tmp_path / "d.jsonl"
    data.write_text('{"responses_create_params": {}}\n')
    task = Task(path=data, line=1, offset=0, hash="ab" * 32, row_override=row)
    spec = TrialSpec(nodeid="d.jsonl::abab[r0]", task=task, task_index=0, repeat=0, agent="agent")
    endpoint = GymEndpoint(head_url="http://127.0.0.1:1", servers=[], run_routes={"agent": url})
    dispatcher = Dispatcher(endpoint, concurrency=1, trial_timeout=timeout, default_agent=None)
    try:
        return dispatcher.result(spec)
    finally:
        dispatcher.close()


def test_dispatcher_reports_a_reward(server: RawServer, tmp_path: Path) -> None:
    server.answer = lambda request: response(b'{"reward": 0.5, "response": {"usage": {"total_tokens": 3}}}')
    outcome = run_one(server.url, tmp_path)
    assert (outcome.reward, outcome.tokens, outcome.error) == (0.5, {"total_tokens": 3}, None)


@pytest.mark.parametrize(
    ("answer", "error_class", "message"),
    [
        (response(b"x" * (33 * 1024 * 1024)), "bad_body", "exceeds 32 MiB; refusing to read it"),
        (response(b"boom", "503 Busy"), "http_status", "HTTP 503 from"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "connection", "closed the connection mid-answer"),
    ],
    ids=["too-large", "status", "cut-short"],
)
def test_dispatcher_faults(server: RawServer, tmp_path: Path, answer: bytes, error_class: str, message: str) -> None:
    server.answer = lambda request: answer
    server.close_after = True
    outcome = run_one(server.url, tmp_path)
    assert outcome.error_class == error_class
    assert message in outcome.error


def test_dispatcher_timeout_and_refused(tmp_path: Path) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        outcome = run_one(f"http://127.0.0.1:{silent.getsockname()[1]}/run", tmp_path, timeout=0.3)
    finally:
        silent.close()
    assert outcome.error_class == "timeout"
    assert "within 0.3 s (--gym-trial-timeout)" in outcome.error
    refused = run_one(f"http://127.0.0.1:{free_port()}/run", tmp_path)
    assert refused.error_class == "connection"
    assert "cannot reach" in refused.error


def test_a_row_that_is_not_json_is_a_setup_fault(server: RawServer, tmp_path: Path) -> None:
    outcome = run_one(server.url, tmp_path, row={"responses_create_params": {}, "x": float("nan")})
    assert outcome.error_class == "setup"
    assert "cannot be sent as JSON" in outcome.error
    assert server.requests == []
