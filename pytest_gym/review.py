"""The reviewer's view at the end of a run: each suite's answers compared with its baseline run folder.

A suite is compared with ``--gym-baseline-run DIR``, else with the run folder its baseline file remembers
(written there by ``--gym-update-baseline --gym-baseline-run DIR``). Under ``--gym-update-baseline`` the
option names the folder to remember, and nothing is compared. The comparison (``runfolder.diff``) fills each
suite summary's ``changes``; the report and the terminal read it from there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from pytest_gym.core.settings import GymSettings
from pytest_gym.judge.paired import Rule
from pytest_gym.judge.suites import SuiteVerdict
from pytest_gym.judge.summary import SuiteSummary
from pytest_gym.runfolder.diff import SuiteDiff, changes_summary, diff_runs

SettingsOf = Callable[[str], GymSettings]


def baseline_runs(
    verdicts: list[SuiteVerdict], settings_of: SettingsOf, run_dir: Path, rootdir: Path
) -> tuple[dict[str, Path], list[str]]:
    """suite -> the run folder its answers are compared with; notes on remembered folders that are not here."""
    found: dict[str, Path] = {}
    notes: list[str] = []
    for verdict in verdicts:
        settings = settings_of(verdict.suite)
        if settings.update_baseline:
            continue  # --gym-baseline-run names the folder the new baseline remembers
        given = settings.baseline_run or verdict.remembered_run
        if not given:
            continue
        path = Path(given) if Path(given).is_absolute() else rootdir / given
        if not path.is_dir():
            notes.append(
                f"{verdict.suite}: the baseline run {given} that {settings.baseline} remembers is not here, so the "
                "answers are not compared: download it there (e.g. main's run folder artifact) or give "
                "--gym-baseline-run DIR"
            )
            continue
        if path.resolve() != run_dir.resolve():
            found[verdict.suite] = path
    return found, notes


def compare_answers(
    run_dir: Path,
    verdicts: list[SuiteVerdict],
    summaries: Mapping[str, SuiteSummary],
    settings_of: SettingsOf,
    rootdir: Path,
) -> tuple[dict[str, Path], list[str]]:
    """Fill ``summaries[suite].changes`` for every suite with a baseline run; returns the runs and notes."""
    sources, notes = baseline_runs(verdicts, settings_of, run_dir, rootdir)
    lines = {v.suite: v.lines for v in verdicts}
    for path in dict.fromkeys(sources.values()):
        names = {name for name, source in sources.items() if source == path}

        def judged_by(suite: str) -> tuple[float, Rule]:
            settings = settings_of(suite)
            return settings.min_reward, settings.task_pass

        diff = diff_runs(run_dir, path, judged_by, names)
        notes += diff.notes
        for name in sorted(names):
            suite_diff = diff.suites.get(name) or SuiteDiff(name)
            summaries[name].changes = changes_summary(suite_diff, str(path), lines.get(name))
    return sources, notes
