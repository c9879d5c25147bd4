"""python -m pytest_gym comment: the Markdown for a pull request, and one sticky comment posted to local stand-ins
of GitHub's and GitLab's APIs (created, then updated; found among paginated comments; a 401/403/404 or no network
says why and exits 0; the token is in no output)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.report.comment import code, markdown
from tests.helpers.inner_runs import pytest_command
from tests.helpers.mcqa_standin import mcqa_gym, rows, run, write_dataset
from tests.helpers.review_apis import serving

pytestmark = pytest.mark.runtime

HASHES = [task_hash(r) for r in rows()]
TOKEN = "ghp_pytestgymSTANDINtoken0123456789abcdef"
MARKER = "<!-- pytest-gym-comment -->"


def comment(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI_", "GITLAB"))}
    clean.update({"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
    return subprocess.run(
        [sys.executable, "-m", "pytest_gym", "comment", *args],
        capture_output=True, text=True, timeout=120, env={**clean, **(env or {})}, cwd=cwd, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A baseline run answering E (q3, q4 pass) and a run answering B (q0 passes), made by pytest once."""
    folder = tmp_path_factory.mktemp("runs")
    write_dataset(folder)
    (folder / "pytest.ini").write_text("[pytest]\n")
    with mcqa_gym() as gym:
        common = ["--gym-url", gym.url, "--gym-agent", "fake_agent", "--gym-dataset", "data.jsonl",
                  "--gym-repeats", "2", "--gym-price-in", "1", "--gym-price-out", "2"]  # fmt: skip
        for name, letter, extra in (("base", "E", []), ("pr", "B", ["--gym-baseline-run", "base"])):
            gym.default = letter
            command = pytest_command(*common, "--gym-run-dir", name, "--gym-gate", "mean_reward>=0.1", *extra)
            subprocess.run(command, cwd=folder, capture_output=True, timeout=300, check=False)
    return folder


def test_the_markdown_names_the_flips_with_both_answers(runs: Path) -> None:
    text = markdown(runs / "pr", report_url="https://example.invalid/artifacts/42")
    assert text.startswith(MARKER + "\n### pytest-gym: ❌ FAIL · run `pr`")
    lines = text.splitlines()
    (row,) = [line for line in lines if line.startswith("| `data.jsonl` |")]
    assert "❌ **FAIL**: 8 of 10 trials failed, 1 gate passed" in row
    assert "| 0.200 (" in row  # mean reward and its interval
    assert "✅ `mean_reward>=0.1` (0.200)" in row
    assert "against the baseline run `base`: 2 new failures, 1 fixed, 0 moved (of 5 tasks both ran)" in text
    for index in (3, 4):
        assert (
            f"| `{HASHES[index][:12]}` | {index + 1} | 1.000 → 0.000 | `The answer is \\boxed{{E}}.` "
            "| `The answer is \\boxed{B}.` |"
        ) in lines
    assert (
        f"| `{HASHES[0][:12]}` | 1 | 0.000 → 1.000 | `The answer is \\boxed{{E}}.` | `The answer is \\boxed{{B}}.` |"
        in lines
    )
    assert "| data.jsonl | 200 in / 70 out | 0.00034 |" in text  # 10 trials of 20 in, 7 out; $1/$2 per million
    assert "**[Full report](https://example.invalid/artifacts/42)**" in text


def test_the_baseline_runs_mean_is_shown_when_the_run_made_no_paired_comparison(runs: Path) -> None:
    text = markdown(runs / "pr", runs / "base")
    (row,) = [line for line in text.splitlines() if line.startswith("| `data.jsonl` |")]
    assert "| -0.200 (was 0.400 (" in row


def test_model_text_cannot_mention_link_or_break_the_table() -> None:
    hostile = "@octocat see <img src=x onerror=alert(1)> | [x](javascript:1) ``tick`` \n next line"
    shown = code(hostile)
    assert shown.startswith("```@octocat")  # a fence longer than any run of backticks inside
    assert shown.endswith("next line```")
    assert "\\|" in shown
    assert "\n" not in shown
    assert code("a" * 500).endswith("…`")


