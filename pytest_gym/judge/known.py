"""Known failures (``--gym-known-failures FILE``): tasks whose failure is accepted for now, each with a reason.

The file is a YAML list::

    - task: 3c26f3a1b2c4            # a task hash prefix (8+ hex characters) or a node id (suite::hash)
      reason: the verifier rejects a correct unit (verifier bug)
      link: https://github.com/org/repo/issues/12    # optional
      expires: 2026-12-31                              # optional: after this day the entry fails

A listed task is *quarantined*: its failing trials are reported as xfail with the reason, its passing ones
as XPASS ("fixed: remove from the list"), and the suite's gates are judged without it (shown separately). An
entry past its ``expires:`` date quarantines nothing: its task is judged as any other, and the entry itself
is reported as a failing test naming it. The file is checked when the run starts; a problem is an error
naming the file, the line and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gym.core.numbers import is_int

if TYPE_CHECKING:
    from pytest_gym.judge.stats import SuiteStats
    from pytest_gym.judge.summary import KnownFailuresSummary, KnownTask

#: A task hash prefix this short would match tasks by chance.
MIN_PREFIX = 8
_HEX = re.compile(r"[0-9a-f]+")
_TRIAL = re.compile(r"\[r\d+\]$")
_KEYS = ("task", "reason", "link", "expires")
_FIX = "each entry is a mapping: `- task: <hash prefix of 8+ hex characters, or node id>`, `reason: <text>`"
MAX_FILE_BYTES = 8 << 20


class KnownFailuresError(ValueError):
    """A known-failures file that cannot be used: the message names the file, the line and the fix."""

    def __init__(self, path: Path, line: int, problem: str) -> None:
        self.path, self.line, self.problem = path, line, problem
        super().__init__(f"pytest-gym: --gym-known-failures {path}:{line}: {problem}")


@dataclass(frozen=True)
class KnownEntry:
    """One entry of the file."""

    task: str
    reason: str
    line: int
    file: str
    link: str | None = None
    expires: date | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def _parts(self) -> tuple[str | None, str]:
        """(suite or None, hash prefix)."""
        if "::" in self.task:
            suite, rest = self.task.rsplit("::", 1)
            return suite, _TRIAL.sub("", rest)
        return None, self.task

    def matches(self, suite: str, task_hash: str) -> bool:
        wanted_suite, prefix = self._parts
        return task_hash.startswith(prefix) and (wanted_suite is None or wanted_suite == suite)

    def expired(self, today: date) -> bool:
        return self.expires is not None and today > self.expires

    def describe(self) -> str:
        """``file:line task X (reason; link)``, for messages."""
        link = f"; {self.link}" if self.link else ""
        return f"{self.where} task {self.task} ({self.reason}{link})"


@dataclass
class KnownFailures:
    """The entries of one file, and which of them matched a task of this run."""

    path: Path
    entries: list[KnownEntry] = field(default_factory=list)
    today: date = field(default_factory=date.today)

    def entry_for(self, suite: str, task_hash: str) -> KnownEntry | None:
        """The first entry naming this task (expired or not)."""
        return next((e for e in self.entries if e.matches(suite, task_hash)), None)

    def active_for(self, suite: str, task_hash: str) -> KnownEntry | None:
        """The entry quarantining this task: one that names it and has not expired."""
        entry = self.entry_for(suite, task_hash)
        return entry if entry is not None and not entry.expired(self.today) else None

    def unused(self, tasks: Iterable[tuple[str, str]]) -> list[KnownEntry]:
        """Entries that name none of ``tasks`` ((suite, task hash) pairs): stale, or the run was narrowed."""
        pairs = list(tasks)
        return [e for e in self.entries if not any(e.matches(s, h) for s, h in pairs)]


@dataclass
class SuiteKnown:
    """One suite's tasks the file names: quarantined (an entry in force) and expired."""

    file: str
    listed: dict[str, KnownEntry] = field(default_factory=dict)
    expired: dict[str, KnownEntry] = field(default_factory=dict)
    #: The baseline comparison's flips of quarantined tasks (``new_failures``, ``fixed``), counted apart.
    quarantined: dict[str, list[str]] = field(default_factory=dict)


def quarantine(known: KnownFailures, suite: str, task_hashes: Iterable[str]) -> SuiteKnown:
    """Which of a suite's tasks the file quarantines, and which it names with an expired entry."""
    found = SuiteKnown(str(known.path))
    for task_hash in task_hashes:
        entry = known.entry_for(suite, task_hash)
        if entry is None:
            continue
        if entry.expired(known.today):
            found.expired[task_hash] = entry
        else:
            found.listed[task_hash] = entry
    return found


def _known_task(task_hash: str, entry: KnownEntry, lines: dict[str, int]) -> KnownTask:
    from pytest_gym.judge.summary import KnownTask

    return KnownTask(
        hash=task_hash[:12],
        line=lines.get(task_hash),
        entry=entry.where,
        reason=entry.reason,
        link=entry.link,
        expires=entry.expires.isoformat() if entry.expires else None,
    )


def known_summary(found: SuiteKnown, stats: SuiteStats, lines: dict[str, int]) -> KnownFailuresSummary:
    """The summary's section: listed tasks that failed, that passed (fixed), and expired entries."""
    from pytest_gym.judge.summary import KnownFailuresSummary

    summary = KnownFailuresSummary(file=found.file)
    for task_hash, entry in found.listed.items():
        ts = stats.per_task.get(task_hash)
        if ts is None or ts.n == 0:
            continue
        summary.failed_trials += ts.n - ts.successes
        (summary.fixed if ts.successes == ts.n else summary.failing).append(_known_task(task_hash, entry, lines))
    summary.expired = [_known_task(h, e, lines) for h, e in found.expired.items()]
    return summary


