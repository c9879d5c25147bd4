"""W3C trace context: a new traceparent per trial, a checked tracestate, the link a trace id makes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pytest_gym.core.tracing import TRACEPARENT, new_traceparent, trace_link, tracestate_problem

TEMPLATE = "https://jaeger.example/trace/{trace_id}"


def test_a_traceparent_is_w3c_and_new_each_time() -> None:
    seen = set()
    for _ in range(200):
        header, trace_id = new_traceparent()
        match = TRACEPARENT.fullmatch(header)
        assert match is not None
        assert match["trace_id"] == trace_id
        assert match["flags"] == "01"
        assert trace_id != "0" * 32
        assert match["parent_id"] != "0" * 16
        seen.add(trace_id)
    assert len(seen) == 200
    assert trace_link(TEMPLATE, trace_id) == f"https://jaeger.example/trace/{trace_id}"
    assert trace_link(TEMPLATE, "not-an-id") is None
    assert trace_link(None, trace_id) is None


def test_a_traceparent_takes_no_system_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """No read of the system's randomness per trial: on the rollout thread a system call gives up the interpreter
    lock, and taking it back from pytest's busy thread costs two thread switches."""

    def urandom(size: int) -> bytes:
        raise AssertionError(f"os.urandom({size}) called for a trace id")

    monkeypatch.setattr(os, "urandom", urandom)
    header, trace_id = new_traceparent()
    assert TRACEPARENT.fullmatch(header) is not None
    assert header.split("-")[1] == trace_id


_FORKED = """
import os
from pytest_gym.core.tracing import new_traceparent

read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write_end, new_traceparent()[1].encode())
    os._exit(0)
os.close(write_end)
child = os.read(read_end, 64).decode()
os.waitpid(pid, 0)
print(child, new_traceparent()[1])
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_process_draws_other_trace_ids_than_its_parent() -> None:
    """The generator's state is copied by a fork: without a new seed in the child both would send the same ids.
    Forked in a process of its own, with one thread (a fork beside other threads may deadlock)."""
    done = subprocess.run([sys.executable, "-c", _FORKED], capture_output=True, text=True, timeout=60, check=True)
    child, parent = done.stdout.split()
    assert len(child) == len(parent) == 32
    assert child != parent


@pytest.mark.parametrize(
    ("value", "ok"),
    [("congo=t61rcWkgMzE", True), ("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", True), ("a@b=1", True),
     ("Upper=1", False), ("k=v,k=w", False), ("novalue", False), (",".join(f"k{i}=v" for i in range(33)), False)],
)  # fmt: skip
def test_tracestate_is_checked(value: str, ok: bool) -> None:
    assert (tracestate_problem(value) is None) is ok
