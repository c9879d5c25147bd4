"""The README's "Run your own dataset" and "A second environment" commands, run exactly as written (issue 24
item 4), against real Gyms started by them, offline, in a folder holding what the demo leaves: examples/,
scripts/ and .venvs/."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers.paths import ROOT
from tests.helpers.realgym import need_gym


def readme_block(title: str) -> str:
    """The first indented code block of the README section ``title``, as a shell script."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"## {title}\n", 1)[1].split("\n#", 1)[0]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    "))
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    return "\n".join(block).strip() + "\n"


def test_run_your_own_dataset_as_written(tmp_path: Path) -> None:
    need_gym()
    for name in ("examples", "scripts", ".venvs"):
        (tmp_path / name).symlink_to(ROOT / name)
    script = readme_block("Run your own dataset")
    assert "--gym-dataset mine/mine.jsonl" in script
    # Their own Gyms, joining this test process's Ray cluster (RAY_ADDRESS): scripts/netns-run, run from the
    # namespace it made for the tests, stays in it. A Gym starting its own Ray: tests marked own_ray.
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-4000:]  # the policy answers B: 1 trial passes, 2 fail
    assert "1 passed" in out, out[-4000:]
    assert "2 failed" in out, out[-4000:]
    assert list((tmp_path / "mine" / ".pytest_gym" / "runs").glob("*/report.html"))

    # A second environment, in the folder the first section made: each command is one pytest run; the first
    # exits 1 (3 of 5 fail), so the block runs without -e, and each run's summary line is checked.
    script = readme_block("A second environment")
    assert script.count("pytest -c mine/pytest.ini") == 2
    done = subprocess.run(
        ["bash", "-uo", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    out = done.stdout + done.stderr
    summaries = [line for line in out.splitlines() if line.startswith("=") and " in " in line and "passed" in line]
    assert len(summaries) == 2, out[-6000:]
    assert "3 failed, 2 passed" in summaries[0], out[-6000:]  # equivalence_rule/lc: the policy answers 6
    assert "5 passed" in summaries[1], out[-6000:]  # every trial called get_weather, then answered
    assert "failed" not in summaries[1], out[-6000:]
    assert done.returncode == 0, out[-4000:]  # the last command's status: every tool-calling trial passed
    assert len(list((tmp_path / "mine" / ".pytest_gym" / "runs").glob("*/report.html"))) == 3
