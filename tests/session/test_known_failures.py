"""--gym-known-failures: listed tasks that fail are xfail with the reason, listed tasks that pass are XPASS
("fixed: remove from the list", strict by option), expired entries fail naming themselves, the gates are judged
without the quarantined tasks (shown apart), the baseline's flip counts leave them out, and a bad file is a
usage error naming its file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.judge.known import KnownFailuresError, load_known_failures
from tests.helpers.mcqa_standin import McqaGym, mcqa_gym, rows, run, write_dataset

HASHES = [task_hash(r) for r in rows()]  # q0..q4 expect B, C, I, E, E; the fake model answers E


def write(folder: Path, text: str, name: str = "known.yaml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


# -- the file -----------------------------------------------------------------------------------------------


def test_entries_name_tasks_by_hash_prefix_or_node_id(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""\
# accepted for now
- task: {HASHES[0][:8]}
  reason: the verifier rejects a correct unit
  link: https://github.com/org/repo/issues/12
- task: data.jsonl::{HASHES[1][:12]}[r1]
  reason: upstream
  expires: 2999-12-31
- task: "{HASHES[2][:10].upper()}"
  reason: flaky upstream
  expires: 2020-01-01
""",
    )
    known = load_known_failures(path, "known.yaml", today=date(2026, 6, 1))
    first, second, third = known.entries
    assert (first.line, first.link, first.expires) == (2, "https://github.com/org/repo/issues/12", None)
    assert (second.line, second.expires) == (5, date(2999, 12, 31))
    assert first.matches("anything.jsonl", HASHES[0])
    assert not first.matches("a.jsonl", HASHES[1])
    assert second.matches("data.jsonl", HASHES[1])
    assert not second.matches("other.jsonl", HASHES[1])
    assert third.matches("data.jsonl", HASHES[2])  # upper-case hex is the same hash
    assert known.active_for("data.jsonl", HASHES[2]) is None  # expired: quarantines nothing
    assert known.entry_for("data.jsonl", HASHES[2]) is third
    assert third.expired(date(2026, 6, 1))
    assert not second.expired(date(2026, 6, 1))
    assert [e.where for e in known.unused([("data.jsonl", HASHES[0])])] == ["known.yaml:5", "known.yaml:8"]
    assert third.describe() == f"known.yaml:8 task {HASHES[2][:10]} (flaky upstream)"


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("task: abcdef12\nreason: x\n", 1, "expected a list of entries"),
        ("- task: abcdef12\n  reason: x\n- just text\n", 3, "entry 2 is not a mapping"),
        ("- task: abcdef12\n  reason: x\n- task: 12345678ab\n", 3, "entry 2 has no 'reason'"),
        ("- task: abcdef1\n  reason: x\n", 1, "neither a task hash prefix of at least 8 hex characters"),
        ("- task: data.jsonl::zzzzzzzzzzzz\n  reason: x\n", 1, "nor a node id"),
        ("- task: abcdef12\n  reason: x\n  reasn: y\n", 3, "unknown key 'reasn'"),
        ("- task: abcdef12\n  reason: x\n  expires: next week\n", 3, "'expires' must be a date"),
        ("- task: abcdef12\n  reason: ''\n", 2, "'reason' must be text"),
        ("- task: abcdef12\n  reason: x\n- task: ABCDEF12\n  reason: y\n", 3, "listed twice (also line 1)"),
        ("- task: abcdef12\n  reason: [unclosed\n", 3, "not valid YAML"),
    ],
)
def test_a_bad_file_names_its_line_and_the_fix(tmp_path: Path, text: str, line: int, problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(KnownFailuresError) as caught:
        load_known_failures(path, "known.yaml")
    assert caught.value.line == line, str(caught.value)
    assert f"{path}:{line}: " in str(caught.value)
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("- task: abcdef12\n  reason: x\n  expires: 2026-02-30\n", 3, "(day is out of range for month)"),
        ("- task: abcdef12\n  reason: x\n- task: " + "1" * 5000 + "\n  reason: y\n", 3, "a number too long"),
        ("- " * 3000 + "x\n", 1, "nested too deeply"),
        ("[" * 3000 + "\n", 1, "nested too deeply"),
    ],
)
def test_a_file_yaml_cannot_build_names_its_line_not_an_internal_error(
    tmp_path: Path, text: str, line: int, problem: str
) -> None:
    """PyYAML parses these but raises ValueError (a 30 February, an int() of 5000 digits) or RecursionError while
    building them: an INTERNALERROR before."""
    path = write(tmp_path, text)
    with pytest.raises(KnownFailuresError) as caught:
        load_known_failures(path, "known.yaml")
    assert caught.value.line == line, str(caught.value)
    assert problem in str(caught.value)


