"""The plugin's one HTTP/1.1 client (pool and ``fetch``), against the stand-in's byte-level server answering as
scripted."""

from __future__ import annotations

import asyncio
import email.utils
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import Task
from pytest_gym.core.endpoint import GymEndpoint
from pytest_gym.core.outcome import TrialSpec
from pytest_gym.gym.startargs import free_port
from pytest_gym.rollout.dispatcher import Dispatcher
from pytest_gym.rollout.http import BodyTooLarge, FetchError, HTTPPool, ProtocolError, fetch
from pytest_gym.rollout.retry import MAX_RETRY_AFTER_S, retry_after_s, retry_delay_s
from tests.helpers.standin import RawServer, response

Answer = Callable[[bytes], bytes]


@pytest.fixture
def server() -> Iterator[RawServer]:
    raw = RawServer()
    yield raw
    raw.close()


def post(
    url: str, body: bytes | None = b"{}", max_body: int = 1 << 20, times: int = 1, method: str = "POST"
) -> list[tuple[int, bytes]]:
    async def go() -> list[tuple[int, bytes]]:
        pool = HTTPPool()
        try:
            return [(await pool.request(method, url, body, max_body))[:2] for _ in range(times)]
        finally:
            await pool.aclose()

    return asyncio.run(asyncio.wait_for(go(), 5))


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


def run_one(url: str, tmp_path: Path, row: dict[str, Any] | None = None, timeout: float = 10, retries: int = 0) -> Any:
    data = tmp_path / "d.jsonl"
    data.write_text('{"responses_create_params": {}}\n')
    task = Task(path=data, line=1, offset=0, hash="ab" * 32, row_override=row)
    spec = TrialSpec(nodeid="d.jsonl::abab[r0]", task=task, task_index=0, repeat=0, agent="agent")
    endpoint = GymEndpoint(head_url="http://127.0.0.1:1", servers=[], run_routes={"agent": url})
    dispatcher = Dispatcher(endpoint, concurrency=1, trial_timeout=timeout, default_agent=None, retries=retries)
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


# -- answers without a body, hostile framing ---------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    ],
    ids=["204", "304", "103-then-204"],
)
def test_answers_without_a_body_do_not_wait_for_the_connection_to_close(server: RawServer, answer: bytes) -> None:
    server.answer = lambda request: answer  # and the connection stays open
    status = int(answer.rsplit(b"HTTP/1.1 ", 1)[1][:3])
    assert post(server.url, times=2) == [(status, b"")] * 2
    assert server.connections == 1


def test_a_head_request_reads_no_body(server: RawServer) -> None:
    server.answer = lambda request: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
    assert post(server.url, None, method="HEAD", times=2) == [(200, b"")] * 2
    assert server.requests[0].startswith(b"HEAD /run HTTP/1.1\r\n")


@pytest.mark.parametrize(
    ("size", "data", "match"),
    [
        (b"-5", b"hello", "bad chunk size"),
        (b"0x10", b"0123456789abcdef", "bad chunk size"),
        (b"+5", b"hello", "bad chunk size"),
        (b"1_0", b"0123456789abcdef", "bad chunk size"),
        (b"F" * 17, b"x", "bad chunk size"),
        (b"1" * 100_000, b"x", "longer than 64 KiB"),
    ],
    ids=["negative", "0x-prefix", "plus-sign", "underscore", "17-digits", "100k-digits"],
)
def test_malformed_chunk_sizes_are_protocol_errors(server: RawServer, size: bytes, data: bytes, match: str) -> None:
    server.answer = lambda request: (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size + b"\r\n" + data + b"\r\n0\r\n\r\n"
    )
    with pytest.raises(ProtocolError, match=match):
        post(server.url, max_body=1 << 30)


def test_an_over_long_header_line_is_a_protocol_error(server: RawServer) -> None:
    server.answer = lambda request: b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 100_000 + b"\r\nContent-Length: 2\r\n\r\n{}"
    with pytest.raises(ProtocolError, match="longer than 64 KiB"):
        post(server.url)


def test_an_over_long_header_line_is_a_connection_fault_that_is_retried(server: RawServer, tmp_path: Path) -> None:
    server.answer = lambda request: b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 100_000 + b"\r\nContent-Length: 2\r\n\r\n{}"
    outcome = run_one(server.url, tmp_path, retries=1)
    assert outcome.error_class == "connection"
    assert "longer than 64 KiB" in outcome.error
    assert "(after 2 attempts)" in outcome.error
    assert len(server.requests) == 2


# -- Retry-After ------------------------------------------------------------------------------------