def test_the_command_prints_markdown_and_refuses_what_is_not_a_run(runs: Path, tmp_path: Path) -> None:
    done = comment(str(runs / "pr"), "--format", "md")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(MARKER)
    missing = comment(str(tmp_path))
    assert missing.returncode == 2
    assert "has no pytest_gym_summary.json" in missing.stderr
    bad_url = comment(str(runs / "pr"), "--report-url", "javascript:alert(1)")
    assert bad_url.returncode == 2
    assert "give an http(s) URL" in bad_url.stderr


# -- posting -------------------------------------------------------------------------------------------------


def github_env(api: str, tmp_path: Path, number: int = 7) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": number, "pull_request": {"number": number}}))
    return {
        "GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": api, "GITHUB_REPOSITORY": "org/evals",
        "GITHUB_EVENT_PATH": str(event), "GITHUB_REF": "refs/heads/main",
    }  # fmt: skip


def test_github_creates_one_comment_then_updates_it_past_a_page_of_others(runs: Path, tmp_path: Path) -> None:
    with serving("github", TOKEN) as api:
        api.seed(130)  # our comment lands on the second page of 100
        env = github_env(api.url, tmp_path)
        first = comment(str(runs / "pr"), "--post", "github", env=env)
        assert first.returncode == 0, first.stderr
        assert "created the comment on pull request org/evals#7" in first.stdout
        assert len(api.comments) == 131
        (created,) = api.writes()
        assert (created.method, created.path) == ("POST", "/repos/org/evals/issues/7/comments")
        assert created.body["body"].startswith(MARKER)
        assert [(e.query["per_page"], e.query["page"]) for e in api.log if e.method == "GET"] == [
            ("100", "1"),
            ("100", "2"),
        ]

        second = comment(str(runs / "pr"), "--post", "github", "--report-url", "https://x.invalid/r", env=env)
        assert second.returncode == 0, second.stderr
        assert "updated the comment" in second.stdout
        assert len(api.comments) == 131  # still one of ours
        updated = api.writes()[-1]
        assert (updated.method, updated.path) == ("PATCH", f"/repos/org/evals/issues/comments/{api.comments[-1]['id']}")
        assert "https://x.invalid/r" in api.comments[-1]["body"]
        assert api.comments[0]["body"] == "a reviewer's comment 0"
        assert api.problems == []
        for done in (first, second):
            assert TOKEN not in done.stdout + done.stderr


def test_gitlab_creates_one_note_then_updates_it(runs: Path) -> None:
    with serving("gitlab", TOKEN) as api:
        api.seed(101)
        env = {"CI_API_V4_URL": f"{api.url}/api/v4", "CI_PROJECT_ID": "group/evals", "CI_MERGE_REQUEST_IID": "12",
               "CI_JOB_TOKEN": TOKEN}  # fmt: skip
        first = comment(str(runs / "pr"), "--post", "gitlab", env=env)
        assert first.returncode == 0, first.stderr
        assert "created the comment on merge request !12 of project group/evals" in first.stdout
        second = comment(str(runs / "pr"), "--post", "gitlab", env=env)
        assert "updated the comment" in second.stdout
        writes = api.writes()
        assert [(w.method, w.path) for w in writes] == [
            ("POST", "/api/v4/projects/group%2Fevals/merge_requests/12/notes"),
            ("PUT", f"/api/v4/projects/group%2Fevals/merge_requests/12/notes/{api.comments[-1]['id']}"),
        ]
        assert all(w.headers.get("job-token") == TOKEN for w in writes)
        assert len(api.comments) == 102
        assert api.problems == []
        # A token variable named by an option goes as PRIVATE-TOKEN.
        env = {**env, "CI_JOB_TOKEN": "", "EVALS_BOT_TOKEN": TOKEN}
        third = comment(str(runs / "pr"), "--post", "gitlab", "--token-var", "EVALS_BOT_TOKEN", env=env)
        assert "updated the comment" in third.stdout, third.stderr
        assert api.log[-1].headers.get("private-token") == TOKEN


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (403, "GitHub answered 403 Forbidden to POST * Resource not accessible by integration; the token may not "
              "write comments here (GitHub: give the job `permissions: pull-requests: write`*"),
        (404, "GitHub answered 404 Not Found to * no such pull request or project, or the token cannot see it"),
    ],
)  # fmt: skip
def test_a_refused_post_says_why_and_exits_0(runs: Path, tmp_path: Path, status: int, said: str) -> None:
    with serving("github", TOKEN) as api:
        api.fail(status, ("POST",) if status == 403 else ("GET",))
        done = comment(str(runs / "pr"), "--post", "github", env=github_env(api.url, tmp_path))
    assert done.returncode == 0
    assert fnmatch(done.stderr.strip(), f"pytest-gym comment: not posted: {said}"), done.stderr
    assert TOKEN not in done.stdout + done.stderr


