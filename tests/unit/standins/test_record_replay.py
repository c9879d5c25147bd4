"""Record, replay and re-score: canonical keys, occurrences, the cassette file, misses, and the servers.

The "real" model is the scripted policy (in-process for the unit tests, a process started like the
session starts it for the end-to-end one); the recorder runs in-process or as its CLI.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from pytest_gym.core.jsonl import AppendLog
from pytest_gym.core.settings import GymSettings
from pytest_gym.process.groups import stop_supervised
from pytest_gym.runfolder.layout import CASSETTE_FILE, MISSES_FILE
from pytest_gym.runfolder.scrub import scrub_run_folder
from pytest_gym.standins.cassette import (
    DEFAULT_IGNORE,
    Cassette,
    Recording,
    canonical_request,
    differences,
    flatten,
    iter_recordings,
    mask_strings,
    misses_for_row,
    read_misses,
    request_hash,
)
from pytest_gym.standins.launch import start_policy, start_recorder
from pytest_gym.standins.policy import PolicyServer, Script
from pytest_gym.standins.recorder import MISS_STATUS, RecorderConfig, RecorderServer, main

MARKER = "sk-replay-MARKER-5d1e0b"


# --- helpers -------------------------------------------------------------------------------------


def call(
    url: str, body: Any = None, method: str = "POST", headers: dict[str, str] | None = None
) -> tuple[int, str, bytes]:
    """(status, content type, body bytes) of one request on a fresh connection."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    data = json.dumps(body).encode() if body is not None else None
    try:
        connection.request(
            method, parts.path, body=data, headers={"Content-Type": "application/json", **(headers or {})}
        )
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def key_of(route: str, body: Any, ignore: tuple[str, ...] = DEFAULT_IGNORE) -> str:
    return request_hash(canonical_request("POST", route, body, ignore))


def text_of(data: bytes) -> str:
    """The answer text of a Responses or Chat Completions body."""
    answer = json.loads(data)
    if "output" in answer:
        return str(answer["output"][0]["content"][0]["text"])
    return str(answer["choices"][0]["message"]["content"])


class Running:
    """A server on a background thread, stopped (and closed) at the end of the test."""

    def __init__(self, server: PolicyServer | RecorderServer) -> None:
        self.server = server
        self.thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return self.server.url

    def stats(self) -> dict[str, Any]:
        status, _, data = call(self.url.removesuffix("/v1") + "/_stats", method="GET")
        assert status == 200
        result: dict[str, Any] = json.loads(data)
        return result

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def servers() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for running in reversed(started):
        running.stop()


@pytest.fixture
def policy(servers: list[Running]) -> Running:
    running = Running(PolicyServer("127.0.0.1", 0, Script(answer="\\boxed{E}")))
    servers.append(running)
    return running


def recorder(servers: list[Running], **config: Any) -> Running:
    running = Running(RecorderServer("127.0.0.1", 0, RecorderConfig(**config)))
    servers.append(running)
    return running


def script(policy: Running, **changes: Any) -> None:
    status, _, data = call(policy.url.removesuffix("/v1") + "/_script", changes, method="PUT")
    assert status == 200, data


def prompt(n: int, template: str = "Answer with \\boxed{X}, X one of the letters.") -> dict[str, Any]:
    """An mcqa-like Responses request: question n in a prompt template."""
    question = f"Question {n}: which option is the {n}th? A) one B) two C) three D) four E) five."
    return {"model": "m", "input": [{"role": "user", "content": f"{question}\n{template}"}], "temperature": 0.0}


# --- canonical keys ------------------------------------------------------------------------------


