"""``python -m pytest_gym``: commands on run folders, outside a pytest run.

``report RUN_DIR [-o PATH] [--baseline FILE]`` writes the run's self-contained HTML page. Each command is
a subparser with its own ``run`` function, so more commands slot in beside it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _report(args: argparse.Namespace) -> int:
    from pytest_gym.report.html import REPORT_FILE, build_report

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(
            f"pytest-gym report: {run_dir} is not a folder (give a run folder, e.g. .pytest_gym/runs/<id>)",
            file=sys.stderr,
        )
        return 2
    try:
        target = build_report(run_dir, Path(args.output) if args.output else None, args.baseline)
    except OSError as exc:
        where = args.output or run_dir / REPORT_FILE
        print(f"pytest-gym report: cannot write {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(target)
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
    return main


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
