"""Recorded model calls: one jsonl cassette, keyed by a canonical hash of each request.

A cassette lets a suite run against yesterday's model answers: deterministic, offline, free. It is
written by the recording proxy and read by the replay server (``pytest_gym.standins.recorder``); both are
plain data here so that tests and the session can inspect a cassette without a server.

The key of a call is the SHA-256 of its canonical request: method, route (``/responses``,
``/chat/completions``, ...) and the JSON body with the ignored fields removed (by default what
changes from run to run without changing the answer: ``user``, ``metadata``, ``store``,
``stream_options``, caching and service hints, and item ``id``s inside the input), keys sorted, ``null``
members dropped and integral floats written as integers (``1.0`` and ``1`` are the same temperature).
Everything else is in the key: model, input or messages, tools, sampling parameters, ``stream``.

Identical requests (repeats) are told apart by an occurrence index: the k-th answer recorded for a
key is handed to the k-th identical request that arrives at replay. Recording numbers occurrences
when the answer is complete, under the cassette's lock, so the lines of one key are in occurrence
order and numbering has no gaps even when calls run concurrently or fail. Only answers worth
replaying are kept: 2xx, and 4xx other than the transient or credential ones (401, 403, 404, 408, 429),
because a 400 "context too long" is as much an answer as a text.

The file is append-only, one call a line, each line written whole by one ``write`` on an ``O_APPEND``
descriptor under ``flock`` (so a crash leaves at most one torn last line, which the reader skips), and
it can be copied anywhere: it holds no credential (headers are never stored; every string passes
through :func:`pytest_gym.core.masking.mask_secrets`), and hashes are recomputed from the stored
requests on load, so a replay may use another ignore list than the recording did. Keys are hashes of
the masked request, so a prompt that itself contains a secret's value (rare) matches its recording
only where the same secret is set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.jsonl import read_jsonl_numbered
from pytest_gym.core.masking import Masker, mask_secrets
from pytest_gym.core.numbers import is_int
from pytest_gym.runfolder.layout import CASSETTE_FILE, MISSES_FILE

FORMAT_VERSION = 1

#: Fields that change between runs without changing the answer. ``a.*.b`` descends into every list
#: element (or mapping value) of ``a``; a bare name is a top-level field.
DEFAULT_IGNORE: tuple[str, ...] = (
    "user",
    "metadata",
    "store",
    "stream_options",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "input.*.id",
    "messages.*.id",
)
#: Answers that say nothing about the request: a retry (or a fixed credential) gets another one.
NOT_RECORDED_STATUSES = frozenset({401, 403, 404, 407, 408, 429})

_EXCERPT = 60
_MAX_DIFFS = 3
_MAX_MESSAGE = 1200


def recordable(status: int) -> bool:
    return 200 <= status < 300 or (400 <= status < 500 and status not in NOT_RECORDED_STATUSES)


# --- canonical requests -------------------------------------------------------------------------


def _parse_ignore(ignore: Iterable[str]) -> list[list[str]]:
    return [[part for part in entry.strip().split(".") if part] for entry in ignore if entry.strip()]


def _drop(value: Any, path: Sequence[str]) -> None:
    if not path:
        return
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        keys = list(value) if head == "*" else [head] if head in value else []
        for key in keys:
            if rest:
                _drop(value[key], rest)
            else:
                del value[key]
    elif isinstance(value, list):
        if head == "*":
            indices: Iterable[int] = range(len(value))
        elif head.isdigit() and int(head) < len(value):
            indices = [int(head)]
        else:
            indices = []
        for index in indices:
            if rest:
                _drop(value[index], rest)


def _normalise(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def canonical_request(method: str, route: str, body: Any, ignore: Iterable[str] = DEFAULT_IGNORE) -> dict[str, Any]:
    """What identifies a model call: method, route and the body without its ignored fields."""
    copy = json.loads(json.dumps(body)) if isinstance(body, (dict, list)) else body
    for path in _parse_ignore(ignore):
        _drop(copy, path)
    return {"method": method.upper(), "route": route, "body": _normalise(copy)}


def request_hash(canonical: dict[str, Any]) -> str:
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def mask_strings(value: Any, secrets: Sequence[str] | None = None) -> Any:
    """A copy with every string (keys too) masked as evidence (``Masker.evidence``), as data: values are
    checked, never field names (``max_tokens`` is a sampling parameter, not a secret).

    A cassette is evidence like the rollouts: a prompt or an answer is stored byte for byte unless it holds a
    known secret or a credential-shaped token; text that merely looks like one (``password='...'`` in an answer)
    is kept, or a replay would differ from its recording. Recording and replay key a request by its masked form
    through this one function, so both sides are masked the same way.
    """
    masker = Masker(list(secrets) if secrets is not None else None)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return masker.evidence(item)
        if isinstance(item, dict):
            return {masker.evidence(str(k)): walk(v) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v) for v in item]
        return item

    return walk(value)


def mask_body(body: str, secrets: Sequence[str] | None = None) -> str:
    """An answer's body masked as data: a JSON document, or a stream of ``data:`` events each holding one,
    keeps its structure (a masked value never runs over a quote); a body without a secret is returned
    unchanged, byte for byte. Text that is neither is masked as text."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        parsed = _NOT_JSON
    if parsed is not _NOT_JSON:
        masked = mask_strings(parsed, secrets)
        return body if masked == parsed else json.dumps(masked, ensure_ascii=False)
    if "data:" in body:
        lines = body.split("\n")
        out = []
        for line in lines:
            head, sep, rest = line.partition("data:")
            if head or not sep or not rest.strip() or rest.strip() == "[DONE]":
                out.append(line)
                continue
            event = rest.strip()
            masked = mask_body(event, secrets)
            out.append(line if masked == event else f"data: {masked}")
        return "\n".join(out)
    text: str = mask_strings(body, secrets)
    return text


