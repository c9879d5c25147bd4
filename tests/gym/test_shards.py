"""Three shards against one real Gym, merged: the same verdict, numbers and run folder as one unsharded run.

The shard and merge commands are read from the README's GitHub Actions recipe and run as written; the
suite's settings are in the ini file, as the recipe says.
"""

from __future__ import annotations

import copy
import json
import math
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.runfolder.layout import AGGREGATE_FILE, ROLLOUTS_FILE
from tests.helpers.gym_tools import run_gym_commands
from tests.helpers.paths import EXAMPLE, ROOT
from tests.helpers.realgym import RealGym

XSD = ROOT / "tests" / "data" / "junit-10.xsd"
SUITE = "evals/mcqa.jsonl"
GATES = ("mean_reward >= 0.9", "pass@2 >= 0.1")  # the first fails (the policy answers E: 0.4), the second passes


def readme_commands() -> tuple[str, str]:
    """The shard job's and the merge job's pytest commands, from the README's recipe."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Sharding across CI jobs", 1)[1].split("\n### ", 1)[0]
    runs = [line.split("run: ", 1)[1] for line in section.splitlines() if "- run: pytest " in line]
    shard = next(r for r in runs if "--gym-shard" in r)
    merge = next(r for r in runs if "--gym-merge" in r)
    return shard, merge


def args_of(command: str, shard: int | None = None) -> list[str]:
    words = shlex.split(command.replace("${{ matrix.shard }}", str(shard)))
    assert words[0] == "pytest"
    return words[1:]


@pytest.fixture
def suite(pytester: pytest.Pytester, gym: RealGym) -> Path:
    """15 mcqa tasks (the example's five, three variants each: B, C, I, E, E), 2 repeats, two gates."""
    base = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    path = pytester.path / SUITE
    path.parent.mkdir()
    with path.open("w", encoding="utf-8") as fh:
        for i in range(15):
            row = copy.deepcopy(base[i % 5])
            message = row["responses_create_params"]["input"][0]
            message["content"] = message["content"].replace("step-by-step.", f"step-by-step (variant {i}).", 1)
            fh.write(json.dumps(row) + "\n")
    gates = "".join(f"    {gate}\n" for gate in GATES)
    pytester.makeini(
        f"[pytest]\ngym_url = {gym.url}\ngym_agent = mcqa_simple_agent\ngym_dataset = {SUITE}\n"
        f"gym_repeats = 2\ngym_verdict = gate\ngym_gate =\n{gates}"
    )
    return path


def outcomes(xml: Path) -> dict[str, str]:
    """Every testcase of a JUnit file: its name and how it ended (passed, skipped, failure, error)."""
    cases = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        ended = next((child.tag for child in case if child.tag in ("skipped", "failure", "error")), "passed")
        cases[case.get("name", "")] = ended
    return cases


def approx(ours: Any, theirs: Any, where: str = "") -> None:
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), where
        assert set(ours) == set(theirs), f"{where}: {sorted(set(ours) ^ set(theirs))}"
        for key in theirs:
            approx(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list), where
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            approx(a, b, f"{where}[{i}]")
    elif isinstance(theirs, float) or (isinstance(theirs, int) and isinstance(ours, float)):
        assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-12), f"{where}: {ours} != {theirs}"
    else:
        assert ours == theirs, where