def test_an_all_digit_task_prefix_is_taken_as_written_not_as_a_yaml_number(tmp_path: Path) -> None:
    """YAML 1.1 reads 01234567 as an octal 342391 and 0x1234abcd as 305441741: the prefix was the number's
    decimal digits (refused as too short, or a different task)."""
    known = load_known_failures(write(tmp_path, "- task: 01234567\n  reason: x\n- task: 12345678\n  reason: y\n"))
    assert [entry.task for entry in known.entries] == ["01234567", "12345678"]
    with pytest.raises(KnownFailuresError, match="task '0x1234abcd' is neither a task hash prefix"):
        load_known_failures(write(tmp_path, "- task: 0x1234abcd\n  reason: x\n"))


def test_an_empty_file_lists_nothing(tmp_path: Path) -> None:
    assert load_known_failures(write(tmp_path, "# nothing yet\n")).entries == []


# -- through pytest -----------------------------------------------------------------------------------------


@pytest.fixture
def gym(pytester: pytest.Pytester) -> Iterator[McqaGym]:
    pytester.makeini("[pytest]\n")
    write_dataset(pytester.path)
    with mcqa_gym() as server:
        yield server


def summary(pytester: pytest.Pytester) -> dict[str, object]:
    data: dict[str, object] = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())
    return data


KNOWN = f"""\
- task: {HASHES[0][:8]}
  reason: expects B, the model says E (issue 12)
  link: https://example.invalid/issues/12
- task: data.jsonl::{HASHES[3][:12]}
  reason: was broken upstream
"""


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_listed_failures_xfail_and_listed_passes_xpass(
    pytester: pytest.Pytester, gym: McqaGym, xdist: tuple[str, ...]
) -> None:
    write(pytester.path, KNOWN)
    result = run(pytester, gym, "--gym-known-failures", "known.yaml", "--gym-run-dir", "run", "-rxX", *xdist)
    # q0 (listed, fails): xfail; q3 (listed, passes): XPASS; q1, q2 fail; q4 passes.
    result.assert_outcomes(passed=1, failed=2, xfailed=1, xpassed=1)
    result.stdout.fnmatch_lines(
        [
            # pytest before 8.1 writes "- reason: known failure: ..."
            f"XFAIL data.jsonl::{HASHES[0][:12]}[[]r0[]] - *known failure: known.yaml:1 task {HASHES[0][:8]} "
            "(expects B, the model says E (issue 12); https://example.invalid/issues/12)*",
            f"XPASS data.jsonl::{HASHES[3][:12]}[[]r0[]]*fixed: remove from the list: known.yaml:4 task "
            f"data.jsonl::{HASHES[3][:12]} (was broken upstream)",
        ]
    )
    suite = summary(pytester)["suites"]["data.jsonl"]  # type: ignore[index]
    known = suite["known_failures"]
    assert [t["hash"] for t in known["failing"]] == [HASHES[0][:12]]
    assert [t["hash"] for t in known["fixed"]] == [HASHES[3][:12]]
    assert known["failed_trials"] == 1
    assert suite["failed_trials"] == 3
    assert suite["verdict"] == "FAIL"  # q1 and q2 fail, and they are not listed
    assert suite["verdict_text"].startswith("2 of 5 trials failed, 1 quarantined task failed (known failures), ")


def test_strict_makes_a_fixed_known_failure_fail(pytester: pytest.Pytester, gym: McqaGym) -> None:
    write(pytester.path, KNOWN)
    strict = ("--gym-known-failures", "known.yaml", "--gym-known-failures-strict")
    result = run(pytester, gym, *strict, "-k", HASHES[3][:12])
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*[[]XPASS(strict)[]] fixed: remove from the list: known.yaml:4 task*"])


