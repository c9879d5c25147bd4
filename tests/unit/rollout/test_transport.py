"""Telling a result from a fault in Gym's answer to /run, over real HTTP to the stand-in Gym."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from pytest_gym.rollout.transport import MAX_BODY_BYTES, TrialFault, parse_answer, post_rollout_once
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
