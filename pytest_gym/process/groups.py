"""Start and stop process groups, and read the tail of their logs.

Gym shuts down on SIGINT only, and its children (servers, Ray) share its process
group, so a whole deployment is stopped by signalling that group: SIGINT, a
grace period, then SIGTERM and SIGKILL. What the plugin starts runs under a
supervisor (``pytest_gym.process.supervisor``) that does this when pytest asks, and
also when pytest dies: nothing the run started outlives it. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gym.core.masking import mask_secrets
from pytest_gym.core.numbers import is_int, is_number
from pytest_gym.core.pids import pid_alive


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _reap(pid: int, popen: subprocess.Popen[bytes] | None) -> None:
    """Reap the leader if it is our child, so a zombie does not keep the group 'alive'."""
    if popen is not None:
        popen.poll()
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _wait_group(pgid: int, deadline: float, popen: subprocess.Popen[bytes] | None) -> bool:
    while time.monotonic() < deadline:
        _reap(pgid, popen)
        if not group_alive(pgid):
            return True
        time.sleep(0.1)
    return not group_alive(pgid)


def stop_group(
    pgid: int, grace: float, popen: subprocess.Popen[bytes] | None = None, first: signal.Signals = signal.SIGINT
) -> str:
    """Stop every process of a group; returns how it ended (for the log)."""
    _reap(pgid, popen)
    if not group_alive(pgid):
        return "already stopped"
    _signal_group(pgid, first)
    if _wait_group(pgid, time.monotonic() + grace, popen):
        return f"stopped by {first.name}"
    _signal_group(pgid, signal.SIGTERM)
    if _wait_group(pgid, time.monotonic() + 5.0, popen):
        return "stopped by SIGTERM"
    _signal_group(pgid, signal.SIGKILL)
    _wait_group(pgid, time.monotonic() + 5.0, popen)
    return "killed (SIGKILL)"


def log_tail(path: Path, lines: int = 20, max_bytes: int = 64 * 1024) -> str:
    """The last lines of a log, secrets masked; empty when there is no log."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    tail = "\n".join(data.splitlines()[-lines:])
    return mask_secrets(tail)


#: A log line that names a failure: an exception line, a pydantic summary, an ``Error:`` line.
_ERROR_LINE = re.compile(
    r"^\s*(Traceback \(most recent call last\)|[\w.]*(Error|Exception|Exit)\b:?|\d+ validation errors? for )"
    r"|\b(Error|ERROR|error):\s"
)


#: A log line that names a root cause: a missing command or module, a port taken, a missing file. Such a
#: line is quoted before any other error: what follows it (``Process 'x' finished unexpectedly!``, the
#: traceback of the shutdown) is its consequence.
_CAUSE_LINE = re.compile(
    r"(: command not found|\bNo module named\b|\baddress already in use\b"
    r"|\bcould not find a version that satisfies\b|\bNo matching distribution\b)",
    re.IGNORECASE,
)


def first_error(path: Path, max_bytes: int = 1024 * 1024) -> str | None:
    """The first line of a log that names a root cause, else the first that names a failure, and what
    explains it; None when there is none.

    Root causes (``uv: command not found``, ``No module named x``, ``address already in use``) come first:
    the exception Gym raises afterwards only says a server stopped. A traceback is quoted by its exception
    line (its last line), a pydantic error with its first field; secrets are masked. The tail of a log often
    shows only the shutdown that followed the cause.
    """
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line for line in data.splitlines() if not line.startswith(("pytest-gym:", "pytest-gym supervisor:"))]
    cause = next((line.strip() for line in lines if _CAUSE_LINE.search(line)), None)
    if cause is not None:
        return mask_secrets(cause)
    found = next((i for i, line in enumerate(lines) if _ERROR_LINE.search(line)), None)
    if found is None:
        return None
    if lines[found].lstrip().startswith("Traceback"):
        # The exception line: the first unindented line after the frames.
        found = next((i for i in range(found + 1, min(len(lines), found + 200)) if lines[i][:1].strip()), found)
    quoted = [lines[found].strip()]
    # A console wraps long lines at a space it keeps: "Error: ... entry 'x.yaml' " + "was not found."
    end = found
    while lines[end].endswith(" ") and end + 1 < len(lines) and lines[end + 1].strip() and end < found + 3:
        end += 1
        quoted[0] += " " + lines[end].strip()
    if re.search(r"\d+ validation errors? for ", lines[found]):
        quoted += [line.strip() for line in lines[found + 1 : found + 3] if line.strip()]
    return mask_secrets(" / ".join(quoted))