def test_a_gitlab_job_token_refused_says_why_and_exits_0(runs: Path) -> None:
    with serving("gitlab", TOKEN) as api:
        api.fail(403, ("POST",))
        env = {"CI_API_V4_URL": f"{api.url}/api/v4", "CI_PROJECT_ID": "7", "CI_MERGE_REQUEST_IID": "3",
               "CI_JOB_TOKEN": TOKEN}  # fmt: skip
        done = comment(str(runs / "pr"), "--post", "gitlab", env=env)
    assert done.returncode == 0
    assert fnmatch(
        done.stderr.strip(),
        "pytest-gym comment: not posted: GitLab answered 403 Forbidden to POST *GitLab: a job token cannot write "
        "notes on most instances: give a project access token with --token-var*",
    ), done.stderr
    assert api.comments == []
    assert TOKEN not in done.stdout + done.stderr


def test_a_wrong_token_no_network_or_no_pull_request_say_why(runs: Path, tmp_path: Path) -> None:
    with serving("github", "another-token") as api:
        wrong = comment(str(runs / "pr"), "--post", "github", env=github_env(api.url, tmp_path))
    assert wrong.returncode == 0
    assert "401 Unauthorized" in wrong.stderr
    assert "the token is missing, expired or not accepted" in wrong.stderr
    assert TOKEN not in wrong.stderr
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        offline = comment(str(runs / "pr"), "--post", "github", env=github_env(url, tmp_path))
    assert offline.returncode == 0
    assert f"not posted: cannot reach GitHub at {url}" in offline.stderr
    env = {**github_env("http://127.0.0.1:9", tmp_path), "GITHUB_EVENT_PATH": "", "GITHUB_REF": "refs/heads/main"}
    push = comment(str(runs / "pr"), "--post", "github", env=env)
    assert push.returncode == 0
    assert "not posted: not a pull request" in push.stderr
    unset = comment(str(runs / "pr"), "--post", "github", "--pr", "5", env={**env, "GITHUB_TOKEN": ""})
    assert "not posted: $GITHUB_TOKEN is not set" in unset.stderr
    with serving("github", TOKEN) as api:
        ref = comment(str(runs / "pr"), "--post", "github", env={**env, "GITHUB_API_URL": api.url,
                                                                   "GITHUB_REF": "refs/pull/31/merge"})  # fmt: skip
        assert "created the comment on pull request org/evals#31" in ref.stdout, ref.stderr
        assert api.writes()[0].path == "/repos/org/evals/issues/31/comments"


def test_the_pytest_run_keeps_its_exit_status_whatever_the_post(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The comment is its own step: the run failed (exit 1) and a 403 on the post leaves that, and exits 0."""
    pytester.makeini("[pytest]\n")
    write_dataset(pytester.path)
    with mcqa_gym() as gym:
        result = run(pytester, gym, "--gym-run-dir", "run")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    summary_before = (pytester.path / "run" / "pytest_gym_summary.json").read_bytes()
    with serving("github", TOKEN) as api:
        api.fail(403)
        done = comment(str(pytester.path / "run"), "--post", "github", env=github_env(api.url, tmp_path))
    assert done.returncode == 0
    assert "403" in done.stderr
    assert (pytester.path / "run" / "pytest_gym_summary.json").read_bytes() == summary_before
