"""benchmarks/cpu.py and benchmarks/dispatcher.py run end to end (smoke runs, not timing tests: speed is what the
scripts print)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]


def smoke_run(script: str, *args: str) -> str:
    """``benchmarks/SCRIPT --quick --rows 10 ARGS``: its output, once it exited 0."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--rows", "10", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def test_the_cpu_benchmark_prints_the_ratio_and_the_share_per_trial_with_and_without_xdist(tmp_path: Path) -> None:
    output = smoke_run("cpu.py", "--workdir", str(tmp_path))
    # Every measured run reported all 20 trials, half of them failed, on both sides.
    measured = re.findall(r"round 1 +(pytest-gym|plain|floor)( -n 2)? +cpu .* 10 failed, 10 passed", output)
    assert len(measured) == 6, output
    for side, plain in (("pytest-gym", "plain"), ("pytest-gym -n 2", "plain -n 2")):
        line = re.search(
            rf"^  {re.escape(side)} +\d+\.\d\d s vs {re.escape(plain)} +\d+\.\d\d s: ratio (\d+\.\d\d)x "
            r"\(target <= 1\.25x: (MET|MISS)\); pytest-gym's own share -?\d+\.\d\d ms per trial",
            output,
            re.MULTILINE,
        )
        assert line is not None, output
        assert float(line.group(1)) > 0
    assert len(re.findall(r"^ +round by round: median ratio \d+\.\d\dx$", output, re.MULTILINE)) == 2, output
    # The floor: the least Gym client as plain tests, beside both, and what it recorded (its last run: -n 2).
    for floor in ("floor", "floor -n 2"):
        row = (
            rf"^  {re.escape(floor)} +\d+\.\d\d s: the least Gym client costs \d+\.\d\dx plain pytest "
            r"\(round by round\); pytest-gym costs \d+\.\d\dx it$"
        )
        assert re.search(row, output, re.MULTILINE), output
    (records,) = tmp_path.glob("cpu-*/floor/rollouts.jsonl")
    rewards = sorted(json.loads(line)["reward"] for line in records.read_text(encoding="utf-8").splitlines())
    assert rewards == [0.0] * 10 + [1.0] * 10
    # Where the CPU goes: every phase on both sides, and the threads of each.
    phases = (
        "start-up and collection",
        "trials (pytest's run loop)",
        "end: verdicts, report, summary",
        "unconfigure and exit",
    )
    for phase in phases:
        row = rf"^  {re.escape(phase)} +\d+\.\d\d s +\d+\.\d\d s +[+-]\d+\.\d\d s$"
        assert re.search(row, output, re.MULTILINE), output
    # One process: the dispatcher's loop runs on pytest's thread, so it has no thread of its own.
    threads = re.search(r"^  pytest-gym threads at the end of the trials: (.*)$", output, re.MULTILINE)
    assert threads is not None, output
    assert re.match(r"MainThread \d+\.\d\d s \([\d,]+ context switches\)", threads.group(1)), output
    assert "pytest-gym-dispatch" not in threads.group(1)
    assert re.search(r"^  plain threads at the end of the trials: MainThread \d+\.\d\d s", output, re.MULTILINE), output
    assert "all runs correct" in output


def test_the_dispatcher_benchmark_prints_each_threads_cpu_per_trial_idle_and_busy() -> None:
    output = smoke_run("dispatcher.py", "--busy-ms", "0,1")
    assert "== 20 trials, C=8, 1 round(s)" in output
    assert re.search(r"^  bare HTTP \(the plugin's client alone\): \d+ us of CPU$", output, re.MULTILINE), output
    for busy in ("0", "1"):
        row = (
            rf"^  busy {busy} ms: the dispatcher's thread \d+ us, \d+\.\d context switches; "
            r"pytest's thread -?\d+ us, \d+\.\d context switches"
        )
        assert re.search(row, output, re.MULTILINE), output
        inline = r"^    inline \(the loop on pytest's thread\): -?\d+ us, \d+\.\d switches$"
        assert len(re.findall(inline, output, re.MULTILINE)) == 2, output
        threads = r"one thread -?\d+ us, a loop thread -?\d+ us$"
        least = rf"^    the least pipeline \(client \+ JSON\), busy {busy} ms: {threads}"
        assert re.search(least, output, re.MULTILINE), output