def _http_date(in_s: float) -> str:
    return email.utils.formatdate(time.time() + in_s, usegmt=True)


@pytest.mark.parametrize(
    ("status", "retry_after", "trial_timeout", "low", "high"),
    [
        ("503 Busy", "1", 10, 0.95, 1.6),
        ("429 Too Many", "date:2", 10, 0.95, 2.6),
        ("503 Busy", "3600", 1.2, 1.1, 1.9),  # capped by the trial timeout
    ],
    ids=["seconds", "http-date", "capped"],
)
def test_retry_after_is_honoured_within_bounds(
    server: RawServer, tmp_path: Path, status: str, retry_after: str, trial_timeout: float, low: float, high: float
) -> None:
    def answer(request: bytes) -> bytes:
        if len(server.requests) > 1:
            return response(b'{"reward": 1.0}')
        value = _http_date(float(retry_after[5:])) if retry_after.startswith("date:") else retry_after
        return response(b"busy", status, f"Retry-After: {value}\r\n")

    server.answer = answer
    outcome = run_one(server.url, tmp_path, timeout=trial_timeout, retries=1)
    assert (outcome.reward, outcome.attempts) == (1.0, 2)
    gap = server.times[1] - server.times[0]
    assert low <= gap <= high  # the plain backoff of a first retry is 0.25-0.5 s


def test_retry_after_values() -> None:
    now = time.time()
    assert retry_after_s("7") == 7.0
    assert retry_after_s(" 0 ") == 0.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert 28 <= (retry_after_s(date, now) or 0) <= 31
    assert retry_after_s(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0
    for garbage in (None, "", "-5", "soon", "1.5", "Mon, 99 Foo 2026"):
        assert retry_after_s(garbage) is None
    assert retry_delay_s(1, 10_000.0, 1e9) == MAX_RETRY_AFTER_S
    assert retry_delay_s(1, 10_000.0, 3.0) == 3.0
    assert 0.25 <= retry_delay_s(1, None, 3.0) <= 0.5


# -- fetch: the same protocol code, blocking ------------------------------------------------------


def test_fetch_sends_extra_headers_and_no_body_framing_on_get(server: RawServer) -> None:
    server.answer = lambda request: response(b'{"ok": true}')
    assert fetch("GET", server.url, headers={"Authorization": "Bearer t0k"}) == (200, b'{"ok": true}')
    request = server.requests[0]
    assert request.startswith(b"GET /run HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer t0k\r\n" in request
    assert b"Content-Length" not in request
    assert fetch("POST", server.url, b"[1]", 5) == (200, b'{"ok": true}')
    assert server.requests[1].endswith(b"Content-Length: 3\r\n\r\n[1]")


def test_fetch_does_not_wait_for_eof_after_a_204(server: RawServer) -> None:
    server.answer = lambda request: b"HTTP/1.1 204 No Content\r\n\r\n"
    started = time.monotonic()
    assert fetch("GET", server.url, timeout=3) == (204, b"")
    assert time.monotonic() - started < 1


def test_fetch_failures_are_fetch_errors(server: RawServer) -> None:
    with pytest.raises(FetchError, match="ConnectionRefusedError"):
        fetch("GET", f"http://127.0.0.1:{free_port()}/")
    server.answer = lambda request: b"SSH-2.0-OpenSSH\r\n\r\n"
    with pytest.raises(FetchError, match="bad status line"):
        fetch("GET", server.url)
    server.answer = lambda request: b""  # says nothing, keeps the connection open
    with pytest.raises(FetchError, match=r"within 0\.3 s"):
        fetch("GET", server.url, timeout=0.3)
    with pytest.raises(FetchError, match="not a valid HTTP header"):
        fetch("GET", server.url, headers={"X-A": "1\r\nX-Injected: 1"})
    with pytest.raises(FetchError, match="not an http"):
        fetch("GET", "ftp://127.0.0.1/")


def test_fetch_inside_a_running_event_loop(server: RawServer) -> None:
    async def inside() -> tuple[int, bytes]:
        return fetch("GET", server.url)

    assert asyncio.run(inside()) == (200, b'{"reward": 1.0}')


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (made with the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_https_through_the_pool_and_fetch(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    tls = RawServer(tls=context)
    try:
        assert tls.url.startswith("https://")
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED"):
            fetch("GET", tls.url)  # not trusted by default
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        assert fetch("GET", tls.url) == (200, b'{"reward": 1.0}')
        assert run_one(tls.url, tmp_path).reward == 1.0
        assert tls.requests[-1].startswith(b"POST /run HTTP/1.1\r\n")
    finally:
        tls.close()
