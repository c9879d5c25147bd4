"""The stand-in Gym (tests/helpers/standin.py) answers as configured, seen through the plugin's own HTTP client.

Every test and benchmark that needs a Gym that is not real uses it, so what it promises is checked here:
the head's routes, rewards per row, latency, queued faults (status codes, Retry-After, hostile bodies,
hangs), a required header, and the log of what it was sent.
"""

from __future__ import annotations

import http.client
import json
import time

import pytest

from pytest_gym.rollout.http import FetchError, fetch
from tests.helpers.standin import Answer, StandinDeployment, reply, serving


def post(url: str, body: object, headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    return fetch("POST", url, json.dumps(body).encode(), timeout=timeout, headers=headers)


def test_the_head_lists_its_agent_and_its_config() -> None:
    with serving("my_agent") as gym:
        assert fetch("GET", gym.url + "/readyz") == (200, b'{"status": "ready"}')
        status, data = fetch("GET", gym.url + "/server_instances")
        assert status == 200
        (agent,) = json.loads(data)
        assert (agent["process_name"], agent["server_type"], agent["url"]) == (
            "my_agent", "responses_api_agents", gym.base_url,
        )  # fmt: skip
        assert json.loads(fetch("GET", gym.url + "/global_config_dict_yaml")[1]).startswith("my_agent:\n")
        assert fetch("GET", gym.url + "/nowhere")[0] == 404


def test_rewards_per_row_latency_and_the_mean_in_aggregate_metrics() -> None:
    with serving() as gym:
        gym.rewards = {1: 0.0}
        gym.latency_s = 0.2
        started = time.monotonic()
        rewards = [json.loads(post(gym.url + "/run", {"_ng_task_index": t})[1])["reward"] for t in range(3)]
        assert time.monotonic() - started >= 0.6
        assert rewards == [1.0, 0.0, 1.0]
        gym.rewards = lambda body: 0.25 * body["_ng_task_index"]
        assert json.loads(post(gym.url + "/agent/run", {"_ng_task_index": 2})[1])["reward"] == 0.5  # by last part
        status, data = post(gym.url + "/aggregate_metrics", {"verify_responses": [{"reward": r} for r in rewards]})
        assert status == 200
        assert json.loads(data)["agent_metrics"] == {"mean/reward": pytest.approx(2 / 3)}
        assert gym.calls == {"/run": 4, "/aggregate_metrics": 1}


def test_faults_come_first_in_turn_then_normal_answers() -> None:
    with serving() as gym:
        gym.faults = [
            reply({"detail": "slow down"}, 429, headers={"Retry-After": "7"}),
            Answer(status=500, body=b"<html>boom"),
            Answer(raw=b"SSH-2.0-OpenSSH\r\n\r\n", close=True),
            Answer(hang_s=0.5),
        ]
        first = fetch("POST", gym.url + "/run", b"{}")
        assert first == (429, b'{"detail": "slow down"}')
        assert fetch("POST", gym.url + "/run", b"{}") == (500, b"<html>boom")
        with pytest.raises(FetchError):
            fetch("POST", gym.url + "/run", b"{}")  # not HTTP
        with pytest.raises(FetchError):
            fetch("POST", gym.url + "/run", b"{}", timeout=0.2)  # no answer at all
        assert json.loads(fetch("POST", gym.url + "/run", b"{}")[1])["reward"] == 1.0
        assert gym.faults == []


def test_retry_after_reaches_the_client_as_a_header() -> None:
    with serving() as gym:
        gym.faults = [reply({}, 429, headers={"Retry-After": "7"})]
        connection = http.client.HTTPConnection("127.0.0.1", gym.port, timeout=10)
        connection.request("POST", "/run", body=b"{}", headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        assert (answer.status, answer.getheader("Retry-After")) == (429, "7")
        connection.close()


def test_a_required_header_refuses_the_rest_and_the_log_keeps_headers_and_bodies() -> None:
    with serving(require={"Authorization": "Bearer t"}) as gym:
        assert post(gym.url + "/run", {"q": 1})[0] == 401
        assert post(gym.url + "/run", {"q": 2}, headers={"Authorization": "Bearer t", "X-Trace": "abc"})[0] == 200
        assert (gym.refused, gym.calls) == (1, {"/run": 1})
        seen = gym.log[-1]
        assert (seen.method, seen.route, seen.headers["x-trace"], seen.json()) == ("POST", "/run", "abc", {"q": 2})


def test_a_huge_answer_is_streamed_with_its_length() -> None:
    with serving() as gym:
        gym.routes["/run"] = lambda _: Answer(length=3 << 20)
        status, data = fetch("POST", gym.url + "/run", b"{}", max_body=4 << 20)
        assert (status, len(data), set(data)) == (200, 3 << 20, {ord(" ")})


def test_a_deployment_whose_resources_server_stops_alone() -> None:
    deployment = StandinDeployment()
    try:
        deployment.pids = {"fake_agent": 1234}
        servers = json.loads(fetch("GET", deployment.head.url + "/server_instances")[1])
        assert [(s["process_name"], s["url"], s["pid"]) for s in servers] == [
            ("fake_agent", deployment.agent.base_url, 1234),
            ("fake_resources", deployment.resources.base_url, None),
        ]
        deployment.resources.close()
        with pytest.raises(FetchError, match="Refused"):
            fetch("GET", deployment.resources.url + "/health")
        assert fetch("GET", deployment.agent.url + "/health")[0] == 200
    finally:
        deployment.close()