def test_an_expired_entry_quarantines_nothing_and_fails_naming_itself(pytester: pytest.Pytester, gym: McqaGym) -> None:
    write(pytester.path, f"- task: {HASHES[1][:12]}\n  reason: old news\n  expires: 2020-01-31\n")
    result = run(pytester, gym, "--gym-known-failures", "known.yaml", "--gym-run-dir", "run", "-k", HASHES[1][:12])
    result.assert_outcomes(failed=2)  # the trial, judged as any other, and the entry
    result.stdout.fnmatch_lines(
        [
            f"*known failure expired on 2020-01-31: known.yaml:1 task {HASHES[1][:12]} (old news)",
            f"known failure expired on 2020-01-31: known.yaml:1 task {HASHES[1][:12]} (old news); its task "
            f"{HASHES[1][:12]} (line 2) is judged as any other again*",
            f"FAILED known.yaml::expired[[]{HASHES[1][:12]}[]]*",  # pytest 8.0 writes no message here
        ]
    )
    suite = summary(pytester)["suites"]["data.jsonl"]  # type: ignore[index]
    assert [t["entry"] for t in suite["known_failures"]["expired"]] == ["known.yaml:1"]
    assert suite["verdict"] == "FAIL"


def test_gates_are_judged_without_quarantined_tasks_and_say_so(pytester: pytest.Pytester, gym: McqaGym) -> None:
    listed = "".join(f"- task: {h[:12]}\n  reason: expects {x}\n" for h, x in zip(HASHES[:3], "BCI", strict=True))
    write(pytester.path, listed)
    args = ("--gym-gate", "mean_reward>=0.9", "--gym-run-dir", "run")
    without = run(pytester, gym, *args, "--gym-verdict", "gate")
    without.assert_outcomes(passed=2, failed=1, xfailed=3)  # 2 trials pass; the gate fails at 0.4
    assert "gate mean_reward>=0.9: FAIL (mean_reward = 0.4, required >= 0.9)" in without.stdout.str()

    result = run(pytester, gym, "--gym-known-failures", "known.yaml", *args[:2], "--gym-run-dir", "run2")
    result.assert_outcomes(passed=3, xfailed=3)
    result.stdout.fnmatch_lines(
        [
            "  verdict: WARN (all 2 other trials passed, 3 quarantined tasks failed (known failures), 1 gate passed)",
            "  gate mean_reward>=0.9: PASS (mean_reward = 1 >= 0.9 (judged without the 3 quarantined tasks: "
            "known failures))",
        ]
    )
    data = json.loads((pytester.path / "run2" / "pytest_gym_summary.json").read_text())
    suite = data["suites"]["data.jsonl"]
    assert suite["mean_reward"] == 0.4  # the suite's own numbers are every task's
    assert suite["gates"]["mean_reward>=0.9"]["value"] == 1.0
    assert suite["verdict"] == "WARN"


def test_the_baseline_counts_quarantined_flips_apart(pytester: pytest.Pytester, gym: McqaGym) -> None:
    gym.answers = dict(enumerate("BCIEE"))  # every answer right
    run(pytester, gym, "--gym-baseline", "base.json", "--gym-update-baseline").assert_outcomes(passed=5)
    gym.answers = {}  # E everywhere: q0, q1, q2 are new failures
    write(pytester.path, f"- task: {HASHES[0][:12]}\n  reason: known\n")
    result = run(
        pytester, gym, "--gym-baseline", "base.json", "--gym-known-failures", "known.yaml",
        "--gym-gate", "new_failures<=1", "--gym-run-dir", "run",
    )  # fmt: skip
    result.assert_outcomes(passed=3, failed=3, xfailed=1)  # q1, q2 and the gate fail; the baseline check passes
    baseline = summary(pytester)["suites"]["data.jsonl"]["baseline"]  # type: ignore[index]
    assert [t["hash"] for t in baseline["new_failure_tasks"]] == [HASHES[1][:12], HASHES[2][:12]]
    assert [t["hash"] for t in baseline["quarantined_new_failures"]] == [HASHES[0][:12]]
    assert "gate new_failures<=1: FAIL (new_failures = 2, required <= 1" in result.stdout.str()


def test_a_bad_file_is_a_usage_error_naming_file_and_line(pytester: pytest.Pytester, gym: McqaGym) -> None:
    write(pytester.path, "- task: abc\n  reason: too short\n")
    result = run(pytester, gym, "--gym-known-failures", "known.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gym-known-failures */known.yaml:1: task 'abc' is neither a task hash prefix*"])
    result = run(pytester, gym, "--gym-known-failures", "missing.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gym-known-failures */missing.yaml:0: no such file*"])
