"""CPU per trial: pytest-gym against plain pytest running as many tests with the same failures.

    PYTHONPATH=. .venvs/dev/bin/python benchmarks/cpu.py            # 320 rows x 4 repeats, 5 rounds
    PYTHONPATH=. .venvs/dev/bin/python benchmarks/cpu.py --quick    # a small smoke version

No Gym: the tests' stand-in Gym (tests/helpers/standin.py) plays the head and one agent, in a process of its
own (its CPU is not counted), answering at once with a reward per row: 0.0 for every odd row, so half of the
trials fail. Then, interleaved over ROUNDS rounds (so a busy minute of the machine hits every method):

- ``pytest-gym``: ``pytest --gym-url URL --gym-dataset rows.jsonl --gym-repeats R`` (ROWS x R trials);
- ``plain``: plain pytest (``-p no:gym``) running ROWS x R parametrized tests, failing the same ones (every
  odd row's R repeats) with an assertion message of the same kind and length;
- ``floor``: the same plain tests, each also doing the least any plugin driving Gym must do: one ``/run`` to
  the stand-in over a kept-alive socket, the answer parsed, a record appended to a jsonl file. What it costs
  beyond ``plain`` is the floor under pytest-gym's own share: no plugin can cost less than it;
- all three again with ``-n 2``.

``--before DIR`` also measures the plugin from an earlier source tree (``git archive REV pytest_gym | tar -x
-C DIR``), interleaved with the rest. Each is a whole process (start-up imports count); its CPU is user + sys
of the process and its children (``os.wait4``: the xdist workers are its children). It prints the medians,
the ratio pytest-gym / plain and pytest-gym's own share per trial in ms ((pytest-gym - plain) / trials), for
one process and for ``-n 2``, then the median of the rounds' own ratios (each round's runs met the same minute of
the machine), the floor's ratio to plain and pytest-gym's to the floor (round by round), and with ``--before``
the median change from the earlier tree, round by round.
Target (issue 19): a run costs at most 1.25x plain pytest's CPU.

Every command runs as a normal Python does, caching bytecode (``PYTHONDONTWRITEBYTECODE`` is dropped from
their environment), after one warm-up run of each; ``-p no:hypothesispytest -p no:randomly -p no:anyio
-p no:rerunfailures -p no:repeat -p no:timeout`` for both (plugins of this repo's test dependencies, no part of
pytest-gym: anyio's alone, which httpx and MLflow bring, imports trio, about 0.2 s of every run). Every wait is
bounded; everything started is stopped.

Then, unless ``--no-phases``, one more run of ``pytest-gym`` and of ``plain`` (not in the medians) with
``benchmarks/cpu_phases.py``: the CPU of each phase side by side (start-up and collection; the trials; the end
of the session: pytest-gym's verdicts and report, pytest's terminal summary; unconfigure and exit), and each
thread's CPU and context switches at the end of the trials (the dispatcher's thread apart from pytest's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
AGENT = "cpu_agent"
RUN_TIMEOUT_S = 600.0
START_TIMEOUT_S = 30.0
TARGET = 1.25
ROUNDS = 5


# -- the stand-in Gym, in its own process ----------------------------------------------------------


def serve(port_file: Path) -> None:
    """The stand-in Gym: rewards 0.0 for every odd row, 1.0 otherwise; until killed (bounded by a day)."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers.standin import StandinGym

    gym = StandinGym(AGENT, record=False)
    gym.rewards = lambda body: 0.0 if int(body.get("_ng_task_index") or 0) % 2 else 1.0
    port_file.write_text(str(gym.port), encoding="utf-8")
    gym.closed.wait(24 * 3600)


@contextlib.contextmanager
def stand_in(work: Path) -> Iterator[str]:
    port_file = work / "stand-in.port"
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port_file)], start_new_session=True, stdin=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_file.exists() or not port_file.read_text(encoding="utf-8"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the stand-in Gym did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text(encoding='utf-8')}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


# -- one measured process --------------------------------------------------------------------------


@dataclass
class Run:
    cpu_s: float
    seconds: float
    returncode: int
    output: str


def run_process(
    args: Sequence[str],
    cwd: Path,
    timeout: float = RUN_TIMEOUT_S,
    pythonpath: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> Run:
    """Run a command as its own process group; CPU (user + sys) of it and its waited-for children (wait4)."""
    log = cwd / f"output-{time.monotonic_ns()}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH")) if p)
    for name in ("PYTEST_ADDOPTS", "PYTHONDONTWRITEBYTECODE", "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    with log.open("wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            list(args), cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip

        def kill() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)  # the blocking wait4 below is bounded by it
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    kill()  # leftovers of the group, if any
    text = log.read_text(encoding="utf-8", errors="replace")
    return Run(usage.ru_utime + usage.ru_stime, seconds, proc.returncode, text)


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else ""


