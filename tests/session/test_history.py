"""python -m pytest_gym history: a suite's mean reward with its interval, pass@k, cost and latency across run
folders in time order, gate thresholds drawn in, each run linked to its report, runs with other settings marked;
checked in the data, the JSON and in Chromium."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.report.history import history_data
from tests.helpers.browser import console_errors
from tests.helpers.inner_runs import pytest_command
from tests.helpers.mcqa_standin import mcqa_gym, write_dataset

#: Five nightly runs: what the fake model answers (q0..q4 expect B, C, I, E, E), and their extra options.
NIGHTS: list[tuple[dict[int, str], tuple[str, ...]]] = [
    ({}, ()),  # E everywhere: 0.4
    ({0: "B"}, ()),  # 0.6
    ({0: "B", 1: "C"}, ()),  # 0.8
    ({0: "B", 1: "C"}, ("--gym-repeats", "2")),  # other settings: 2 repeats
    ({0: "B", 1: "C", 2: "I"}, ("--gym-repeats", "2")),  # 1.0
]


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("nights")
    write_dataset(folder)
    (folder / "pytest.ini").write_text("[pytest]\n")
    with mcqa_gym() as gym:
        for night, (answers, extra) in enumerate(NIGHTS):
            gym.answers = answers
            gates = ("--gym-gate", "mean_reward>=0.5", "--gym-gate", f"pass@1>={0.3 if night < 3 else 0.7}")
            subprocess.run(
                pytest_command(
                    "--gym-url", gym.url, "--gym-agent", "fake_agent", "--gym-dataset", "data.jsonl",
                    "--gym-run-dir", f"runs/night{night}", "--gym-price-in", "2", *gates, *extra,
                ),
                cwd=folder, capture_output=True, timeout=300, check=False,
            )  # fmt: skip
    return folder


def folders(nights: Path) -> list[Path]:
    return [nights / "runs" / f"night{i}" for i in (3, 0, 4, 1, 2)]  # any order: drawn in time order


def test_the_runs_are_in_time_order_with_their_numbers_and_changes_marked(nights: Path) -> None:
    data = history_data(folders(nights), nights)
    assert [r["label"] for r in data["runs"]] == [f"night{i}" for i in range(5)]
    points = data["suites"]["data.jsonl"]
    assert [p["mean_reward"] for p in points] == [0.4, 0.6, 0.8, 0.8, 1.0]
    assert all(p["ci_low"] < p["mean_reward"] <= p["ci_high"] for p in points)
    assert [p["k"] for p in points] == [1, 1, 1, 2, 2]
    assert [r["changed"] for r in data["runs"]] == [[], [], [], ["data.jsonl: repeats (max k)"], []]
    assert all(p["cost"] is not None and p["cost"] > 0 for p in points)
    assert [r["report"] for r in data["runs"]] == [f"runs/night{i}/report.html" for i in range(5)]
    assert [[g["threshold"] for g in p["gates"]] for p in points][2:4] == [[0.5, 0.3], [0.5, 0.7]]


def test_a_folder_without_a_summary_is_listed_and_drawn_nowhere(nights: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    data = history_data([*folders(nights), empty], tmp_path)
    (run,) = [r for r in data["runs"] if r["label"] == "empty"]
    assert run["problem"].startswith("no pytest_gym_summary.json")
    assert len(data["suites"]["data.jsonl"]) == 5


def test_the_command_writes_the_page_and_the_json(nights: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gym", "history", *map(str, folders(nights)), "-o", "out/history.html",
         "--json", "out/history.json"],
        cwd=nights, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "out/history.html: 5 runs, 1 suites" in done.stdout
    data = json.loads((nights / "out" / "history.json").read_text())
    assert data["runs"][0]["report"] == "../runs/night0/report.html"
    page = (nights / "out" / "history.html").read_text()
    assert "http" not in page.replace("http://www.w3.org", "")  # self-contained: nothing to fetch


@pytest.mark.browser
def test_history_in_a_browser(nights: Path, browser: Any) -> None:
    subprocess.run(
        [sys.executable, "-m", "pytest_gym", "history", *map(str, folders(nights)), "-o", "history.html"],
        cwd=nights, capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    page = nights / "history.html"
    browser.get(page.as_uri())
    reward = browser.find_element("css selector", 'svg[data-chart="reward"]')
    assert reward.is_displayed()
    assert len(reward.find_elements("css selector", "circle.pt")) == 5
    assert len(reward.find_elements("css selector", "line.ci")) == 5
    assert len(reward.find_elements("css selector", "circle.pt.changed")) == 1
    gate = reward.find_element("css selector", 'g.threshold[data-gate="mean_reward>=0.5"]')
    assert gate.text == "mean_reward>=0.5"
    passk = browser.find_element("css selector", 'svg[data-chart="passk"]')
    assert {g.get_attribute("data-gate") for g in passk.find_elements("css selector", "g.threshold")} == {
        "pass@1>=0.3",
        "pass@1>=0.7",
    }
    for chart in ("cost", "latency"):
        assert browser.find_element("css selector", f'svg[data-chart="{chart}"]').is_displayed()
    # The threshold lies where the axis puts 0.5: between the points of 0.4 and 0.6.
    ys = browser.execute_script(
        "var s = document.querySelector('svg[data-chart=reward]');"
        "var pts = Array.from(s.querySelectorAll('circle.pt')).map(c => Number(c.getAttribute('cy')));"
        "var d = s.querySelector('g.threshold path').getAttribute('d');"
        "return [pts, Number(d.split(' ')[1].split('H')[0])];"
    )
    points, threshold = ys
    assert points[1] < threshold < points[0]  # SVG y grows downwards: 0.6 above 0.5 above 0.4
    # A point opens its run's report.
    browser.execute_script(
        "document.querySelectorAll('svg[data-chart=reward] a')[2]"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true}))"
    )
    assert browser.current_url.endswith("/runs/night2/report.html")
    assert "pytest-gym report" in browser.title
    assert console_errors(browser) == []


def test_a_json_path_that_cannot_be_written_is_the_path_named(tmp_path: Path) -> None:
    """``--json`` naming a folder: the message named the page (written fine), not the JSON path."""
    (tmp_path / "run").mkdir()
    (tmp_path / "taken").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gym", "history", "run", "-o", "page.html", "--json", "taken"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "pytest-gym history: cannot write taken: Is a directory" in done.stderr