def test_volatile_fields_and_key_order_do_not_change_the_key() -> None:
    base = {
        "model": "m",
        "input": [
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
        ],
        "temperature": 1.0,
        "max_output_tokens": 64,
    }
    noisy = {
        "max_output_tokens": 64,
        "temperature": 1,  # 1 and 1.0 are the same temperature
        "user": "run-42",
        "metadata": {"trial": "x"},
        "store": False,
        "stream_options": {"include_usage": True},
        "instructions": None,  # null members are left out
        "input": [
            {"content": "hi", "role": "user", "type": "message", "id": "msg_fresh"},
            {"arguments": "{}", "name": "f", "call_id": "c1", "id": "fc_2", "type": "function_call"},
        ],
        "model": "m",
    }
    assert key_of("/responses", base) == key_of("/responses", noisy)
    assert key_of("/responses", base) != key_of("/chat/completions", base)


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.7},
        {"top_p": 0.9},
        {"max_output_tokens": 65},
        {"seed": 3},
        {"model": "other"},
        {"stream": True},
        {"tools": [{"type": "function", "name": "f", "parameters": {}}]},
        {"input": [{"type": "message", "role": "user", "content": "hi!"}]},
    ],
)
def test_model_input_tools_and_sampling_parameters_change_the_key(change: dict[str, Any]) -> None:
    base = {"model": "m", "input": [{"type": "message", "role": "user", "content": "hi"}], "temperature": 1.0}
    assert key_of("/responses", base) != key_of("/responses", {**base, "max_output_tokens": 64} | change)
    assert key_of("/responses", base) != key_of("/responses", base | change)


def test_an_ignore_list_leaves_more_fields_out() -> None:
    a = {"model": "m", "input": "hi", "temperature": 0.2, "tools": [{"name": "f", "description": "old"}]}
    b = {"model": "m", "input": "hi", "temperature": 0.9, "tools": [{"name": "f", "description": "new"}]}
    assert key_of("/responses", a) != key_of("/responses", b)
    assert key_of("/responses", a, ("temperature", "tools.*.description")) == key_of(
        "/responses", b, ("temperature", "tools.*.description")
    )


def test_masking_checks_values_not_field_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)
    body = {"max_tokens": 64, "input": f"my key is {MARKER}", "headers": "Bearer abcdef1234"}
    masked = mask_strings(body)
    assert masked == {"max_tokens": 64, "input": "my key is ***", "headers": "Bearer ***"}


# --- the cassette file ---------------------------------------------------------------------------


def recording(n: int, text: str = "x") -> Recording:
    body = prompt(n)
    return Recording(
        "POST", "/responses", body, 200, "application/json", json.dumps({"t": text}), key_of("/responses", body)
    )


def test_every_append_is_one_whole_line_visible_at_once(tmp_path: Path) -> None:
    log = AppendLog(tmp_path / CASSETTE_FILE)
    log.append(recording(1).to_json())
    assert (tmp_path / CASSETTE_FILE).read_bytes().count(b"\n") == 1  # no buffer: readable before close
    log.append(recording(2).to_json())
    assert len(Cassette.load(tmp_path)) == 2
    log.close()


