"""Telling a result from a fault in Gym's answer to /run, over real HTTP to the stand-in Gym."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Iterator

import pytest

from pytest_gym.rollout.http import HTTPPool
from pytest_gym.rollout.transport import (
    MAX_BODY_BYTES,
    TrialFault,
    _bounded,
    parse_answer,
    post_rollout,
    post_rollout_once,
)
from tests.helpers.standin import Answer, StandinGym, serving

URL = "http://gym/run"


@pytest.mark.parametrize(
    ("status", "body", "error_class", "message"),
    [
        (500, b"boom", "http_status", "HTTP 500 from http://gym/run: boom"),
        (429, b"", "http_status", "HTTP 429"),
        (200, b"<html>", "bad_body", "is not JSON"),
        (200, b"[1, 2]", "bad_body", "is a list, not an object"),
        (200, b'{"score": 1}', "no_reward", "has no 'reward' field (see --gym-reward-key); its fields: score"),
        (200, b'{"reward": "1.0"}', "bad_reward", "is '1.0', not a finite number"),
        (200, b'{"reward": NaN}', "bad_reward", "is nan, not a finite number"),
        (200, b'{"reward": Infinity}', "bad_reward", "is inf, not a finite number"),
        (200, b'{"reward": true}', "bad_reward", "is True, not a finite number"),
        (200, b'{"reward": null}', "bad_reward", "is None, not a finite number"),
    ],
)
def test_faults_are_classified_with_a_message(status: int, body: bytes, error_class: str, message: str) -> None:
    with pytest.raises(TrialFault) as excinfo:
        parse_answer(status, body, URL, "reward")
    assert excinfo.value.error_class == error_class
    assert message in excinfo.value.message


def test_a_reward_is_a_result() -> None:
    answer, reward = parse_answer(200, b'{"reward": 1, "extracted_answer": "B"}', URL, "reward")
    assert reward == 1.0
    assert answer["extracted_answer"] == "B"
    assert not math.isnan(reward)


def test_error_bodies_never_echo_the_policy_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", "sk-marker-123456")
    with pytest.raises(TrialFault) as excinfo:
        parse_answer(401, b"bad key sk-marker-123456 (Bearer sk-marker-123456)", URL, "reward")
    assert "sk-marker-123456" not in excinfo.value.message


@pytest.fixture
def server() -> Iterator[StandinGym]:
    with serving() as gym:
        yield gym


def answer_of_size(server: StandinGym, size: int) -> str:
    """/run answers ``size`` spaces (streamed); the URL to post to."""
    server.routes["/run"] = lambda _: Answer(length=size)
    return server.base_url + "/run"


def _post(url: str, timeout: float = 10.0) -> tuple[dict[str, object], float, float]:
    return post_rollout_once(url, {"responses_create_params": {}}, timeout, "reward")


def test_a_50_mb_answer_is_refused_without_reading_it_all(server: StandinGym) -> None:
    url = answer_of_size(server, 50 * 1024 * 1024)
    with pytest.raises(TrialFault) as excinfo:
        _post(url)
    assert excinfo.value.error_class == "bad_body"
    assert f"exceeds {MAX_BODY_BYTES // (1024 * 1024)} MiB" in excinfo.value.message


def test_connection_refused_is_a_connection_fault() -> None:
    from pytest_gym.gym.startargs import free_port

    with pytest.raises(TrialFault) as excinfo:
        _post(f"http://127.0.0.1:{free_port()}/run")
    assert excinfo.value.error_class == "connection"
    assert "cannot reach" in excinfo.value.message


def test_body_must_be_json_object_even_if_small(server: StandinGym) -> None:
    url = answer_of_size(server, 10)
    with pytest.raises(TrialFault) as excinfo:
        _post(url)
    assert excinfo.value.error_class == "bad_body"


# -- a request the trial stops waiting for ----------------------------------------------------------------------


def hanging(server: StandinGym) -> str:
    server.routes["/run"] = lambda _: Answer(hang_s=30)
    return server.base_url + "/run"


async def post_hanging(url: str, timeout: float, dead_after_s: float | None = None) -> tuple[float, HTTPPool]:
    """post_rollout to a server that never answers; (seconds until it raised, the pool) with the fault raised."""
    http = HTTPPool()
    dead: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if dead_after_s is not None:
        asyncio.get_running_loop().call_later(dead_after_s, dead.set_result, None)
    started = time.monotonic()
    try:
        await post_rollout(http, url, b"{}", timeout, "reward", dead)
    finally:
        elapsed = time.monotonic() - started
        await http.aclose()
    raise AssertionError(f"no fault after {elapsed:.2f} s")


def test_a_request_past_the_trial_timeout_is_a_timeout_fault_at_that_time(server: StandinGym) -> None:
    url = hanging(server)
    started = time.monotonic()
    with pytest.raises(TrialFault) as excinfo:
        asyncio.run(post_hanging(url, timeout=0.3))
    assert 0.25 < time.monotonic() - started < 3
    assert (excinfo.value.error_class, excinfo.value.message) == (
        "timeout",
        f"no answer from {url} within 0.3 s (--gym-trial-timeout)",
    )


def test_a_request_in_flight_when_gym_dies_is_abandoned_at_once(server: StandinGym) -> None:
    url = hanging(server)
    started = time.monotonic()
    with pytest.raises(TrialFault) as excinfo:
        asyncio.run(post_hanging(url, timeout=60, dead_after_s=0.2))
    assert time.monotonic() - started < 3
    assert excinfo.value.error_class == "gym_died"


def test_a_stop_cancels_a_request_in_flight_instead_of_making_it_a_fault(server: StandinGym) -> None:
    url = hanging(server)

    async def stopped() -> None:
        # The timeout far from the stop: a busy machine (CI) can hold the loop for a few tenths of a second, and a
        # stop that arrives once the timeout is due is rightly a timeout.
        task = asyncio.ensure_future(post_hanging(url, timeout=1.5))
        await asyncio.sleep(0.1)
        task.cancel()  # the dispatcher's stop: the trial is cancelled, not timed out a moment later
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(1.6)  # past the trial timeout: its timer must not cancel anything now

    asyncio.run(stopped())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10 does not count cancellations (Task.uncancel)")
def test_a_stop_at_the_moment_gym_dies_still_cancels_the_trial(server: StandinGym) -> None:
    url = hanging(server)

    async def stopped_as_gym_dies() -> None:
        http = HTTPPool()
        loop = asyncio.get_running_loop()
        dead: asyncio.Future[None] = loop.create_future()
        task = asyncio.ensure_future(post_rollout(http, url, b"{}", 60, "reward", dead))
        # One callback: Gym is declared dead (its callbacks run next) and the run is stopped (the task is cancelled).
        loop.call_later(0.1, lambda: (dead.set_result(None), task.cancel()))
        try:
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await http.aclose()

    asyncio.run(stopped_as_gym_dies())


def test_gym_dying_as_the_answer_arrives_cancels_nothing_the_trial_does_next() -> None:
    async def answered_as_gym_dies() -> str:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str] = loop.create_future()
        dead: asyncio.Future[None] = loop.create_future()

        async def request() -> str:
            return await answer

        # One callback: the answer arrives (the trial resumes first), then Gym is declared dead.
        loop.call_later(0.05, lambda: (answer.set_result("reward"), dead.set_result(None)))
        result = await _bounded(request(), 10, dead)  # type: ignore[arg-type]
        await asyncio.sleep(0.05)  # the trial's next wait (recording, its next retry) is not cancelled
        return result

    assert asyncio.run(answered_as_gym_dies()) == "reward"