def run_shards(pytester: pytest.Pytester, command: str, concurrently: bool) -> list[tuple[int, str]]:
    """(exit code, output) of the three shard jobs: one after another in-process, or as three processes at once."""
    if not concurrently:
        results = [pytester.runpytest(*args_of(command, i)) for i in (1, 2, 3)]
        return [(int(r.ret), r.stdout.str()) for r in results]
    procs = [
        pytester.popen(
            [sys.executable, "-m", "pytest", "-p", "no:randomly", *args_of(command, i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        for i in (1, 2, 3)
    ]
    finished = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            finished.append((proc.returncode, out.decode("utf-8", "replace")))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    return finished


@pytest.mark.parametrize("concurrently", [False, True], ids=["in-sequence", "concurrently"])
def test_three_shards_merged_judge_like_one_unsharded_run(
    pytester: pytest.Pytester, suite: Path, gym: RealGym, concurrently: bool
) -> None:
    shard_command, merge_command = readme_commands()
    schema = xmlschema.XMLSchema(str(XSD))
    for index, (code, output) in enumerate(run_shards(pytester, shard_command, concurrently), start=1):
        # The failing gate waits for the merge: the shard passes, and says so.
        assert code == 0, output
        assert f"gate mean_reward>=0.9: deferred to the merge (shard {index}/3)" in output, output
        cases = outcomes(pytester.path / f"shard-{index}.xml")
        assert cases["gate[mean_reward>=0.9]"] == cases["gate[pass@2>=0.1]"] == "skipped"
        assert schema.is_valid(str(pytester.path / f"shard-{index}.xml"))

    merged = pytester.runpytest(*args_of(merge_command))
    whole = pytester.runpytest(
        "--gym-run-dir", "runs/whole", "--junitxml", "whole.xml",
        "--gym-baseline", "whole.json", "--gym-update-baseline",
    )  # fmt: skip
    assert merged.ret == whole.ret == pytest.ExitCode.TESTS_FAILED  # the gate fails over the whole suite
    merged.stdout.fnmatch_lines(["*gate mean_reward>=0.9: FAIL (mean_reward = 0.4, *", "*gate pass@2>=0.1: PASS*"])
    assert gym.policy_calls() == 2 * 30  # the shards and the unsharded run; the merge called nobody

    # Every trial and gate ends the same; the merged JUnit is valid.
    assert outcomes(pytester.path / "merged.xml") == outcomes(pytester.path / "whole.xml")
    assert len(outcomes(pytester.path / "merged.xml")) == 30 + 2
    errors = [f"{e.path}: {e.reason}" for e in schema.iter_errors(str(pytester.path / "merged.xml"))]
    assert errors == []

    # The same statistics and gate values, and the same per-task results (as a baseline file holds them).
    suites = [
        json.loads((pytester.path / "runs" / d / "pytest_gym_summary.json").read_text())["suites"]
        for d in ("merged", "whole")
    ]
    suites[1][SUITE].pop("baseline_note")  # "baseline written to whole.json"
    # Latencies are the shards' own (the merge keeps them), not the unsharded run's: present, not equal.
    # The efficiency figures (for efficiency gates) hold the same latencies as p50/p90/p99_latency_s.
    for figures in ([s[SUITE]["totals"] for s in suites], [s[SUITE]["efficiency"] for s in suites]):
        timed = [{k: t.pop(k) for k in list(t) if "latency" in k} for t in figures]
        assert set(timed[0]) == set(timed[1])
        assert timed[0]
        assert all(isinstance(v, float) and v > 0 for v in timed[0].values()), timed
    approx(suites[0], suites[1], "suites")
    shards = [arg for i in (1, 2, 3) for arg in ("--gym-merge", f"runs/shard-{i}")]
    again = pytester.runpytest(
        *shards, "--gym-run-dir", "runs/merged-2", "--gym-baseline", "merged.json", "--gym-update-baseline"
    )
    assert again.ret == pytest.ExitCode.TESTS_FAILED
    tasks = [
        json.loads((pytester.path / f"{name}.json").read_text())["suites"][SUITE]["tasks"]
        for name in ("merged", "whole")
    ]
    approx(tasks[0], tasks[1], "tasks")
    assert len(tasks[0]) == 15

    # The merged folder holds every rollout once, and Gym reads it.
    def rewards(run_dir: str) -> list[tuple[str, int, float]]:
        records = read_jsonl(pytester.path / "runs" / run_dir / ROLLOUTS_FILE)
        return sorted((r["_pytest_gym_task_hash"], r["_ng_rollout_index"], r["reward"]) for r in records)

    assert rewards("merged") == rewards("whole")
    assert len(rewards("merged")) == 30
    ours, gyms = (json.loads((pytester.path / "runs" / d / AGGREGATE_FILE).read_text())[0] for d in ("merged", "whole"))
    approx(ours["group_level_metrics"], gyms["group_level_metrics"], "group_level_metrics")
    approx(ours["repeat_level_metrics"], gyms["repeat_level_metrics"], "repeat_level_metrics")
    samples = ours["agent_metrics"].pop("per_sample_aggregate")
    approx(samples["accuracy"], gyms["agent_metrics"]["per_sample_aggregate"]["accuracy"], "per_sample_aggregate")
    approx(ours["agent_metrics"], {k: gyms["agent_metrics"][k] for k in ours["agent_metrics"]}, "agent_metrics")
    assert ours["agent_metrics"]["pass@2/accuracy"] == pytest.approx(40.0)
    left_out = set(gyms["agent_metrics"]) - set(ours["agent_metrics"]) - {"per_sample_aggregate"}
    assert left_out
    assert [k for k in left_out if "majority@" not in k and "no_answer" not in k] == []  # mcqa's own extras
    pairs = (("whole", "merged"), ("merged", "whole"))
    comparisons = run_gym_commands(  # in turn, in one process of Gym's interpreter
        gym.cli,
        [
            (
                ["eval", "compare", "--baseline", f"runs/{baseline}/{ROLLOUTS_FILE}",
                 "--candidates", f"runs/{candidate}/{ROLLOUTS_FILE}", "--output-dir", f"compare-{candidate}",
                 "--report-format", "json"],
                pytester.path,
            )
            for baseline, candidate in pairs
        ],
    )  # fmt: skip
    for (_, candidate), compared in zip(pairs, comparisons, strict=True):
        assert compared.returncode == 0, compared.stdout[-2000:] + compared.stderr[-2000:]
        (report,) = (pytester.path / f"compare-{candidate}").glob("*.json")
        (comparison,) = json.loads(report.read_text())["comparisons"]
        (flips,) = comparison["flips"]
        assert (flips["mode"], flips["common_task_count"], flips["unchanged_count"]) == ("binary", 15, 15)
        mean = next(m for m in comparison["metrics"] if m["metric"] == "mean/reward")
        assert mean["candidates"][0]["delta"] == 0.0

    # A shard folder left out: refused, naming the shard.
    missing = pytester.runpytest("--gym-merge", "runs/shard-1", "--gym-merge", "runs/shard-3")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*were run by no shard given*belong to shard 2/3, whose run folder was not given*"])


def test_a_shard_defers_its_baseline_and_shard_verdicts_judge_its_part(
    pytester: pytest.Pytester, example: Path, gym: RealGym
) -> None:
    from pytest_gym.core.dataset import read_tasks
    from pytest_gym.core.shard import shard_of
    from tests.helpers.realgym import attach

    index = shard_of(read_tasks(example)[0].hash, 2)  # a shard with at least one of the example's tasks
    shard = ("--gym-shard", f"{index}/2", "--gym-verdict", "gate", "--gym-gate", "mean_reward >= 0.9")

    # Comparing with a baseline waits for the merge: reported as a skipped test, never passed.
    pytester.runpytest(*attach(gym, "--gym-run-dir", "base", "--gym-baseline", "b.json", "--gym-update-baseline"))
    compared = pytester.runpytest(*attach(gym, *shard, "--gym-baseline", "b.json", "--junitxml", "c.xml"))
    assert compared.ret == pytest.ExitCode.OK
    compared.stdout.fnmatch_lines([f"  baseline: deferred to the merge (shard {index}/2)"])
    cases = outcomes(pytester.path / "c.xml")
    assert cases["baseline"] == cases["gate[mean_reward>=0.9]"] == "skipped"
    summary = json.loads(next((pytester.path / ".pytest_gym" / "runs").glob("*/pytest_gym_summary.json")).read_text())
    assert summary["shard"] == f"{index}/2"
    assert summary["verdicts"] == "deferred"
    (suite,) = summary["suites"].values()
    assert suite["gates_deferred"] == {"mean_reward>=0.9": f"deferred to the merge (shard {index}/2)"}
    assert "gates" not in suite or suite["gates"] == {}

    # Nor is a baseline written from part of the suite.
    written = pytester.runpytest(*attach(gym, *shard, "--gym-baseline", "part.json", "--gym-update-baseline"))
    assert written.ret == pytest.ExitCode.OK
    assert not (pytester.path / "part.json").exists()

    # --gym-shard-verdicts: judged on the shard's part, and said so.
    judged = pytester.runpytest(*attach(gym, *shard, "--gym-shard-verdicts"))
    assert judged.ret == pytest.ExitCode.TESTS_FAILED
    judged.stdout.fnmatch_lines(["*gate mean_reward>=0.9: FAIL*", f"*judged on shard {index}/2's part of the suite*"])
