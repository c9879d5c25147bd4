"""Collection of datasets into trial items, without Gym: ids, selection, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.runfolder.layout import BOARD_DIR
from tests.helpers.standin import StandinGym


def row(answer: str) -> dict[str, object]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": f"say {answer}"}]},
        "expected_answer": answer,
    }


ROWS = [row("A"), row("B"), row("C")]
HASHES = [task_hash(r)[:12] for r in ROWS]
NO_GYM = ("--gym-cli=/bin/false", "--gym-resources-server", "mcqa", "--gym-policy", "scripted")


@pytest.fixture
def dataset(pytester: pytest.Pytester) -> Path:
    path = pytester.path / "evals" / "data.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return path


def test_each_distinct_row_times_repeats_is_an_item_in_file_order(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--gym-dataset", str(dataset), "--gym-repeats", "2", "--co", "-q", *NO_GYM)
    expected = [f"evals/data.jsonl::{h}[r{r}]" for h in HASHES for r in range(2)]
    assert [line for line in result.stdout.lines if line.startswith("evals/")] == expected
    result.stdout.fnmatch_lines(["6 tests collected*"])
    assert result.ret == 0


def test_a_dataset_given_twice_is_collected_once(pytester: pytest.Pytester, dataset: Path) -> None:
    # Relative and absolute, on the command line: pytest before 8.1 would collect the path twice.
    twice = ("--gym-dataset", str(dataset), "--gym-dataset", "evals/data.jsonl")
    result = pytester.runpytest(*twice, "--co", "-q", *NO_GYM)
    assert [line for line in result.stdout.lines if line.startswith("evals/")] == [
        f"evals/data.jsonl::{h}[r0]" for h in HASHES
    ]


@pytest.mark.parametrize("xdist", [(), ("-p", "no:xdist")])
def test_collect_only_starts_nothing(pytester: pytest.Pytester, dataset: Path, xdist: tuple[str, ...]) -> None:
    result = pytester.runpytest("--gym-dataset", str(dataset), "--co", *NO_GYM, *xdist)
    assert result.ret == 0
    assert not list((pytester.path / ".pytest_gym").glob("runs/*/deployment.json"))


def test_selection_that_matches_no_trial_starts_nothing(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--gym-dataset", str(dataset), "-k", "nomatch", *NO_GYM)
    result.assert_outcomes(deselected=3)
    assert not list((pytester.path / ".pytest_gym").glob("runs/*/deployment.json"))


def test_k_and_deselect_select_trials(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest(
        "--gym-dataset",
        str(dataset),
        "--gym-repeats",
        "2",
        "--co",
        "-q",
        "-k",
        f"{HASHES[1]} or r1",
        "--deselect",
        f"evals/data.jsonl::{HASHES[2]}[r1]",
        *NO_GYM,
    )
    listed = [line for line in result.stdout.lines if line.startswith("evals/")]
    assert listed == [f"evals/data.jsonl::{h}" for h in (f"{HASHES[0]}[r1]", f"{HASHES[1]}[r0]", f"{HASHES[1]}[r1]")]
    result.stdout.fnmatch_lines(["3/6 tests collected (3 deselected)*"])


def test_dataset_alone_when_no_test_paths_given(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.makepyfile(test_unit="def test_unit(): pass")
    result = pytester.runpytest("--gym-dataset", str(dataset), "--co", "-q", *NO_GYM)
    result.stdout.fnmatch_lines(["3 tests collected*"])
    both = pytester.runpytest("--gym-dataset", str(dataset), ".", "--co", "-q", *NO_GYM)
    both.stdout.fnmatch_lines(["4 tests collected*"])


def test_ini_datasets_are_relative_to_rootdir(
    pytester: pytest.Pytester, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\ngym_dataset = evals/data.jsonl\ngym_repeats = 3\n")
    monkeypatch.chdir(pytester.mkdir("sub"))
    result = pytester.runpytest("--co", "-q", *NO_GYM)
    result.stdout.fnmatch_lines(["9 tests collected*"])


def test_duplicate_rows_warn_with_file_and_lines(pytester: pytest.Pytester, dataset: Path) -> None:
    with dataset.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[0], sort_keys=True) + "\n")
    result = pytester.runpytest("--gym-dataset", str(dataset), "--co", "-q", *NO_GYM)
    result.stdout.fnmatch_lines(
        [
            "*GymDuplicateRowWarning*duplicate rows collapsed*lines 4, 6 repeat line 1*--gym-repeats*",
            "3 tests collected*",
        ]
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"responses_create_params": {}}\n{oops\n', "*data.jsonl:2: invalid JSON*"),
        ('"just a string"\n', "*data.jsonl:1: expected a JSON object, got str*"),
        ('{"prompt": "hi"}\n', "*data.jsonl:1: row has no 'responses_create_params' object*"),
        ("\n   \n", "*data.jsonl:0: dataset has no rows*"),
    ],
)
def test_bad_dataset_is_a_collection_error_naming_file_and_line(
    pytester: pytest.Pytester, dataset: Path, content: str, message: str
) -> None:
    dataset.write_text(content, encoding="utf-8")
    result = pytester.runpytest("--gym-dataset", str(dataset), *NO_GYM)
    result.stdout.fnmatch_lines(["*ERROR collecting evals/data.jsonl*", message, "*fix: *"])
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_missing_dataset_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--gym-dataset", "nope.jsonl", *NO_GYM)
    result.stderr.fnmatch_lines(["*dataset */nope.jsonl does not exist*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (("--gym-repeats", "0"), "", "*invalid value '0' for repeats from command line (--gym-repeats)*"),
        ((), "gym_repeats = many", "*invalid value 'many' for repeats from ini file (gym_repeats)*"),
        (("--gym-url", "localhost:11000"), "", "*for url from command line (--gym-url)*"),
        ((), "gym_min_reward = high", "*for min_reward from ini file (gym_min_reward)*"),
    ],
)
def test_bad_settings_say_where_they_came_from(
    pytester: pytest.Pytester, dataset: Path, args: tuple[str, ...], ini: str, message: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest("--gym-dataset", str(dataset), *args)
    result.stderr.fnmatch_lines([message])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_gym_missing_is_a_usage_error_naming_the_cause(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--gym-dataset", str(dataset), *NO_GYM[1:], "--gym-cli", "/nonexistent/gym")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gym-cli: /nonexistent/gym does not exist*"])
    assert not list(pytester.path.glob(".pytest_gym/runs/*/deployment.json"))


def test_gym_that_does_not_start_is_one_error_naming_the_cause(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--gym-dataset", str(dataset), *NO_GYM)
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*Gym exited with code 1 during start-up.", "*printed nothing*--gym-cli*"])
    # The errors' section: with CI set, pytest's short summary repeats each message whole.
    errors = result.stdout.str().split("short test summary info")[0]
    assert errors.count("not run: Gym is unavailable") == 2
    states = list((pytester.path / ".pytest_gym").glob("runs/*/deployment.json"))
    assert len(states) == 1
    assert "exited with code 1" in json.loads(states[0].read_text())["error"]


def test_run_folder_is_never_reused(pytester: pytest.Pytester, dataset: Path) -> None:
    run_dir = pytester.mkdir("run")
    (run_dir / "rollouts.jsonl").write_text("{}\n")
    result = pytester.runpytest("--gym-dataset", str(dataset), "--gym-run-dir", str(run_dir), *NO_GYM)
    result.stderr.fnmatch_lines(["*run folder */run already holds a run (rollouts.jsonl)*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_a_folder_of_the_users_is_no_run_folder_and_its_files_are_left_alone(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    """The run masks secrets in place in every file of its folder when it ends: ``--gym-run-dir=.`` (or ``/``)
    overwrote the key in the project's .env with asterisks, even with ``--co``."""
    mine = pytester.mkdir("mine")
    env = mine / ".env"
    env.write_text("OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234567890\n")
    result = pytester.runpytest("--co", "--gym-dataset", str(dataset), f"--gym-run-dir={mine}", *NO_GYM)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*run folder */mine is not empty (.env) and is no pytest-gym run folder*"])
    assert env.read_text() == "OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234567890\n"
    assert sorted(p.name for p in mine.iterdir()) == [".env"]
    (pytester.path / "file").write_text("")
    result = pytester.runpytest("--co", "--gym-dataset", str(dataset), f"--gym-run-dir={pytester.path / 'file'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*run folder */file is a file*"])


