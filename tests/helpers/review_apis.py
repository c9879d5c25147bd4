"""Local stand-ins of GitHub's and GitLab's comment APIs (127.0.0.1 only) that check every request.

``GitHubAPI``: ``GET/POST /repos/{owner}/{repo}/issues/{n}/comments`` (paginated by ``per_page``/``page``, with
a ``Link`` header) and ``PATCH /repos/{owner}/{repo}/issues/comments/{id}``; it requires ``Authorization:
Bearer <token>``, GitHub's ``Accept`` and API-version headers. ``GitLabAPI``: ``GET/POST
/projects/{id}/merge_requests/{iid}/notes`` (paginated, ``X-Next-Page``) and ``PUT .../notes/{id}``; it requires
``JOB-TOKEN`` or ``PRIVATE-TOKEN``. Both keep the comments, log each request (method, path, query, body) and
answer ``fail_with`` (a status) to the requests ``fail_on`` names.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Logged:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


@dataclass
class _State:
    token: str
    comments: list[dict[str, Any]] = field(default_factory=list)
    log: list[Logged] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    fail_with: int | None = None
    fail_on: frozenset[str] = frozenset({"GET", "POST", "PATCH", "PUT"})
    next_id: int = 1000

    def add(self, body: str) -> dict[str, Any]:
        self.next_id += 1
        comment = {"id": self.next_id, "body": body, "html_url": f"https://example.invalid/c/{self.next_id}"}
        self.comments.append(comment)
        return comment


class _API(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, platform: str, state: _State) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.platform = platform
        self.state = state
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    # -- what the tests read and set --
    @property
    def comments(self) -> list[dict[str, Any]]:
        return self.state.comments

    @property
    def log(self) -> list[Logged]:
        return self.state.log

    @property
    def problems(self) -> list[str]:
        return self.state.problems

    def seed(self, count: int, text: str = "a reviewer's comment") -> None:
        for i in range(count):
            self.state.add(f"{text} {i}")

    def fail(self, status: int | None, methods: tuple[str, ...] = ("GET", "POST", "PATCH", "PUT")) -> None:
        self.state.fail_with, self.state.fail_on = status, frozenset(methods)

    def writes(self) -> list[Logged]:
        return [entry for entry in self.log if entry.method != "GET"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _API

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self) -> None:
        state, platform = self.server.state, self.server.platform
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        state.log.append(Logged(self.command, parts.path, query, body, headers))
        if not self._authorized(headers):
            self._send(401, {"message": "Bad credentials"})
            return
        if state.fail_with is not None and self.command in state.fail_on:
            self._send(state.fail_with, {"message": "Resource not accessible by integration"})
            return
        if platform == "github":
            self._github(parts.path, query, body)
        else:
            self._gitlab(parts.path, query, body)

    def _authorized(self, headers: dict[str, str]) -> bool:
        state = self.server.state
        if self.server.platform == "github":
            if headers.get("accept") != "application/vnd.github+json" or "x-github-api-version" not in headers:
                state.problems.append(f"{self.command} {self.path}: GitHub's Accept/version headers missing")
            return headers.get("authorization") == f"Bearer {state.token}"
        return state.token in (headers.get("job-token"), headers.get("private-token"))

    def _page(self, query: dict[str, str]) -> tuple[list[dict[str, Any]], bool]:
        per_page, page = int(query.get("per_page", 30)), int(query.get("page", 1))
        comments = self.server.state.comments
        start = (page - 1) * per_page
        return comments[start : start + per_page], start + per_page < len(comments)

    def _github(self, path: str, query: dict[str, str], body: Any) -> None:
        state = self.server.state
        parts = path.strip("/").split("/")
        if len(parts) == 6 and parts[0] == "repos" and parts[3] == "issues" and parts[5] == "comments":
            if self.command == "GET":
                items, more = self._page(query)
                next_page = int(query.get("page", 1)) + 1
                link = f'<{self.server.url}{path}?per_page={query.get("per_page", 30)}&page={next_page}>; rel="next"'
                self._send(200, items, {"Link": link} if more else {})
                return
            if self.command == "POST" and isinstance(body, dict) and isinstance(body.get("body"), str):
                self._send(201, state.add(body["body"]))
                return
        if len(parts) == 6 and parts[3:5] == ["issues", "comments"] and self.command == "PATCH":
            return self._update(int(parts[5]), body)
        state.problems.append(f"unexpected {self.command} {path}")
        self._send(404, {"message": "Not Found"})

    def _gitlab(self, path: str, query: dict[str, str], body: Any) -> None:
        state = self.server.state
        parts = path.strip("/").split("/")
        tail = parts[parts.index("projects") :] if "projects" in parts else []
        if len(tail) == 5 and tail[2] == "merge_requests" and tail[4] == "notes":
            if self.command == "GET":
                items, more = self._page(query)
                self._send(200, items, {"X-Next-Page": str(int(query.get("page", 1)) + 1) if more else ""})
                return
            if self.command == "POST" and isinstance(body, dict) and isinstance(body.get("body"), str):
                self._send(201, state.add(body["body"]))
                return
        if len(tail) == 6 and tail[4] == "notes" and self.command == "PUT":
            return self._update(int(tail[5]), body)
        state.problems.append(f"unexpected {self.command} {path}")
        self._send(404, {"message": "404 Not found"})

    def _update(self, comment_id: int, body: Any) -> None:
        for comment in self.server.state.comments:
            if comment["id"] == comment_id and isinstance(body, dict) and isinstance(body.get("body"), str):
                comment["body"] = body["body"]
                self._send(200, comment)
                return
        self._send(404, {"message": "Not Found"})

    do_GET = do_POST = do_PATCH = do_PUT = _handle  # noqa: N815


@contextmanager
def serving(platform: str, token: str) -> Iterator[_API]:
    server = _API(platform, _State(token))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
