"""The dispatcher's thread alone: its CPU per trial outside pytest, with pytest's thread idle or busy.

    PYTHONPATH=. .venvs/dev/bin/python benchmarks/dispatcher.py            # 1280 trials, C=8, 3 rounds
    PYTHONPATH=. .venvs/dev/bin/python benchmarks/dispatcher.py --quick    # a small smoke version

Inside pytest the dispatcher's thread costs more than the same rollouts cost here (``benchmarks/cpu.py`` prints
that thread's CPU at the end of the trials); this isolates it. No Gym: the stand-in Gym of
``benchmarks/cpu.py`` answers in a process of its own (its CPU is not counted). In this process, over ROUNDS
interleaved rounds:

- ``bare HTTP``: the plugin's HTTP client alone (``HTTPPool``), one POST per trial, C in flight;
- ``dispatcher, busy B ms``: a ``Dispatcher`` as a run builds it (the masking listener, the run folder's writer,
  the run's concurrency limit), its results taken in plan order by this thread, which then keeps the
  interpreter busy for B ms of pure Python per trial, as pytest does between trials (0: it only waits); its
  loop in a thread of its own, as under xdist;
- ``inline, busy B ms``: the same with the loop on this thread, as in one process;
- ``the least pipeline``: only the client and the JSON, answers taken in order by a caller busy B ms after each,
  the loop driven by the caller while it waits (one thread) or run in a thread of its own (as the dispatcher's):
  what any design pays, and what the second thread adds.

Printed: the medians of each thread's CPU (``/proc/self/task``) and of its context switches, per trial. What
grows with B while the work stays the same is the cost of running interleaved with pytest's work; the least
pipeline's two forms tell how much of it the second thread adds. Every wait is bounded; the stand-in is stopped.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.cpu import AGENT, size_options, sizes, stand_in, write_rows  # noqa: E402
from benchmarks.cpu_phases import thread_stats  # noqa: E402
from pytest_gym.core.dataset import read_tasks  # noqa: E402
from pytest_gym.core.masking import Masker  # noqa: E402
from pytest_gym.core.outcome import TrialSpec  # noqa: E402
from pytest_gym.gym.discovery import discover  # noqa: E402
from pytest_gym.judge.messages import clean_outcome  # noqa: E402
from pytest_gym.rollout.adaptive import make_limit  # noqa: E402
from pytest_gym.rollout.dispatcher import Dispatcher  # noqa: E402
from pytest_gym.rollout.http import HTTPPool  # noqa: E402
from pytest_gym.runfolder.rollouts import RunFolderWriter  # noqa: E402

RESULT_TIMEOUT_S = 60.0
ROUNDS = 3


def keep_busy(seconds: float) -> None:
    """Pure Python for ``seconds`` of this thread's CPU, as pytest's own work between two trials."""
    end = time.thread_time() + seconds
    count = 0
    while time.thread_time() < end:
        for _ in range(200):
            count += 1


def bare_http(url: str, bodies: Sequence[bytes], concurrency: int) -> float:
    """CPU seconds of this process for one POST per body over the plugin's client, ``concurrency`` in flight."""

    async def all_of_them() -> None:
        pool = HTTPPool()
        slots = asyncio.Semaphore(concurrency)

        async def one(body: bytes) -> None:
            async with slots:
                await _one(pool, url, body)

        try:
            await asyncio.wait_for(asyncio.gather(*(one(b) for b in bodies)), RESULT_TIMEOUT_S)
        finally:
            await pool.aclose()

    started = time.process_time()
    asyncio.run(all_of_them())
    return time.process_time() - started


async def _one(pool: HTTPPool, url: str, body: bytes) -> None:
    json.loads((await pool.request("POST", url, body)).body)