# -- the two sides ---------------------------------------------------------------------------------


def base_args() -> list[str]:
    return [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
        "-p", "no:randomly", "-p", "no:anyio", "-p", "no:rerunfailures",
        "-p", "no:repeat", "-p", "no:timeout",
    ]  # fmt: skip


def write_rows(path: Path, rows: int) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(rows):
            row = {
                "responses_create_params": {"input": [{"role": "user", "content": f"What is {i} + {i}?"}]},
                "expected_answer": str(2 * i),
            }
            fh.write(json.dumps(row) + "\n")


PLAIN_TEST = """\
import pytest


@pytest.mark.parametrize("i", range({trials}))
def test_trial(i):
    task = i // {repeats}
    if task % 2:
        where = f"{rows_path}:{{task + 1}}, repeat {{i % {repeats}}}"
        pytest.fail(f"reward 0.0 < min_reward 1.0 for task {{task:012x}} ({{where}})", pytrace=False)
"""

#: The least any plugin driving Gym must do per trial, as plain pytest tests: one ``/run`` over a kept-alive
#: socket (HTTP/1.1 written and read by hand: cheaper than ``http.client``), its JSON parsed, its record appended
#: to a jsonl file, the reward asserted. No masking, no retries, no run folder, no report, no verdicts: the floor
#: under pytest-gym's own share.
FLOOR_TEST = """\
import json
import socket

import pytest

ROWS = [json.loads(line) for line in open({rows_path!r}, encoding="utf-8")]
SOCKET = socket.create_connection(({host!r}, {port}), timeout=30)
READER = SOCKET.makefile("rb")
RECORDS = open("rollouts.jsonl", "a", encoding="utf-8")


def post(body):
    data = json.dumps(body).encode()
    head = f"POST /{agent}/run HTTP/1.1\\r\\nHost: {host}\\r\\nContent-Type: application/json\\r\\n"
    SOCKET.sendall(f"{{head}}Content-Length: {{len(data)}}\\r\\n\\r\\n".encode() + data)
    length = 0
    while (line := READER.readline()) not in (b"\\r\\n", b""):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return json.loads(READER.read(length))


@pytest.mark.parametrize("i", range({trials}))
def test_trial(i):
    task = i // {repeats}
    body = dict(ROWS[task], _ng_task_index=task, _ng_rollout_index=i % {repeats})
    answer = post(body)
    RECORDS.write(json.dumps({{**body, **answer}}) + "\\n")
    if answer["reward"] < 1.0:
        where = f"{rows_path}:{{task + 1}}, repeat {{i % {repeats}}}"
        pytest.fail(f"reward {{answer['reward']}} < min_reward 1.0 for task {{task:012x}} ({{where}})", pytrace=False)
"""


@dataclass
class Side:
    name: str
    args: list[str]
    folder: Path
    #: Run the plugin from this source tree (an earlier version), measured beside the current one.
    source: Path | None = None