def test_a_torn_last_line_is_skipped_and_the_next_append_starts_a_fresh_line(tmp_path: Path) -> None:
    path = tmp_path / CASSETTE_FILE
    log = AppendLog(path)
    for n in range(3):
        log.append(recording(n).to_json())
    log.close()
    whole = path.read_bytes()
    path.write_bytes(whole + json.dumps(recording(9).to_json()).encode()[:57])  # a crash mid-write
    torn = Cassette.load(path)
    assert (len(torn), torn.skipped_lines) == (3, 1)
    again = AppendLog(path)
    again.append(recording(4).to_json())
    again.close()
    loaded = Cassette.load(tmp_path)
    assert (len(loaded), loaded.skipped_lines) == (4, 1)
    assert [r.request["input"][0]["content"][:11] for r in iter_recordings(path)] == [
        "Question 0:", "Question 1:", "Question 2:", "Question 4:",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "fields",
    [
        {"status": 1e999},
        {"status": True},
        {"status": "200"},
        {"status": 7},
        {"occurrence": 1e999},
        {"occurrence": True},
    ],
)
def test_a_recording_whose_status_or_occurrence_is_not_a_whole_number_is_a_skipped_line(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    """``true`` would be replayed as HTTP status 1; Infinity stopped the recorder with an OverflowError."""
    path = tmp_path / CASSETTE_FILE
    lines = [json.dumps(recording(0).to_json()), json.dumps({**recording(1).to_json(), **fields})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    loaded = Cassette.load(path)
    assert (len(loaded), loaded.skipped_lines) == (1, 1)
    assert len(list(iter_recordings(path))) == 1


@pytest.mark.parametrize("fields", [{"occurrence": 1e999}, {"recorded": 1e999}, {"occurrence": True}])
def test_a_miss_whose_counts_are_not_whole_numbers_is_skipped(tmp_path: Path, fields: dict[str, Any]) -> None:
    miss = {"time": 1.0, "hash": "h", "route": "/v1/responses", "occurrence": 0, "recorded": 1, "message": "m"}
    lines = [json.dumps(miss), json.dumps({**miss, **fields})]
    (tmp_path / MISSES_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert [m.occurrence for m in read_misses(tmp_path)] == [0]


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    log = AppendLog(tmp_path / CASSETTE_FILE)
    big = "y" * 200_000  # larger than a pipe buffer: a write that is not atomic by itself
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: log.append(recording(n, big).to_json()), range(40)))
    log.close()
    loaded = Cassette.load(tmp_path)
    assert (len(loaded), loaded.skipped_lines) == (40, 0)


def test_take_hands_out_each_occurrence_once_in_arrival_order() -> None:
    cassette = Cassette()
    for text in ("first", "second", "third"):
        cassette.add(recording(1, text))
    key = key_of("/responses", prompt(1))
    with ThreadPoolExecutor(8) as pool:
        takes = list(pool.map(lambda _: cassette.take(key), range(8)))
    served = sorted(t.occurrence for t in takes if t.recording is not None)
    assert served == [0, 1, 2]
    assert sorted(t.occurrence for t in takes if t.recording is None) == [3, 4, 5, 6, 7]
    assert all(t.recorded == 3 for t in takes)
    fresh = Cassette()
    for text in ("first", "second", "third"):
        fresh.add(recording(1, text))
    assert [json.loads(fresh.take(key).recording.body)["t"] for _ in range(3)] == ["first", "second", "third"]  # type: ignore[union-attr]


# --- nearest-miss diagnostics --------------------------------------------------------------------


def test_the_nearest_recording_is_the_same_row_and_the_changed_field_is_named() -> None:
    cassette = Cassette()
    for n in range(20):
        cassette.add(recording(n))
    changed = prompt(7, template="Reply with \\boxed{X}, X one of the letters.")
    _, canonical = cassette.key("POST", "/responses", changed)
    nearest = cassette.nearest(canonical)
    assert nearest is not None
    assert nearest[0] == key_of("/responses", prompt(7))
    (diff,) = nearest[1]
    assert diff.startswith("input[0].content differs: recorded '...")
    assert "Answer with" in diff.split(" vs now ")[0]
    assert "Reply with" in diff.split(" vs now ")[1]
    assert len(diff) < 250


def test_differences_are_bounded_and_say_what_was_added_and_removed() -> None:
    recorded = flatten({"a": 1, "b": "x" * 5000, "c": [1, 2], "gone": True})
    now = flatten({"a": 2, "b": "y" * 5000, "c": [1, 2, 3], "new": "z"})
    found = differences(recorded, now)
    assert found[:2] == [
        "a differs: recorded 1 vs now 2",
        f"b differs: recorded '{'x' * 60}...' vs now '{'y' * 60}...'",
    ]
    assert found[2:] == ["c[2] is new (now 3)", "(+2 more differing fields)"]  # new, gone
    assert len(found) == 4
    assert differences(flatten({"t": 0.5}), flatten({"t": 0.7})) == ["t differs: recorded 0.5 vs now 0.7"]
    assert differences(flatten({"t": 0.5}), flatten({})) == ["t missing now (recorded 0.5)"]


# --- the servers: record through the proxy, replay with the upstream gone --------------------------


def test_record_then_replay_offline_gives_the_same_answers(
    policy: Running, servers: list[Running], tmp_path: Path
) -> None:
    script(policy, answers=[f"\\boxed{{{c}}}" for c in "ABCDEFG"])
    rec = recorder(servers, mode="record", run_dir=tmp_path / "rec", upstream=policy.url)
    requests = [prompt(n) for n in range(5) for _ in range(4)]  # 5 rows x 4 repeats, sent concurrently
    with ThreadPoolExecutor(8) as pool:
        recorded = list(pool.map(lambda body: call(f"{rec.url}/responses", body), requests))
    assert {status for status, _, _ in recorded} == {200}
    assert rec.stats()["upstream_calls"] == policy.stats()["calls"] == 20
    lines = list(iter_recordings(tmp_path / "rec"))
    assert len(lines) == 20
    by_key: dict[str, list[int]] = {}
    for line in lines:
        by_key.setdefault(line.hash, []).append(line.occurrence)
    assert all(occurrences == [0, 1, 2, 3] for occurrences in by_key.values())  # file order is occurrence order

    rec.stop()
    servers.remove(rec)
    policy.stop()
    servers.remove(policy)
    rep = recorder(servers, mode="replay", run_dir=tmp_path / "rep", cassette=tmp_path / "rec")
    with ThreadPoolExecutor(8) as pool:
        replayed = list(pool.map(lambda body: call(f"{rep.url}/responses", body), requests))
    for n in range(5):  # each row gets exactly its recorded answers: the same bytes, each once
        want = Counter(data for (_, _, data), body in zip(recorded, requests, strict=True) if body == prompt(n))
        got = Counter(data for (_, _, data), body in zip(replayed, requests, strict=True) if body == prompt(n))
        assert got == want
    stats = rep.stats()
    assert (stats["calls"], stats["hits"], stats["misses"], stats["upstream_calls"]) == (20, 20, 0, 0)
    status, _, data = call(f"{rep.url}/responses", prompt(0))  # a fifth repeat: nothing left to hand out
    assert status == MISS_STATUS
    assert "was recorded 4 time(s) and this is identical request number 5" in json.loads(data)["error"]["message"]


def test_a_leased_recorder_serves_each_run_as_one_started_for_it(
    policy: Running, servers: list[Running], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kept Gym's recorder: the recording run's lease, then a replay run's lease on the same server, each with its
    own folder, counts and stats line; a lease it cannot serve is refused and the last one stays."""
    script(policy, answers=["one", "two", "three"])
    rec = recorder(servers, mode="replay", run_dir=tmp_path / "kept", cassette=_empty_cassette(tmp_path))
    base = rec.url.removesuffix("/v1")

    def lease(**body: Any) -> tuple[int, dict[str, Any]]:
        status, _, data = call(base + "/_lease", body, method="PUT")
        answer: dict[str, Any] = json.loads(data)
        return status, answer

    status, info = lease(mode="record", run_dir=str(tmp_path / "run1"), upstream=policy.url)
    assert (status, info["mode"], info["cassette"]) == (200, "record", str(tmp_path / "run1" / CASSETTE_FILE))
    recorded = [text_of(call(f"{rec.url}/responses", prompt(1))[2]) for _ in range(3)]
    assert recorded == ["one", "two", "three"]
    status, _, data = call(base + "/_release", method="POST")
    assert (status, json.loads(data)["recorded"]) == (200, 3)
    assert len(list(iter_recordings(tmp_path / "run1"))) == 3

    status, info = lease(mode="replay", run_dir=str(tmp_path / "run2"), cassette=str(tmp_path / "run1"))
    assert (status, info["mode"], info["calls"], info["loaded"]) == (200, "replay", 0, 3)
    policy.stop()
    servers.remove(policy)
    assert [text_of(call(f"{rec.url}/responses", prompt(1))[2]) for _ in range(3)] == recorded
    assert call(f"{rec.url}/responses", prompt(2))[0] == MISS_STATUS
    assert len(read_misses(tmp_path / "run2")) == 1  # the misses go to the leasing run's folder
    assert not (tmp_path / "run2" / CASSETTE_FILE).exists()  # a replay writes no cassette

    status, refused = lease(mode="replay", run_dir=str(tmp_path / "run3"), cassette=str(tmp_path / "none"))
    assert status == 400
    assert f"the lease was refused: no cassette at {tmp_path / 'none'}" in refused["error"]["message"]
    assert lease(mode="replay", run_dir=str(tmp_path / "run3"), cassette=str(tmp_path / "run1"), port=1)[0] == 400
    assert lease(mode="record", run_dir="")[0] == 400
    assert rec.stats()["hits"] == 3  # still the second run's
    call(base + "/_release", method="POST")
    out = capsys.readouterr().out
    lines = [json.loads(line.split("stats: ", 1)[1]) for line in out.splitlines() if "recorder released" in line]
    assert [(s["mode"], s["calls"], s["hits"], s["misses"], s["upstream_calls"]) for s in lines] == [
        ("record", 3, 0, 0, 3), ("replay", 4, 3, 1, 0),
    ]  # fmt: skip
    assert "leased to " + str(tmp_path / "run2") in out


def _empty_cassette(tmp_path: Path) -> Path:
    path = tmp_path / "empty" / CASSETTE_FILE
    path.parent.mkdir()
    path.write_text("")
    return path


def test_sequential_repeats_replay_in_recorded_order(policy: Running, servers: list[Running], tmp_path: Path) -> None:
    script(policy, answers=["one", "two", "three"])
    rec = recorder(servers, mode="record", run_dir=tmp_path / "rec", upstream=policy.url)
    first = [text_of(call(f"{rec.url}/responses", prompt(1))[2]) for _ in range(3)]
    rep = recorder(servers, mode="replay", run_dir=tmp_path / "rep", cassette=tmp_path / "rec" / CASSETTE_FILE)
    assert [text_of(call(f"{rep.url}/responses", prompt(1))[2]) for _ in range(3)] == first == ["one", "two", "three"]


@pytest.mark.parametrize("route", ["/responses", "/chat/completions"])
def test_streams_and_tool_calls_replay_byte_for_byte(
    policy: Running, servers: list[Running], tmp_path: Path, route: str
) -> None:
    script(policy, tool_name="lookup", tool_arguments='{"q": "capital"}')
    rec = recorder(servers, mode="record", run_dir=tmp_path / "rec", upstream=policy.url)
    field = "input" if route == "/responses" else "messages"
    tool_turn = {"model": "m", field: [{"role": "user", "content": "look it up"}], "tools": [{"type": "function"}]}
    streamed = {"model": "m", field: [{"role": "user", "content": "stream it"}], "stream": True}
    recorded_tool = call(f"{rec.url}{route}", tool_turn)
    script(policy, tool_name="")
    recorded_stream = call(f"{rec.url}{route}", streamed)
    answer = json.loads(recorded_tool[2])
    if route == "/responses":
        assert answer["output"][0]["type"] == "function_call"
        assert answer["output"][0]["name"] == "lookup"
    else:
        assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "lookup"
    assert recorded_stream[1] == "text/event-stream"
    assert recorded_stream[2].count(b"data: ") >= 3
    assert recorded_stream[2].endswith(b"\n\n")
    policy.stop()
    servers.remove(policy)
    rep = recorder(servers, mode="replay", run_dir=tmp_path / "rep", cassette=tmp_path / "rec")
    assert call(f"{rep.url}{route}", tool_turn) == recorded_tool
    assert call(f"{rep.url}{route}", streamed) == recorded_stream
    assert rep.stats()["upstream_calls"] == 0


def test_a_stream_reaches_the_caller_while_the_model_is_still_writing(servers: list[Running], tmp_path: Path) -> None:
    """The proxy relays each chunk as it arrives (a caller's first token is not delayed to the end)."""
    release = threading.Event()

    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"data: first\n\n", b"data: [DONE]\n\n"):
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                self.wfile.flush()
                release.wait(10)
            self.wfile.write(b"0\r\n\r\n")

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        rec = recorder(
            servers, mode="record", run_dir=tmp_path, upstream=f"http://127.0.0.1:{upstream.server_address[1]}/v1"
        )
        parts = urlsplit(rec.url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        connection.request(
            "POST", "/v1/responses", body=b'{"stream": true}', headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        assert response.read1(100) == b"data: first\n\n"  # before the upstream has finished
        assert list(iter_recordings(tmp_path)) == []  # recorded only once complete
        release.set()
        assert response.read() == b"data: [DONE]\n\n"
        connection.close()
        (line,) = iter_recordings(tmp_path)
        assert line.body == "data: first\n\ndata: [DONE]\n\n"
    finally:
        release.set()
        upstream.shutdown()
        upstream.server_close()


def test_the_key_comes_from_the_environment_and_is_never_stored(
    policy: Running, servers: list[Running], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)
    script(policy, answer=f"echo {MARKER}")  # even an upstream that echoes the key
    rec = recorder(servers, mode="record", run_dir=tmp_path / "rec", upstream=policy.url)
    body = {"model": "m", "input": f"the key is {MARKER}"}
    status, _, _ = call(f"{rec.url}/responses", body, headers={"Authorization": "Bearer caller-sent-this"})
    assert status == 200
    # The upstream got our key, not the caller's header.
    assert policy.stats()["auth_sha256"] == [hashlib.sha256(f"Bearer {MARKER}".encode()).hexdigest()]
    rep = recorder(servers, mode="replay", run_dir=tmp_path / "rep", cassette=tmp_path / "rec")
    assert call(f"{rep.url}/responses", body)[0] == 200  # the masked request still finds its answer
    assert call(f"{rep.url}/responses", {"model": "m", "input": f"another {MARKER}"})[0] == MISS_STATUS
    for path in (tmp_path / "rec" / CASSETTE_FILE, tmp_path / "rep" / MISSES_FILE):
        text = path.read_text()
        assert MARKER not in text
        assert "caller-sent-this" not in text
        assert "***" in text


def test_a_miss_is_an_error_naming_the_field_and_is_logged_for_pytest(
    policy: Running, servers: list[Running], tmp_path: Path
) -> None:
    rec = recorder(servers, mode="record", run_dir=tmp_path / "rec", upstream=policy.url)
    for n in range(10):
        call(f"{rec.url}/responses", prompt(n))
    rep = recorder(servers, mode="replay", run_dir=tmp_path / "rep", cassette=tmp_path / "rec")
    changed = prompt(3, template="Answer with \\boxed{X} and nothing else.")
    status, _, data = call(f"{rep.url}/responses", changed)
    assert status == MISS_STATUS
    error = json.loads(data)["error"]
    assert error["code"] == "replay_miss"
    assert error["request_hash"] == key_of("/responses", changed)
    assert error["nearest_hash"] == key_of("/responses", prompt(3))
    assert error["message"].startswith(
        f"pytest-gym replay: no recorded answer for request {error['request_hash'][:16]}"
    )
    assert (
        "input[0].content differs: recorded '...nswer with \\boxed{X}, X one of the letters.' "
        "vs now '...nswer with \\boxed{X} and nothing else.'"
    ) in error["message"]
    status, _, data = call(f"{rep.url}/responses", {**prompt(4), "temperature": 0.3})
    assert "temperature differs: recorded 0 vs now 0.3" in json.loads(data)["error"]["message"]
    misses = read_misses(tmp_path / "rep")
    assert [m.hash for m in misses] == [
        key_of("/responses", changed),
        key_of("/responses", {**prompt(4), "temperature": 0.3}),
    ]
    row = {"responses_create_params": changed, "expected_answer": "C"}
    assert misses_for_row(misses, row) == [misses[0]]
    assert misses_for_row(misses, {"responses_create_params": prompt(3)}) == []
    assert rep.stats()["misses"] == 2
    call(f"{rep.url}/responses", {"model": "m", "input": "a plain string prompt"})
    assert misses_for_row(
        read_misses(tmp_path / "rep"), {"responses_create_params": {"input": "a plain string prompt"}}
    )


def test_passthrough_records_what_is_missing_into_a_complete_new_cassette(
    policy: Running, servers: list[Running], tmp_path: Path
) -> None:
    rec = recorder(servers, mode="record", run_dir=tmp_path / "day1", upstream=policy.url)
    for n in range(3):
        call(f"{rec.url}/responses", prompt(n))
    day2 = recorder(
        servers, mode="replay", run_dir=tmp_path / "day2", cassette=tmp_path / "day1", miss="passthrough",
        upstream=policy.url,
    )  # fmt: skip
    calls_before = policy.stats()["calls"]
    for n in range(4):  # rows 0-2 recorded, row 3 new
        assert call(f"{day2.url}/responses", prompt(n))[0] == 200
    stats = day2.stats()
    assert (stats["hits"], stats["misses"], stats["upstream_calls"], stats["recorded"]) == (3, 1, 1, 4)
    assert policy.stats()["calls"] == calls_before + 1
    assert [m.recorded for m in read_misses(tmp_path / "day2")] == [0]
    policy.stop()
    servers.remove(policy)
    day3 = recorder(servers, mode="replay", run_dir=tmp_path / "day3", cassette=tmp_path / "day2")
    assert [call(f"{day3.url}/responses", prompt(n))[0] for n in range(4)] == [200] * 4


def test_passthrough_in_place_appends_to_the_cassette_it_replays(
    policy: Running, servers: list[Running], tmp_path: Path
) -> None:
    rec = recorder(servers, mode="record", run_dir=tmp_path, upstream=policy.url)
    call(f"{rec.url}/responses", prompt(0))
    again = recorder(
        servers, mode="replay", run_dir=tmp_path, cassette=tmp_path, miss="passthrough", upstream=policy.url
    )
    for n in (0, 0, 1):  # a hit, a second repeat never recorded, a new row
        assert call(f"{again.url}/responses", prompt(n))[0] == 200
    assert [(r.request["input"][0]["content"][:11], r.occurrence) for r in iter_recordings(tmp_path)] == [
        ("Question 0:", 0), ("Question 0:", 1), ("Question 1:", 0),
    ]  # fmt: skip


def test_only_answers_worth_replaying_are_recorded(policy: Running, servers: list[Running], tmp_path: Path) -> None:
    rec = recorder(servers, mode="record", run_dir=tmp_path, upstream=policy.url)
    script(policy, fault_every=1, fault_status=500)
    assert call(f"{rec.url}/responses", prompt(1))[0] == 500  # transient: passed on, not recorded
    script(policy, fault_status=400)
    assert call(f"{rec.url}/responses", prompt(1))[0] == 400  # an answer ("context too long"): recorded
    assert [(r.status, r.occurrence) for r in iter_recordings(tmp_path)] == [(400, 0)]


def test_models_listing_is_replayed_or_made_up_and_unknown_routes_fail_fast(
    policy: Running, servers: list[Running], tmp_path: Path
) -> None:
    rec = recorder(servers, mode="record", run_dir=tmp_path / "rec", upstream=policy.url)
    call(f"{rec.url}/responses", prompt(1))
    rep = recorder(servers, mode="replay", run_dir=tmp_path / "rep", cassette=tmp_path / "rec")
    status, _, data = call(f"{rep.url}/models", method="GET")
    assert (status, [m["id"] for m in json.loads(data)["data"]]) == (200, ["m"])  # from the recorded requests
    status, _, _ = call(f"{rec.url}/models", method="GET")
    rep2 = recorder(servers, mode="replay", run_dir=tmp_path / "rep2", cassette=tmp_path / "rec")
    for _ in range(3):  # recorded once, answered every time Gym probes it
        status, _, data = call(f"{rep2.url}/models", method="GET")
        assert [m["id"] for m in json.loads(data)["data"]] == ["pytest-gym-scripted"]
    assert call(f"{rep.url}/nothing", method="GET")[0] == 400


def test_an_unreachable_upstream_is_a_502_and_nothing_is_recorded(servers: list[Running], tmp_path: Path) -> None:
    from pytest_gym.gym.startargs import free_port

    port = free_port()
    rec = recorder(servers, mode="record", run_dir=tmp_path, upstream=f"http://user:pw-{MARKER}@127.0.0.1:{port}/v1")
    status, _, data = call(f"{rec.url}/responses", prompt(1))
    assert status == 502
    assert f"cannot reach the upstream http://127.0.0.1:{port}/v1: ConnectionRefusedError" in data.decode()
    stats = rec.stats()
    assert (stats["upstream_errors"], stats["upstream"]) == (1, f"http://127.0.0.1:{port}/v1")
    assert list(iter_recordings(tmp_path)) == []


# --- the command line, started as the session starts the scripted policy --------------------------


def test_record_and_replay_as_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)
    policy_proc, policy_url = start_policy(GymSettings(policy_answer="\\boxed{C}"), tmp_path)
    try:
        proc, url = start_recorder("record", tmp_path / "rec", upstream=policy_url)
        try:
            answers = [call(f"{url}/responses", prompt(n))[2] for n in range(3)]
            stats = json.loads(call(url.removesuffix("/v1") + "/_stats", method="GET")[2])
            assert (stats["mode"], stats["recorded"], stats["upstream_calls"]) == ("record", 3, 3)
        finally:
            stop_supervised([proc])
    finally:
        stop_supervised([policy_proc])
    monkeypatch.delenv("GYM_POLICY_API_KEY")
    proc, url = start_recorder("replay", tmp_path / "rep", cassette=tmp_path / "rec")
    try:
        assert [call(f"{url}/responses", prompt(n))[2] for n in range(3)] == answers
        stats = json.loads(call(url.removesuffix("/v1") + "/_stats", method="GET")[2])
        assert (stats["hits"], stats["misses"], stats["upstream_calls"]) == (3, 0, 0)
    finally:
        stop_supervised([proc])
    log = (tmp_path / "rep" / "recorder.log").read_text()
    assert '"hits": 3' in log  # the final stats line
    assert MARKER not in (tmp_path / "rec" / "recorder.log").read_text()


def test_bad_arguments_are_refused_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--run-dir", str(tmp_path), "--cassette", str(tmp_path / "nope")]) == 2
    assert f"no cassette at {tmp_path / 'nope'} (give a cassette file or a run folder" in capsys.readouterr().err
    assert main(["replay", "--run-dir", str(tmp_path), "--cassette", str(tmp_path)]) == 2
    assert f"no cassette at {tmp_path / CASSETTE_FILE}" in capsys.readouterr().err
    (tmp_path / CASSETTE_FILE).write_text("")
    assert main(["replay", "--run-dir", str(tmp_path), "--cassette", str(tmp_path), "--miss", "passthrough"]) == 2
    assert "--miss passthrough needs --upstream URL" in capsys.readouterr().err
    from pytest_gym.core.endpoint import GymError

    with pytest.raises(GymError, match=r"did not start; log .*recorder.log:\n.*no cassette at"):
        start_recorder("replay", tmp_path / "r", cassette=tmp_path / "missing")
    assert os.path.exists(tmp_path / "r" / "recorder.log")


def test_the_end_of_run_scrub_leaves_a_cassette_that_replays_every_call_with_the_same_answers(
    policy: Running, servers: list[Running], tmp_path: Path
) -> None:
    """Issue 20 item 2: the cassette is masked as data when written and never text-masked again at the end of the
    run; a prompt holding ``?token=...`` or "Basic auth" replays as a hit, an answer holding ``password='...'``
    comes back as it was recorded."""
    answer = "The form posts password='hunter2' over HTTP Basic auth; see https://docs.example/x?token=abc123def"
    script(policy, answers=[answer])
    rec = recorder(servers, mode="record", run_dir=tmp_path / "run", upstream=policy.url)
    bodies = [
        prompt(0, "Fetch https://api.example/v1?token=abc123def and answer."),
        prompt(1, "Explain HTTP Basic auth: what does Basic dXNlcjpwYXNz carry?"),
        prompt(2, "Token: a unit of text. How many are in 'hello'?"),
    ]
    recorded = [call(f"{rec.url}/responses", body) for body in bodies]
    assert [status for status, _, _ in recorded] == [200, 200, 200]
    rec.stop()
    servers.remove(rec)
    cassette = tmp_path / "run" / CASSETTE_FILE
    before = cassette.read_bytes()
    assert scrub_run_folder(tmp_path / "run") == []
    assert cassette.read_bytes() == before  # masked when written, as data: not masked again as text
    assert all(json.loads(line) for line in before.splitlines())  # every line still a record
    rep = recorder(servers, mode="replay", run_dir=tmp_path / "rep", cassette=tmp_path / "run")
    replayed = [call(f"{rep.url}/responses", body) for body in bodies]
    assert [status for status, _, _ in replayed] == [200, 200, 200]
    assert [text_of(data) for _, _, data in replayed] == [text_of(data) for _, _, data in recorded]
    stats = rep.stats()
    assert (stats["hits"], stats["misses"]) == (3, 0)


def test_the_scrub_masks_json_written_by_others_as_data_and_never_breaks_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-scrub-MARKER-7f3a2b91c"
    monkeypatch.setenv("PYTEST_GYM_SCRUB_API_KEY", secret)
    captures = tmp_path / "model_calls"
    captures.mkdir()
    line = {"request": {"headers": {"Authorization": f"Bearer {secret}"}}, "note": "a 'quoted' value's end"}
    (captures / "t-0.capture.jsonl").write_text(json.dumps(line) + "\n" + json.dumps({"ok": 1}) + "\n")
    (tmp_path / "quality_summary.json").write_text(json.dumps({"api_key": secret, "text": f"key='{secret}'"}))
    (tmp_path / "gym_env.log").write_text(f"starting with api_key={secret}\n")
    assert scrub_run_folder(tmp_path, final=False) == []
    assert secret in (captures / "t-0.capture.jsonl").read_text()  # writers may still append: text only
    assert secret not in (tmp_path / "gym_env.log").read_text()
    assert scrub_run_folder(tmp_path) == []
    for path in (captures / "t-0.capture.jsonl", tmp_path / "quality_summary.json"):
        text = path.read_text()
        assert secret not in text
        records = (
            [json.loads(x) for x in text.splitlines() if x.strip()] if path.suffix == ".jsonl" else [json.loads(text)]
        )
        assert records  # still JSON, record by record
    assert json.loads((captures / "t-0.capture.jsonl").read_text().splitlines()[1]) == {"ok": 1}
