"""Sharding at scale: a large suite split across N shard runs, merged, and checked against one unsharded run.

    PYTHONPATH=. .venvs/dev/bin/python benchmarks/shards.py                       # 50,000 rows x 4, 8 shards
    PYTHONPATH=. .venvs/dev/bin/python benchmarks/shards.py --rows 2000 --sizes 500,2000 --shards 3   # quick

No Gym: the tests' stand-in Gym (tests/helpers/standin.py; ``--serve`` runs it in its own process group)
plays the head (``/readyz``, ``/server_instances``, ``/global_config_dict_yaml``) and one agent whose
``/run`` answers like mcqa, deterministically (the reward depends only on the row and the repeat), and whose
``/aggregate_metrics`` answers the mean reward. pytest-gym attaches to it with ``--gym-url``.

1. The suite (ROWS x REPEATS trials) runs as SHARDS shard runs (``--gym-shard I/N``, ``-n 0``, one after
   another: the machine has 2 cores) and once unsharded; time of each.
2. ``pytest --gym-merge`` over the shard folders, and ``python -m pytest_gym merge``: wall time and peak
   RSS (``os.wait4``). All of it is done for each suite size in SIZES (row counts), to see how it scales.
3. The merged run's numbers (mean reward, pass@k, every per-task result: the ``--gym-update-baseline``
   files) must equal the unsharded run's, and the merged folder must hold every rollout once.

Measured on a shared 2-core machine (Nov 2026): the merge is linear in the trials (``python -m pytest_gym
merge``: 1.0 / 4.2 / 20 s CPU and 113 / 353 / 1290 MiB at 12.5k / 50k / 200k trials; ``pytest --gym-merge``:
15 / 65 / 219 s CPU, 278 / 938 / 3586 MiB, the same as pytest reporting as many reused trials). The unsharded
run is not linear (33 s CPU at 12.5k trials, 248 s at 50k): ``--compare-max 12500`` skips it at 200k.

Everything it starts is stopped by process group; every wait is bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
AGENT = "bench_agent"
LETTERS = "ABCDEFGHIJ"
RUN_TIMEOUT_S = 3600.0


# -- the stand-in Gym --------------------------------------------------------------------------------


def reward_for(row: dict[str, Any], repeat: int) -> float:
    """1.0 for about two thirds of (row, repeat) pairs, the same every time."""
    text = json.dumps(row.get("responses_create_params"), sort_keys=True) + f"#{repeat}"
    return 0.0 if int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 3 == 0 else 1.0


def answer(body: dict[str, Any]) -> dict[str, Any]:
    repeat = int(body.get("_ng_rollout_index") or 0)
    reward = reward_for(body, repeat)
    expected = str(body.get("expected_answer") or "A")
    extracted = expected if reward else LETTERS[(LETTERS.index(expected) + 1) % len(LETTERS)]
    text = f"The answer is \\boxed{{{extracted}}}"
    return {
        "responses_create_params": body.get("responses_create_params"),
        "response": {
            "id": f"resp_{body.get('_ng_task_index')}_{repeat}",
            "object": "response",
            "created_at": 0,
            "model": "stand-in",
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "id": "msg_0",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
            "usage": {"input_tokens": 40 + len(text), "output_tokens": 7, "total_tokens": 47 + len(text)},
        },
        "reward": reward,
        "expected_answer": expected,
        "extracted_answer": extracted,
        "_ng_task_index": body.get("_ng_task_index"),
        "_ng_rollout_index": repeat,
    }


def serve(port_file: Path) -> None:
    """The stand-in Gym (tests/helpers/standin.py), its /run answering like mcqa, until killed."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers.standin import StandinGym, reply

    gym = StandinGym(AGENT, record=False)
    gym.routes["/run"] = lambda request: reply(answer(request.json()))
    port_file.write_text(str(gym.port))
    gym.closed.wait(24 * 3600)  # the benchmark stops the process group long before


@contextlib.contextmanager
def stand_in(work: Path, script: str = __file__, env: dict[str, str] | None = None) -> Any:
    """``script --serve PORT_FILE`` in its own process group (this file's stand-in Gym by default); its URL."""
    port_file = work / "stand-in.port"
    proc = subprocess.Popen(
        [sys.executable, script, "--serve", str(port_file)],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists() or not port_file.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the stand-in server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text()}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


# -- running -----------------------------------------------------------------------------------------


@dataclass
class Result:
    seconds: float
    returncode: int
    max_rss_mib: float
    output: str
    cpu_s: float = 0.0

    def line(self) -> str:
        wall, cpu, rss = f"{self.seconds:.1f} s wall", f"{self.cpu_s:.1f} s CPU", f"{self.max_rss_mib:.0f} MiB"
        return f"{wall}, {cpu}, peak RSS {rss}, exit {self.returncode}"


