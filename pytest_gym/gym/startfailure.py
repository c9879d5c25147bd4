"""Why a Gym start failed, said once: the cause quoted from Gym's log, the fix when the cause is a known one,
and the log to read (with its last lines, minus the cause already quoted)."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_gym.process.groups import first_error, log_tail

#: Causes with a known fix: (pattern of the quoted cause, the fix; ``{0}`` is the pattern's first group).
FIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"\buv: command not found|No such file or directory: '?uv'?"),
        "Gym builds one venv per server with `uv`, which is not on PATH: pass --gym-server-venv auto to run "
        "every server in the gym CLI's own venv (offline, no uv needed), or install uv",
    ),
    (
        re.compile(r"No module named '?([\w.]+)'?"),
        "a Gym server's venv lacks the module {0}: install that server's requirements.txt into the venv it runs "
        "in (with --gym-server-venv, that venv), then run again",
    ),
    (
        re.compile(r"address already in use", re.IGNORECASE),
        "a port Gym needs is taken (pytest-gym already started Gym again after a port race): stop the other "
        "Gym or server holding it (`ss -ltnp` names it), then run again",
    ),
    (
        re.compile(r"config_paths entry '([^']+)' was not found"),
        "{0} was not found: relative --gym-config paths are from where pytest was started, or from Gym's "
        "install root (resources_servers/NAME/configs/NAME.yaml)",
    ),
)


def fix_for(cause: str | None) -> str | None:
    """The fix for a quoted cause, when it is a known one."""
    for pattern, fix in FIXES if cause else ():
        match = pattern.search(cause or "")
        if match:
            return fix.format(*match.groups())
    return None


def start_failure(headline: str, log_path: Path, tail_lines: int = 12) -> str:
    """The one report of a failed start: ``headline``, the cause, its fix, the log and its last lines (with a
    cause found: the last few, without a traceback's frames)."""
    cause = first_error(log_path)
    lines = [headline]
    if cause:
        lines.append(f"first error in the log: {cause}")
        fix = fix_for(cause)
        if fix:
            lines.append(f"fix: {fix}")
    tail = log_tail(log_path, tail_lines).splitlines()
    if cause:  # the cause is quoted: of the tail, what is not the cause and not a traceback's frames
        tail = [line for line in tail if line.strip() not in cause and not line[:1].isspace()][-tail_lines // 2 :]
    printed = [line for line in tail if not line.startswith(("pytest-gym:", "pytest-gym supervisor:"))]
    if not printed and not cause:
        lines.append("the gym command printed nothing: is --gym-cli the `gym` of a NeMo Gym install?")
    lines.append(f"log: {log_path}" + (", last lines:" if printed else ""))
    if printed:
        lines += tail
    return "\n".join(lines)
