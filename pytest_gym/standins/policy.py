"""The built-in scripted policy: a deterministic OpenAI-compatible model server.

It stands in for the LLM so that a Gym environment can be exercised end to end
without credentials: the README demo, the plugin's own tests and environment
authors smoke-testing their wiring. Standard library only, so it runs under
any interpreter and starts in well under a second.

Routes (with or without the ``/v1`` prefix):

- ``POST /v1/responses``        Responses API (Gym's ``openai_model``)
- ``POST /v1/chat/completions`` Chat Completions (``vllm_model`` and friends)
- ``GET  /v1/models``           model listing (Gym probes it at start-up)
- ``GET/PUT /_script``          read or change the script at run time (tests)
- ``GET  /_stats``              call counters (tests count paid model calls), calls in flight now and
                                 at most since the last reset (tests check a concurrency bound), and
                                 when the first call came and the last ended (epoch seconds)

Faults can be scheduled (``fault_every`` calls, ``fault_mode`` one of
``status``, ``hang``, ``garbage``) so that retry and timeout paths are testable
against a real Gym. ``answers`` (a list) makes call N answer ``answers[(N-1) % len]``, so repeats
differ; ``empty_if`` answers empty text with no completion tokens to requests holding that text (a
broken endpoint, for the health checks); ``tool_name`` makes the first turn a function call (the turn
after its output is answered with text), and ``"stream": true`` requests get Server-Sent Events, so that
recording and replay of tool calls and streams are testable.

A seeded stochastic mode stands in for a model at temperature > 0: with ``chance`` < 1 each task (its
first input item) is answered with ``answer`` with its own chance, else with ``wrong_answer``. The
chances are ``chance`` for every task, or Beta-distributed around it (``chance_concentration`` > 0), with
``solid``/``hopeless`` shares of tasks always right/wrong (a deterministic mix); a task whose prompt
holds a text in ``broken`` is always wrong (a break). Every draw is a hash of ``seed``, the task and how
many calls the task has had, so a run is reproduced by its seed whatever the order calls arrive in.
Set it with ``PUT /_script`` or, for a policy pytest-gym starts, ``PYTEST_GYM_POLICY_SCRIPT``
(e.g. ``{"chance": 0.9, "seed": 7}``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pytest_gym.standins import SCRIPT_ENV
from pytest_gym.standins.serve import serve

FAULT_MODES = ("status", "hang", "garbage")


@dataclass
class Script:
    """What the policy answers and how it misbehaves."""

    answer: str = "\\boxed{A}"
    model: str = "pytest-gym-scripted"
    latency_ms: float = 0.0
    fault_every: int = 0
    fault_mode: str = "status"
    fault_status: int = 500
    hang_s: float = 3600.0
    answers: list[str] = field(default_factory=list)
    tool_name: str = ""
    tool_arguments: str = "{}"
    #: Answer with empty text and no completion tokens (a broken endpoint) when the request holds this text.
    empty_if: str = ""
    chance: float = 1.0
    chance_concentration: float = 0.0
    solid: float = 0.0
    hopeless: float = 0.0
    broken: list[str] = field(default_factory=list)
    wrong_answer: str = "I do not know."
    seed: int = 0

    def update(self, changes: dict[str, Any]) -> None:
        known = {f.name: f.type for f in fields(self)}
        unknown = sorted(set(changes) - set(known))
        if unknown:
            raise ValueError(f"unknown script keys: {', '.join(unknown)}")
        for key, value in changes.items():
            current = getattr(self, key)
            if isinstance(current, list) and not isinstance(value, list):
                raise ValueError(f"{key} must be a list")
            setattr(self, key, [str(v) for v in value] if isinstance(current, list) else type(current)(value))
        if self.fault_mode not in FAULT_MODES:
            raise ValueError(f"fault_mode must be one of {FAULT_MODES}")
        for name in ("chance", "solid", "hopeless"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")
        if self.chance_concentration < 0.0 or self.solid + self.hopeless > 1.0:
            raise ValueError("chance_concentration must be >= 0 and solid + hopeless at most 1")

    @property
    def stochastic(self) -> bool:
        return self.chance < 1.0 or self.solid > 0.0 or self.hopeless > 0.0 or bool(self.broken)

    def task_chance(self, task: str) -> float:
        """The chance that ``task`` (its first input item, as JSON) is answered right: fixed by seed and task."""
        if any(text in task for text in self.broken):
            return 0.0
        where = _uniform(self.seed, "mix", task)
        if where < self.solid:
            return 1.0
        if where >= 1.0 - self.hopeless:
            return 0.0
        if self.chance_concentration <= 0.0 or self.chance in (0.0, 1.0):
            return self.chance
        a, b = self.chance * self.chance_concentration, (1.0 - self.chance) * self.chance_concentration
        return random.Random(_uniform(self.seed, "beta", task)).betavariate(a, b)


def _uniform(seed: int, *parts: object) -> float:
    """A number in [0, 1) from a hash of the seed and the parts: the same on every run, any call order."""
    digest = hashlib.sha256(json.dumps([seed, *parts], default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def task_key(body: Any) -> str:
    """The task a model call belongs to: its first input item (or message), as canonical JSON."""
    items = body.get("input") if isinstance(body, dict) and "input" in body else (body or {}).get("messages")
    first = items[0] if isinstance(items, list) and items else items
    return json.dumps(first, sort_keys=True, default=str)


class PolicyState:
    """Script plus counters, shared by the handler threads."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.lock = threading.Lock()
        self.calls = 0
        self.faults = 0
        self.by_route: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.first_call: float | None = None
        self.last_call: float | None = None
        self.auth_digests: set[str] = set()
        self.task_calls: dict[str, int] = {}

    def count(self, route: str, body: Any = None) -> tuple[int, Script]:
        with self.lock:
            self.calls += 1
            self.by_route[route] = self.by_route.get(route, 0) + 1
            script = Script(**asdict(self.script))
            if script.answers:
                script.answer = script.answers[(self.calls - 1) % len(script.answers)]
            if script.stochastic:
                task = task_key(body)
                number = self.task_calls[task] = self.task_calls.get(task, 0) + 1
                if _uniform(script.seed, "call", task, number) >= script.task_chance(task):
                    script.answer = script.wrong_answer
            return self.calls, script

    def enter(self) -> None:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.first_call is None:
                self.first_call = time.time()

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.last_call = time.time()

    def reset(self) -> None:
        """Zero the counters (the caller holds the lock); calls in flight stay counted as in flight."""
        self.calls, self.faults, self.by_route, self.task_calls = 0, 0, {}, {}
        self.max_in_flight = self.in_flight
        self.first_call = self.last_call = None

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "calls": self.calls,
                "faults": self.faults,
                "by_route": dict(self.by_route),
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "first_call": self.first_call,
                "last_call": self.last_call,
                # Which credentials reached the model, as SHA-256 digests: tests prove a key was used
                # without the key itself ever being written anywhere.
                "auth_sha256": sorted(self.auth_digests),
            }


