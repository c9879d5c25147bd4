"""What a replay costs next to calling the model: the model-call part of a run, without Gym.

    PYTHONPATH=. .venvs/dev/bin/python benchmarks/replay.py [--rows 200] [--repeats 4] [--concurrency 8]

Starts the scripted policy and the recorder as processes, as the session does (``start_policy``,
``start_recorder``), and sends ROWS x REPEATS Responses calls (distinct mcqa-sized prompts, each
repeated, sent concurrently by C threads over keep-alive connections, as Gym's model server does) to:

1. ``direct``: the scripted policy;
2. ``record``: the recording proxy in front of it (each answer written to the cassette);
3. ``replay``: the replay server, the policy stopped (``_stats`` must show 0 upstream calls);

and with ``--latency-ms L`` also how much a model's latency replay saves. Then: cassette size, the
replay server's start-up (load and index), and the time to answer one miss with its nearest-request
diagnostics. Every process it starts is stopped at the end; every wait is bounded.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.cassette import CASSETTE_FILE
from pytest_gym.gym.deployment import start_policy
from pytest_gym.gym.processes import stop_supervised
from pytest_gym.gym.recorder import start_recorder


def prompts(rows: int) -> list[dict[str, Any]]:
    options = "\n".join(f"{chr(65 + i)}: option number {i} of a multiple-choice question" for i in range(10))
    return [
        {
            "model": "pytest-gym-scripted",
            "input": [{"role": "user", "content": f"Answer in \\boxed{{}}. Question {n}: which is right?\n{options}"}],
        }
        for n in range(rows)
    ]


def run_calls(url: str, bodies: list[dict[str, Any]], concurrency: int) -> tuple[float, list[float], int]:
    """(wall seconds, per-call latencies, non-200 answers) for POSTing every body to ``url``/responses."""
    parts = urlsplit(url)
    local = threading.local()
    latencies: list[float] = []
    bad = [0]
    lock = threading.Lock()

    def one(body: dict[str, Any]) -> None:
        connection = getattr(local, "c", None)
        if connection is None:
            connection = local.c = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        data = json.dumps(body).encode()
        started = time.perf_counter()
        connection.request("POST", f"{parts.path}/responses", body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        elapsed = time.perf_counter() - started
        with lock:
            latencies.append(elapsed)
            if response.status != 200:
                bad[0] += 1

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, bodies))
    return time.perf_counter() - started, latencies, bad[0]


def stats_of(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request("GET", "/_stats")
        result: dict[str, Any] = json.loads(connection.getresponse().read())
        return result
    finally:
        connection.close()


def script(url: str, **changes: Any) -> None:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request("PUT", "/_script", body=json.dumps(changes).encode())
        connection.getresponse().read()
    finally:
        connection.close()


def report(name: str, wall: float, latencies: list[float], bad: int, calls: int) -> None:
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1000
    p95 = ordered[int(len(ordered) * 0.95) - 1] * 1000
    print(
        f"{name:<8} {calls} calls in {wall:6.3f} s  {calls / wall:7.0f} calls/s  p50 {p50:6.2f} ms  "
        f"p95 {p95:6.2f} ms  errors {bad}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="the scripted model's latency per call")
    args = parser.parse_args()
    bodies = [body for body in prompts(args.rows) for _ in range(args.repeats)]
    calls = len(bodies)
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        root = Path(tmp)
        stops: list[Callable[[], None]] = []
        try:
            policy, policy_url = start_policy(GymSettings(policy_latency_ms=args.latency_ms), root / "policy")
            stops.append(lambda: stop_supervised([policy]) and None)
            script(policy_url.removesuffix("/v1"), answers=["\\boxed{A}", "\\boxed{B}", "\\boxed{C}"])
            run_calls(policy_url, bodies[: args.concurrency * 4], args.concurrency)  # warm-up
            report("direct", *run_calls(policy_url, bodies, args.concurrency), calls)

            recorder, url = start_recorder("record", root / "rec", upstream=policy_url)
            stops.append(lambda: stop_supervised([recorder]) and None)
            report("record", *run_calls(url, bodies, args.concurrency), calls)
            recorded = stats_of(url.removesuffix("/v1"))
            assert recorded["recorded"] == calls, recorded
            stop_supervised([recorder])
            stop_supervised([policy])

            started = time.perf_counter()
            replay, url = start_recorder("replay", root / "rep", cassette=root / "rec")
            startup = time.perf_counter() - started
            stops.append(lambda: stop_supervised([replay]) and None)
            report("replay", *run_calls(url, bodies, args.concurrency), calls)
            replayed = stats_of(url.removesuffix("/v1"))
            assert (replayed["hits"], replayed["upstream_calls"]) == (calls, 0), replayed
            changed = json.loads(json.dumps(bodies[0]))
            changed["input"][0]["content"] += " (changed)"
            wall, _, bad = run_calls(url, [changed], 1)
            size = (root / "rec" / CASSETTE_FILE).stat().st_size
            print(
                f"cassette {size / 1024:.0f} KiB ({size / calls:.0f} B a call); replay start-up (process, load, "
                f"index {calls} calls) {startup:.2f} s; one miss with nearest-request diagnostics "
                f"{wall * 1000:.1f} ms (answered {'409' if bad else '200?'})",
                flush=True,
            )
        finally:
            for stop in reversed(stops):
                stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
