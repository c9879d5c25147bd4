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

``--suite``: the whole pytest-gym suite through a real Gym (needs ``PYTEST_GYM_CLI`` or ``gym`` on PATH, run
it in a network namespace: ``scripts/netns-run``). ROWS distinct mcqa rows x REPEATS, run by ``pytest
--gym-url`` against one Gym whose model port is served in turn by the scripted policy (``--latency-ms``)
and by the replay server of a recording made once before (the port is the same: Gym's
``policy_base_url`` is fixed at start). ``--rounds`` interleaved rounds (scripted, replay; then the
other order), each a fresh pytest process; medians and the replay/scripted ratio are printed. Gym's
start-up is paid once and is in neither number.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
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
from pytest_gym.process.groups import stop_supervised
from pytest_gym.runfolder.layout import CASSETTE_FILE
from pytest_gym.standins.launch import start_policy, start_recorder


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


def suite_rows(rows: int) -> list[dict[str, Any]]:
    """``rows`` distinct mcqa rows: the bundled five, each question numbered (so every prompt differs)."""
    example = Path(__file__).resolve().parent.parent / "examples" / "mcqa" / "example.jsonl"
    base = [json.loads(line) for line in example.read_text().splitlines() if line.strip()]
    result = []
    for n in range(rows):
        row = json.loads(json.dumps(base[n % len(base)]))
        row["responses_create_params"]["input"][0]["content"] += f" (question {n})"
        result.append(row)
    return result


def serve_policy(port: int, latency_ms: float, log: Path) -> subprocess.Popen[bytes]:
    """The scripted policy on a fixed port (the one Gym's policy_base_url names), answering \\boxed{E}."""
    args = [sys.executable, "-m", "pytest_gym.standins.policy", "--port", str(port), "--answer", "\\boxed{E}",
            f"--latency-ms={latency_ms}"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            stats_of(f"http://127.0.0.1:{port}")
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"the scripted policy did not start on port {port}; see {log}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def run_suite(root: Path, name: str, head: str, args: argparse.Namespace) -> tuple[float, str]:
    """One pytest-gym run of the suite in a fresh process; (wall seconds, its last line)."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
               "--gym-url", head, "--gym-agent", "mcqa_simple_agent", "--gym-dataset", "suite.jsonl",
               "--gym-repeats", str(args.repeats), "--gym-concurrency", str(args.concurrency),
               "--gym-run-dir", f"runs/{name}"]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=1800, check=False)
    wall = time.perf_counter() - started
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{name}: pytest exited {done.returncode}: {done.stdout[-3000:]}{done.stderr[-2000:]}")
    return wall, last


def suite_main(args: argparse.Namespace) -> int:
    from pytest_gym.gym.deployment import start_deployment, stop_started
    from pytest_gym.gym.startargs import free_port

    cli = os.environ.get("PYTEST_GYM_CLI") or shutil.which("gym")
    if not cli:
        print("--suite needs Gym: set PYTEST_GYM_CLI or put gym on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-replay-suite-") as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text("[pytest]\n")
        (root / "suite.jsonl").write_text("".join(json.dumps(r) + "\n" for r in suite_rows(args.rows)))
        port = free_port()
        model_url = f"http://127.0.0.1:{port}/v1"
        policy = serve_policy(port, args.latency_ms, root / "policy.log")
        started = None
        replay = None
        try:
            settings = GymSettings(resources_server="mcqa", model_url=model_url, model="pytest-gym-scripted", cli=cli,
                                   server_venv="auto", shutdown_grace=20)  # fmt: skip
            endpoint, started = start_deployment(settings, root / "gym")
            head = endpoint.head_url
            # Record once: the recorder on the model port, in front of the scripted policy on another one.
            stop_process(policy)
            upstream_port = free_port()
            policy = serve_policy(upstream_port, args.latency_ms, root / "policy.log")
            recorder, _ = start_recorder(
                "record", root / "rec", upstream=f"http://127.0.0.1:{upstream_port}/v1", port=port
            )
            wall, last = run_suite(root, "record", head, args)
            print(f"record   {wall:7.2f} s  {last}", flush=True)
            stop_supervised([recorder])
            stop_process(policy)
            times: dict[str, list[float]] = {"scripted": [], "replay": []}
            for number in range(args.rounds):
                order = ["scripted", "replay"] if number % 2 == 0 else ["replay", "scripted"]
                for mode in order:
                    if mode == "scripted":
                        policy = serve_policy(port, args.latency_ms, root / "policy.log")
                        wall, last = run_suite(root, f"scripted-{number}", head, args)
                        calls = stats_of(f"http://127.0.0.1:{port}")["calls"]
                        stop_process(policy)
                        assert calls == args.rows * args.repeats, calls
                    else:
                        replay, _ = start_recorder("replay", root / f"rep-{number}", cassette=root / "rec", port=port)
                        wall, last = run_suite(root, f"replay-{number}", head, args)
                        served = stats_of(f"http://127.0.0.1:{port}")
                        stop_supervised([replay])
                        replay = None
                        assert (served["hits"], served["misses"], served["upstream_calls"]) == (
                            args.rows * args.repeats, 0, 0,
                        ), served  # fmt: skip
                    times[mode].append(wall)
                    print(f"round {number} {mode:<8} {wall:7.2f} s  {last}", flush=True)
            scripted, replayed = statistics.median(times["scripted"]), statistics.median(times["replay"])
            print(
                f"suite {args.rows} rows x {args.repeats} repeats, concurrency {args.concurrency}, model latency "
                f"{args.latency_ms:g} ms, {args.rounds} rounds: median scripted {scripted:.2f} s, replay "
                f"{replayed:.2f} s, replay/scripted {replayed / scripted:.2f}",
                flush=True,
            )
        finally:
            if replay is not None:
                stop_supervised([replay])
            if policy.poll() is None:
                stop_process(policy)
            if started is not None:
                stop_started(started, 20)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="the scripted model's latency per call")
    parser.add_argument("--suite", action="store_true", help="the whole pytest-gym suite through a real Gym")
    parser.add_argument("--rounds", type=int, default=3, help="--suite: interleaved rounds")
    args = parser.parse_args()
    if args.suite:
        return suite_main(args)
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
