"""The plugin's one HTTP client: a small keep-alive HTTP/1.1 client on asyncio streams.

The dispatcher sends thousands of small JSON POSTs to local Gym servers and
shares its process (and its CPU) with pytest. httpx's async stack costs a few
milliseconds of CPU per request here (pool bookkeeping through anyio, and a
failing ``import sniffio`` on every request when sniffio is not installed,
which under pytest's import hook walks ``sys.path`` each time); on a loaded
machine that CPU is taken from the Gym servers themselves. This client does
only what Gym's routes need: a request with ``Content-Length`` (or none), a
response with ``Content-Length``, chunked or close-delimited body (none for
HEAD, 1xx, 204 and 304), keep-alive reuse, TLS for ``https`` URLs, extra headers
(an auth header) sent only to the origins they belong to. No proxies, redirects,
cookies or compression (Gym sends none of those on these routes; a redirect's
status and ``Location`` are reported, not followed).

Errors are plain exceptions (``OSError``, ``asyncio.IncompleteReadError``,
``ProtocolError``, ``BodyTooLarge``); ``pytest_gym.rollout.transport`` makes
trial faults of them.

``fetch`` is the blocking form of one request (discovering the servers, waiting
for readiness, Gym's ``/aggregate_metrics``): the same code on a fresh pool and
a private event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Collection, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import ssl

#: An idle connection older than this is not reused (servers close idle ones; uvicorn after 5 s).
MAX_IDLE_S = 2.0
#: The longest status, header or chunk-size line accepted (asyncio's StreamReader limit).
LINE_LIMIT = 64 * 1024
#: The largest body ``fetch`` reads (Gym's config and aggregate metrics are far smaller).
FETCH_MAX_BODY = 64 * 1024 * 1024
_MAX_HEADERS = 200
_MAX_INTERIM = 16
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_T = TypeVar("_T")


class FetchError(Exception):
    """A blocking request failed before an HTTP status came back (no connection, timeout, garbage)."""


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.x as expected."""


class BodyTooLarge(Exception):
    def __init__(self, status: int, limit: int) -> None:
        super().__init__(f"body larger than {limit} bytes")
        self.status = status
        self.limit = limit


class Response(NamedTuple):
    status: int
    body: bytes
    #: The ``Retry-After`` header as sent (429 and 503 answers may carry one), else None.
    retry_after: str | None = None
    #: The ``Location`` header of a redirect (3xx), as sent (bounded), else None.
    location: str | None = None


def header_lines(headers: Mapping[str, str] | None) -> str:
    """``Name: value\\r\\n`` lines; a name or value that could split the request is refused (ValueError)."""
    if not headers:
        return ""
    lines = []
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name) or any(c in value for c in "\r\n\0"):
            raise ValueError(f"not a valid HTTP header: {name!r}")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines)


def fetch(
    method: str,
    url: str,
    body: bytes | None = None,
    timeout: float = 10.0,
    headers: Mapping[str, str] | None = None,
    max_body: int = FETCH_MAX_BODY,
    ssl_context: ssl.SSLContext | None = None,
    origins: Collection[tuple[str, str, int]] | None = None,
) -> tuple[int, bytes]:
    """One blocking request on a fresh connection: (status, body). Raises FetchError.

    ``headers``, ``ssl_context`` and ``origins`` as for ``HTTPPool``.
    """

    async def once() -> Response:
        pool = HTTPPool(headers, ssl_context, origins)
        try:
            return await asyncio.wait_for(pool.request(method, url, body, max_body), timeout)
        finally:
            await pool.aclose()

    try:
        response = run_blocking(once())
    except asyncio.TimeoutError:
        raise FetchError(f"no answer from {url} within {timeout:g} s") from None
    except asyncio.IncompleteReadError:
        raise FetchError(f"{url} closed the connection mid-answer") from None
    except (OSError, ProtocolError, BodyTooLarge, ValueError) as exc:
        raise FetchError(f"{type(exc).__name__}: {exc}") from None
    return response.status, response.body


