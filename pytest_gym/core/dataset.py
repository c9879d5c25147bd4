"""Stream jsonl datasets into distinct tasks, identified by the hash of their content.

A task keeps only where its row lives (line and byte offset), and the few short
fields asked for to select it by (``-k``/``-m``), unless a hook rewrote the row:
a 100k-row dataset then collects in the memory of its items, not of its rows,
and the file is read once at collection. The row is read back from its offset
when the trial is dispatched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.masking import clean_text, mask_secrets

REQUIRED_KEY = "responses_create_params"
HASH_PREFIX_LEN = 12
_EXCERPT_LEN = 80
_EXCERPT_WINDOW = 1024
#: Row fields kept for selection are short: a longer string is text, not a label.
FIELD_VALUE_MAX = 100
#: At most this many strings of a list field (tags).
FIELD_LIST_MAX = 16


class DatasetError(Exception):
    """A row that cannot become a task; names file, line, what was expected and the fix."""

    def __init__(self, path: Path, line: int, problem: str, fix: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        self.fix = fix
        super().__init__(f"{path}:{line}: {problem}\n  fix: {fix}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def canonical_json(row: Any) -> bytes:
    """Sorted keys, compact separators, UTF-8: the bytes a task's identity is the hash of."""
    return json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def task_hash(row: Any) -> str:
    return hashlib.sha256(canonical_json(row)).hexdigest()


def parse_row(raw: bytes, path: Path, line: int) -> dict[str, Any]:
    """Decode one non-blank line into a row, or raise a DatasetError that says why."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(
            path, line, f"line is not valid UTF-8 (byte {exc.start})", "save the dataset as UTF-8"
        ) from None
    try:
        row = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        # The "dataset" may be any file (/proc/self/environ): the excerpt is masked before it is cut.
        excerpt = clean_text(text.strip()[:_EXCERPT_WINDOW], _EXCERPT_WINDOW)
        if len(excerpt) > _EXCERPT_LEN:
            excerpt = excerpt[:_EXCERPT_LEN] + "..."
        raise DatasetError(
            path,
            line,
            f"invalid JSON ({exc}): {excerpt!r}",
            "each line must hold one complete JSON object (jsonl)",
        ) from None
    if not isinstance(row, dict):
        raise DatasetError(
            path,
            line,
            f"expected a JSON object, got {type(row).__name__}",
            'each line must be an object such as {"responses_create_params": {...}}',
        )
    if not isinstance(row.get(REQUIRED_KEY), dict):
        problem = (
            f"row has no {REQUIRED_KEY!r} object"
            if REQUIRED_KEY not in row
            else f"{REQUIRED_KEY!r} must be an object, got {type(row[REQUIRED_KEY]).__name__}"
        )
        raise DatasetError(
            path,
            line,
            problem,
            f'add "{REQUIRED_KEY}": {{"input": [...]}} with the prompt, as Gym datasets do',
        )
    return row


@dataclass
class Task:
    """One distinct row of a dataset."""

    path: Path
    line: int
    offset: int
    hash: str
    duplicate_lines: list[int] = field(default_factory=list)
    row_override: dict[str, Any] | None = None
    #: the row's short label fields asked for at collection (keywords, markers), packed by ``pack_fields``:
    #: one string per task, as a 100k-row dataset keeps one for every row
    packed_fields: str = ""

    @property
    def fields(self) -> tuple[tuple[str, str], ...]:
        """(field, value) of the row's label fields that were asked for, in the order asked."""
        return unpack_fields(self.packed_fields)

    @property
    def short_hash(self) -> str:
        return self.hash[:HASH_PREFIX_LEN]

    def load_row(self) -> dict[str, Any]:
        """The row as sent to Gym: rewritten by a hook, or read back from its offset."""
        if self.row_override is not None:
            return self.row_override
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            return parse_row(fh.readline(), self.path, self.line)


#: What one read of a row asks for; a longer row takes more reads.
_ROW_READ = 16 * 1024
#: Datasets a ``RowReader`` keeps open at once (the least recently read is closed first): a run of hundreds of
#: datasets must not use up the process's file descriptors (256 by default on macOS).
ROW_FILES_OPEN = 32


