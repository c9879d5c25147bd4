"""Throughput of pytest-gym against a bare client and ``gym eval run``, on one real Gym deployment.

Run it inside a loopback-only network namespace (Gym starts Ray, which listens on every interface):

    scripts/netns-run .venvs/dev/bin/python benchmarks/throughput.py            # the full benchmark
    scripts/netns-run .venvs/dev/bin/python benchmarks/throughput.py --quick    # a small smoke version

It starts one Gym (mcqa, with the built-in scripted policy standing in for the model; its latency L is
set per case through the policy's ``/_script`` route), writes ROWS distinct mcqa-style rows (variants of
the bundled example), and for every case (L, C) measures, one after another on the same deployment:

1. ``bare``: a minimal asyncio client (httpx) POSTing the materialized rows (row, ``agent_ref``,
   ``_ng_task_index``, ``_ng_rollout_index``) to the same ``/run`` route ``gym eval run`` uses, with a
   semaphore of C. It runs inside this process: no interpreter start-up, the strictest baseline.
2. ``gym-eval``: ``gym eval run --no-serve --concurrency C --num-repeats R`` on the same rows, pointed at
   the running head server with ``++head_server.port=PORT``, as a whole process.
3. ``pytest``: ``pytest --gym-url URL --gym-concurrency C --gym-repeats R`` as a whole process
   (start-up, collection, rollouts, reports), and the same with ``-n 2``.
4. ``floor`` and ``floor -n 2``: plain pytest (``-p no:gym``) running as many parametrized tests, failing the
   same ones, without and with ``-n 2``. The targets are ratios to the bare client plus the floor of the same mode.

Every method must make exactly ROWS x R policy calls (checked on the policy's counters). Then a
collection benchmark: ``pytest --co -q`` on a 100k-row dataset against plain pytest collecting 100k
trivial parametrized tests, wall time and peak RSS of each process (``os.wait4``).

Every command runs as a normal Python does, caching bytecode (``PYTHONDONTWRITEBYTECODE`` is dropped
from their environment), after one warm-up run. The pytest runs use ``--gym-min-reward 0`` (the
machinery is measured, not the policy: every trial passes) unless ``--with-failures`` or ``--chance P``
(the policy's seeded stochastic mode: each row answered right with chance P, a model at temperature > 0), and
``-p no:hypothesispytest`` (a test dependency of this repo that costs about 0.6 s per process and is
no part of pytest-gym) unless ``--keep-plugins``.

Every wait is bounded, and everything the benchmark starts is stopped when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gym.core.endpoint import GymEndpoint  # noqa: E402
from pytest_gym.core.settings import GymSettings  # noqa: E402
from pytest_gym.gym.deployment import start_deployment, stop_started  # noqa: E402
from pytest_gym.gym.discovery import discover  # noqa: E402

EXAMPLE = ROOT / "examples" / "mcqa" / "example.jsonl"
AGENT = "mcqa_simple_agent"
RUN_TIMEOUT_S = 900.0
#: Targets from the issue: (case label, method, max ratio to the bare client).
TARGETS = [
    ("L=100ms C=32", "pytest", 1.25),
    ("L=100ms C=32", "pytest -n 2", 1.40),
    ("L=0ms C=1", "pytest", 1.30),
]
#: Targets of issues 9 and 19, with half of the trials failing: (case, method, the floor it is measured against,
#: max ratio to bare client + that floor). ``-n 2`` against plain pytest's floor under ``-n 2``: its workers'
#: start-up and the controller's report are pytest's own cost of ``-n 2``, not pytest-gym's.
FLOOR_TARGETS = [
    ("L=100ms C=32", "pytest", "floor", 1.08),
    ("L=100ms C=32", "pytest -n 2", "floor -n 2", 1.15),
]
COLLECT_TARGET = 1.5


# -- data ------------------------------------------------------------------------------------------


def iter_mcqa_rows(count: int, half_fail: bool = False) -> Iterator[dict[str, Any]]:
    """``count`` distinct mcqa rows: the bundled five, each question tagged with a variant number.

    ``half_fail``: every other row expects E (the scripted policy's answer) and the rest B, so exactly
    half of the trials fail, as in a real eval whose failures pytest must report.
    """
    base = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    for i in range(count):
        row = copy.deepcopy(base[i % len(base)])
        if half_fail:
            row["expected_answer"] = "E" if i % 2 == 0 else "B"
        message = row["responses_create_params"]["input"][0]
        message["content"] = message["content"].replace("step-by-step.", f"step-by-step (variant {i}).", 1)
        row["uuid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"pytest-gym-benchmark/{i}"))
        yield row


def mcqa_rows(count: int, half_fail: bool = False) -> list[dict[str, Any]]:
    return list(iter_mcqa_rows(count, half_fail))


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def materialize(rows: Sequence[dict[str, Any]], repeats: int) -> list[dict[str, Any]]:
    """The bodies Gym's collector POSTs: each row with its agent and task/rollout indices, repeats adjacent."""
    return [
        {**row, "agent_ref": {"name": AGENT}, "_ng_task_index": task, "_ng_rollout_index": repeat}
        for task, row in enumerate(rows)
        for repeat in range(repeats)
    ]


# -- the policy ------------------------------------------------------------------------------------


class Policy:
    def __init__(self, url: str) -> None:
        self.url = url

    def set(self, **changes: Any) -> None:
        httpx.put(f"{self.url}/_script", json=changes, timeout=10, trust_env=False).raise_for_status()

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.url}/_stats", timeout=10, trust_env=False).json()
        return result