def _task(value: Any, path: Path, line: int, written: str | None) -> str:
    if is_int(value):  # an all-digit prefix reads as a number: take it as written (YAML reads 01234567 as octal)
        value = written if written is not None else str(value)
    if not isinstance(value, str) or not value.strip():
        raise KnownFailuresError(path, line, f"'task' must be a task hash prefix or a node id; {_FIX}")
    text = value.strip()
    prefix = _TRIAL.sub("", text.rsplit("::", 1)[-1]).lower()
    if not _HEX.fullmatch(prefix) or not MIN_PREFIX <= len(prefix) <= 64:
        raise KnownFailuresError(
            path,
            line,
            f"task {text[:80]!r} is neither a task hash prefix of at least {MIN_PREFIX} hex characters nor a node id "
            "(DATASET::HASH, as pytest prints it); copy it from the failing trial's node id",
        )
    return f"{text.rsplit('::', 1)[0]}::{prefix}" if "::" in text else prefix


def _expires(value: Any, path: Path, line: int) -> date | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise KnownFailuresError(path, line, f"'expires' must be a date such as 2026-12-31, got {str(value)[:40]!r}")


def _entry(node: Any, value: Any, number: int, path: Path, shown: str) -> KnownEntry:
    import yaml

    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode) or not isinstance(value, dict):
        raise KnownFailuresError(path, line, f"entry {number} is not a mapping; {_FIX}")
    lines: dict[str, int] = {}
    written: dict[str, str] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        key_line = key_node.start_mark.line + 1
        if isinstance(value_node, yaml.ScalarNode):
            written[key] = str(value_node.value)
        if key not in _KEYS:
            raise KnownFailuresError(path, key_line, f"unknown key {key[:40]!r} (an entry has {', '.join(_KEYS)})")
        if key in lines:
            raise KnownFailuresError(path, key_line, f"{key!r} given twice in entry {number}")
        lines[key] = key_line
    for key in ("task", "reason"):
        if key not in value:
            raise KnownFailuresError(path, line, f"entry {number} has no {key!r}; {_FIX}")
    reason = value["reason"]
    if not isinstance(reason, str) or not reason.strip():
        raise KnownFailuresError(path, lines["reason"], "'reason' must be text saying why the failure is accepted")
    link = value.get("link")
    if link is not None and (not isinstance(link, str) or not link.strip()):
        raise KnownFailuresError(path, lines["link"], "'link' must be text (a URL), or left out")
    return KnownEntry(
        task=_task(value["task"], path, lines["task"], written.get("task")),
        reason=" ".join(reason.split())[:500],
        line=line,
        file=shown,
        link=link.strip()[:500] if isinstance(link, str) else None,
        expires=_expires(value.get("expires"), path, lines.get("expires", line)),
    )


def _unreadable_line(text: str) -> int:
    """The line of the first scalar PyYAML parses but cannot build (a date or a number out of range); else 1."""
    import yaml

    pending = [yaml.compose(text, Loader=yaml.SafeLoader)]
    while pending:
        node = pending.pop(0)
        if isinstance(node, yaml.ScalarNode):
            try:
                yaml.SafeLoader("").construct_object(node)
            except ValueError:
                return int(node.start_mark.line) + 1
        elif isinstance(node, yaml.SequenceNode):
            pending[:0] = node.value
        elif isinstance(node, yaml.MappingNode):
            pending[:0] = [part for pair in node.value for part in pair]
    return 1


def load_known_failures(path: Path | str, shown: str | None = None, today: date | None = None) -> KnownFailures:
    """The file's entries, checked; ``KnownFailuresError`` naming the file and line of the first problem.

    ``shown`` is how messages name the file (as the user gave it, relative to the rootdir).
    """
    import yaml

    path = Path(path)
    shown = shown or str(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise KnownFailuresError(path, 1, f"larger than the {MAX_FILE_BYTES} bytes pytest-gym reads")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KnownFailuresError(path, 0, "no such file; give the path of the YAML list of known failures") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KnownFailuresError(path, 0, f"cannot be read ({exc})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise KnownFailuresError(path, line, f"not valid YAML ({problem})") from None
    except RecursionError:  # PyYAML recurses once per nesting level
        raise KnownFailuresError(path, 1, f"nested too deeply to read; {_FIX}") from None
    except ValueError as exc:  # a scalar YAML cannot build: 2026-02-30, a number of thousands of digits
        problem = "a number too long to read" if "digits" in str(exc) else f"a value that cannot be read ({exc})"
        raise KnownFailuresError(
            path, _unreadable_line(text), f"{problem}; 'expires' is a date such as 2026-12-31; {_FIX}"
        ) from None
    found = KnownFailures(path, today=today or date.today())
    if node is None or data is None:
        return found
    if not isinstance(node, yaml.SequenceNode) or not isinstance(data, list):
        raise KnownFailuresError(path, node.start_mark.line + 1, f"expected a list of entries; {_FIX}")
    first: dict[str, int] = {}
    for number, (item_node, item) in enumerate(zip(node.value, data, strict=True), start=1):
        entry = _entry(item_node, item, number, path, shown)
        if entry.task in first:
            twice = f"task {entry.task} is listed twice (also line {first[entry.task]})"
            raise KnownFailuresError(path, entry.line, twice)
        first[entry.task] = entry.line
        found.entries.append(entry)
    return found