def minimal(url: str, bodies: Sequence[bytes], concurrency: int, busy_s: float, threaded: bool) -> float:
    """CPU seconds of this process (beyond the busy work) for the least a rollout pipeline does: the plugin's
    client and the JSON, ``concurrency`` ahead of a caller that takes the answers in order and is busy
    ``busy_s`` after each. ``threaded``: the loop runs in a thread of its own, as the dispatcher's; else the
    caller drives it while it waits (no second thread)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True) if threaded else None
    pool = HTTPPool()
    pending: dict[int, Any] = {}
    started = time.process_time()
    try:
        if thread is not None:
            thread.start()
        for index in range(len(bodies)):
            for ahead in range(len(pending) + index, min(len(bodies), index + concurrency)):
                coro = _one(pool, url, bodies[ahead])
                pending[ahead] = asyncio.run_coroutine_threadsafe(coro, loop) if threaded else loop.create_task(coro)
            answer = pending.pop(index)
            if threaded:
                answer.result(RESULT_TIMEOUT_S)
            else:
                loop.run_until_complete(asyncio.wait_for(answer, RESULT_TIMEOUT_S))
            if busy_s:
                keep_busy(busy_s)
        return time.process_time() - started - busy_s * len(bodies)
    finally:
        if thread is not None:
            asyncio.run_coroutine_threadsafe(pool.aclose(), loop).result(RESULT_TIMEOUT_S)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(RESULT_TIMEOUT_S)
        else:
            loop.run_until_complete(pool.aclose())
        loop.close()


def dispatched(
    url: str, specs: Sequence[TrialSpec], concurrency: int, busy_s: float, work: Path, inline: bool = False
) -> dict[str, Any]:
    """One run of ``specs`` through a Dispatcher: each thread's CPU and context switches (``inline``: the loop on
    this thread, so the dispatcher has none of its own)."""
    endpoint = discover(url)
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    before = thread_stats()
    limit = make_limit(folder, concurrency, adaptive=True, shared=False)
    dispatcher = Dispatcher(
        endpoint, concurrency, RESULT_TIMEOUT_S, AGENT, max(64, 4 * concurrency), limit=limit, inline=inline
    )
    writer = RunFolderWriter(folder)
    masker = Masker()
    dispatcher.listeners.append(lambda outcome: clean_outcome(outcome, masker))
    dispatcher.recorders.append(writer.record_all)
    try:
        dispatcher.plan(specs)
        for spec in specs:
            outcome = dispatcher.result(spec, timeout=RESULT_TIMEOUT_S)
            if outcome.reward is None:
                raise RuntimeError(f"trial {spec.nodeid} failed: {outcome.error}")
            if busy_s:
                keep_busy(busy_s)
        after = thread_stats()
    finally:
        dispatcher.close()
        writer.close()
    main, start = after[threading.main_thread().name], before[threading.main_thread().name]
    dispatch = {"cpu_s": 0.0, "switches": 0} if inline else after["pytest-gym-dispatch"]  # that thread started here
    return {
        "the dispatcher's thread": (dispatch["cpu_s"], int(dispatch["switches"])),
        "pytest's thread": (main["cpu_s"] - start["cpu_s"], int(main["switches"] - start["switches"])),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = size_options(__doc__, ROUNDS)
    parser.add_argument("--concurrency", type=int, default=8, help="rollouts in flight (default 8, the plugin's)")
    parser.add_argument("--busy-ms", default="0,1.5", help="pytest's work per trial to emulate, ms (default 0,1.5)")
    options = parser.parse_args(argv)
    rows, repeats, rounds = sizes(options, ROUNDS)
    busy = [float(b) for b in options.busy_ms.split(",")]
    trials = rows * repeats
    with tempfile.TemporaryDirectory(prefix="pytest-gym-dispatcher-") as folder:
        work = Path(folder)
        with stand_in(work) as url:
            write_rows(work / "rows.jsonl", rows)
            tasks = read_tasks(work / "rows.jsonl")
            specs = [
                TrialSpec(f"rows.jsonl::{task.hash}[r{r}]", task, index, r, AGENT)
                for index, task in enumerate(tasks)
                for r in range(repeats)
            ]
            bodies = [json.dumps({**task.load_row(), "_ng_task_index": i}).encode() for i, task in enumerate(tasks)]
            route = discover(url).route_for(AGENT)
            print(f"== {trials} trials, C={options.concurrency}, {rounds} round(s), Python {sys.version.split()[0]} ==")
            http: list[float] = []
            runs: dict[float, list[dict[str, Any]]] = {b: [] for b in busy}
            inline: dict[float, list[dict[str, Any]]] = {b: [] for b in busy}
            least: dict[tuple[float, bool], list[float]] = {(b, t): [] for b in busy for t in (False, True)}
            sent = [bodies[i % len(bodies)] for i in range(trials)]
            for number in range(rounds):
                http.append(bare_http(route, sent, options.concurrency))
                print(f"  round {number + 1}  bare HTTP  cpu {http[-1]:.2f} s", flush=True)
                for b in busy:
                    found = dispatched(url, specs, options.concurrency, b / 1000, work)
                    runs[b].append(found)
                    cpu = ", ".join(f"{name} {s[0]:.2f} s" for name, s in found.items())
                    print(f"  round {number + 1}  dispatcher, busy {b:g} ms  {cpu}", flush=True)
                    inline[b].append(dispatched(url, specs, options.concurrency, b / 1000, work, inline=True))
                    cpu = "pytest's thread {:.2f} s".format(inline[b][-1]["pytest's thread"][0])
                    print(f"  round {number + 1}  inline, busy {b:g} ms  {cpu}", flush=True)
                    for threaded in (False, True):
                        least[(b, threaded)].append(minimal(route, sent, options.concurrency, b / 1000, threaded))
    print("\n== medians, per trial ==")
    print(f"  bare HTTP (the plugin's client alone): {1e6 * statistics.median(http) / trials:.0f} us of CPU")
    for b, found in runs.items():
        parts = []
        for name in ("the dispatcher's thread", "pytest's thread"):
            cpu = statistics.median(r[name][0] for r in found)
            switches = statistics.median(r[name][1] for r in found)
            own = cpu - (b / 1000) * trials if name == "pytest's thread" else cpu
            parts.append(f"{name} {1e6 * own / trials:.0f} us, {switches / trials:.1f} context switches")
        print(f"  busy {b:g} ms: " + "; ".join(parts) + (" (beside its busy work)" if b else ""))
        cpu = statistics.median(r["pytest's thread"][0] for r in inline[b]) - (b / 1000) * trials
        switches = statistics.median(r["pytest's thread"][1] for r in inline[b])
        per_trial = f"{1e6 * cpu / trials:.0f} us, {switches / trials:.1f} switches"
        print(f"    inline (the loop on pytest's thread): {per_trial}")
        one, two = (1e6 * statistics.median(least[(b, t)]) / trials for t in (False, True))
        least_line = f"one thread {one:.0f} us, a loop thread {two:.0f} us"
        print(f"    the least pipeline (client + JSON), busy {b:g} ms: {least_line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