def _token_count(value: Any) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


def _wants_tool_call(script: Script, body: dict[str, Any]) -> bool:
    """A function call on the first turn only: once its output (or a tool message) is in, answer text."""
    if not script.tool_name:
        return False
    items = body.get("input") if "input" in body else body.get("messages")
    last = items[-1] if isinstance(items, list) and items else None
    return not (isinstance(last, dict) and (last.get("type") == "function_call_output" or last.get("role") == "tool"))


def responses_object(script: Script, body: dict[str, Any]) -> dict[str, Any]:
    """A complete Responses API object, as Gym's ``openai_model`` expects it."""
    in_tokens = _token_count(body.get("input", ""))
    out_tokens = max(1, len(script.answer.split())) if script.answer else 0
    item: dict[str, Any] = {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": script.answer, "annotations": []}],
    }
    if _wants_tool_call(script, body):
        item = {
            "type": "function_call",
            "id": f"fc_{uuid.uuid4().hex}",
            "call_id": f"call_{uuid.uuid4().hex[:24]}",
            "name": script.tool_name,
            "arguments": script.tool_arguments,
            "status": "completed",
        }
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "model": body.get("model") or script.model,
        "status": "completed",
        "output": [item],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": in_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": in_tokens + out_tokens,
        },
    }


def chat_completion_object(script: Script, body: dict[str, Any]) -> dict[str, Any]:
    in_tokens = _token_count(body.get("messages", ""))
    out_tokens = max(1, len(script.answer.split())) if script.answer else 0
    message: dict[str, Any] = {"role": "assistant", "content": script.answer}
    finish = "stop"
    if _wants_tool_call(script, body):
        call = {"name": script.tool_name, "arguments": script.tool_arguments}
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": call}
        ]}  # fmt: skip
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or script.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": in_tokens,
            "completion_tokens": out_tokens,
            "total_tokens": in_tokens + out_tokens,
        },
    }