def test_an_empty_folder_or_one_an_attempt_left_is_a_run_folder(pytester: pytest.Pytester, dataset: Path) -> None:
    run_dir = pytester.mkdir("out")
    for _ in range(2):  # the second time it holds the first --co's lock file
        result = pytester.runpytest("--co", "--gym-dataset", str(dataset), f"--gym-run-dir={run_dir}", *NO_GYM)
        assert result.ret == pytest.ExitCode.OK
    crashed = pytester.mkdir("crashed")
    (crashed / BOARD_DIR).mkdir()  # all an xdist attempt killed early may leave: its workers' claims
    result = pytester.runpytest("--co", "--gym-dataset", str(dataset), f"--gym-run-dir={crashed}", *NO_GYM)
    assert result.ret == pytest.ExitCode.OK


def test_trial_items_expose_hash_line_and_repeat_to_hooks(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.makeconftest(
        """
        def pytest_collection_modifyitems(items):
            for item in items:
                s = item.spec
                print("SPEC", item.name, s.task.hash, s.task.line, s.repeat, s.task_index)
        """
    )
    result = pytester.runpytest("--gym-dataset", str(dataset), "--gym-repeats", "2", "--co", "-s", *NO_GYM)
    full = [task_hash(r) for r in ROWS]
    assert f"SPEC {full[2][:12]}[r1] {full[2]} 3 1 2" in result.stdout.lines


def test_row_hook_can_drop_rows(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.makeconftest(
        """
        def pytest_gym_row(row, dataset, line):
            return False if row["expected_answer"] == "B" else None
        """
    )
    result = pytester.runpytest("--gym-dataset", str(dataset), "--co", "-q", *NO_GYM)
    result.stdout.fnmatch_lines(["2 tests collected*"])
    assert HASHES[1] not in result.stdout.str()


@pytest.mark.parametrize("verdict", ["trial", "task"])
def test_setup_plan_runs_no_rollout_and_setup_only_runs_each_once(
    pytester: pytest.Pytester, dataset: Path, verdict: str
) -> None:
    """Items run their trials in their own setup, not through a fixture: ``--setup-plan`` must still run nothing,
    and ``--setup-only`` (setup, no call) each trial once, its fixtures (an autouse one here) around it."""
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture(autouse=True)
        def around(request):
            print("AROUND", request.node.name)
        """
    )
    gym = StandinGym("agent")
    try:
        args = ("--gym-dataset", str(dataset), f"--gym-url={gym.base_url}", "--gym-repeats", "2")
        planned = pytester.runpytest(*args, "--gym-verdict", verdict, "--setup-plan", "-p", "no:xdist")
        assert planned.ret == 0
        planned.stdout.fnmatch_lines(["*SETUP    F around*"])
        assert gym.calls.get("/run", 0) == 0
        ran = pytester.runpytest(*args, "--gym-verdict", verdict, "--setup-only", "-s", "-p", "no:xdist")
        assert ran.ret == 0
        assert gym.calls.get("/run", 0) == 6
        assert ran.stdout.str().count("AROUND ") == (6 if verdict == "trial" else 3)
    finally:
        gym.close()


def test_a_trial_without_the_session_errors_rather_than_passes(pytester: pytest.Pytester, dataset: Path) -> None:
    """A trial item judges nothing without the run's session (a plugin removed it): an error, never a pass."""
    pytester.makeconftest(
        """
        from pytest_gym.current import SESSION_KEY

        def pytest_collection_finish(session):
            del session.config.stash[SESSION_KEY]
        """
    )
    result = pytester.runpytest("--gym-dataset", str(dataset), *NO_GYM, "-p", "no:xdist")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*pytest-gym's session is not installed in this process: no trial can run*"])
