"""A pytest plugin for ``benchmarks/cpu.py``'s phases: where a run's CPU goes, written as JSON at exit.

Loaded with ``-p cpu_phases`` (this folder on ``PYTHONPATH``) by one extra run of each side, never by the
measured ones. Process CPU (all threads) at the phase boundaries: start-up until collection ends, the trials
(pytest's run loop), the end of the session (pytest-gym judges, writes the summary and the report in its
``pytest_sessionfinish`` wrapper; pytest's terminal summary is written within that hook too), unconfigure and
the exit. At the end of the run loop, each live thread's CPU and context switches (``/proc/self/task``), so the
dispatcher's thread shows apart from pytest's.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

_marks: dict[str, float] = {"loaded": time.process_time()}
_threads: dict[str, dict[str, float]] = {}


def thread_stats() -> dict[str, dict[str, float]]:
    """Each live thread of this process, by name: its CPU seconds (``cpu_s``) and context switches."""
    tick = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}
    found: dict[str, dict[str, float]] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
            status = (task / "status").read_text(encoding="utf-8")
        except OSError:
            continue  # ended meanwhile
        switches = sum(int(line.split(":")[1]) for line in status.splitlines() if "ctxt_switches" in line)
        name = names.get(int(task.name), f"thread {task.name}")
        found[name] = {"cpu_s": (int(fields[11]) + int(fields[12])) / tick, "switches": switches}
    return found


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    _marks["collected"] = time.process_time()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, Any, Any]:
    _marks["trials_start"] = time.process_time()
    try:
        return (yield)
    finally:
        _marks["trials_end"] = time.process_time()
        _threads.update(thread_stats())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, Any, Any]:
    try:
        return (yield)
    finally:
        _marks["session_end"] = time.process_time()


def _write() -> None:
    out = os.environ.get("CPU_PHASES_OUT")
    if out and "PYTEST_XDIST_WORKER" not in os.environ:
        _marks["exit"] = time.process_time()
        Path(out).write_text(json.dumps({"marks": _marks, "threads": _threads}), encoding="utf-8")


atexit.register(_write)
