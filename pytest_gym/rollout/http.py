"""A small keep-alive HTTP/1.1 client for the dispatcher's POSTs to Gym's ``/run``.

The dispatcher sends thousands of small JSON POSTs to local Gym servers and
shares its process (and its CPU) with pytest. httpx's async stack costs a few
milliseconds of CPU per request here (pool bookkeeping through anyio, and a
failing ``import sniffio`` on every request when sniffio is not installed,
which under pytest's import hook walks ``sys.path`` each time); on a loaded
machine that CPU is taken from the Gym servers themselves. This client does
only what ``/run`` needs: ``POST`` with ``Content-Length``, a response with
``Content-Length``, chunked or close-delimited body, keep-alive reuse, TLS for
``https`` URLs. No proxies, redirects, cookies or compression (Gym sends none
of those on these routes).

Errors are plain exceptions (``OSError``, ``asyncio.IncompleteReadError``,
``ProtocolError``, ``BodyTooLarge``); ``pytest_gym.rollout.transport`` style faults are
made from them by the caller.

``fetch`` is the blocking counterpart for the few other calls a run makes
(discovering the servers, Gym's ``/aggregate_metrics``), on the standard
library, so that no HTTP package is imported at start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import ssl

#: An idle connection older than this is not reused (servers close idle ones; uvicorn after 5 s).
MAX_IDLE_S = 2.0
_LINE_LIMIT = 64 * 1024
_MAX_HEADERS = 200


class FetchError(Exception):
    """A blocking request failed before an HTTP status came back (no connection, timeout, garbage)."""


def fetch(
    method: str, url: str, body: bytes | None = None, timeout: float = 10.0, content_type: str = "application/json"
) -> tuple[int, bytes]:
    """One blocking request on a fresh connection: (status, body). Raises FetchError."""
    import http.client

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"not an http(s) URL: {url!r}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_type(parts.hostname, parts.port, timeout=timeout)
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise FetchError(f"{type(exc).__name__}: {exc}") from None
    finally:
        connection.close()


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.x as expected."""


class BodyTooLarge(Exception):
    def __init__(self, status: int, limit: int) -> None:
        super().__init__(f"body larger than {limit} bytes")
        self.status = status
        self.limit = limit


@dataclass(frozen=True)
class _Target:
    host: str
    port: int
    tls: bool
    host_header: str
    path: str


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def usable(self, now: float) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing() and now - self.idle_since < MAX_IDLE_S

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.transport.abort()


class HTTPPool:
    """Keep-alive connections per server, used from one event loop."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int, bool], list[_Connection]] = {}
        self._targets: dict[str, _Target] = {}
        self._ssl: ssl.SSLContext | None = None

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ProtocolError(f"not an http(s) URL: {url!r}")
            tls = parts.scheme == "https"
            port = parts.port or (443 if tls else 80)
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            netloc = parts.netloc.rsplit("@", 1)[-1]
            target = self._targets[url] = _Target(parts.hostname, port, tls, netloc, path)
        return target

    async def _connect(self, target: _Target) -> _Connection:
        context = None
        if target.tls:
            import ssl  # only for https URLs

            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        reader, writer = await asyncio.open_connection(target.host, target.port, ssl=context, limit=_LINE_LIMIT)
        return _Connection(reader, writer)

    def _take(self, key: tuple[str, int, bool]) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        return None

    async def post(
        self, url: str, body: bytes, max_body: int, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        """POST ``body``; (status, response body). Retries once on a reused connection the server had closed."""
        target = self._target(url)
        key = (target.host, target.port, target.tls)
        head = (
            f"POST {target.path} HTTP/1.1\r\nHost: {target.host_header}\r\nContent-Type: {content_type}\r\n"
            f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1")
        connection = self._take(key)
        if connection is not None:
            try:
                return await self._exchange(connection, key, head, body, max_body, reused=True)
            except _StaleConnection:
                pass
        return await self._exchange(await self._connect(target), key, head, body, max_body, reused=False)

    async def _exchange(
        self, connection: _Connection, key: tuple[str, int, bool], head: bytes, body: bytes, max_body: int, reused: bool
    ) -> tuple[int, bytes]:
        reader, writer = connection.reader, connection.writer
        try:
            try:
                if len(body) < 65536:
                    writer.write(head + body)
                else:
                    writer.write(head)
                    writer.write(body)
                await writer.drain()
                line = await reader.readline()
            except (ConnectionError, asyncio.IncompleteReadError):
                if reused:
                    raise _StaleConnection() from None
                raise
            if not line and reused:
                raise _StaleConnection()
            status, keep_alive, length, chunked = await _read_head(reader, line)
            if chunked:
                data = await _read_chunked(reader, status, max_body)
            elif length is not None:
                if length > max_body:
                    raise BodyTooLarge(status, max_body)
                data = await reader.readexactly(length)
            else:
                keep_alive = False
                data = await _read_to_eof(reader, status, max_body)
        except BaseException:
            connection.close()
            raise
        if keep_alive:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(key, []).append(connection)
        else:
            connection.close()
        return status, data

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()


class _StaleConnection(Exception):
    """A kept-alive connection the server had closed before it read our request."""


async def _read_head(reader: asyncio.StreamReader, line: bytes) -> tuple[int, bool, int | None, bool]:
    """Status line and headers: (status, keep-alive, content-length, chunked). Skips 1xx answers."""
    while True:
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"bad status line {line[:80]!r}")
        version, status = parts[0], int(parts[1])
        keep_alive = version == b"HTTP/1.1"
        length: int | None = None
        chunked = False
        for _ in range(_MAX_HEADERS):
            header = await reader.readline()
            if header in (b"\r\n", b"\n"):
                break
            if not header:
                raise asyncio.IncompleteReadError(header, None)
            name, _, value = header.partition(b":")
            name = name.strip().lower()
            value = value.strip()
            if name == b"content-length":
                if not value.isdigit():
                    raise ProtocolError(f"bad Content-Length {value[:40]!r}")
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                tokens = value.lower()
                if b"close" in tokens:
                    keep_alive = False
                elif b"keep-alive" in tokens:
                    keep_alive = True
        else:
            raise ProtocolError("too many headers")
        if 100 <= status < 200:
            line = await reader.readline()
            continue
        return status, keep_alive, (None if chunked else length), chunked


async def _read_chunked(reader: asyncio.StreamReader, status: int, max_body: int) -> bytes:
    chunks: list[bytes] = []
    size_so_far = 0
    while True:
        line = await reader.readline()
        if not line:
            raise asyncio.IncompleteReadError(line, None)
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size {size_text[:40]!r}") from None
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        size_so_far += size
        if size_so_far > max_body:
            raise BodyTooLarge(status, max_body)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def _read_to_eof(reader: asyncio.StreamReader, status: int, max_body: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await reader.read(1024 * 1024)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_body:
            raise BodyTooLarge(status, max_body)
        chunks.append(chunk)