def process_start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot), to tell a process from a later one with its pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _is_supervisor(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"pytest_gym.process.supervisor" in fh.read()
    except FileNotFoundError:
        return False
    except OSError:
        return pid_alive(pid)  # no procfs: trust the pid


@dataclass
class Supervised:
    """A command run under a supervisor: its name in notes, its pid (= its process group), the supervisor's."""

    name: str
    pid: int
    supervisor_pid: int
    state_file: str
    first: str = "INT"
    grace: float = 30.0

    @classmethod
    def from_json(cls, data: Any) -> Supervised:
        """One a state file records; ValueError when it is not what this plugin wrote (a hand edit): a pid of
        ``true``, 0 or 1 would signal init's process group or this process's own, so none is signalled."""
        if not isinstance(data, dict):
            raise ValueError(f"{type(data).__name__}, not a recorded process")
        pid, supervisor_pid, grace = data.get("pid"), data.get("supervisor_pid"), data.get("grace", 30.0)
        if not (is_int(pid) and 1 < pid <= MAX_PID and is_int(supervisor_pid) and 1 < supervisor_pid <= MAX_PID):
            raise ValueError(f"pid {pid!r} or supervisor pid {supervisor_pid!r} is no process id")
        if pid in (os.getpid(), os.getpgrp()):  # this process's own group: never stopped on a file's word
            raise ValueError(f"pid {pid} is this pytest process or its group")
        name, state_file, first = data.get("name"), data.get("state_file"), data.get("first", "INT")
        if not isinstance(name, str) or not isinstance(state_file, str) or first not in ("INT", "TERM"):
            raise ValueError("a name, state file or first signal that is not one recorded")
        if not is_number(grace) or math.isnan(grace) or grace < 0:  # inf: --gym-shutdown-grace inf
            raise ValueError(f"grace {grace!r} is no number of seconds")
        return cls(name, pid, supervisor_pid, state_file, first, float(grace))


#: The largest process id Linux gives (``pid_max`` at most 2**22).
MAX_PID = 4_194_304

#: Supervisors this process started: the pipe to each (its write end) must stay open while the run lasts.
_PIPES: dict[int, subprocess.Popen[bytes]] = {}
_PIPES_LOCK = threading.Lock()


def spawn_supervised(
    name: str,
    args: Sequence[str],
    cwd: Path,
    log_path: Path,
    *,
    first: signal.Signals = signal.SIGINT,
    grace: float = 30.0,
    owner_pid: int | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 20.0,
    idle: tuple[float, Path] | None = None,
) -> Supervised:
    """Start ``args`` under a supervisor that stops its whole group when asked or when pytest is gone.

    ``owner_pid`` names the process whose end ends the run when it is not this one (an xdist worker
    starts Gym, the controller owns the run); without it, this process's end does. ``idle`` (seconds, a kept
    Gym's folder): also stop once it has been unused that long (``pytest_gym.process.keep``).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    state_file = log_path.parent / f"{name}.supervisor.json"
    state_file.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "pytest_gym.process.supervisor",
        "--first",
        first.name.removeprefix("SIG"),
        "--grace",
        repr(float(grace)),
        "--state-file",
        str(state_file),
    ]
    if owner_pid is not None:
        command += ["--owner", str(owner_pid)]
    if idle is not None:
        command += ["--idle", repr(float(idle[0])), "--idle-entry", str(idle[1])]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [*command, "--", *args],
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    with _PIPES_LOCK:
        _PIPES[proc.pid] = proc
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            state = json.loads(state_file.read_text(encoding="utf-8"))
            return Supervised(name, int(state["pid"]), proc.pid, str(state_file), first.name[3:], grace)
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    _close_pipe(proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    raise OSError(f"the supervisor of {name} did not start; log {log_path}:\n{log_tail(log_path)}")


def supervisor_popen(supervised: Supervised) -> subprocess.Popen[bytes] | None:
    """The supervisor as a child of this process (None when another process started it)."""
    with _PIPES_LOCK:
        return _PIPES.get(supervised.supervisor_pid)


def _close_pipe(pid: int, message: bytes = b"") -> None:
    with _PIPES_LOCK:
        proc = _PIPES.get(pid)
    if proc is None or proc.stdin is None:
        return
    with contextlib.suppress(OSError, ValueError):
        if message:
            proc.stdin.write(message)
            proc.stdin.flush()
    with contextlib.suppress(OSError, ValueError):
        proc.stdin.close()


def _request_stop(supervised: Supervised) -> None:
    if supervisor_popen(supervised) is not None:
        _close_pipe(supervised.supervisor_pid, b"stop\n")
    elif pid_alive(supervised.supervisor_pid) and _is_supervisor(supervised.supervisor_pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(supervised.supervisor_pid, signal.SIGUSR1)


def _supervisor_running(supervised: Supervised) -> bool:
    proc = supervisor_popen(supervised)
    if proc is not None:
        return proc.poll() is None
    return pid_alive(supervised.supervisor_pid) and _is_supervisor(supervised.supervisor_pid)


def _ended(supervised: Supervised) -> str | None:
    try:
        state = json.loads(Path(supervised.state_file).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    ended = state.get("ended") if isinstance(state, dict) else None
    return str(ended) if ended else None


@contextlib.contextmanager
def signals_deferred(notice: str = "") -> Iterator[list[int]]:
    """Hold SIGINT, SIGTERM and SIGHUP while a stop runs, so a CI's second signal cannot cut it short.

    The signals received are listed (the caller is ending anyway and reports them); the first one prints
    ``notice`` to stderr, so a user pressing Ctrl-C again knows why pytest waits. Only the main thread
    can set handlers: elsewhere nothing is held.
    """
    received: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        if not received and notice:
            with contextlib.suppress(OSError):
                os.write(2, f"\n{notice}\n".encode())
        received.append(signum)

    previous: dict[signal.Signals, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(OSError, ValueError):
                previous[sig] = signal.signal(sig, hold)
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)  # type: ignore[arg-type]


def stop_supervised(items: Sequence[Supervised], margin: float = 15.0) -> list[str]:
    """Stop every item at once and wait (bounded) until all are stopped; one note per item.

    Each supervisor runs its own stop (first signal, grace, SIGTERM, SIGKILL), so they run in parallel,
    and a pytest killed meanwhile does not cut them short. A command whose supervisor is gone (killed)
    is stopped here directly.
    """
    notes: dict[str, str] = {}
    bound = max((item.grace for item in items), default=0.0) + margin
    names = " and ".join(item.name for item in items)
    notice = f"pytest-gym: stopping {names} first (at most {bound:.0f} s; they are stopped even if pytest is killed)"
    with signals_deferred(notice) as received:
        for item in items:
            _request_stop(item)
        orphans = [item for item in items if not _supervisor_running(item)]
        threads = [
            threading.Thread(target=_stop_orphan, args=(item, notes), name=f"pytest-gym-stop-{item.name}", daemon=True)
            for item in orphans
            if group_alive(item.pid)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + bound
        pending = [item for item in items if item not in orphans]
        while pending and time.monotonic() < deadline:
            pending = [item for item in pending if _supervisor_running(item)]
            if pending:
                time.sleep(0.05)
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for item in items:
            if item.name in notes:
                continue
            if item in pending:
                notes[item.name] = f"still stopping (its supervisor, pid {item.supervisor_pid}, finishes the stop)"
            else:
                notes[item.name] = _ended(item) or "already stopped"
            proc = supervisor_popen(item)
            if proc is not None and proc.poll() is not None:
                with _PIPES_LOCK:
                    _PIPES.pop(item.supervisor_pid, None)
    result = [f"{item.name}: {notes.get(item.name, 'still stopping')}" for item in items]
    if received:
        names = ", ".join(sorted({signal.Signals(sig).name for sig in received}))
        result.append(f"{names} arrived while Gym was stopping: the stop was finished first")
    return result


def _stop_orphan(item: Supervised, notes: dict[str, str]) -> None:
    first = signal.SIGINT if item.first == "INT" else signal.SIGTERM
    notes[item.name] = stop_group(item.pid, item.grace, None, first=first) + " (its supervisor was gone)"
