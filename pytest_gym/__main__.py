"""``python -m pytest_gym``: commands on run folders, outside a pytest run.

``report RUN_DIR [-o PATH] [--baseline FILE] [--baseline-run DIR]`` writes the run's self-contained HTML page.
``merge RUN_DIR... -o MERGED_DIR [--allow-missing]`` joins shard run folders into one Gym-format run folder
(no verdicts: ``pytest --gym-merge`` judges). ``comment RUN_DIR [--baseline-run DIR] [--post github|gitlab]``
writes (and posts) the pull-request comment. ``history RUN_DIR... -o PAGE [--json PATH]`` draws the suites
across runs. ``stop-kept DIR`` stops the Gyms kept by ``--gym-reuse DIR``. Each command is a subparser with
its own ``run`` function.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path


def _report(args: argparse.Namespace) -> int:
    from pytest_gym.judge.summary import SummaryError
    from pytest_gym.report.html import build_report
    from pytest_gym.runfolder.layout import REPORT_FILE
    from pytest_gym.runfolder.records import RecordError
    from pytest_gym.runfolder.summary import read_summary

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(
            f"pytest-gym report: {run_dir} is not a folder (give a run folder, e.g. .pytest_gym/runs/<id>)",
            file=sys.stderr,
        )
        return 2
    try:
        read_summary(run_dir)
    except SummaryError as exc:
        print(
            f"pytest-gym report: note: the summary is unusable ({exc}); numbers computed from the rollouts",
            file=sys.stderr,
        )
    try:
        target = build_report(run_dir, Path(args.output) if args.output else None, args.baseline, args.baseline_run)
    except RecordError as exc:
        print(f"pytest-gym report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = args.output or run_dir / REPORT_FILE
        print(f"pytest-gym report: cannot write {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(target)
    return 0


def _merge(args: argparse.Namespace) -> int:
    from pytest_gym.core.dataset import DatasetError, read_tasks
    from pytest_gym.runfolder.merge import (
        MergeError,
        MissingTrial,
        expected_trials,
        index_shards,
        missing_message,
        read_shard_folders,
        write_merged,
    )

    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"pytest-gym merge: {out} exists and is not empty; give a new folder with -o", file=sys.stderr)
        return 2
    try:
        folders = read_shard_folders([Path(p) for p in args.run_dirs])
        records = index_shards(folders)
        trials, problems = expected_trials(
            folders, Path(args.rootdir), lambda path: (task.hash for task in read_tasks(path))
        )
    except (MergeError, DatasetError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if problems:
        print("pytest-gym merge: " + "; ".join(problems) + " (datasets are found from --rootdir)", file=sys.stderr)
        return 2
    missing = [MissingTrial(label, h, r) for label, h, r in trials if (h, r) not in records]
    if missing and not args.allow_missing:
        print(missing_message(missing, folders, "Or pass --allow-missing to merge without them."), file=sys.stderr)
        return 1
    wanted = {(h, r) for _, h, r in trials} if folders[0].datasets else None
    if wanted is None:
        print(
            "note: the shards recorded no datasets (suite files?): every trial is merged, none checked for missing",
            file=sys.stderr,
        )
    try:
        result = write_merged(records, out, wanted.__contains__ if wanted is not None else None)
    except OSError as exc:
        print(f"pytest-gym merge: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        records.close()
    if missing:
        print(missing_message(missing, folders, "Merged without them (--allow-missing)."), file=sys.stderr)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(
        f"{out}: {result.rollouts} rollouts, {result.failures} failures, {result.materialized} materialized inputs "
        f"from {len(folders)} shards ({', '.join(f.shard for f in folders)})"
    )
    return 0


def _comment(args: argparse.Namespace) -> int:
    """The Markdown comment on stdout (or in -o); with --post, created or updated on the pull request.

    A post that fails says why on stderr and exits 0: the comment never decides a CI job's outcome."""
    from pytest_gym.judge.summary import SummaryError
    from pytest_gym.report.comment import CommentError, markdown, marker
    from pytest_gym.report.pullrequest import PostError, Target, github_target, gitlab_target, post_comment
    from pytest_gym.runfolder.records import RecordError

    run_dir = Path(args.run_dir)
    baseline_run = Path(args.baseline_run) if args.baseline_run else None
    for given, what in ((run_dir, "RUN_DIR"), (baseline_run, "--baseline-run")):
        if given is not None and not given.is_dir():
            print(f"pytest-gym comment: {what} {given} is not a run folder", file=sys.stderr)
            return 2
    try:
        text = markdown(run_dir, baseline_run, args.report_url, args.marker)
    except (CommentError, SummaryError, RecordError) as exc:
        print(f"pytest-gym comment: {exc}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    elif not args.post:
        sys.stdout.write(text)
    if not args.post:
        return 0
    try:
        target: Target
        if args.post == "github":
            target = github_target(repo=args.repo, pr=args.pr, api=args.api_url, token_var=args.token_var)
        else:
            target = gitlab_target(project=args.project, mr=args.mr, api=args.api_url, token_var=args.token_var)
        posted = post_comment(target, text, marker(args.marker), timeout=args.timeout)
    except PostError as exc:
        print(f"pytest-gym comment: not posted: {exc}", file=sys.stderr)
        return 0
    print(
        f"pytest-gym comment: {posted.action} the comment on {posted.where}" + (f": {posted.url}" if posted.url else "")
    )
    return 0


def _history(args: argparse.Namespace) -> int:
    from pytest_gym.report.history import write_history

    folders = [Path(p) for p in args.run_dirs]
    missing = [str(p) for p in folders if not p.is_dir()]
    if missing:
        print(f"pytest-gym history: not run folders: {', '.join(missing)}", file=sys.stderr)
        return 2
    output = Path(args.output)
    try:
        data = write_history(folders, output, Path(args.json) if args.json else None)
    except OSError as exc:
        where = exc.filename2 or exc.filename or output  # the page or the --json file (filename2: os.replace's target)
        print(f"pytest-gym history: cannot write {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for run in data["runs"]:
        if run["problem"]:
            print(f"note: {run['path']}: {run['problem']}", file=sys.stderr)
    print(f"{output}: {len(data['runs'])} runs, {len(data['suites'])} suites")
    return 0


def _positive(text: str) -> int:
    """A pull request's number: ASCII digits (``int`` also reads "٣"), a few of them."""
    if not re.fullmatch(r"\s*[0-9]{1,18}\s*", text) or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a positive whole number such as 42")
    return int(text)


def _seconds(text: str, least: float = 0.0, more: bool = False) -> float:
    """A bound on a wait: finite (a NaN or an infinity of seconds bounds nothing), at least ``least`` (or more)."""
    try:
        value = float(text) if re.fullmatch(r"\s*[0-9.eE+\-]+\s*", text) else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < least or (more and value == least):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds such as 30")
    return value


def _timeout(text: str) -> float:
    return _seconds(text, more=True)


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="python -m pytest_gym", description="pytest-gym commands on run folders.")
    commands = main.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = commands.add_parser(
        "report",
        help="write a run's self-contained HTML report",
        description="Write one self-contained HTML file (no network needed to open it) from a run folder.",
    )
    report.add_argument("run_dir", metavar="RUN_DIR", help="the run folder (.pytest_gym/runs/<id> or --gym-run-dir)")
    report.add_argument("-o", "--output", metavar="PATH", help="where to write it (default: RUN_DIR/report.html)")
    report.add_argument(
        "--baseline", metavar="FILE", help="the --gym-baseline file the run was compared with: per-task values before"
    )
    report.add_argument(
        "--baseline-run",
        metavar="DIR",
        help="the baseline run folder: the Changes section shows its answers beside this run's",
    )
    report.set_defaults(run=_report)
    merge = commands.add_parser(
        "merge",
        help="join shard run folders into one Gym-format run folder",
        description=(
            "Join the run folders of --gym-shard jobs into one run folder in Gym's layout (rollouts, failures, "
            "materialized inputs, aggregate metrics computed here), for Gym's tools. It judges nothing: "
            "pytest --gym-merge RUN_DIR ... gives the verdicts, JUnit and exit code. Datasets are read without "
            "pytest hooks: if a pytest_gym_row hook drops rows, use pytest --gym-merge."
        ),
    )
    merge.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="each shard job's run folder, once")
    merge.add_argument("-o", "--output", metavar="MERGED_DIR", required=True, help="the new merged run folder")
    merge.add_argument(
        "--allow-missing", action="store_true", help="merge even when trials of the datasets are in no shard"
    )
    merge.add_argument(
        "--rootdir", metavar="DIR", default=".", help="where the datasets' paths start (the shards' rootdir; default .)"
    )
    merge.set_defaults(run=_merge)
    comment = commands.add_parser(
        "comment",
        help="a Markdown comment for the pull request; --post github|gitlab creates or updates it there",
        description=(
            "Write a compact Markdown comment for a pull request from a run folder: per suite the verdict, mean "
            "reward with its interval and change against the baseline, pass@k, gates; the tasks that flipped "
            "against the baseline run with both answers; known failures; tokens, cost, latency; a link to the "
            "report. --post creates one comment on the pull request (GitHub) or merge request (GitLab) and "
            "updates that same comment on later runs (found by a hidden marker). A failed post is reported "
            "and exits 0."
        ),
    )
    comment.add_argument("run_dir", metavar="RUN_DIR", help="the run folder")
    comment.add_argument("--baseline-run", metavar="DIR", help="the baseline run folder (e.g. main's last run)")
    comment.add_argument("--format", choices=["md"], default="md", help="the comment's format (Markdown)")
    comment.add_argument("--report-url", metavar="URL", help="link to the HTML report (e.g. the artifact's URL)")
    comment.add_argument("-o", "--output", metavar="PATH", help="write the comment here instead of stdout")
    comment.add_argument("--post", choices=["github", "gitlab"], help="create or update the comment there")
    comment.add_argument("--marker", metavar="KEY", help="a key for several sticky comments on one pull request")
    comment.add_argument("--repo", metavar="OWNER/NAME", help="GitHub repository (default $GITHUB_REPOSITORY)")
    comment.add_argument("--pr", type=_positive, metavar="N", help="pull request number (default: from the event)")
    comment.add_argument("--project", metavar="ID", help="GitLab project id or path (default $CI_PROJECT_ID)")
    comment.add_argument("--mr", type=_positive, metavar="IID", help="merge request (default $CI_MERGE_REQUEST_IID)")
    comment.add_argument("--api-url", metavar="URL", help="API base (default $GITHUB_API_URL or $CI_API_V4_URL)")
    comment.add_argument(
        "--token-var",
        metavar="NAME",
        help="environment variable holding the token (default GITHUB_TOKEN; GitLab: CI_JOB_TOKEN)",
    )
    comment.add_argument("--timeout", type=_timeout, default=30.0, metavar="S", help="seconds per API request")
    comment.set_defaults(run=_comment)
    history = commands.add_parser(
        "history",
        help="a suite's trend across run folders, as a self-contained HTML page (and JSON)",
        description=(
            "Draw each suite's mean reward with its 95% interval, pass@1 and pass@k, cost and latency across "
            "run folders in time order, with the gates' thresholds; each run links to its report, and runs whose "
            "settings differ from the run before are marked."
        ),
    )
    history.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders (any order: sorted by time)")
    history.add_argument("-o", "--output", metavar="PATH", default="history.html", help="the page (history.html)")
    history.add_argument("--json", metavar="PATH", help="also write the data as JSON")
    history.set_defaults(run=_history)
    stop_kept = commands.add_parser(
        "stop-kept",
        help="stop the Gyms kept in a --gym-reuse folder",
        description="Stop every Gym kept in DIR (--gym-reuse DIR) that no running pytest holds.",
    )
    stop_kept.add_argument("pool", metavar="DIR", help="the --gym-reuse folder")
    stop_kept.add_argument("--grace", type=_seconds, default=30.0, help="seconds Gym gets after SIGINT (default 30)")
    stop_kept.set_defaults(run=_stop_kept)
    return main


def _stop_kept(args: argparse.Namespace) -> int:
    from pytest_gym.gym.kept import stop_kept

    pool = Path(args.pool)
    if not pool.is_dir():
        print(f"pytest-gym stop-kept: {pool} is not a folder (give the --gym-reuse DIR)", file=sys.stderr)
        return 2
    notes = stop_kept(pool, args.grace)
    for note in notes:
        print(note)
    if not notes:
        print(f"no kept Gym in {pool}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
