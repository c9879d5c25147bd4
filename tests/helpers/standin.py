"""The one stand-in for Gym over HTTP, for every test and benchmark that needs one (no real Gym).

``RawServer`` is the byte level: it reads one request at a time per connection and writes whatever its
``answer`` returns, framing included (the HTTP client's protocol tests script it byte by byte).
``StandinGym`` is Gym on top of it, as each test configures it:

- a head: ``/readyz``, ``/server_instances`` (``instances``), ``/global_config_dict_yaml`` (``config_yaml``);
- an agent's ``/run``: the reward per row (``rewards``: by task index or a function of the body), latency
  (``latency_s``), and answers queued before the normal ones (``faults``: HTTP status codes, 429 with
  Retry-After, hostile bodies, raw bytes, hangs); ``/aggregate_metrics`` the mean of the rewards it is sent;
- a resources server's ``/verify`` (``verify``) and ``/reverify_mode`` (``reverify_mode``);
- TLS (``tls``) and a required header (``require``: anything else gets 401);
- what it saw: ``calls`` per route, ``log`` (each request: method, path, headers, body), ``refused`` (no
  required header), the most calls in flight at once (``max_in_flight``).

Any route can be replaced through ``routes``; a route's answer is an ``Answer`` or ``(status, body bytes)``.
One instance is one server (one port); several make a deployment whose head lists the others
(``instances``; ``StandinDeployment``: a head, an agent and a resources server). Everything binds
127.0.0.1; every wait is bounded; ``close()`` stops the listener.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The longest a hanging answer waits (unless the server closes first).
MAX_HANG_S = 600.0


def response(body: bytes, status: str = "200 OK", headers: str = "") -> bytes:
    """A well-formed HTTP/1.1 answer with a Content-Length, as bytes."""
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body


class RawServer:
    """Reads one request at a time per connection and writes whatever ``answer(request)`` returns."""

    def __init__(
        self, tls: ssl.SSLContext | None = None, path: str = "/run", record: bool = True, port: int = 0
    ) -> None:
        self.answer: Callable[[bytes], bytes] = lambda request: response(b'{"reward": 1.0}')
        self.close_after = False
        self.connections = 0
        self.requests: list[bytes] = []
        self.times: list[float] = []
        self.record = record
        self.tls = tls
        self.closed = threading.Event()
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(128)
        scheme = "https" if tls else "http"
        self.port: int = self.sock.getsockname()[1]
        self.base_url = f"{scheme}://127.0.0.1:{self.port}"
        self.url = self.base_url + path
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError):
                conn.close()
                return
        with conn:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    buffer += data
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(rest) < length:
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    rest += data
                request, buffer = head + b"\r\n\r\n" + rest[:length], rest[length:]
                if self.record:
                    with self.lock:
                        self.requests.append(request)
                        self.times.append(time.monotonic())
                try:
                    hang_up = self.respond(conn, request)
                except OSError:
                    return
                if hang_up or self.close_after:
                    return

    def respond(self, conn: socket.socket, request: bytes) -> bool:
        """Answer one request; True to hang up afterwards."""
        conn.sendall(self.answer(request))
        return False

    def close(self) -> None:
        """Stop accepting connections (connections already open are served until their client closes them)."""
        self.closed.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread: a bare close() would not (Linux)
        with contextlib.suppress(OSError):
            self.sock.close()


@dataclass
class Request:
    """One request as the stand-in Gym saw it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def route(self) -> str:
        return self.target.split("?", 1)[0]

    def json(self) -> Any:
        return json.loads(self.body or b"{}")


@dataclass
class Answer:
    """What one request gets. By default a JSON answer; each field makes it slower or more hostile."""

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Seconds before answering.
    delay_s: float = 0.0
    #: Hang up after answering, without saying so.
    close: bool = False
    #: Never answer: keep the connection open this long (bounded by MAX_HANG_S, or until the server closes).
    hang_s: float = 0.0
    #: Written as they are instead of an HTTP answer (broken framing, another protocol).
    raw: bytes | None = None
    #: A body of this many spaces, streamed (a huge answer without holding it in memory).
    length: int | None = None


Route = Callable[[Request], "Answer | tuple[int, bytes]"]


def reply(data: Any, status: int = 200, **kw: Any) -> Answer:
    """A JSON answer."""
    return Answer(status=status, body=json.dumps(data).encode(), **kw)


def answer_text(record: Mapping[str, Any]) -> str:
    """The text of the first output message of a saved Responses answer (what a verifier reads)."""
    text: str = record["response"]["output"][0]["content"][0]["text"]
    return text