_NOT_JSON = object()


# --- records ------------------------------------------------------------------------------------


@dataclass
class Recording:
    """One recorded call: the (masked) request as sent and the answer's status, type and body."""

    method: str
    route: str
    request: Any
    status: int
    content_type: str
    body: str
    hash: str = ""
    occurrence: int = 0
    recorded_at: float = 0.0
    upstream_ms: float | None = None
    line: int = 0

    @property
    def body_bytes(self) -> bytes:
        return self.body.encode("utf-8", "surrogateescape")

    @property
    def streamed(self) -> bool:
        return self.content_type.startswith("text/event-stream")

    def to_json(self) -> dict[str, Any]:
        data = {
            "v": FORMAT_VERSION,
            "hash": self.hash,
            "occurrence": self.occurrence,
            "method": self.method,
            "route": self.route,
            "status": self.status,
            "content_type": self.content_type,
            "request": self.request,
            "body": self.body,
            "recorded_at": self.recorded_at,
        }
        if self.upstream_ms is not None:
            data["upstream_ms"] = round(self.upstream_ms, 3)
        return data

    @classmethod
    def from_json(cls, data: Any, line: int) -> Recording:
        if not isinstance(data, dict):
            raise ValueError("not an object")
        status, occurrence = data["status"], data.get("occurrence", 0)
        # Whole numbers, as the recorder writes them: ``true`` is no HTTP status 1, Infinity no OverflowError.
        if not (is_int(status) and 100 <= status <= 599) or not is_int(occurrence):
            raise ValueError("a status or an occurrence that is not a whole number")
        return cls(
            method=str(data["method"]),
            route=str(data["route"]),
            request=data.get("request"),
            status=status,
            content_type=str(data.get("content_type") or "application/json"),
            body=str(data["body"]),
            hash=str(data.get("hash", "")),
            occurrence=occurrence,
            recorded_at=float(data.get("recorded_at") or 0.0),
            upstream_ms=data.get("upstream_ms"),
            line=line,
        )


def decode_body(data: bytes) -> str:
    """Bytes as text that round-trips exactly (``surrogateescape`` keeps non-UTF-8 bytes)."""
    return data.decode("utf-8", "surrogateescape")


def resolve_cassette(path: str | Path) -> Path:
    """A cassette file, or the cassette inside a run folder; ``FileNotFoundError`` naming both."""
    candidate = Path(path)
    if candidate.is_dir():
        candidate = candidate / CASSETTE_FILE
    if not candidate.is_file():
        raise FileNotFoundError(
            f"no cassette at {candidate} (give a cassette file or a run folder holding {CASSETTE_FILE})"
        )
    return candidate


# --- the index a replay serves from --------------------------------------------------------------


@dataclass
class Take:
    """What a replayed request gets: a recording, or why not (for the miss log and the error body)."""

    hash: str
    occurrence: int
    recording: Recording | None
    recorded: int


