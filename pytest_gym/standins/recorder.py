"""Record a model's answers once, replay them offline: an OpenAI-compatible proxy and a replay server.

``record``: a proxy on 127.0.0.1 in front of a real endpoint. Every call (``POST /responses``,
``POST /chat/completions``, any other POST route, ``GET /models``) goes upstream with the key from
``$GYM_POLICY_API_KEY`` (never from argv, never what the caller sent); the answer is passed back
as it came (a Server-Sent-Events stream chunk by chunk as it arrives) and appended to the run
folder's cassette (:mod:`pytest_gym.standins.cassette`) before the caller sees its end.

``replay``: serves the answers of a cassette (a file, or a run folder holding one) with no network.
The k-th of N identical requests gets the k-th recorded answer, counted atomically in arrival order.
A request with no recording is answered ``409`` (Gym's ``openai_model`` retries 404/408/429/5xx and
gives up for good on some 401/403; a 409 fails the model call at once, and Gym reports the trial's
``/run`` as failed: an infrastructure fault, not a low reward. Not 400: ``vllm_model`` turns a 400
mentioning ``max_tokens`` into an empty answer scored 0). The error body names the request's hash
and the fields in which it differs from the nearest recorded request; each miss is also appended to
``replay_misses.jsonl`` in the run folder (:func:`~pytest_gym.standins.cassette.read_misses`), so pytest
can name the trial. With ``--miss passthrough`` a miss goes upstream instead and is recorded, and the
run folder's cassette receives every answer served, so it is a complete cassette of this run.

Determinism: for each distinct request the answers handed out are exactly the recorded ones, each
once, in recording order; which of N concurrent identical requests (repeats of one task) gets which
one follows arrival order. Repeats are interchangeable requests, so a task's set of trajectories,
its mean reward and pass@k are reproduced exactly; the repeat index a given trajectory lands on is
exact when repeats are sent one after another. Later turns of a conversation carry the earlier
answers, so each repeat keeps a whole recorded trajectory.

``GET /_stats``: calls (model calls), hits, misses, upstream_calls, recorded, upstream_errors.
A Gym kept between runs (``--gym-reuse``) keeps its recorder too, and leases it to each run: ``PUT /_lease``
with the run's mode, folder, upstream and cassette (:func:`config_from_json`) serves that run from then on;
``POST /_release`` prints the run's stats (``pytest-gym recorder released; stats: {...}``) and closes its files.
Start it like the scripted policy: ``python -m pytest_gym.standins.recorder record --upstream URL
--run-dir DIR --port 0 --port-file F`` (or :func:`start_recorder`).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pytest_gym.core.jsonl import AppendLog
from pytest_gym.core.masking import POLICY_KEY_ENV, known_secrets, mask_secrets
from pytest_gym.runfolder.layout import CASSETTE_FILE, MISSES_FILE
from pytest_gym.standins.cassette import (
    DEFAULT_IGNORE,
    Cassette,
    Miss,
    Recording,
    Take,
    decode_body,
    mask_body,
    mask_strings,
    miss_message,
    recordable,
    resolve_cassette,
)
from pytest_gym.standins.serve import serve

MISS_STATUS = 409
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "authorization",
        "accept-encoding",
        "cookie",
        "expect",
    }
)
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.CannotSendRequest)


def route_of(path: str) -> str:
    """``/v1/responses?x`` -> ``/responses``: the part of the path that names the call."""
    path = path.split("?", 1)[0].rstrip("/")
    return path[3:] if path.startswith("/v1/") else "" if path == "/v1" else path


@dataclass
class RecorderConfig:
    mode: Literal["record", "replay"]
    run_dir: Path
    upstream: str | None = None
    cassette: Path | None = None
    miss: Literal["error", "passthrough"] = "error"
    ignore: tuple[str, ...] = DEFAULT_IGNORE
    upstream_timeout: float = 600.0
    fsync: bool = False


class Upstream:
    """The real endpoint: one keep-alive connection per handler thread, the key from the environment."""

    def __init__(self, base_url: str, timeout: float) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream must be an http(s) URL, got {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.base_path = parts.path
        self.timeout = timeout
        # Never the URL's user:password@ or query: they may hold credentials.
        self.display = f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"
        self._local = threading.local()
        self._ssl = ssl.create_default_context() if self.scheme == "https" else None

    def target(self, path: str) -> str:
        """Where a caller's path goes: under the upstream's ``/v1`` if the caller used one, else beside it."""
        bare, _, query = path.partition("?")
        if bare == "/v1" or bare.startswith("/v1/"):
            target = self.base_path + bare[3:]
        else:
            target = self.base_path.removesuffix("/v1") + bare
        return (target or "/") + (f"?{query}" if query else "")

    def _connection(self, fresh: bool) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is not None and fresh:
            connection.close()
            connection = None
        if connection is None:
            if self._ssl is not None:
                connection = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self._ssl)
            else:
                connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.connection = connection
        return connection

    def headers(self, incoming: Any, length: int) -> dict[str, str]:
        headers = {k: v for k, v in incoming.items() if k.lower() not in _HOP_BY_HOP}
        headers["Accept-Encoding"] = "identity"  # stored bodies must be the bytes the model sent, not gzip
        if length:
            headers["Content-Length"] = str(length)
        key = os.environ.get(POLICY_KEY_ENV)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def send(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> http.client.HTTPResponse:
        """Send and read the status line; a reused connection the server closed is retried once, fresh."""
        for fresh in (False, True):
            connection = self._connection(fresh)
            reused = getattr(connection, "sock", None) is not None
            try:
                connection.request(method, self.target(path), body=body if method == "POST" else None, headers=headers)
                return connection.getresponse()
            except _STALE:
                connection.close()
                if fresh or not reused:
                    raise
            except BaseException:
                connection.close()
                raise
        raise AssertionError("unreachable")

    def discard(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


@dataclass
class Stats:
    mode: str
    calls: int = 0
    hits: int = 0
    misses: int = 0
    upstream_calls: int = 0
    upstream_errors: int = 0
    recorded: int = 0
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def to_json(self) -> dict[str, Any]:
        with self.lock:
            return {
                "mode": self.mode,
                "calls": self.calls,
                "hits": self.hits,
                "misses": self.misses,
                "upstream_calls": self.upstream_calls,
                "upstream_errors": self.upstream_errors,
                "recorded": self.recorded,
                "in_flight": self.in_flight,
            }


class RecorderState:
    """What the handler threads share: the cassette being served, the one being written, counters."""

    def __init__(self, config: RecorderConfig) -> None:
        self.config = config
        self.stats = Stats(config.mode)
        self.secrets = known_secrets()  # this process's environment does not change
        config.run_dir.mkdir(parents=True, exist_ok=True)
        self.out_path = config.run_dir / CASSETTE_FILE
        self.source: Cassette | None = None
        self.source_path: Path | None = None
        self.upstream = Upstream(config.upstream, config.upstream_timeout) if config.upstream else None
        if config.mode == "record":
            if self.upstream is None:
                raise ValueError("record needs --upstream URL")
        else:
            if config.cassette is None:
                raise ValueError("replay needs --cassette (a cassette file or a run folder)")
            self.source_path = resolve_cassette(config.cassette)
            self.source = Cassette.load(self.source_path, config.ignore)
            if config.miss == "passthrough" and self.upstream is None:
                raise ValueError("--miss passthrough needs --upstream URL")
        in_place = self.source_path is not None and self._same_file(self.source_path, self.out_path)
        self.copy_hits = config.mode == "replay" and config.miss == "passthrough" and not in_place
        writes = config.mode == "record" or config.miss == "passthrough"
        # Occurrences continue after what the output cassette already holds (an interrupted or resumed run).
        self.written: dict[str, int] = {}
        if writes and self.out_path.exists():
            existing = self.source if in_place and self.source else Cassette.load(self.out_path, config.ignore)
            self.written = {key: len(items) for key, items in existing.by_hash.items()}
        self.writer = AppendLog(self.out_path, config.fsync) if writes else None
        self.miss_log = AppendLog(config.run_dir / MISSES_FILE) if config.mode == "replay" else None
        self.write_lock = threading.Lock()
        #: Computes request keys (the source cassette in replay: the same ignore list by construction).
        self.keyer = self.source or Cassette(ignore=config.ignore)

    @staticmethod
    def _same_file(a: Path, b: Path) -> bool:
        try:
            return a.resolve() == b.resolve() or (b.exists() and a.samefile(b))
        except OSError:
            return False

    def write(self, recording: Recording) -> None:
        """Number the recording after the others of its key and append it, in one step (file order = occurrence)."""
        if self.writer is None:
            return
        with self.write_lock:
            recording.occurrence = self.written.get(recording.hash, 0)
            self.written[recording.hash] = recording.occurrence + 1
            self.writer.append(recording.to_json())
        self.stats.add(recorded=1)

    def log_miss(self, miss: Miss) -> None:
        if self.miss_log is not None:
            self.miss_log.append(miss.to_json())

    def close(self) -> None:
        for log in (self.writer, self.miss_log):
            if log is not None:
                log.close()


class RecorderHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RecorderServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Silent: request lines carry nothing useful; errors are printed where they happen."""

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle's algorithm holds the body
        # until the caller's delayed ACK (40 ms on Linux) on every keep-alive answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # --- small helpers

    def _send(self, status: int, data: bytes, content_type: str = "application/json", note: str = "") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if note:
            self.send_header("X-Pytest-Gym-Recorder", note)
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode())

    def _error(self, status: int, message: str, **extra: Any) -> None:
        self._json(status, {"error": {"message": message, "type": "pytest_gym_recorder", **extra}})

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    # --- routes

    def do_GET(self) -> None:
        route = route_of(self.path)
        state = self.server.state
        if route == "/_stats":
            self._json(200, {**state.stats.to_json(), **self.server.describe()})
        elif route == "/health":
            self._json(200, {"status": "ok"})
        elif route in ("/models", ""):
            self._model_call("GET", route, b"", None)
        else:
            # Not 404: Gym retries 404s, and an unknown route should fail fast.
            self._error(400, f"unknown route {self.path}")

    def do_PUT(self) -> None:
        raw = self._read_body()
        if route_of(self.path) != "/_lease":
            self._error(400, f"unknown route {self.path}")
            return
        try:
            self.server.lease(config_from_json(json.loads(raw)))
        except (ValueError, OSError) as exc:  # a bad body, a cassette that is missing or unreadable
            self._error(400, f"pytest-gym recorder: the lease was refused: {exc}")
            return
        self._json(200, {**self.server.state.stats.to_json(), **self.server.describe()})

    def do_POST(self) -> None:
        route = route_of(self.path)
        raw = self._read_body()
        if route == "/_release":
            self._json(200, self.server.release())
            return
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            self._error(400, "request body is not JSON")
            return
        state = self.server.state
        state.stats.add(calls=1, in_flight=1)
        try:
            self._model_call("POST", route, raw, body)
        finally:
            state.stats.add(in_flight=-1)

    def _model_call(self, method: str, route: str, raw: bytes, body: Any) -> None:
        state = self.server.state
        masked = mask_strings(body, state.secrets) if body is not None else None
        key, canonical = state.keyer.key(method, route, masked)
        if state.config.mode == "record":
            self._forward(method, route, raw, key, masked)
            return
        assert state.source is not None
        take = state.source.take(key, reuse_last=method == "GET")
        if take.recording is not None:
            if method == "POST":
                state.stats.add(hits=1)
            if state.copy_hits:
                rec = take.recording
                state.write(Recording(method, route, masked, rec.status, rec.content_type, rec.body, key,
                                      recorded_at=time.time()))  # fmt: skip
            self._send(take.recording.status, take.recording.body_bytes, take.recording.content_type, "hit")
            return
        if method == "GET":
            models = [{"id": name, "object": "model", "owned_by": "pytest-gym"} for name in state.source.models()]
            self._json(200, {"object": "list", "data": models})
            return
        self._miss(route, raw, key, canonical, masked, take)

    def _miss(self, route: str, raw: bytes, key: str, canonical: dict[str, Any], masked: Any, take: Take) -> None:
        state = self.server.state
        assert state.source is not None
        state.stats.add(misses=1)
        nearest = None if take.recorded else state.source.nearest(canonical)
        message = miss_message(take, route, nearest)
        passthrough = state.config.miss == "passthrough"
        miss = Miss(
            time=time.time(),
            hash=key,
            route=route,
            occurrence=take.occurrence,
            recorded=take.recorded,
            nearest=nearest[0] if nearest else None,
            differences=nearest[1] if nearest else [],
            message=message + (" (passed through to the upstream and recorded)" if passthrough else ""),
            request=masked,
        )
        state.log_miss(miss)
        if passthrough:
            self._forward("POST", route, raw, key, masked)
            return
        print(message, flush=True)
        extra = {"code": "replay_miss", "request_hash": key, "nearest_hash": miss.nearest}
        self._error(MISS_STATUS, message, differences=miss.differences, **extra)

    def _forward(self, method: str, route: str, raw: bytes, key: str, masked: Any) -> None:
        """Send the call upstream, relay the answer, and record it if it is an answer worth replaying."""
        state = self.server.state
        upstream = state.upstream
        assert upstream is not None
        state.stats.add(upstream_calls=1)
        started = time.perf_counter()
        try:
            response = upstream.send(method, self.path, raw, upstream.headers(self.headers, len(raw)))
        except (OSError, http.client.HTTPException) as exc:
            upstream.discard()
            state.stats.add(upstream_errors=1)
            text = mask_secrets(f"pytest-gym recorder: cannot reach the upstream {upstream.display}: {exc!r}")
            print(text, flush=True)
            self._error(502, text)
            return
        content_type = response.getheader("Content-Type") or "application/json"

        def record(data: bytes) -> None:
            if recordable(response.status):
                text = mask_body(decode_body(data), state.secrets)
                elapsed = (time.perf_counter() - started) * 1000
                state.write(Recording(method, route, masked, response.status, content_type, text, key,
                                      recorded_at=time.time(), upstream_ms=elapsed))  # fmt: skip

        if content_type.startswith("text/event-stream"):
            self._relay_stream(response, content_type, record)
            return
        try:
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            upstream.discard()
            state.stats.add(upstream_errors=1)
            self._error(502, mask_secrets(f"pytest-gym recorder: the upstream broke off its answer: {exc!r}"))
            return
        if response.will_close:
            upstream.discard()
        record(data)
        self._send(response.status, data, content_type, "recorded" if recordable(response.status) else "passed")

    def _relay_stream(self, response: http.client.HTTPResponse, content_type: str, record: Any) -> None:
        """Pass an event stream on chunk by chunk as it arrives; record it once it is complete."""
        state = self.server.state
        self.send_response(response.status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Pytest-Gym-Recorder", "recorded")
        self.end_headers()
        client_gone = False
        parts: list[bytes] = []
        try:
            while True:
                chunk = response.read1(65536)
                if not chunk:
                    break
                parts.append(chunk)
                if not client_gone:
                    try:
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        self.wfile.flush()
                    except OSError:
                        client_gone = True  # the answer is paid for: keep reading and record it
        except (OSError, http.client.HTTPException) as exc:
            assert state.upstream is not None
            state.upstream.discard()
            state.stats.add(upstream_errors=1)
            print(mask_secrets(f"pytest-gym recorder: the upstream broke off a stream: {exc!r}"), flush=True)
            self.close_connection = True  # no terminating chunk: the caller sees a truncated stream
            return
        if response.will_close:
            assert state.upstream is not None
            state.upstream.discard()
        record(b"".join(parts))
        if client_gone:
            self.close_connection = True
            return
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()


class RecorderServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, host: str, port: int, config: RecorderConfig) -> None:
        self.state = RecorderState(config)
        try:
            super().__init__((host, port), RecorderHandler)
        except BaseException:
            self.state.close()
            raise

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://{name}:{port}/v1"

    def describe(self) -> dict[str, Any]:
        state = self.state
        info: dict[str, Any] = {"cassette": str(state.out_path), "miss": state.config.miss}
        if state.source is not None:
            info.update(
                source=str(state.source_path), loaded=len(state.source), skipped_lines=state.source.skipped_lines
            )
        if state.upstream is not None:
            info["upstream"] = state.upstream.display
        return info

    def lease(self, config: RecorderConfig) -> None:
        """Serve another run from now on (a kept Gym's next run): its mode, folder and cassette."""
        state = RecorderState(config)  # a cassette that cannot be loaded raises here: the old state stays
        old, self.state = self.state, state
        old.close()
        print(f"pytest-gym recorder ({config.mode}) leased to {config.run_dir}; {json.dumps(self.describe())}",
              flush=True)  # fmt: skip

    def release(self) -> dict[str, Any]:
        """The leasing run ended: its stats into the log (which the run copies), its files closed."""
        stats = self.state.stats.to_json()
        print(f"pytest-gym recorder released; stats: {json.dumps(stats)}", flush=True)
        self.state.close()
        return stats

    def server_close(self) -> None:
        super().server_close()
        self.state.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_gym.standins.recorder", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    for mode in ("record", "replay"):
        p = sub.add_parser(mode)
        p.add_argument("--run-dir", required=True, help=f"folder for {CASSETTE_FILE}, {MISSES_FILE} and the log")
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--port", type=int, default=0, help="0 picks a free port")
        p.add_argument("--port-file", help="write the bound port here once listening")
        p.add_argument("--ignore", action="append", default=[], help="another request field to leave out of the key")
        p.add_argument("--no-default-ignore", action="store_true", help=f"key on {', '.join(DEFAULT_IGNORE)} too")
        p.add_argument("--upstream-timeout", type=float, default=600.0)
        p.add_argument("--fsync", action="store_true", help="fsync the cassette after every call")
        p.add_argument(
            "--upstream",
            required=mode == "record",
            help=f"the real endpoint's base URL (key from ${POLICY_KEY_ENV})",
        )
        if mode == "replay":
            p.add_argument("--cassette", required=True, help="a cassette file or a run folder holding one")
            p.add_argument("--miss", choices=("error", "passthrough"), default="error")
    return parser