class StandinGym(RawServer):
    """Gym over HTTP, as configured: see the module's docstring."""

    def __init__(
        self,
        agent: str = "fake_agent",
        *,
        tls: ssl.SSLContext | None = None,
        require: Mapping[str, str] | None = None,
        record: bool = True,
        port: int = 0,
    ) -> None:
        super().__init__(tls=tls, path="", record=False, port=port)
        self.keep = record
        self.agent = agent
        #: The head's /server_instances: a list of dicts, or a function of this server giving one.
        self.instances: Any = None
        #: The head's /global_config_dict_yaml (default: the agent as a simple_agent).
        self.config_yaml = f"{agent}:\n  responses_api_agents:\n    simple_agent: {{}}\n"
        #: /run: reward by task index (``_ng_task_index``) or a function of the body; 1.0 otherwise.
        self.rewards: Mapping[int, float] | Callable[[dict[str, Any]], float] | None = None
        self.latency_s = 0.0
        #: Answers /run gives, in turn, before its normal ones.
        self.faults: list[Answer] = []
        #: /verify: the reward for a saved answer (default: 1.0 when it holds the row's expected answer).
        self.verify: Callable[[dict[str, Any]], float] = lambda body: float(
            str(body.get("expected_answer")) in answer_text(body)
        )
        self.reverify_mode: Any = "stateless"
        self.require = dict(require or {})
        self.refused = 0
        self.calls: dict[str, int] = {}
        self.log: list[Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.routes: dict[str, Route] = {
            "/readyz": lambda _: reply({"status": "ready"}),
            "/health": lambda _: reply({"status": "ok"}),
            "/server_instances": lambda _: reply(self.server_instances()),
            "/global_config_dict_yaml": lambda _: reply(self.config_yaml),
            "/run": self.run,
            "/aggregate_metrics": self.aggregate_metrics,
            "/verify": lambda request: reply({**request.json(), "reward": self.verify(request.json())}),
            "/reverify_mode": lambda _: reply(self.reverify_mode),
        }

    # -- what the routes answer ----------------------------------------------------------------------------

    def server_instances(self) -> Any:
        if callable(self.instances):
            return self.instances(self)
        if self.instances is not None:
            return self.instances
        return [
            {"process_name": self.agent, "server_type": "responses_api_agents", "name": "simple_agent",
             "url": self.base_url}
        ]  # fmt: skip

    def reward(self, body: dict[str, Any]) -> float:
        if callable(self.rewards):
            return self.rewards(body)
        if self.rewards is not None:
            return self.rewards.get(int(body.get("_ng_task_index") or 0), 1.0)
        return 1.0

    def run(self, request: Request) -> Answer:
        with self.lock:
            fault = self.faults.pop(0) if self.faults else None
        if fault is not None:
            return fault
        body = request.json()
        usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
        return reply({"reward": self.reward(body), "response": {"usage": usage}}, delay_s=self.latency_s)

    def aggregate_metrics(self, request: Request) -> Answer:
        rewards = [r.get("reward") or 0.0 for r in request.json().get("verify_responses") or []]
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        metrics = {"mean/reward": mean}
        return reply({"agent_metrics": metrics, "key_metrics": metrics, "group_level_metrics": []})

    # -- serving ------------------------------------------------------------------------------------------

    def route_of(self, target: str) -> str:
        """The route a path is served by: the whole path, else its last part (``/agent/run`` is ``/run``)."""
        path = target.split("?", 1)[0]
        if path in self.routes:
            return path
        return "/" + path.rsplit("/", 1)[-1]

    def respond(self, conn: socket.socket, raw: bytes) -> bool:
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = [*lines[0].split(" ", 2), "", ""][:3]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        request = Request(method, target, headers, body)
        route = self.route_of(target)
        refused = any(headers.get(name.lower()) != value for name, value in self.require.items())
        with self.lock:
            if self.keep:
                self.log.append(request)
            if refused:
                self.refused += 1
            else:
                self.calls[route] = self.calls.get(route, 0) + 1
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if refused:
            return self._send(conn, reply({"detail": "Not authenticated"}, 401))
        try:
            handler = self.routes.get(route)
            if handler is None:
                answer: Answer | tuple[int, bytes] = reply({"error": f"unknown route {route}"}, 404)
            else:
                answer = handler(request)
            if isinstance(answer, tuple):
                answer = Answer(status=answer[0], body=answer[1])
            if answer.delay_s:
                time.sleep(answer.delay_s)
            return self._send(conn, answer)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _send(self, conn: socket.socket, answer: Answer) -> bool:
        if answer.hang_s:
            self.closed.wait(min(answer.hang_s, MAX_HANG_S))
            return True
        if answer.raw is not None:
            conn.sendall(answer.raw)
            return answer.close
        length = answer.length if answer.length is not None else len(answer.body)
        head = f"HTTP/1.1 {answer.status} {'OK' if answer.status < 400 else 'Error'}\r\n"
        head += "Content-Type: application/json\r\n" if "Content-Type" not in answer.headers else ""
        head += "".join(f"{name}: {value}\r\n" for name, value in answer.headers.items())
        conn.sendall(
            f"{head}Content-Length: {length}\r\n\r\n".encode() + (answer.body if answer.length is None else b"")
        )
        if answer.length is not None:
            chunk = b" " * (1 << 20)
            sent = 0
            try:
                while sent < answer.length:
                    part = chunk[: answer.length - sent]
                    conn.sendall(part)
                    sent += len(part)
            except OSError:
                return True
        return answer.close


class StandinDeployment:
    """A head listing an agent and a resources server, each a StandinGym of its own (so one can stop alone)."""

    def __init__(self, agent: str = "fake_agent", resources: str = "fake_resources") -> None:
        self.head = StandinGym(agent)
        self.agent = StandinGym(agent)
        self.resources = StandinGym(resources)
        #: The pids the head reports, by process name (none by default).
        self.pids: dict[str, int] = {}
        self.head.config_yaml = "{}\n"
        self.head.instances = lambda _: [
            {"process_name": server.agent, "server_type": kind, "name": server.agent, "url": server.base_url,
             "pid": self.pids.get(server.agent)}
            for server, kind in ((self.agent, "responses_api_agents"), (self.resources, "resources_servers"))
        ]  # fmt: skip

    def close(self) -> None:
        for server in (self.head, self.agent, self.resources):
            server.close()


@contextlib.contextmanager
def serving(agent: str = "fake_agent", **kw: Any) -> Iterator[StandinGym]:
    """A StandinGym until the block ends."""
    gym = StandinGym(agent, **kw)
    try:
        yield gym
    finally:
        gym.close()