@dataclass
class Cassette:
    """Recordings by key, and the next occurrence each key hands out (atomically, in arrival order)."""

    ignore: tuple[str, ...] = DEFAULT_IGNORE
    by_hash: dict[str, list[Recording]] = field(default_factory=dict)
    skipped_lines: int = 0
    _next: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _flat: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path, ignore: Iterable[str] = DEFAULT_IGNORE) -> Cassette:
        """Index a cassette; keys are recomputed with ``ignore``, file order is occurrence order."""
        cassette = cls(ignore=tuple(ignore))
        items, bad = read_jsonl_numbered(resolve_cassette(path))
        cassette.skipped_lines = bad
        for number, data in items:
            try:
                recording = Recording.from_json(data, number)
            except (KeyError, TypeError, ValueError):
                cassette.skipped_lines += 1
                continue
            cassette.add(recording)
        return cassette

    def key(self, method: str, route: str, body: Any) -> tuple[str, dict[str, Any]]:
        canonical = canonical_request(method, route, body, self.ignore)
        return request_hash(canonical), canonical

    def add(self, recording: Recording) -> None:
        key, _ = self.key(recording.method, recording.route, recording.request)
        with self._lock:
            self.by_hash.setdefault(key, []).append(recording)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_hash.values())

    def take(self, key: str, reuse_last: bool = False) -> Take:
        """The next unused recording of ``key``; the k-th identical request gets the k-th recording.

        ``reuse_last`` (idempotent GETs such as ``/models``) hands out the last one again when all are used.
        """
        with self._lock:
            recordings = self.by_hash.get(key, [])
            occurrence = self._next.get(key, 0)
            self._next[key] = occurrence + 1
        if occurrence < len(recordings):
            return Take(key, occurrence, recordings[occurrence], len(recordings))
        if reuse_last and recordings:
            return Take(key, occurrence, recordings[-1], len(recordings))
        return Take(key, occurrence, None, len(recordings))

    def models(self) -> list[str]:
        names = {r.request.get("model") for rs in self.by_hash.values() for r in rs if isinstance(r.request, dict)}
        return sorted(str(n) for n in names if n)

    def nearest(self, canonical: dict[str, Any]) -> tuple[str, list[str]] | None:
        """The recorded request closest to ``canonical`` and how they differ (field paths, excerpts)."""
        now = flatten(canonical["body"])
        best: tuple[float, int, str] | None = None
        with self._lock:
            items = [(h, rs[0]) for h, rs in self.by_hash.items() if rs]
        for key, recording in items:
            if recording.method != canonical["method"]:
                continue
            flat = self._flat.get(key)
            if flat is None:
                recorded = canonical_request(recording.method, recording.route, recording.request, self.ignore)
                flat = flatten(recorded["body"])
                self._flat[key] = flat
            cost = distance(flat, now) + (0.0 if recording.route == canonical["route"] else 100.0)
            if best is None or (cost, recording.line) < best[:2]:
                best = (cost, recording.line, key)
        if best is None:
            return None
        key = best[2]
        return key, differences(self._flat[key], now)


# --- diagnostics ---------------------------------------------------------------------------------


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf values by path: ``input[0].content``, ``temperature``, ``tools[1].name``."""
    out: dict[str, Any] = {}
    if isinstance(value, dict) and value:
        for key in sorted(value):
            out.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{index}]"))
    elif prefix or value not in ({}, []):
        out[prefix or "(body)"] = value
    return out


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by bisection on slice equality (C speed on long prompts)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _similarity(a: Any, b: Any) -> float:
    if not (isinstance(a, str) and isinstance(b, str)) or not (a or b):
        return 0.0
    prefix = _common_prefix(a, b)
    suffix = _common_prefix(a[prefix:][::-1], b[prefix:][::-1])
    return (prefix + suffix) / max(len(a), len(b))


def distance(recorded: dict[str, Any], now: dict[str, Any]) -> float:
    """How far two flattened requests are: 1 per differing leaf, less for strings that mostly agree."""
    cost = 0.0
    for path in recorded.keys() | now.keys():
        if path not in recorded or path not in now:
            cost += 1.0
        elif recorded[path] != now[path]:
            cost += 1.0 - 0.9 * _similarity(recorded[path], now[path])
    return cost


def _excerpt_pair(a: Any, b: Any) -> tuple[str, str]:
    """Both values, cut around where they start to differ, so a one-word template change shows."""
    if isinstance(a, str) and isinstance(b, str):
        start = max(0, _common_prefix(a, b) - 20)

        def cut(text: str) -> str:
            piece = text[start : start + _EXCERPT]
            return ("..." if start else "") + piece + ("..." if start + _EXCERPT < len(text) else "")

        return _quote(cut(a)), _quote(cut(b))

    def short(value: Any) -> str:
        text = json.dumps(value, ensure_ascii=False)
        return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."

    return short(a), short(b)


def _quote(text: str) -> str:
    """Quoted as written (``repr`` would double every backslash of a LaTeX prompt); line breaks shown as ``\\n``."""
    return "'" + text.replace("\r", "\\r").replace("\n", "\\n") + "'"


def differences(recorded: dict[str, Any], now: dict[str, Any], limit: int = _MAX_DIFFS) -> list[str]:
    """Readable field differences, most telling first (changed, then added, then removed), bounded."""
    changed, added, removed = [], [], []
    for path in sorted(recorded.keys() | now.keys(), key=_path_order):
        if path not in now:
            removed.append(f"{path} missing now (recorded {_excerpt_pair(recorded[path], None)[0]})")
        elif path not in recorded:
            added.append(f"{path} is new (now {_excerpt_pair(None, now[path])[1]})")
        elif recorded[path] != now[path]:
            was, is_now = _excerpt_pair(recorded[path], now[path])
            changed.append(f"{path} differs: recorded {was} vs now {is_now}")
    found = changed + added + removed
    if len(found) > limit:
        found = [*found[:limit], f"(+{len(found) - limit} more differing fields)"]
    return found


def _path_order(path: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in path.replace("]", "").replace("[", ".").split("."))


def miss_message(take: Take, route: str, nearest: tuple[str, list[str]] | None) -> str:
    """The error text of a replay miss: the request's hash and, bounded, what differs from the nearest."""
    if take.recorded:
        text = (
            f"pytest-gym replay: request {take.hash[:16]} ({route}) was recorded {take.recorded} time(s) and this "
            f"is identical request number {take.occurrence + 1} (more repeats or retries than when recorded)"
        )
    elif nearest is None:
        text = f"pytest-gym replay: no recorded answer for request {take.hash[:16]} ({route}); the cassette is empty"
    else:
        text = (
            f"pytest-gym replay: no recorded answer for request {take.hash[:16]} ({route}); nearest recorded request "
            f"{nearest[0][:16]}: " + "; ".join(nearest[1])
        )
    text = mask_secrets(text)
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