def sse_events(route: str, answer: dict[str, Any]) -> Iterator[bytes]:
    """The answer as Server-Sent Events, in the shape of OpenAI's streams (deltas, then the whole)."""

    def event(name: str | None, data: Any) -> bytes:
        text = data if isinstance(data, str) else json.dumps(data)
        return (f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode()

    if route == "/responses":
        started = {**answer, "status": "in_progress", "output": []}
        yield event("response.created", {"type": "response.created", "sequence_number": 0, "response": started})
        number = 1
        for index, item in enumerate(answer["output"]):
            for part in item.get("content") or []:
                for word in part["text"].split(" "):
                    delta = {"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                             "content_index": 0, "delta": word + " ", "sequence_number": number}  # fmt: skip
                    yield event(delta["type"], delta)
                    number += 1
        yield event("response.completed", {"type": "response.completed", "sequence_number": number, "response": answer})
        return
    choice = answer["choices"][0]
    chunk = {key: answer[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    words = (choice["message"].get("content") or "").split(" ")
    for word in words:
        yield event(None, chunk | {"choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]})
    delta = {key: value for key, value in choice["message"].items() if key != "content"}
    yield event(None, chunk | {"choices": [{"index": 0, "delta": delta, "finish_reason": choice["finish_reason"]}]})
    yield event(None, "[DONE]")


def _route(path: str) -> str:
    path = path.split("?", 1)[0].rstrip("/")
    return path[3:] if path.startswith("/v1/") else path


class PolicyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: PolicyServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Silent: request lines would carry nothing useful and cost time."""

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm holds the body until
        # the caller's delayed ACK, 40 ms per call on a keep-alive connection (http.client, httpx).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(self, status: int, payload: Any, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        return json.loads(raw or b"{}")

    def do_GET(self) -> None:
        route = _route(self.path)
        state = self.server.state
        if route in ("/models", ""):
            model = state.script.model
            self._send(200, {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "pytest-gym"}]})
        elif route == "/_script":
            self._send(200, asdict(state.script))
        elif route == "/_stats":
            self._send(200, state.stats())
        elif route == "/health":
            self._send(200, {"status": "ok"})
        else:
            # Not 404: Gym retries 404s, and an unknown route should fail fast.
            self._send(400, {"error": {"message": f"unknown route {self.path}"}})

    def do_PUT(self) -> None:
        state = self.server.state
        if _route(self.path) != "/_script":
            self._send(400, {"error": {"message": f"unknown route {self.path}"}})
            return
        try:
            changes = dict(self._body())
            reset = bool(changes.pop("reset_stats", False))
            with state.lock:
                state.script.update(changes)
                if reset:
                    state.reset()
        except (ValueError, TypeError) as exc:
            self._send(400, {"error": {"message": str(exc)}})
            return
        self._send(200, asdict(state.script))

    def do_POST(self) -> None:
        route = _route(self.path)
        if route not in ("/responses", "/chat/completions"):
            self._send(400, {"error": {"message": f"unknown route {self.path}"}})
            return
        try:
            body = self._body()
        except ValueError:
            self._send(400, {"error": {"message": "request body is not JSON"}})
            return
        state = self.server.state
        state.enter()
        try:
            status, payload, raw = self._answer(route, body)
        finally:
            state.leave()  # before the answer goes out: the caller may send its next call at once
        if status == 200 and raw is None and isinstance(body, dict) and body.get("stream") is True:
            self._stream(sse_events(route, payload))
            return
        self._send(status, payload, raw=raw)

    def _stream(self, events: Iterator[bytes]) -> None:
        """Chunked ``text/event-stream``, one chunk per event, flushed as it goes."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for data in events:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def _answer(self, route: str, body: Any) -> tuple[int, Any, bytes | None]:
        """(status, JSON payload, raw body) for one model call, after the scripted latency or fault."""
        state = self.server.state
        number, script = state.count(route, body)
        auth = self.headers.get("Authorization")
        if auth:
            with state.lock:
                state.auth_digests.add(hashlib.sha256(auth.encode()).hexdigest())
        if script.latency_ms > 0:
            time.sleep(script.latency_ms / 1000.0)
        if script.empty_if and script.empty_if in json.dumps(body, ensure_ascii=False):
            script.answer = ""  # an endpoint that answers nothing: empty text, no completion tokens
        if script.fault_every > 0 and number % script.fault_every == 0:
            with state.lock:
                state.faults += 1
            if script.fault_mode == "hang":
                time.sleep(script.hang_s)
            elif script.fault_mode == "garbage":
                return 200, None, b"<html>this is not json"
            else:
                return script.fault_status, {"error": {"message": f"scripted fault on call {number}"}}, None
        if route == "/responses":
            return 200, responses_object(script, body), None
        return 200, chat_completion_object(script, body), None


class PolicyServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, host: str, port: int, script: Script) -> None:
        super().__init__((host, port), PolicyHandler)
        self.state = PolicyState(script)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://{name}:{port}/v1"


def start_script(answer: str, model: str | None, latency_ms: float, initial: str | None) -> Script:
    """What a started policy answers: its arguments, then ``initial`` (``PYTEST_GYM_POLICY_SCRIPT``'s JSON, e.g.
    ``{"tool_name": "get_weather"}``: a policy that calls a tool from the first trial). A kept policy is given
    the same again when a run attaches to it (``pytest_gym.gym.kept``)."""
    script = Script(answer=answer, model=model or Script.model, latency_ms=latency_ms)
    if initial:
        try:
            changes = json.loads(initial)
            if not isinstance(changes, dict):
                raise ValueError(f"a JSON {type(changes).__name__}, not an object")
            script.update(changes)
        except (ValueError, TypeError, RecursionError) as exc:
            raise ValueError(
                f"${SCRIPT_ENV} is no policy script ({exc}); give a JSON object of its keys, e.g. "
                '{"tool_name": "get_weather", "tool_arguments": "{\\"city\\": \\"sf\\"}"}'
            ) from None
    return script


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_gym.standins.policy", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--answer", default=Script.answer)
    parser.add_argument("--model", default=Script.model)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--port-file", help="write the bound port here once listening")
    args = parser.parse_args(argv)
    script = start_script(args.answer, args.model, args.latency_ms, os.environ.get(SCRIPT_ENV))
    server = PolicyServer(args.host, args.port, script)
    return serve(
        server,
        args.port_file,
        f"pytest-gym scripted policy listening on {server.url}",
        "pytest-gym scripted policy",
        server.state.stats,
    )


if __name__ == "__main__":
    sys.exit(main())