def run(args: list[str], cwd: Path, timeout: float = RUN_TIMEOUT_S) -> Result:
    """Run a command in its own process group: wall time, exit code, peak RSS of the process (wait4)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    log = cwd / f"out-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        status, usage = 0, None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - started > timeout:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        seconds = time.perf_counter() - started
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    cpu = usage.ru_utime + usage.ru_stime if usage else 0.0
    rss = usage.ru_maxrss / 1024 if usage else 0.0
    return Result(seconds, os.waitstatus_to_exitcode(status), rss, log.read_text(), cpu)


def write_rows(path: Path, rows: int) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(rows):
            row = {
                "responses_create_params": {
                    "input": [
                        {"role": "user", "content": f"Question {i}: which option is right? Answer in \\boxed{{}}."}
                    ]
                },
                "options": [{letter: f"option {letter} of question {i}"} for letter in LETTERS[:4]],
                "expected_answer": LETTERS[i % 4],
            }
            fh.write(json.dumps(row) + "\n")


PYTEST = [
    sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:hypothesispytest", "-q",
    "-n", "0", "--tb=no",
]  # fmt: skip


def suite_args(url: str, repeats: int, concurrency: int) -> list[str]:
    return [
        "--gym-url", url, "--gym-agent", AGENT, "--gym-dataset", "rows.jsonl", "--gym-repeats", str(repeats),
        "--gym-concurrency", str(concurrency), "--gym-verdict", "gate", "--gym-progress-interval", "3600",
    ]  # fmt: skip


def summary(run_dir: Path) -> dict[str, Any]:
    data = json.loads((run_dir / "pytest_gym_summary.json").read_text())
    (suite,) = data["suites"].values()
    return {k: suite[k] for k in ("tasks", "trials", "errors", "mean_reward", "pass_at", "pass_hat")}


def tasks_of(baseline: Path) -> dict[str, Any]:
    """The per-task results of the baseline file's one suite (schema version 2: suites by name)."""
    (suite,) = json.loads(baseline.read_text())["suites"].values()
    tasks: dict[str, Any] = suite["tasks"]
    return tasks


def count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sizes", default="3125,12500,50000", help="row counts to merge (each <= --rows)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--compare-max", type=int, default=1 << 60, help="run the unsharded comparison only up to this many rows"
    )
    options = parser.parse_args(argv)
    if options.serve:
        serve(Path(options.serve))
        return 0
    sizes = sorted(int(s) for s in options.sizes.split(","))
    work = Path(tempfile.mkdtemp(prefix="pytest-gym-shards-"))
    print(f"work folder: {work}")
    ok = True
    with stand_in(work) as url:
        for size in sizes:
            folder = work / f"rows-{size}"
            folder.mkdir()
            (folder / "pytest.ini").write_text("[pytest]\n")
            write_rows(folder / "rows.jsonl", size)
            base = suite_args(url, options.repeats, options.concurrency)
            trials = size * options.repeats
            shards = []
            for index in range(1, options.shards + 1):
                result = run(
                    [*PYTEST, *base, "--gym-shard", f"{index}/{options.shards}", "--gym-run-dir", f"shard-{index}"],
                    folder,
                )
                shards.append(result)
                if result.returncode != 0:
                    print(result.output[-3000:])
                    return 1
            sizes_seen = [count_lines(folder / f"shard-{i}" / "rollouts.jsonl") for i in range(1, options.shards + 1)]
            print(
                f"{size} rows x {options.repeats} = {trials} trials: {options.shards} shards took "
                f"{sum(r.seconds for r in shards):.1f} s wall, {sum(r.cpu_s for r in shards):.1f} s CPU in all "
                f"(each {min(r.seconds for r in shards):.1f}..{max(r.seconds for r in shards):.1f} s); "
                f"trials per shard {min(sizes_seen)}..{max(sizes_seen)}"
            )
            shard_dirs = [f"shard-{i}" for i in range(1, options.shards + 1)]
            merged = run(
                [
                    *PYTEST, *(a for d in shard_dirs for a in ("--gym-merge", d)), "--gym-verdict", "gate",
                    "--gym-run-dir", "merged", "--gym-baseline", "merged.json", "--gym-update-baseline",
                    "--gym-progress-interval", "3600",
                ],
                folder,
            )  # fmt: skip
            print(f"  pytest --gym-merge:          {merged.line()}")
            cli = run([sys.executable, "-m", "pytest_gym", "merge", *shard_dirs, "-o", "cli-merged"], folder)
            print(f"  python -m pytest_gym merge:  {cli.line()}")
            if merged.returncode != 0 or cli.returncode != 0:
                print(merged.output[-3000:], cli.output[-3000:])
                return 1
            counts = [count_lines(folder / d / "rollouts.jsonl") for d in ("merged", "cli-merged")]
            ok = ok and counts == [trials, trials]
            if size > options.compare_max:
                print(f"  rollouts in the merged folders {counts} of {trials}; not compared with an unsharded run")
                continue
            whole = run(
                [*PYTEST, *base, "--gym-run-dir", "whole", "--gym-baseline", "whole.json", "--gym-update-baseline"],
                folder,
            )
            print(f"  unsharded run:               {whole.line()}")
            floor = run([*PYTEST, *base, "--gym-resume", "whole", "--gym-run-dir", "resumed"], folder)
            print(f"  same trials reused (resume): {floor.line()}  <- pytest reporting them, no merge")
            same_numbers = summary(folder / "merged") == summary(folder / "whole")
            same_tasks = tasks_of(folder / "merged.json") == tasks_of(folder / "whole.json")
            print(
                f"  merged == unsharded: numbers {same_numbers}, per-task results {same_tasks}; "
                f"rollouts {counts} of {trials}; {summary(folder / 'merged')}"
            )
            ok = ok and same_numbers and same_tasks
    if not options.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