# --- the miss log, for pytest to name the trial ---------------------------------------------------


@dataclass
class Miss:
    """One replayed request that had no answer: when, its key, why, and the request (masked)."""

    time: float
    hash: str
    route: str
    occurrence: int
    recorded: int
    nearest: str | None
    differences: list[str]
    message: str
    request: Any

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "hash": self.hash,
            "route": self.route,
            "occurrence": self.occurrence,
            "recorded": self.recorded,
            "nearest": self.nearest,
            "differences": self.differences,
            "message": self.message,
            "request": self.request,
        }

    def matches_row(self, row: Any) -> bool:
        """Whether this miss is a model call of the trial whose ``/run`` body (or dataset row) is ``row``.

        The first model call of a trial sends the row's ``responses_create_params.input`` as is; later
        turns send it followed by the conversation so far. Item ids are ignored on both sides.
        """
        params = row.get("responses_create_params") if isinstance(row, dict) else None
        if not isinstance(params, dict) or not isinstance(self.request, dict):
            return False
        for name in ("input", "messages"):
            if name not in params:
                continue
            want = _strip_ids(params[name])
            got = _strip_ids(self.request.get(name))
            if isinstance(want, list) and isinstance(got, list):
                return got[: len(want)] == want
            if isinstance(want, str) and isinstance(got, list) and got:
                first = got[0]
                return isinstance(first, dict) and first.get("content") == want
            return bool(want == got)
        return False


def _strip_ids(value: Any) -> Any:
    value = _normalise(mask_strings(value))
    if isinstance(value, list):
        return [{k: v for k, v in item.items() if k != "id"} if isinstance(item, dict) else item for item in value]
    return value


def read_misses(path: str | Path) -> list[Miss]:
    """The misses of a replay, from its run folder (or the miss log itself); torn lines skipped."""
    target = Path(path)
    if target.is_dir():
        target = target / MISSES_FILE
    misses = []
    for _, data in read_jsonl_numbered(target)[0]:
        with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
            if not (is_int(data["occurrence"]) and is_int(data["recorded"])):
                continue  # not a line the recorder wrote (``true``; Infinity would raise OverflowError)
            misses.append(
                Miss(
                    time=float(data["time"]),
                    hash=str(data["hash"]),
                    route=str(data["route"]),
                    occurrence=int(data["occurrence"]),
                    recorded=int(data["recorded"]),
                    nearest=data.get("nearest"),
                    differences=[str(d) for d in data.get("differences") or []],
                    message=str(data["message"]),
                    request=data.get("request"),
                )
            )
    return misses


def misses_for_row(misses: Iterable[Miss], row: Any) -> list[Miss]:
    return [miss for miss in misses if miss.matches_row(row)]


def iter_recordings(path: str | Path) -> Iterator[Recording]:
    """Every whole recording of a cassette, in file order (torn lines skipped)."""
    for number, data in read_jsonl_numbered(resolve_cassette(path))[0]:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            yield Recording.from_json(data, number)