def sides(url: str, work: Path, rows: int, repeats: int, before: Path | None = None) -> list[Side]:
    gym = work / "gym"
    plain = work / "plain"
    floor = work / "floor"
    for folder in (gym, plain, floor):
        folder.mkdir()
        (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    write_rows(gym / "rows.jsonl", rows)
    (plain / "test_plain.py").write_text(
        PLAIN_TEST.format(trials=rows * repeats, repeats=repeats, rows_path=gym / "rows.jsonl"), encoding="utf-8"
    )
    host, port = url.rsplit("//", 1)[1].rsplit(":", 1)
    (floor / "test_floor.py").write_text(
        FLOOR_TEST.format(
            trials=rows * repeats, repeats=repeats, rows_path=str(gym / "rows.jsonl"), host=host, port=port, agent=AGENT
        ),
        encoding="utf-8",
    )
    gym_args = [
        *base_args(), "--gym-url", url, "--gym-agent", AGENT, "--gym-dataset=rows.jsonl",
        "--gym-repeats", str(repeats), "--gym-run-dir=run",
    ]  # fmt: skip
    plain_args = [*base_args(), "-p", "no:gym", "test_plain.py"]
    floor_args = [*base_args(), "-p", "no:gym", "test_floor.py"]
    measured = [
        Side("pytest-gym", gym_args, gym),
        Side("plain", plain_args, plain),
        Side("floor", floor_args, floor),
        Side("pytest-gym -n 2", [*gym_args, "-n", "2"], gym),
        Side("plain -n 2", [*plain_args, "-n", "2"], plain),
        Side("floor -n 2", [*floor_args, "-n", "2"], floor),
    ]
    if before is not None:
        measured.insert(1, Side("pytest-gym (before)", gym_args, gym, before))
        measured.append(Side("pytest-gym -n 2 (before)", [*gym_args, "-n", "2"], gym, before))
    return measured


def check(side: Side, run: Run, trials: int) -> str:
    """'' when the run reported every trial, half of them failed; else what was wrong."""
    half = trials // 2
    expected = f"{half} failed, {trials - half} passed"
    if run.returncode != 1 or expected not in run.output:
        return f"exit {run.returncode}, expected '{expected}': {last_line(run.output)}"
    return ""


def paired(these: Sequence[float], those: Sequence[float]) -> float:
    """The median of the rounds' ratios: steadier than a ratio of medians when the machine's speed drifts (a
    small VM's CPU time for the same run moves by 10-20% from minute to minute)."""
    return statistics.median(a / b for a, b in zip(these, those, strict=True))


# -- where the CPU goes ----------------------------------------------------------------------------

#: (label, first mark, last mark) of ``benchmarks/cpu_phases.py``'s marks.
PHASES = (
    ("start-up and collection", None, "collected"),
    ("trials (pytest's run loop)", "trials_start", "trials_end"),
    ("end: verdicts, report, summary", "trials_end", "session_end"),
    ("unconfigure and exit", "session_end", "exit"),
)


def phases(side: Side, work: Path) -> dict[str, Any]:
    """One more run of ``side`` with ``benchmarks/cpu_phases.py``: its marks and threads."""
    out = work / f"phases-{side.folder.name}.json"
    shutil.rmtree(side.folder / "run", ignore_errors=True)
    args = [*side.args[:3], "-p", "cpu_phases", *side.args[3:]]
    # The probe's folder on the path the measured runs have (after side.source, if any).
    path = os.pathsep.join(p for p in (str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")) if p)
    probe = {"CPU_PHASES_OUT": str(out), "PYTHONPATH": path}
    run_process(args, side.folder, pythonpath=side.source, extra_env=probe)
    found: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return found


def print_phases(gym: dict[str, Any], plain: dict[str, Any]) -> None:
    print("\n== where the CPU goes (one more run of each, with benchmarks/cpu_phases.py; not in the medians) ==")
    print(f"  {'phase':<30} {'pytest-gym':>10} {'plain':>8} {'beyond plain':>13}")
    for label, start, end in PHASES:
        spent = [found["marks"][end] - (found["marks"][start] if start else 0.0) for found in (gym, plain)]
        print(f"  {label:<30} {spent[0]:8.2f} s {spent[1]:6.2f} s {spent[0] - spent[1]:+11.2f} s")
    for name, found in (("pytest-gym", gym), ("plain", plain)):
        threads = sorted(found["threads"].items(), key=lambda item: -item[1]["cpu_s"])
        listed = ", ".join(f"{t} {s['cpu_s']:.2f} s ({int(s['switches']):,} context switches)" for t, s in threads[:3])
        print(f"  {name} threads at the end of the trials: {listed}")


# -- the benchmark ---------------------------------------------------------------------------------


def size_options(doc: str | None, rounds: int, quick: str = "") -> argparse.ArgumentParser:
    """The options this benchmark and ``benchmarks/dispatcher.py`` share: how many trials, how many rounds."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help=f"small smoke version (40 rows x 2, 1 round{quick})")
    parser.add_argument("--rows", type=int, help="distinct rows (default 320)")
    parser.add_argument("--repeats", type=int, help="repeats per row (default 4)")
    parser.add_argument("--rounds", type=int, help=f"interleaved rounds; medians are reported (default {rounds})")
    return parser


def sizes(options: argparse.Namespace, rounds: int) -> tuple[int, int, int]:
    """(rows, repeats, rounds) as given, else the defaults (smaller with ``--quick``)."""
    quick = options.quick
    return (
        options.rows or (40 if quick else 320),
        options.repeats or (2 if quick else 4),
        options.rounds or (1 if quick else rounds),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = size_options(__doc__, ROUNDS, ", no warm-up")
    parser.add_argument("--no-xdist", action="store_true", help="skip the -n 2 runs")
    parser.add_argument(
        "--before", type=Path, help="a source tree of an earlier pytest-gym: also measure it, interleaved"
    )
    parser.add_argument("--workdir", type=Path, help="keep the work files here (default: a temporary folder)")
    parser.add_argument("--no-phases", action="store_true", help="skip the extra runs that show where the CPU goes")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.serve:
        serve(options.serve)
        return 0
    rows, repeats, rounds = sizes(options, ROUNDS)
    trials = rows * repeats
    with contextlib.ExitStack() as stack:
        if options.workdir:
            options.workdir.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix="cpu-", dir=options.workdir.resolve()))
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pytest-gym-cpu-")))
        url = stack.enter_context(stand_in(work))
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"machine: {os.cpu_count()} CPUs, load average {load}, Python {sys.version.split()[0]}; work {work}")
        print(f"== CPU: {rows} rows x {repeats} repeats = {trials} trials, half failing, {rounds} round(s) ==")
        before = options.before.resolve() if options.before else None
        measured = [s for s in sides(url, work, rows, repeats, before) if not (options.no_xdist and "-n" in s.name)]
        for side in [] if options.quick else measured:  # warm-up: bytecode caches, as a second run finds them
            run_process([*side.args, "--co"], side.folder, pythonpath=side.source)
        cpu: dict[str, list[float]] = {side.name: [] for side in measured}
        problems: list[str] = []
        for number in range(rounds):
            for side in measured:
                shutil.rmtree(side.folder / "run", ignore_errors=True)  # each run writes a fresh run folder
                (side.folder / "rollouts.jsonl").unlink(missing_ok=True)
                run = run_process(side.args, side.folder, pythonpath=side.source)
                problem = check(side, run, trials)
                if problem:
                    problems.append(f"{side.name} (round {number + 1}): {problem}")
                cpu[side.name].append(run.cpu_s)
                print(
                    f"  round {number + 1}  {side.name:<24} cpu {run.cpu_s:6.2f} s  wall {run.seconds:6.2f} s  "
                    f"{last_line(run.output)}",
                    flush=True,
                )
        explained = [] if options.no_phases else [s for s in measured if s.name in ("pytest-gym", "plain")]
        found = {side.name: phases(side, work) for side in explained}
    medians = {name: statistics.median(values) for name, values in cpu.items()}
    print("\n== medians (CPU s: user + sys of the process and its children) ==")
    ok = not problems
    pairs = [("pytest-gym", "plain"), ("pytest-gym (before)", "plain")]
    pairs += [("pytest-gym -n 2", "plain -n 2"), ("pytest-gym -n 2 (before)", "plain -n 2")]
    for gym_name, plain_name in pairs:
        if gym_name not in medians:
            continue
        gym_cpu, plain_cpu = medians[gym_name], medians[plain_name]
        ratio = gym_cpu / plain_cpu
        share = 1000 * (gym_cpu - plain_cpu) / trials
        met = ratio <= TARGET
        print(
            f"  {gym_name:<24} {gym_cpu:6.2f} s vs {plain_name:<11} {plain_cpu:6.2f} s: ratio {ratio:.2f}x "
            f"(target <= {TARGET:.2f}x: {'MET' if met else 'MISS'}); pytest-gym's own share "
            f"{share:.2f} ms per trial (plain pytest {1000 * plain_cpu / trials:.2f} ms per test)"
        )
        # The same rounds paired: each round's two runs met the same minute of the machine.
        print(f"  {'':<24} round by round: median ratio {paired(cpu[gym_name], cpu[plain_name]):.2f}x")
    for floor_name, plain_name in (("floor", "plain"), ("floor -n 2", "plain -n 2")):
        if floor_name in cpu:
            # The floor: what the least Gym client costs beyond plain pytest, in the same rounds.
            floor_ratio = paired(cpu[floor_name], cpu[plain_name])
            left = paired(cpu[floor_name.replace("floor", "pytest-gym")], cpu[floor_name])
            print(
                f"  {floor_name:<24} {medians[floor_name]:6.2f} s: the least Gym client costs {floor_ratio:.2f}x plain "
                f"pytest (round by round); pytest-gym costs {left:.2f}x it"
            )
    for now, earlier in (("pytest-gym", "pytest-gym (before)"), ("pytest-gym -n 2", "pytest-gym -n 2 (before)")):
        if earlier in cpu:
            change = paired(cpu[now], cpu[earlier]) - 1
            print(f"  {now:<24} against its earlier tree, round by round: median {change:+.1%} CPU")
    if found:
        print_phases(found["pytest-gym"], found["plain"])
    for problem in problems:
        print("  WRONG RUN:", problem)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average at the end: {load}")
    print("all runs correct" if ok else "some runs were wrong (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
