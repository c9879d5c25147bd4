"""Names people can read: a row's label (``id``, ``task_id``, ``name`` or ``--gym-keyword-field``) in the node id,
the failure header, JUnit and the report."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.report.html import report_data
from tests.helpers.reused_runs import earlier_run, latest_run, reuse, row

XDIST = [(), ("-n", "2")]


def short(r: dict[str, object]) -> str:
    return task_hash(r)[:12]


ROWS = [
    row(0, id="q5", category="algebra"),
    row(1, task_id=17, category="geometry"),
    row(2, name="two words/and::[brackets]"),
    row(3),
    row(4, id="q5"),  # the same label as row 0: the hash keeps them apart
]


@pytest.mark.parametrize("xdist", XDIST)
def test_node_ids_carry_the_rows_label(pytester: pytest.Pytester, xdist: tuple[str, ...]) -> None:
    run = earlier_run(pytester, {"d.jsonl": [(r, [1.0]) for r in ROWS]})
    result = pytester.runpytest("--co", "-q", *reuse(run, "d.jsonl", repeats=1), *xdist)
    h = [short(r) for r in ROWS]
    expected = [
        f"d.jsonl::{h[0]}-q5[r0]",
        f"d.jsonl::{h[1]}-17[r0]",
        f"d.jsonl::{h[2]}-two_words_and_brackets[r0]",
        f"d.jsonl::{h[3]}[r0]",
        f"d.jsonl::{h[4]}-q5[r0]",
    ]
    assert [line for line in result.stdout.lines if line.startswith("d.jsonl::")] == expected


def test_keyword_field_names_the_label(pytester: pytest.Pytester) -> None:
    run = earlier_run(pytester, {"d.jsonl": [(r, [1.0]) for r in ROWS]})
    args = [*reuse(run, "d.jsonl", repeats=1), "--gym-keyword-field", "category"]
    result = pytester.runpytest("--co", "-q", *args)
    assert f"d.jsonl::{short(ROWS[1])}-geometry[r0]" in result.stdout.lines
    assert f"d.jsonl::{short(ROWS[2])}[r0]" in result.stdout.lines  # no category: the hash alone


def test_failure_header_is_the_node_id_and_runs_the_trial_again(pytester: pytest.Pytester) -> None:
    run = earlier_run(pytester, {"d.jsonl": [(ROWS[0], [1.0, 0.0]), (ROWS[3], [1.0, 1.0])]})
    nodeid = f"d.jsonl::{short(ROWS[0])}-q5[r1]"
    result = pytester.runpytest(*reuse(run, "d.jsonl"), "--junitxml", "r.xml")
    result.assert_outcomes(passed=3, failed=1)
    headers = [line.strip("_").strip() for line in result.stdout.lines if line.startswith("___")]
    assert headers == [f"./{nodeid}"]
    names = [case.get("name") for case in ET.parse(pytester.path / "r.xml").iter("testcase")]
    assert f"{short(ROWS[0])}-q5[r1]" in names
    again = pytester.runpytest(*reuse(run, "d.jsonl"), headers[0])  # pasted as printed
    again.assert_outcomes(failed=1)
    assert (latest_run(pytester) / "report.html").is_file()


TEMPLATE = "You are a careful grader. Read the question and answer with one letter only. Question: "


def test_report_names_tasks_by_label_and_skips_the_common_prompt_prefix(pytester: pytest.Pytester) -> None:
    rows = [
        {"responses_create_params": {"input": TEMPLATE + text}, "id": f"q{i}"}
        for i, text in enumerate(["what is 2+2?", "which planet is red?", "who wrote Hamlet?"])
    ]
    plain = [row(i) for i in range(3)]  # "question N": nothing shared worth skipping
    run = earlier_run(pytester, {"d.jsonl": [(r, [1.0]) for r in rows], "e.jsonl": [(r, [1.0]) for r in plain]})
    pytester.runpytest(*reuse(run, "d.jsonl", "e.jsonl", repeats=1)).assert_outcomes(passed=6)
    data = report_data(latest_run(pytester))
    assert all("prompt_at" not in t for t in data["tasks"] if t["suite"] == "e.jsonl")
    data["tasks"] = [t for t in data["tasks"] if t["suite"] == "d.jsonl"]
    assert [t["name"] for t in data["tasks"]] == [f"{short(r)}-q{i}" for i, r in enumerate(rows)]
    at = len(TEMPLATE)
    assert [t["prompt"][t["prompt_at"] :] for t in data["tasks"]] == [
        "what is 2+2?",
        "which planet is red?",
        "who wrote Hamlet?",
    ]
    assert all(t["prompt_at"] == at for t in data["tasks"])


def test_verbose_lines_are_the_node_ids(pytester: pytest.Pytester) -> None:
    run = earlier_run(pytester, {"d.jsonl": [(ROWS[0], [1.0])]})
    result = pytester.runpytest(*reuse(run, "d.jsonl", repeats=1), "-v")
    result.stdout.fnmatch_lines([f"d.jsonl::{short(ROWS[0])}-q5?r0? PASSED*"])


#: A key of the policy's shape, set as the policy key: a row whose id holds it must not name its test with it.
KEY = "nvapi-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7dEf0hIj3kLm6nOp9qRs2tUv5wXy8z"


def test_a_label_holding_a_secret_is_left_out_of_the_node_id(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", KEY)
    leaky = row(0, id=KEY)
    run = earlier_run(pytester, {"d.jsonl": [(leaky, [0.0]), (ROWS[0], [1.0])]})
    result = pytester.runpytest(*reuse(run, "d.jsonl", repeats=1), "-v", "-rA", "--junitxml", "r.xml")
    result.assert_outcomes(passed=1, failed=1)
    collected = pytester.runpytest(*reuse(run, "d.jsonl", repeats=1), "--co", "-q")
    # The hash alone names it, the same in the terminal, JUnit and the run folder (not "<hash>-***" in some).
    nodeid = f"d.jsonl::{short(leaky)}[r0]"
    assert nodeid in collected.stdout.lines
    result.stdout.fnmatch_lines([f"d.jsonl::{short(leaky)}?r0? FAILED*"])
    assert {case.get("name") for case in ET.parse(pytester.path / "r.xml").iter("testcase")} == {
        f"{short(leaky)}[r0]",
        f"{short(ROWS[0])}-q5[r0]",
    }
    cut = KEY[:16]  # the label is cut to 40 characters: any part of the key is a leak
    for out in (result, collected):
        assert cut not in out.stdout.str() + out.stderr.str()
    written = [p for p in latest_run(pytester).rglob("*") if p.is_file()]
    assert [str(p) for p in written if cut.encode() in p.read_bytes()] == []