def run_blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to the end on a private event loop (a helper thread's when this thread runs one).

    Unlike ``asyncio.run`` it leaves this thread's current event loop alone.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(coro)
        finally:
            try:  # interrupted (Ctrl-C): end what is left, so that its connection closes now
                left = asyncio.all_tasks(loop)
                for task in left:
                    task.cancel()
                if left:
                    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            finally:
                loop.close()
    import concurrent.futures

    def elsewhere() -> _T:
        return run_blocking(coro)

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pytest-gym-http") as pool:
        return pool.submit(elsewhere).result()


@dataclass(frozen=True)
class _Target:
    host: str
    port: int
    tls: bool
    host_header: str
    path: str
    #: The extra header lines this target gets (none off the headers' origins).
    extra: str


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
    """Keep-alive connections per server, used from one event loop.

    ``headers`` go with every request (e.g. an auth header) to one of ``origins`` ((scheme, host, port), as
    ``core.access.origin`` spells them; None: every origin); ``ssl_context`` replaces the system's default
    trust for ``https`` URLs.
    """

    def __init__(
        self,
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        origins: Collection[tuple[str, str, int]] | None = None,
    ) -> None:
        self._idle: dict[tuple[str, int, bool], list[_Connection]] = {}
        self._targets: dict[str, _Target] = {}
        self._ssl = ssl_context
        self._extra = header_lines(headers)
        self._origins = None if origins is None else frozenset(origins)

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
            if any(c in path for c in " \r\n\0"):
                raise ProtocolError(f"not a valid request path: {path!r}")
            netloc = parts.netloc.rsplit("@", 1)[-1]
            own = ("https" if tls else "http", parts.hostname.lower(), port)
            extra = self._extra if self._origins is None or own in self._origins else ""
            target = self._targets[url] = _Target(parts.hostname, port, tls, netloc, path, extra)
        return target

    async def _connect(self, target: _Target) -> _Connection:
        context = None
        if target.tls:
            import ssl  # only for https URLs

            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        reader, writer = await asyncio.open_connection(target.host, target.port, ssl=context, limit=LINE_LIMIT)
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

    async def request(
        self,
        method: str,
        url: str,
        body: bytes | None = None,
        max_body: int = FETCH_MAX_BODY,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """One request; the answer. Sent again once on a fresh connection when a reused one turns out closed."""
        target = self._target(url)
        key = (target.host, target.port, target.tls)
        extra = target.extra + header_lines(headers) if headers else target.extra
        framing = "" if body is None else f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        head = (
            f"{method} {target.path} HTTP/1.1\r\nHost: {target.host_header}\r\nAccept: application/json\r\n"
            f"{framing}{extra}\r\n"
        ).encode("latin-1")
        bodiless = method == "HEAD"
        connection = self._take(key)
        if connection is not None:
            try:
                return await self._exchange(connection, key, head, body, max_body, bodiless, reused=True)
            except _StaleConnection:
                pass
        return await self._exchange(await self._connect(target), key, head, body, max_body, bodiless, reused=False)

    async def _exchange(
        self,
        connection: _Connection,
        key: tuple[str, int, bool],
        head: bytes,
        body: bytes | None,
        max_body: int,
        bodiless: bool,
        reused: bool,
    ) -> Response:
        reader, writer = connection.reader, connection.writer
        try:
            try:
                if body is None:
                    writer.write(head)
                elif len(body) < 65536:
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
            status, keep_alive, length, chunked, retry_after, location = await _read_head(reader, line)
            if bodiless or status in (204, 304):
                data = b""  # no body by definition, whatever the headers say
            elif chunked:
                data = await _read_chunked(reader, status, max_body)
            elif length is not None:
                if length > max_body:
                    raise BodyTooLarge(status, max_body)
                data = await reader.readexactly(length)
            else:
                keep_alive = False
                data = await _read_to_eof(reader, status, max_body)
        except ValueError:  # StreamReader.readline past LINE_LIMIT
            connection.close()
            raise ProtocolError(f"a line of the answer is longer than {LINE_LIMIT // 1024} KiB") from None
        except BaseException:
            connection.close()
            raise
        if keep_alive:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(key, []).append(connection)
        else:
            connection.close()
        return Response(status, data, retry_after, location)

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()


class _StaleConnection(Exception):
    """A kept-alive connection the server had closed before it read our request."""


async def _read_head(
    reader: asyncio.StreamReader, line: bytes
) -> tuple[int, bool, int | None, bool, str | None, str | None]:
    """Status line and headers: (status, keep-alive, content-length, chunked, retry-after, location). Skips 1xx
    answers."""
    for _ in range(_MAX_INTERIM):
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
            raise ProtocolError(f"bad status line {line[:80]!r}")
        version, status = parts[0], int(parts[1])
        keep_alive = version == b"HTTP/1.1"
        length: int | None = None
        chunked = False
        retry_after: str | None = None
        location: str | None = None
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
                if not value.isdigit() or (length is not None and int(value) != length):
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
            elif name == b"retry-after":
                retry_after = value[:100].decode("latin-1")
            elif name == b"location":
                location = value[:500].decode("latin-1")
        else:
            raise ProtocolError("too many headers")
        if status >= 200:
            return status, keep_alive, (None if chunked else length), chunked, retry_after, location
        if status == 101:
            raise ProtocolError("the server switched protocols (HTTP 101), which nobody asked for")
        line = await reader.readline()  # an interim 1xx answer: the real one follows
    raise ProtocolError(f"more than {_MAX_INTERIM} interim (1xx) answers")


async def _read_chunked(reader: asyncio.StreamReader, status: int, max_body: int) -> bytes:
    chunks: list[bytes] = []
    size_so_far = 0
    while True:
        line = await reader.readline()
        if not line:
            raise asyncio.IncompleteReadError(line, None)
        size_text = line.split(b";", 1)[0].strip()
        if not _CHUNK_SIZE.fullmatch(size_text):
            raise ProtocolError(f"bad chunk size {size_text[:40]!r}")
        size = int(size_text, 16)
        if size == 0:
            for _ in range(_MAX_HEADERS):
                if (await reader.readline()) in (b"\r\n", b"\n", b""):
                    return b"".join(chunks)  # after the trailers
            raise ProtocolError("too many trailers")
        size_so_far += size
        if size_so_far > max_body:
            raise BodyTooLarge(status, max_body)
        chunks.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ProtocolError("a chunk is longer than its size says")


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
