"""W3C trace context: a new traceparent per trial, a checked tracestate, the link a trace id makes."""

from __future__ import annotations

import os

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


def test_a_traceparent_takes_one_read_of_the_systems_randomness(monkeypatch: pytest.MonkeyPatch) -> None:
    """One system call per trial for both ids (the rollout thread's system calls are its cost)."""
    reads: list[int] = []
    real = os.urandom

    def urandom(size: int) -> bytes:
        reads.append(size)
        return real(size)

    monkeypatch.setattr(os, "urandom", urandom)
    header, trace_id = new_traceparent()
    assert reads == [24]
    assert TRACEPARENT.fullmatch(header) is not None
    assert header.split("-")[1] == trace_id


@pytest.mark.parametrize(
    ("value", "ok"),
    [("congo=t61rcWkgMzE", True), ("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", True), ("a@b=1", True),
     ("Upper=1", False), ("k=v,k=w", False), ("novalue", False), (",".join(f"k{i}=v" for i in range(33)), False)],
)  # fmt: skip
def test_tracestate_is_checked(value: str, ok: bool) -> None:
    assert (tracestate_problem(value) is None) is ok
