"""Run one command (Gym, or the scripted policy) for as long as the pytest run that started it.

``python -m pytest_gym.process.supervisor --first INT --grace 30 --state-file F [--owner PID] -- CMD ...``

pytest starts this in a session of its own, with a pipe as its stdin. It starts
``CMD`` as the leader of a new process group (Gym's servers and Ray join that
group) and stops the whole group, SIGINT (``--first``) then after ``--grace``
seconds SIGTERM and SIGKILL, when:

- pytest asks (a ``stop`` line on the pipe, or SIGUSR1 from another pytest process);
- pytest is gone, however it ended (SIGKILL included): the pipe reaches EOF, or,
  when the starter is an xdist worker, the run's owner (``--owner``) is gone;
- the command exits by itself (then only what it left behind is stopped);
- it has been unused for ``--idle`` seconds (a kept Gym: ``--idle-entry`` is its folder, see
  ``pytest_gym.process.keep``);
- the supervisor itself is killed (SIGKILL with its owner, the OOM killer): a reaper process it forked
  (Linux: ``PR_SET_PDEATHSIG``) stops the group the same way, so no child outlives its supervisor.

It ignores SIGINT, SIGTERM and SIGHUP: a Ctrl-C, a CI cancel or a closed terminal
reaches pytest, which stops the run; a stop that has begun is always finished.
Standard library only, and it writes ``{"supervisor", "pid"}`` to the state file
once the command runs and adds ``"ended"`` and ``"code"`` when it is over.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_gym.core.pids import pid_alive
from pytest_gym.process.groups import process_start_time, stop_group
from pytest_gym.process.keep import claim_if_idle

#: Seconds between checks of the command and the owner (the pipe and signals wake the loop at once).
POLL_S = 0.25
#: Seconds between checks whether a kept Gym is unused (``--idle``).
IDLE_CHECK_S = 1.0
#: Grace for what the command left behind when it exited by itself.
LEFTOVER_GRACE_S = 2.0


#: The supervisor's own reaper: of its session, but never what the command left behind.
_REAPERS: set[int] = set()


def _child_setup() -> None:
    # Ignored signals survive exec: the command must get SIGINT/SIGTERM/SIGHUP back, and its own group.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)
    os.setpgid(0, 0)


def _write_state(path: Path, state: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state), encoding="utf-8")
    os.replace(tmp, path)


def _say(text: str) -> None:
    print(f"pytest-gym supervisor: {text}", flush=True)


class _Owner:
    """The pytest process whose end ends the run, told apart from a later process with its pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started = process_start_time(pid)

    def alive(self) -> bool:
        return pid_alive(self.pid) and process_start_time(self.pid) == self.started


def _session_members() -> list[int]:
    """Other live processes of this supervisor's session: what left the command's group (Ray's workers
    move to groups of their own) but not the session. Empty without procfs."""
    me, sid = os.getpid(), os.getsid(0)
    found: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
                if int(fields[3]) == sid and fields[0] not in (b"Z", b"X") and int(entry) not in _REAPERS:
                    found.append(int(entry))
    return found


def _sweep_session(grace: float = 2.0) -> str:
    """Stop what is left in the session once the command's group is gone: SIGTERM, then SIGKILL."""
    left = _session_members()
    count = len(left)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [pid for pid in left if pid_alive(pid)]
    if not count:
        return ""
    if left:
        return f"; {len(left)} of {count} process(es) that left its group survived SIGKILL"
    return f"; {count} process(es) that left its group stopped"