# -- the methods -----------------------------------------------------------------------------------


@dataclass
class Measurement:
    method: str
    seconds: float
    calls: int
    max_in_flight: int
    ok: bool
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    #: CPU seconds of the measured process and its children (None for the in-process bare client).
    cpu_s: float | None = None


async def _bare(url: str, bodies: Sequence[dict[str, Any]], concurrency: int) -> int:
    semaphore = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    rewarded = 0
    async with httpx.AsyncClient(limits=limits, timeout=120, trust_env=False) as client:

        async def one(body: dict[str, Any]) -> None:
            nonlocal rewarded
            async with semaphore:
                response = await client.post(url, json=body)
            if response.status_code == 200 and isinstance(response.json().get("reward"), (int, float)):
                rewarded += 1

        await asyncio.gather(*(one(body) for body in bodies))
    return rewarded


def run_bare(endpoint: GymEndpoint, bodies: Sequence[dict[str, Any]], concurrency: int) -> tuple[float, str, bool]:
    started, cpu = time.perf_counter(), time.process_time()
    rewarded = asyncio.run(asyncio.wait_for(_bare(endpoint.route_for(AGENT), bodies, concurrency), RUN_TIMEOUT_S))
    seconds = time.perf_counter() - started
    detail = f"cpu {time.process_time() - cpu:.2f} s, {rewarded}/{len(bodies)} rewarded"
    return seconds, detail, rewarded == len(bodies)


@dataclass
class ProcessResult:
    seconds: float
    returncode: int
    max_rss_kib: int
    output: str
    cpu_s: float = 0.0


def run_process(
    args: Sequence[str], cwd: Path, timeout: float = RUN_TIMEOUT_S, pythonpath: Path | None = None
) -> ProcessResult:
    """Run a command as its own process group; wall time, exit code, peak RSS (its own, from wait4)."""
    log = cwd / f"output-{time.monotonic_ns()}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    env.pop("PYTEST_ADDOPTS", None)
    # A normal Python caches bytecode. With PYTHONDONTWRITEBYTECODE (set in some sandboxes) pytest cannot
    # cache its assertion-rewritten plugin modules and parses and rewrites them in every process, about
    # 0.2 s of start-up that measures the sandbox, not the tools. Every measured command runs without it.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with log.open("wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            list(args),
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        deadline = started + timeout
        status, usage = 0, None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.005)
        seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    with contextlib.suppress(ProcessLookupError):  # leftovers of the group (xdist workers are waited by it)
        os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text(encoding="utf-8", errors="replace")
    cpu = usage.ru_utime + usage.ru_stime if usage else 0.0
    return ProcessResult(seconds, proc.returncode, usage.ru_maxrss if usage else 0, text, cpu)


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else ""