class RowReader:
    """Reads rows back by offset through one open file per dataset: one ``pread`` a row.

    Why not ``Task.load_row`` on the dispatcher's thread: opening, seeking, reading and closing are five system
    calls, and each gives up the interpreter lock, which that thread then takes back from pytest's busy thread (two
    thread switches). A file kept open also keeps reading the dataset that was collected if it is replaced meanwhile.
    Used by one thread; ``close`` once nothing reads any more. At most ``ROW_FILES_OPEN`` files are open at once.
    """

    def __init__(self, most_open: int = ROW_FILES_OPEN) -> None:
        self._files: dict[Path, int] = {}  # in the order they were last read
        self._most_open = max(1, most_open)

    def load(self, task: Task) -> dict[str, Any]:
        """The row as sent to Gym (see ``Task.load_row``)."""
        if task.row_override is not None:
            return task.row_override
        fd = self._files.pop(task.path, None)
        if fd is None:
            if len(self._files) >= self._most_open:
                os.close(self._files.pop(next(iter(self._files))))
            fd = os.open(task.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._files[task.path] = fd  # the most recently read last
        parts: list[bytes] = []
        offset = task.offset
        while True:
            chunk = os.pread(fd, _ROW_READ, offset)
            end = chunk.find(b"\n")
            if end >= 0:
                parts.append(chunk[: end + 1])
                break
            parts.append(chunk)
            if len(chunk) < _ROW_READ:
                break  # the last line, without a newline
            offset += len(chunk)
        return parse_row(b"".join(parts), task.path, task.line)

    def close(self) -> None:
        files, self._files = self._files, {}
        for fd in files.values():
            os.close(fd)


RowHook = Callable[[dict[str, Any], int], "dict[str, Any] | None"]
"""Called with (row, line); returns the row to send (maybe rewritten) or None to drop it.

With a hook the rows stay in memory: the hook may have changed them in place."""


def iter_rows(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, raw line) for every non-blank line, streaming."""
    offset = 0
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if raw.strip():
                yield number, offset, raw
            offset += len(raw)


def count_rows(path: Path) -> int:
    """The dataset's rows (non-blank lines), read in blocks: the size of its ``_ng_task_index`` range in a run."""
    rows = 0
    with path.open("rb") as fh:
        for raw in fh:
            if raw.strip():
                rows += 1
    return rows


_UNIT, _RECORD = "\x1f", "\x1e"  # ASCII unit and record separators: between name and value, between fields


def _label(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = value if isinstance(value, str) else str(value)
    if not 0 < len(text) <= FIELD_VALUE_MAX or _UNIT in text or _RECORD in text:
        return None
    return text


def pack_fields(fields: Sequence[tuple[str, str]]) -> str:
    """(name, value) pairs as one string (see ``Task.packed_fields``); neither may hold the separators."""
    return _RECORD.join(f"{name}{_UNIT}{value}" for name, value in fields)


def unpack_fields(packed: str) -> tuple[tuple[str, str], ...]:
    if not packed:
        return ()
    pairs = (record.split(_UNIT, 1) for record in packed.split(_RECORD))
    return tuple((name, value) for name, value in pairs)


def row_fields(row: dict[str, Any], names: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(name, value) for each of ``names`` whose value is a short string or integer, or a list of them.

    Bounded (``FIELD_VALUE_MAX`` characters, ``FIELD_LIST_MAX`` list items), so keeping them for
    every task of a large dataset costs little.
    """
    found: list[tuple[str, str]] = []
    for name in names:
        if _UNIT in name or _RECORD in name:
            continue
        value = row.get(name)
        if value is None:
            continue
        if isinstance(value, list):
            found.extend((name, text) for text in map(_label, value[:FIELD_LIST_MAX]) if text is not None)
        else:
            text = _label(value)
            if text is not None:
                found.append((name, text))
    return tuple(found)


#: Row fields whose value names a task in its node id, first found wins (``--gym-keyword-field`` replaces them).
LABEL_FIELDS = ("id", "task_id", "name")
#: A label is cut to this many characters: it names the task, the hash keeps it unique.
LABEL_MAX = 40
_LABEL_UNSAFE = re.compile(r"[^0-9A-Za-z_.@+-]+")


def task_label(fields: Sequence[tuple[str, str]], names: Sequence[str] = LABEL_FIELDS) -> str:
    """A task's readable label: the value of the first of ``names`` the row has (see ``row_fields``).

    Only letters, digits and ``_.@+-`` are kept (others become ``_``), so the label never breaks a node id
    (no ``::``, ``[``, ``/`` or space) and can be pasted into a shell; cut to ``LABEL_MAX``. Empty without one.
    A credential in it is masked first (and so left out): pytest prints node ids unmasked (``-v``, ``--co``,
    failure headers), and a cut key would escape the mask everywhere else.
    """
    for name in names:
        for field_name, value in fields:
            if field_name == name:
                label = _LABEL_UNSAFE.sub("_", mask_secrets(value)).strip("_.-")[:LABEL_MAX].rstrip("_.-")
                if label:
                    return label
    return ""


def task_name(digest: str, label: str = "") -> str:
    """The task part of a node id: ``<hash[:12]>`` or ``<hash[:12]>-<label>``.

    The hash prefix keeps it unique (two rows may share a label) and stable (it is the row's content); the
    label makes it readable. Every node id of a task is built here (trials add ``[rN]``).
    """
    short = digest[:HASH_PREFIX_LEN]
    return f"{short}-{label}" if label else short


def read_tasks(path: Path, row_hook: RowHook | None = None, fields: Sequence[str] = ()) -> list[Task]:
    """Distinct tasks of one dataset, in file order; duplicates fold into the first occurrence.

    ``fields``: row fields to keep on each task (see ``row_fields``), read from the row as sent.
    """
    tasks: dict[str, Task] = {}
    for line, offset, raw in iter_rows(path):
        row = parse_row(raw, path, line)
        try:
            digest = hashlib.sha256(canonical_json(row)).hexdigest()
        except UnicodeEncodeError as exc:
            raise DatasetError(
                path,
                line,
                f"the row holds a lone UTF-16 surrogate ({exc.object[exc.start]!r}, written escaped in the JSON), "
                "which no UTF-8 text can carry",
                "replace the escape with the character it was meant to be (a surrogate pair), or remove it",
            ) from None
        override: dict[str, Any] | None = None
        if row_hook is not None:
            override = row_hook(row, line)
            if override is None:
                continue
        known = tasks.get(digest)
        if known is not None:
            known.duplicate_lines.append(line)
            continue
        kept = pack_fields(row_fields(override if override is not None else row, fields)) if fields else ""
        tasks[digest] = Task(
            path=path, line=line, offset=offset, hash=digest, row_override=override, packed_fields=kept
        )
    return list(tasks.values())