def config_from_json(body: Any) -> RecorderConfig:
    """A lease's ``PUT /_lease`` body as a config; ValueError saying what is wrong."""
    if not isinstance(body, dict):
        raise ValueError("a lease is a JSON object")
    known = {"mode", "run_dir", "upstream", "cassette", "miss", "ignore", "upstream_timeout", "fsync"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise ValueError(f"unknown lease keys: {', '.join(unknown)}")
    mode, miss, run_dir = body.get("mode"), body.get("miss", "error"), body.get("run_dir")
    if mode not in ("record", "replay") or miss not in ("error", "passthrough"):
        raise ValueError("a lease's mode is record or replay, its miss error or passthrough")
    if not isinstance(run_dir, str) or not run_dir:
        raise ValueError("a lease needs run_dir, the leasing run's folder")
    ignore = body.get("ignore", list(DEFAULT_IGNORE))
    if not isinstance(ignore, list) or not all(isinstance(item, str) for item in ignore):
        raise ValueError("a lease's ignore is a list of field names")
    for name in ("upstream", "cassette"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise ValueError(f"a lease's {name} is a string")
    timeout = body.get("upstream_timeout", 600.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ValueError("a lease's upstream_timeout is a positive number of seconds")
    return RecorderConfig(
        mode=mode,
        run_dir=Path(run_dir),
        upstream=body.get("upstream"),
        cassette=Path(body["cassette"]) if body.get("cassette") else None,
        miss=miss,
        ignore=tuple(ignore),
        upstream_timeout=float(timeout),
        fsync=bool(body.get("fsync", False)),
    )


def config_from_args(args: argparse.Namespace) -> RecorderConfig:
    ignore = tuple(args.ignore) + (() if args.no_default_ignore else DEFAULT_IGNORE)
    return RecorderConfig(
        mode=args.mode,
        run_dir=Path(args.run_dir),
        upstream=args.upstream,
        cassette=Path(args.cassette) if getattr(args, "cassette", None) else None,
        miss=getattr(args, "miss", "error"),
        ignore=ignore,
        upstream_timeout=args.upstream_timeout,
        fsync=args.fsync,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        server = RecorderServer(args.host, args.port, config_from_args(args))
    except (ValueError, FileNotFoundError) as exc:
        print(f"pytest-gym recorder: {exc}", file=sys.stderr, flush=True)
        return 2
    return serve(
        server,
        args.port_file,
        f"pytest-gym recorder ({args.mode}) listening on {server.url}; {json.dumps(server.describe())}",
        "pytest-gym recorder",
        server.state.stats.to_json,
    )


if __name__ == "__main__":
    sys.exit(main())