def count_lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    except FileNotFoundError:
        return 0


def run_gym_eval(
    gym_cli: str, head_port: int, rows_path: Path, repeats: int, concurrency: int, work: Path
) -> tuple[float, str, bool]:
    work.mkdir(parents=True)
    out = work / "out" / "rollouts.jsonl"
    args = [
        gym_cli, "eval", "run", "--no-serve", "--agent", AGENT, "--input", str(rows_path), "--output", str(out),
        "--concurrency", str(concurrency), "--num-repeats", str(repeats), f"++head_server.port={head_port}",
    ]  # fmt: skip
    result = run_process(args, work)
    records = count_lines(out)
    ok = result.returncode == 0
    detail = f"cpu {result.cpu_s:.2f} s, exit {result.returncode}, {records} rollouts"
    if not ok:
        detail += "; last line: " + last_line(result.output)
    return result.seconds, detail, ok


def pytest_args(options: argparse.Namespace) -> list[str]:
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    if not options.keep_plugins:
        args += ["-p", "no:hypothesispytest"]
    return args


def run_pytest(
    options: argparse.Namespace,
    url: str,
    rows_path: Path,
    repeats: int,
    concurrency: int,
    work: Path,
    extra: Sequence[str] = (),
    source: Path | None = None,
) -> tuple[float, str, bool]:
    """pytest-gym as a whole process; ``source``: run the plugin from that source tree (an earlier version)."""
    work.mkdir(parents=True)
    (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    run_dir = work / "run"
    args = [
        *pytest_args(options),
        "--gym-url", url, "--gym-agent", AGENT, f"--gym-dataset={rows_path}",
        "--gym-repeats", str(repeats), "--gym-concurrency", str(concurrency), f"--gym-run-dir={run_dir}",
        *([] if failing(options) else ["--gym-min-reward", "0"]),
        *extra,
    ]  # fmt: skip
    result = run_process(args, work, pythonpath=source)
    records = count_lines(run_dir / "rollouts.jsonl")
    ok = result.returncode in ((0, 1) if failing(options) else (0,))
    detail = f"cpu {result.cpu_s:.2f} s, exit {result.returncode}, {records} rollouts, {last_line(result.output)}"
    return result.seconds, detail, ok


def failing(options: argparse.Namespace) -> bool:
    return bool(options.with_failures or options.half_fail or options.chance < 1.0)


def run_floor(
    options: argparse.Namespace, trials: int, work: Path, extra: Sequence[str] = ()
) -> tuple[float, str, bool]:
    """pytest's own floor: as many plain parametrized tests as trials, failing the same ones with a message
    of the same kind. Nothing of pytest-gym runs (``-p no:gym``)."""
    work.mkdir(parents=True)
    (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (work / "test_floor.py").write_text(
        "import pytest\n\n\n"
        f"@pytest.mark.parametrize('i', range({trials}))\n"
        "def test_trial(i):\n"
        f"    if {failing(options)} and (i // {options.repeats}) % 2:\n"
        "        pytest.fail(f'reward 0.0 < min_reward 1.0 for task {i:012x} (rows.jsonl:{i}, repeat 0)\\n'\n"
        "                    \"  expected_answer: 'B'\\n  extracted_answer: 'E'\", pytrace=False)\n",
        encoding="utf-8",
    )
    result = run_process([*pytest_args(options), "-p", "no:gym", *extra, "test_floor.py"], work)
    ok = result.returncode in ((0, 1) if failing(options) else (0,))
    return result.seconds, f"cpu {result.cpu_s:.2f} s, exit {result.returncode}, {last_line(result.output)}", ok


# -- the benchmark ---------------------------------------------------------------------------------


@dataclass
class Case:
    latency_ms: float
    concurrency: int

    @property
    def label(self) -> str:
        return f"L={self.latency_ms:g}ms C={self.concurrency}"


def measure(
    policy: Policy, expected_calls: int, method: str, run: Callable[[], tuple[float, str, bool]]
) -> Measurement:
    if method.startswith("floor"):
        expected_calls = 0
    policy.set(reset_stats=True)
    started = time.time()
    seconds, detail, ok = run()
    time.sleep(0.2)
    stats = policy.stats()
    calls, peak = int(stats["calls"]), int(stats["max_in_flight"])
    ok = ok and calls == expected_calls
    if calls != expected_calls:
        detail += f"; POLICY CALLS {calls} != {expected_calls}"
    phases = {}
    if stats.get("first_call") and stats.get("last_call"):
        # Wall time before the first model call (start-up, collection) and between first and last call.
        phases = {"before_first_call": stats["first_call"] - started, "calls": stats["last_call"] - stats["first_call"]}
    cpu = re.match(r"cpu (\d+\.\d+) s", detail)
    measurement = Measurement(
        method, seconds, calls, peak, ok, detail, phases, float(cpu.group(1)) if cpu and method != "bare" else None
    )
    shown = (
        f"first call after {phases['before_first_call']:5.2f} s, calls span {phases['calls']:5.2f} s" if phases else ""
    )
    print(
        f"    {method:<12} {seconds:7.2f} s   {shown}   max in flight {peak:3d}   {detail}",
        flush=True,
    )
    return measurement


def throughput(options: argparse.Namespace, endpoint: GymEndpoint, policy: Policy, work: Path) -> dict[str, Any]:
    rows = mcqa_rows(options.rows, options.half_fail)
    rows_path = write_jsonl(work / "rows.jsonl", rows)
    bodies = materialize(rows, options.repeats)
    trials = len(bodies)
    head_port = int(endpoint.head_url.rsplit(":", 1)[1])
    cases = [Case(float(lat), int(c)) for lat, c in (spec.split(":") for spec in options.case)] or [
        Case(100, 32),
        Case(0, 1),
        Case(0, 32),
    ]
    methods = set(options.method or ["bare", "gym eval run", "pytest", "pytest -n 2", "floor", "floor -n 2"]) | {"bare"}
    if options.before:
        methods |= {"pytest (before)", "pytest -n 2 (before)"}
    print(f"\n== throughput: {options.rows} rows x {options.repeats} repeats = {trials} trials per method ==")
    # Warm Gym up (first calls pay for connection set-up and lazy imports in its servers), and let each tool
    # write its bytecode caches once, as any second run on a machine finds them.
    policy.set(latency_ms=0, chance=options.chance, seed=21)
    asyncio.run(_bare(endpoint.route_for(AGENT), bodies[: min(64, trials)], 8))
    warm = work / "warm-up"
    warm.mkdir()
    (warm / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    run_process([*pytest_args(options), "--co", f"--gym-dataset={rows_path}", "-n", "2"], warm)
    if "gym eval run" in methods:
        run_process([options.gym_cli, "eval", "run", "--help"], warm)
    url, reps = endpoint.head_url, options.repeats
    runs: dict[str, dict[str, list[Measurement]]] = {case.label: {} for case in cases}
    for round_number in range(options.rounds):
        for number, case in enumerate(cases):
            policy.set(latency_ms=case.latency_ms, reset_stats=True)
            c = case.concurrency
            print(
                f"  {case.label}" + (f" (round {round_number + 1} of {options.rounds})" if options.rounds > 1 else "")
            )
            tag = f"{round_number}-{number}-{case.latency_ms:g}-{c}"
            runners: dict[str, Callable[[], tuple[float, str, bool]]] = {
                "bare": partial(run_bare, endpoint, bodies, c),
                "gym eval run": partial(
                    run_gym_eval, options.gym_cli, head_port, rows_path, reps, c, work / f"gym-eval-{tag}"
                ),
                "pytest": partial(run_pytest, options, url, rows_path, reps, c, work / f"pytest-{tag}"),
                "pytest -n 2": partial(
                    run_pytest, options, url, rows_path, reps, c, work / f"pytest-n2-{tag}", ["-n", "2"]
                ),
                "floor": partial(run_floor, options, trials, work / f"floor-{tag}"),
                "floor -n 2": partial(run_floor, options, trials, work / f"floor-n2-{tag}", ["-n", "2"]),
                "pytest (before)": partial(
                    run_pytest, options, url, rows_path, reps, c, work / f"pytest-before-{tag}", (), options.before
                ),
                "pytest -n 2 (before)": partial(
                    run_pytest, options, url, rows_path, reps, c, work / f"pytest-n2-before-{tag}", ["-n", "2"],
                    options.before,
                ),
            }  # fmt: skip
            # Interleaved: every round runs every method once, so a slow minute of the machine hits all of them.
            for method, run in runners.items():
                if method in methods:
                    runs[case.label].setdefault(method, []).append(measure(policy, trials, method, run))
    # With several rounds, each method's median run stands for it (all runs must have been correct).
    results: dict[str, Any] = {}
    for label, by_method in runs.items():
        row = {}
        for method, measured in by_method.items():
            median = sorted(measured, key=lambda m: m.seconds)[len(measured) // 2]
            median.ok = all(m.ok for m in measured)
            row[method] = median
        results[label] = row
    return results


def collection(options: argparse.Namespace, work: Path) -> dict[str, Any]:
    count = options.collect_rows
    print(f"\n== collection: pytest --co -q on {count} rows vs {count} trivial parametrized tests ==")
    folder = work / "collect"
    folder.mkdir()
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    # Streamed: this process stays small, and a child's peak RSS starts from its parent's (fork, then exec).
    write_jsonl(folder / "big.jsonl", iter_mcqa_rows(count))
    plain = folder / "plain"
    plain.mkdir()
    (plain / "test_plain.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('i', range({count}))\ndef test_trivial(i):\n    pass\n",
        encoding="utf-8",
    )
    empty = folder / "empty"
    empty.mkdir()
    run_process([*pytest_args(options), "--co", str(empty)], folder)  # warm-up: bytecode caches
    runs = {
        "pytest-gym": [*pytest_args(options), "--co", "--gym-dataset=big.jsonl"],
        "plain pytest": [*pytest_args(options), "--co", "plain"],
    }
    results: dict[str, Any] = {}
    for name, args in runs.items():
        result = run_process(args, folder)
        ok = result.returncode == 0 and f"{count} tests collected" in result.output
        print(
            f"    {name:<13} {result.seconds:7.2f} s   peak RSS {result.max_rss_kib / 1024:7.1f} MiB   "
            f"exit {result.returncode}, {last_line(result.output)}",
            flush=True,
        )
        results[name] = {"seconds": result.seconds, "max_rss_kib": result.max_rss_kib, "ok": ok}
    return results


def report(throughput_results: dict[str, Any], collect_results: dict[str, Any], quick: bool, trials: int = 0) -> bool:
    """Print ratios and targets; True when every run was correct and (full size only) every target met."""
    runs_ok = all(m.ok for row in throughput_results.values() for m in row.values())
    runs_ok = runs_ok and all(entry["ok"] for entry in collect_results.values())
    all_ok = True
    print("\n== ratios (wall time / bare client; with --rounds N, of the medians) ==")
    for label, row in throughput_results.items():
        bare = row["bare"].seconds
        parts = [f"{m.method} {m.seconds / bare:.2f}x" for m in row.values() if m.method != "bare"]
        print(f"  {label:<14} bare {bare:.2f} s | " + " | ".join(parts))
        all_ok = all_ok and all(m.ok for m in row.values())
        for floor_method, xdist in (("floor", False), ("floor -n 2", True)):
            floor = row.get(floor_method)
            if floor is None:
                continue
            limit = bare + floor.seconds
            parts = [
                f"{m.method} {m.seconds / limit:.2f}x"
                for m in row.values()
                if (m.method.startswith("pytest") and ("-n 2" in m.method) == xdist) or m.method == "gym eval run"
            ]
            print(f"  {'':<14} vs (bare + {floor_method} {floor.seconds:.2f} s = {limit:.2f} s): " + " | ".join(parts))
        if trials:
            cpu = [
                f"{m.method} {1000 * m.cpu_s / trials:.2f}"
                for m in row.values()
                if m.cpu_s is not None and (m.method.startswith("pytest") or m.method.startswith("floor"))
            ]
            print(f"  {'':<14} CPU ms per trial of the pytest process(es): " + " | ".join(cpu))
    print(
        "\n== targets ==" + (" (they are for the full size; --quick only checks that everything runs)" if quick else "")
    )
    for label, method, floor_method, limit in FLOOR_TARGETS:
        row = throughput_results.get(label)
        if row is None or method not in row or floor_method not in row:
            continue
        ratio = row[method].seconds / (row["bare"].seconds + row[floor_method].seconds)
        met = ratio <= limit and row[method].ok
        all_ok = all_ok and met
        verdict = "MET " if met else "MISS"
        print(f"  {verdict} {label}: {method} {ratio:.2f}x (bare + {floor_method}) (target <= {limit:.2f}x)")
    for label, method, limit in TARGETS:
        row = throughput_results.get(label)
        if row is None:
            continue
        if method not in row:
            continue
        ratio = row[method].seconds / row["bare"].seconds
        met = ratio <= limit and row[method].ok
        all_ok = all_ok and met
        print(f"  {'MET ' if met else 'MISS'} {label}: {method} {ratio:.2f}x bare (target <= {limit:.2f}x)")
    row = throughput_results.get("L=100ms C=32")
    if row is not None and "pytest" in row and "gym eval run" in row:
        faster = row["pytest"].seconds < row["gym eval run"].seconds
        all_ok = all_ok and faster
        print(
            f"  {'MET ' if faster else 'MISS'} L=100ms C=32: pytest {row['pytest'].seconds:.2f} s vs gym eval run "
            f"{row['gym eval run'].seconds:.2f} s (target: faster)"
        )
    if collect_results:
        gym, plain = collect_results["pytest-gym"], collect_results["plain pytest"]
        time_ratio = gym["seconds"] / plain["seconds"]
        rss_ratio = gym["max_rss_kib"] / plain["max_rss_kib"]
        for what, ratio in (("time", time_ratio), ("peak memory", rss_ratio)):
            met = ratio <= COLLECT_TARGET and gym["ok"] and plain["ok"]
            all_ok = all_ok and met
            print(f"  {'MET ' if met else 'MISS'} collection {what}: {ratio:.2f}x plain pytest (target <= 1.50x)")
    return runs_ok if quick else runs_ok and all_ok


def find_gym_cli(given: str | None) -> str:
    for candidate in (given, os.environ.get("PYTEST_GYM_CLI"), str(ROOT / ".venvs" / "gym" / "bin" / "gym")):
        if candidate and Path(candidate).is_file():
            return candidate
    sys.exit("benchmark: no gym CLI (pass --gym-cli, set PYTEST_GYM_CLI, or run scripts/install-gym.sh)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small smoke version (20 rows x 2, 5k-row collection)")
    parser.add_argument("--rows", type=int, default=None, help="distinct rows (default 200)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per row (default 4)")
    parser.add_argument("--collect-rows", type=int, default=None, help="rows for the collection benchmark (100000)")
    parser.add_argument("--only", choices=("throughput", "collect"), help="run one part only")
    parser.add_argument("--gym-cli", help="the gym executable (default: $PYTEST_GYM_CLI or .venvs/gym/bin/gym)")
    parser.add_argument("--with-failures", action="store_true", help="keep min reward 1: 60%% of trials fail")
    parser.add_argument("--half-fail", action="store_true", help="half of the rows expect another answer: 50%% fail")
    parser.add_argument(
        "--chance", type=float, default=1.0, help="the policy answers each row right with this chance (seeded)"
    )
    parser.add_argument(
        "--before", type=Path, help="a source tree of an earlier pytest-gym: also measure it, interleaved"
    )
    parser.add_argument("--keep-plugins", action="store_true", help="do not disable unrelated pytest plugins")
    parser.add_argument("--rounds", type=int, default=1, help="measure every case this often; report medians")
    parser.add_argument("--case", action="append", default=[], metavar="L:C", help="only this case (repeatable)")
    parser.add_argument(
        "--method",
        action="append",
        choices=("gym eval run", "pytest", "pytest -n 2", "floor", "floor -n 2"),
        help="only this method",
    )
    parser.add_argument("--gym-url", help="attach to this running Gym instead of starting one (needs --policy-url)")
    parser.add_argument("--policy-url", help="the scripted policy of that Gym (http://127.0.0.1:PORT/v1)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--workdir", type=Path, help="keep the work files here (default: a temporary folder)")
    options = parser.parse_args(argv)
    options.rows = options.rows or (20 if options.quick else 200)
    options.repeats = options.repeats or (2 if options.quick else 4)
    options.collect_rows = options.collect_rows or (5000 if options.quick else 100_000)

    with contextlib.ExitStack() as stack:
        if options.workdir:
            work = options.workdir.resolve()
            work.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix="bench-", dir=work))
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pytest-gym-bench-")))
        throughput_results: dict[str, Any] = {}
        collect_results: dict[str, Any] = {}
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(
            f"machine: {os.cpu_count()} CPUs, load average {load}, Python {sys.version.split()[0]}; work folder {work}"
        )
        if options.only in (None, "throughput") and options.gym_url:
            options.gym_cli = find_gym_cli(options.gym_cli)
            if not options.policy_url:
                parser.error("--gym-url needs --policy-url (the benchmark steers the scripted policy)")
            endpoint = discover(options.gym_url)
            throughput_results = throughput(options, endpoint, Policy(options.policy_url), work)
        elif options.only in (None, "throughput"):
            options.gym_cli = find_gym_cli(options.gym_cli)
            settings = GymSettings.model_validate(
                {
                    "resources_server": "mcqa",
                    "policy": "scripted",
                    "policy_answer": "\\boxed{E}",
                    "cli": options.gym_cli,
                    "server_venv": "auto",
                    "shutdown_grace": 20,
                    "startup_timeout": 300,
                }
            )
            print("starting Gym (mcqa + scripted policy) ...", flush=True)
            started_at = time.perf_counter()
            endpoint, started = start_deployment(settings, work / "gym")
            stack.callback(lambda: print("stopping Gym:", "; ".join(stop_started(started, 20)), flush=True))
            print(f"Gym ready in {time.perf_counter() - started_at:.1f} s at {endpoint.head_url}", flush=True)
            assert endpoint.policy_url is not None
            throughput_results = throughput(options, endpoint, Policy(endpoint.policy_url), work)
        if options.only in (None, "collect"):
            collect_results = collection(options, work)
        ok = report(throughput_results, collect_results, options.quick, options.rows * options.repeats)
        if options.json:
            data = {
                "rows": options.rows,
                "repeats": options.repeats,
                "throughput": {
                    label: {m.method: m.__dict__ for m in row.values()} for label, row in throughput_results.items()
                },
                "collection": collect_results,
            }
            options.json.write_text(json.dumps(data, indent=2), encoding="utf-8")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average at the end: {load} (other work on the machine skews the ratios: run it on a quiet one)")
    if options.quick:
        print("\nall runs correct" if ok else "\nsome runs failed (see above)")
    else:
        print("\nall targets met" if ok else "\nsome targets missed or runs failed (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
