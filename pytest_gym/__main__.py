"""``python -m pytest_gym``: commands on run folders, outside a pytest run.

``report RUN_DIR [-o PATH] [--baseline FILE]`` writes the run's self-contained HTML page.
``merge RUN_DIR... -o MERGED_DIR [--allow-missing]`` joins shard run folders into one Gym-format run folder
(no verdicts: ``pytest --gym-merge`` judges). Each command is a subparser with its own ``run`` function.
"""

from __future__ import annotations

import argparse
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
        target = build_report(run_dir, Path(args.output) if args.output else None, args.baseline)
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
    return main


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