#: prctl(2) option: the signal this process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def _start_reaper(child: int, first: signal.Signals, grace: float) -> int | None:
    """Fork a process that stops the command's group once this supervisor is gone, however it ended.

    The kernel signals the reaper (``PR_SET_PDEATHSIG``) when its parent dies; it then stops the group
    (``first``, ``grace``, SIGTERM, SIGKILL) and what left it in the session. The supervisor kills the reaper
    when it ends normally. None where prctl is not available (not Linux): the owner and the pipe still
    end the run as before.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    supervisor = os.getpid()
    wake = {signal.SIGUSR2}
    signal.pthread_sigmask(signal.SIG_BLOCK, wake)  # before the fork: the reaper cannot miss the signal
    pid = os.fork()
    if pid:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, wake)
        _REAPERS.add(pid)
        return pid
    code = 0
    try:
        signal.set_wakeup_fd(-1)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGUSR2), 0, 0, 0) != 0:
            os._exit(1)
        if os.getppid() == supervisor:  # else the supervisor died before prctl took effect
            signal.sigwait(wake)
        stop_group(child, grace, None, first=first)
        _sweep_session()
    except BaseException:
        code = 1
    os._exit(code)


def _stop_reaper(reaper: int | None) -> None:
    if reaper is None:
        return
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(reaper, signal.SIGKILL)
        os.waitpid(reaper, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_gym.process.supervisor")
    parser.add_argument("--first", choices=("INT", "TERM"), default="INT", help="signal that starts the stop")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds after it before SIGTERM and SIGKILL")
    parser.add_argument("--state-file", required=True)
    parser.add_argument("--owner", type=int, help="stop when this pid is gone (and not on EOF of stdin)")
    parser.add_argument("--idle", type=float, help="stop once the kept Gym in --idle-entry is unused this long")
    parser.add_argument("--idle-entry", help="the kept Gym's folder (its lease and last use)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    first = signal.SIGINT if args.first == "INT" else signal.SIGTERM
    state_file = Path(args.state_file)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    requested: list[str] = []
    signal.signal(signal.SIGUSR1, lambda *_: requested.append("asked to stop (SIGUSR1)"))
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the loop when the command exits

    owner = _Owner(args.owner) if args.owner else None
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, preexec_fn=_child_setup)
    reaper = _start_reaper(child.pid, first, args.grace)
    _write_state(state_file, {"supervisor": os.getpid(), "pid": child.pid})
    try:
        return _supervise(child, command, args, first, state_file, owner, wake_r, requested)
    finally:
        _stop_reaper(reaper)


def _supervise(
    child: subprocess.Popen[bytes],
    command: list[str],
    args: argparse.Namespace,
    first: signal.Signals,
    state_file: Path,
    owner: _Owner | None,
    wake_r: int,
    requested: list[str],
) -> int:

    stdin_fd: int | None = sys.stdin.fileno()
    reason = ""
    idle_check = time.monotonic() + IDLE_CHECK_S
    while not reason:
        code = child.poll()
        if code is not None:
            ended = stop_group(child.pid, LEFTOVER_GRACE_S, None, first=signal.SIGTERM)
            note = f"exited with code {code}" + ("" if ended == "already stopped" else f"; what it left: {ended}")
            note += _sweep_session()
            _say(f"{command[0]} {note}")
            _write_state(state_file, {"supervisor": os.getpid(), "pid": child.pid, "ended": note, "code": code})
            return code if code >= 0 else 128 - code
        if requested:
            reason = requested[0]
            break
        if owner is not None and not owner.alive():
            reason = f"the pytest run (pid {owner.pid}) is gone"
            break
        if args.idle is not None and args.idle_entry and time.monotonic() >= idle_check:
            idle_check = time.monotonic() + IDLE_CHECK_S
            if claim_if_idle(Path(args.idle_entry), args.idle):
                reason = f"unused for {args.idle:g} s"
                break
        watched = [wake_r] + ([stdin_fd] if stdin_fd is not None else [])
        with contextlib.suppress(InterruptedError):
            ready, _, _ = select.select(watched, [], [], POLL_S)
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
            if stdin_fd is not None and stdin_fd in ready:
                data = os.read(stdin_fd, 512)
                if b"stop" in data:
                    reason = "asked to stop"
                elif not data:
                    if owner is None:
                        reason = "pytest is gone (its pipe closed)"
                    stdin_fd = None  # the starter (an xdist worker) ended; the owner is still watched
    _say(f"{reason}: stopping {command[0]} (pid {child.pid}) with SIG{args.first}, grace {args.grace:g} s")
    began = time.monotonic()
    ended = stop_group(child.pid, args.grace, child, first=first) + _sweep_session()
    _say(f"{ended} after {time.monotonic() - began:.1f} s")
    _write_state(state_file, {"supervisor": os.getpid(), "pid": child.pid, "ended": ended, "code": child.returncode})
    return 0


if __name__ == "__main__":
    sys.exit(main())
