"""Collection: a jsonl dataset (or a suite file) becomes one trial item per (distinct row, repeat).

Trials are real ``pytest.Function`` items, so fixtures, ``--setup-plan``,
``-k``, ``--lf`` and ``record_property`` work on them as on any test. An item
runs its rollout in its setup phase (an infrastructure fault is an *error*)
and judges the reward in its call phase (a low reward is a *failure*), itself
rather than through a fixture: pytest's fixture machinery would cost about a
third of a trial's CPU in this process (``benchmarks/cpu.py``).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gym.core.dataset import LABEL_FIELDS, DatasetError, Task, read_tasks, task_label, task_name
from pytest_gym.core.masking import MAX_MESSAGE, clean_text
from pytest_gym.core.outcome import INTERRUPTED, TrialOutcome, TrialSpec, trials_property
from pytest_gym.core.settings import GymSettings
from pytest_gym.core.shard import Shard, parse_shard
from pytest_gym.core.taskrule import parse_task_rule
from pytest_gym.current import SessionView, current_session
from pytest_gym.inidir import ini_dir
from pytest_gym.judge.gates import parse_gate, unreachable
from pytest_gym.judge.messages import failure_message, fault_message
from pytest_gym.judge.sequential import task_order
from pytest_gym.runfolder.layout import ROLLOUTS_FILE
from pytest_gym.runner.sources import NotRun

if TYPE_CHECKING:
    from pytest_gym.judge.known import KnownFailures


class GymDuplicateRowWarning(pytest.PytestWarning):
    """A dataset holds the same row more than once; the copies are one task."""


class GymMissingFieldWarning(pytest.PytestWarning):
    """Rows lack a field their environment scores by (mcqa without ``expected_answer`` scores 0, silently)."""


#: Row fields an environment cannot score without: resources server -> field.
REQUIRED_FIELDS = {"mcqa": "expected_answer"}


#: Row fields ``-k`` matches by default (``--gym-keyword-field`` replaces them).
DEFAULT_KEYWORD_FIELDS = ("id", "task_id", "uuid", "category", "name", "difficulty", "tags")
_NOT_IDENT = re.compile(r"[^0-9A-Za-z_]")
_EXPRESSION_WORDS = frozenset({"and", "or", "not"})
_REGISTERED = pytest.StashKey[set[str]]()
#: Where this package's code lives: a failure it raised has its frame here.
_PACKAGE_DIR = os.path.dirname(__file__) + os.sep


def marker_name(field: str, value: str) -> str:
    """A row value as a marker name usable in ``-m``: ASCII letters, digits and ``_``, starting with a letter.

    ``hard`` stays ``hard``; ``multi step`` becomes ``multi_step``; ``3`` (or ``and``) becomes ``<field>_3``.
    """
    name = _NOT_IDENT.sub("_", value)
    if not name[:1].isalpha() or name in _EXPRESSION_WORDS:
        name = f"{_NOT_IDENT.sub('_', field)}_{name}"
        if not name[:1].isalpha():
            name = "m_" + name
    return name


def _keywords(task: Task, names: frozenset[str]) -> set[str]:
    """What ``-k`` matches besides the node names: each value, and ``field:value``."""
    found: set[str] = set()
    for field, value in task.fields:
        if field in names:
            found.add(value)
            found.add(f"{field}:{value}")
    return found


def raise_fault(outcome: TrialOutcome, trace_url: str | None = None) -> None:
    """Fail the setup phase: the trial is reported as an error, not a failure."""
    pytest.fail(fault_message(outcome, trace_url), pytrace=False)


def check_reward(
    outcome: TrialOutcome,
    min_reward: float,
    reward_key: str,
    xfail: bool = False,
    record: str | None = None,
    trace_url: str | None = None,
    known: KnownFailures | None = None,
    item: pytest.Item | None = None,
    strict_known: bool = False,
) -> None:
    """Fail a low reward; with ``--gym-verdict gate`` report it as xfail (only gates decide).

    ``known`` (``--gym-known-failures``): a listed task's low reward is xfail with the entry's reason, and its
    passing trial is marked xfail now, so pytest reports it XPASS ("fixed: remove from the list"; a failure
    with ``strict_known``). An expired entry quarantines nothing; the message names it.
    """
    assert outcome.reward is not None, "check_reward needs a finished rollout"
    suite = outcome.nodeid.split("::", 1)[0]
    entry = known.entry_for(suite, outcome.task_hash) if known is not None else None
    expired = entry is not None and known is not None and entry.expired(known.today)
    if outcome.reward < min_reward:
        message = failure_message(outcome, min_reward, reward_key, record, trace_url)
        if entry is not None and expired:
            message += f"\n  known failure expired on {entry.expires}: {entry.describe()}"
        elif entry is not None:
            pytest.xfail(clean_text(f"known failure: {entry.describe()}\n{message}", MAX_MESSAGE))
        if xfail:
            pytest.xfail(message)
        pytest.fail(message, pytrace=False)
    if entry is not None and not expired and item is not None:
        reason = clean_text(f"fixed: remove from the list: {entry.describe()}", MAX_MESSAGE)
        item.add_marker(pytest.mark.xfail(reason=reason, strict=strict_known))


def judged_by_the_item() -> None:
    """The function of every trial and task item: the item runs its trials in ``setup`` and judges them in
    ``runtest`` (a fixture per trial would cost more CPU than the rest of the item's own work)."""


def judge_trial(item: GymTrial, outcome: TrialOutcome) -> None:
    """Judge one trial's reward (its rollout ran in setup)."""
    spec = item.spec
    session = current_session(item.config)
    record = None
    low = outcome.reward is not None and outcome.reward < spec.min_reward
    if session is not None and low:  # where Gym's tools (and a reader) find the whole trial: said on a failure
        record = (
            f"{session.run_dir / ROLLOUTS_FILE} (_ng_task_index={spec.task_index}, _ng_rollout_index={spec.repeat})"
        )
    check_reward(
        outcome,
        spec.min_reward,
        spec.reward_key,
        xfail=spec.xfail_low,
        record=record,
        trace_url=spec.trace_url,
        known=session.known if session is not None else None,
        item=item,
        strict_known=session is not None and session.settings.known_failures_strict,
    )


def reported_here(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure pytest-gym reported: ``pytest.fail(..., pytrace=False)`` called from this package
    (one of the last two frames, ``fail``'s own being the last)."""
    if not isinstance(exc, pytest.fail.Exception) or exc.pytrace:
        return False
    frames: list[str] = []
    tb = exc.__traceback__
    while tb is not None:
        frames, tb = [*frames[-1:], tb.tb_frame.f_code.co_filename], tb.tb_next
    return any(name.startswith(_PACKAGE_DIR) for name in frames)


def raised_by_another(exc: BaseException) -> bool:
    """Whether an exception in a trial's setup is other than a failure or skip pytest-gym reported (whose trials
    carry their properties when they have an outcome): a fixture's, another plugin's (pytest-timeout's, raised by its
    signal into the wait for the rollout), an interrupt, a crash."""
    return not isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception)) and not reported_here(exc)


def errored_by_another(spec: TrialSpec) -> TrialOutcome:
    """A trial another plugin's exception ended before it had an outcome: reported as an error by pytest, and
    counted as one by the verdicts (the report's text is its error), not dropped from them (``setup_errors.py``;
    a task's trials left unfinished: ``run_task``)."""
    return TrialOutcome.for_spec(spec, error=INTERRUPTED, error_class=INTERRUPTED)


def suite_coverage(items: Iterable[pytest.Item]) -> dict[str, list[int]]:
    """Per suite (the path part of its node ids): [its trials in the dataset, those selected to run]. Fewer
    selected (-k, a node id, --sw, a shard, another plugin's deselection) is a part of the suite."""
    found: dict[str, list[int]] = {}
    for item in items:
        if isinstance(item, (GymTrial, GymTask)) and isinstance(item.parent, GymDatasetFile):
            counts = found.setdefault(item.nodeid.split("::", 1)[0], [item.parent.whole_trials, 0])
            counts[1] += 0 if item.skipped_before_setup else len(item.specs)  # a part of the whole, never run
    return found


@functools.lru_cache(maxsize=64)
def _from_here(rootpath: str, here: str, file_part: str) -> str:
    where = os.path.normpath(os.path.join(os.path.relpath(rootpath, here), file_part))
    return where if where.startswith("..") else f"./{where}"


def _file_from_here(rootpath: str, here: str, nodeid: str) -> str:
    """The file part of ``nodeid`` as a path from ``here`` (once per file: every trial of it asks)."""
    return _from_here(rootpath, here, nodeid.split("::", 1)[0])


class _GymItem(pytest.Function):
    """What trial and task items share: their trials run in setup (not under ``--setup-plan``, which runs
    nothing), and how a failure pytest-gym raised on them is shown."""

    @functools.cached_property
    def skipped_before_setup(self) -> bool:
        """Whether pytest skips this item before its setup whatever happens: its rollouts would be paid for and
        judged nowhere. Read when collection is done (the marks are final), once."""
        return _skipped_before_setup(self)

    def _session_view(self) -> SessionView | None:
        """The run's session; None under ``--setup-plan`` (it plans, nothing runs)."""
        if getattr(self.config.option, "setupplan", False):
            return None
        session = current_session(self.config)
        if session is None:  # the session collected this item: never without it, and a silent pass is no verdict
            pytest.fail("pytest-gym's session is not installed in this process: no trial can run", pytrace=False)
        return session

    def _traceback_filter(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:
        """For a failure pytest-gym raised (``pytest.fail(..., pytrace=False)`` in this package), the last entry
        alone; pytest's filtering for any other.

        pytest shows such a failure as its message alone (style "value"), and of the filtered traceback it uses
        only whether it is empty: it is not, since the frame in this package that called ``pytest.fail`` is never
        hidden. Filtering it costs a path and a ``stat`` per frame (about 20 per trial failure); the report is
        the same without.
        """
        if reported_here(excinfo.value):
            return excinfo.traceback[-1:]
        return super()._traceback_filter(excinfo)


class GymTrial(_GymItem):
    """One repeat of one task. ``spec`` carries the task, its hash, line and repeat index."""

    spec: TrialSpec
    #: The trial's finished rollout, from setup to teardown.
    outcome: TrialOutcome | None = None

    @property
    def specs(self) -> list[TrialSpec]:
        return [self.spec]

    def setup(self) -> None:
        super().setup()
        session = self._session_view()
        if session is not None:
            self.outcome = session.trial_outcome(self)

    def runtest(self) -> None:
        if self.outcome is not None:
            judge_trial(self, self.outcome)

    def teardown(self) -> None:
        self.outcome = None  # the answer can be large; pytest keeps its items until the end
        super().teardown()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # pytest >= 9.2 keeps structured node ids. Without a callspec our "[rN]" would be part
        # of the name, and the id would not equal the same id read back from a string (--lf,
        # --deselect compare them). Re-parse it so "[rN]" is the params part, as for parametrize.
        structured = getattr(self, "_id", None)
        if structured is not None and getattr(structured, "params", "") is None and hasattr(structured, "parse"):
            self._id = type(structured).parse(str(structured))

    def reportinfo(self) -> tuple[Path, int, str]:
        # The failure header is the node id as a path from the current folder: pasted after pytest, it runs this
        # trial again. "./" keeps it from being a suffix of the node id, which pytest -v would respell (. -> ::).
        where = _file_from_here(str(self.config.rootpath), str(self.config.invocation_params.dir), self.nodeid)
        return self.path, self.spec.task.line - 1, f"{where}::{self.name}"

    def listextrakeywords(self) -> set[str]:
        """What ``-k`` matches besides the names: also the row's label fields, made only when ``-k`` asks."""
        found = super().listextrakeywords()
        parent = self.parent
        if self.spec.task.packed_fields and isinstance(parent, GymDatasetFile):
            found.update(_keywords(self.spec.task, frozenset(parent.keyword_fields)))
        return found


class GymTask(_GymItem):
    """--gym-verdict task: one task, all its repeats (``specs``), judged together by ``--gym-task-pass``."""

    specs: list[TrialSpec]
    rule: str = "all"
    #: The task's trials as setup found them, from setup to teardown.
    task_run: TaskRun | None = None

    def setup(self) -> None:
        super().setup()
        view = self._session_view()
        if view is not None:
            session = self.session
            self.task_run = run_task(self, lambda spec: view.spec_outcome(session, spec))

    def runtest(self) -> None:
        if self.task_run is not None:
            judge_task(self, self.task_run)

    def teardown(self) -> None:
        self.task_run = None
        super().teardown()

    def reportinfo(self) -> tuple[Path, int, str]:
        task = self.specs[0].task
        return self.path, task.line - 1, f"{self.path.name}:{task.line} {self.name}"

    def listextrakeywords(self) -> set[str]:
        found = super().listextrakeywords()
        parent = self.parent
        if self.specs[0].task.packed_fields and isinstance(parent, GymDatasetFile):
            found.update(_keywords(self.specs[0].task, frozenset(parent.keyword_fields)))
        return found


@dataclass
class TaskRun:
    """A task's trials as its setup phase found them: what ran, and whether the task passes."""

    outcomes: list[TrialOutcome]
    passed: bool
    successes: int


def run_task(item: GymTask, outcome_of: Callable[[TrialSpec], TrialOutcome]) -> TaskRun:
    """Run (or take) every trial of ``item``: its properties carry each trial's (``TRIALS_PROPERTY``) and the
    task's own. A task whose verdict its trials do not settle is an error when trials faulted, and skipped when
    trials were not run (a budget, or its suite decided without it)."""
    specs = item.specs
    ran: list[TrialOutcome] = []
    carried: list[TrialOutcome] = []
    faults: list[str] = []
    skips: list[str] = []
    for i, spec in enumerate(specs):
        try:
            outcome = outcome_of(spec)
        except NotRun as exc:
            if exc.fault is not None:
                carried.append(exc.fault)
            (skips if exc.skipped else faults).append(exc.message)
            continue
        except BaseException as exc:
            if raised_by_another(exc):  # the trials it left unfinished are errors, the others as they ended
                unfinished = [errored_by_another(s) for s in specs[i:]]
                item.user_properties.append(trials_property([*carried, *unfinished]))
            raise
        carried.append(outcome)
        if outcome.ok:
            ran.append(outcome)
        else:
            faults.append(fault_message(outcome))
    rule = parse_task_rule(item.rule)
    min_reward = specs[0].min_reward
    successes = sum(1 for o in ran if o.reward is not None and o.reward >= min_reward)
    verdict = rule.decided(len(specs), successes, len(ran) - successes)
    task = specs[0].task
    item.user_properties.extend(
        [
            ("gym_task", task.short_hash),
            ("gym_line", task.line),
            ("gym_task_pass", rule.text),
            ("gym_repeats", len(specs)),
            ("gym_trials_run", len(ran)),
            ("gym_successes", successes),
            trials_property(carried),
        ]
    )
    if verdict is None:
        if faults:
            shown = "\n".join(faults[:3]) + (f"\n... and {len(faults) - 3} more" if len(faults) > 3 else "")
            pytest.fail(clean_text(f"the task's trials do not decide it, {len(faults)} faulted:\n{shown}"), False)
        pytest.skip(skips[0] if skips else "no trial of the task ran")
    return TaskRun(ran, verdict, successes)


def judge_task(item: GymTask, run: TaskRun) -> None:
    """Judge one task by --gym-task-pass (its trials ran in setup)."""
    if run.passed:
        return
    spec = item.specs[0]
    rewards = ", ".join(f"{o.reward:g}" for o in run.outcomes if o.reward is not None)
    head = (
        f"task {spec.task.short_hash} ({spec.task.path}:{spec.task.line}) failed --gym-task-pass {item.rule}: "
        f"{run.successes} of {len(run.outcomes)} trials reached min_reward {spec.min_reward:g} (rewards {rewards})"
    )
    low = next((o for o in run.outcomes if o.reward is not None and o.reward < spec.min_reward), None)
    detail = f"\n{failure_message(low, spec.min_reward, spec.reward_key)}" if low is not None else ""
    pytest.fail(clean_text(head + detail, MAX_MESSAGE), pytrace=False)


class GymDatasetFile(pytest.File):
    """A jsonl dataset given with ``--gym-dataset`` (or the ``gym_dataset`` ini setting)."""

    repeats: int = 1
    agent: str | None = None
    min_reward: float = 1.0
    reward_key: str = "reward"
    xfail_low: bool = False
    keyword_fields: tuple[str, ...] = DEFAULT_KEYWORD_FIELDS
    #: the row fields a task's label (in its node id) is read from, first found wins
    label_fields: tuple[str, ...] = LABEL_FIELDS
    #: this suite's baseline file (None: none), for --gym-update-baseline's check after collection
    baseline: str | None = None
    #: why a gate of this suite can never be decided at its repeats (a collection error), or None
    gate_problem: str | None = None
    #: a field every row needs for this suite's environment to score it (REQUIRED_FIELDS), or None
    required_field: str | None = None
    marker_field: str | None = None
    trace_url: str | None = None
    #: --gym-sequential: the suite's tasks run in a seeded random order (``sequential_order``).
    sequential: bool = False
    #: --gym-verdict task: one item per task, judged by ``task_pass``.
    per_task: bool = False
    task_pass: str = "all"
    #: --gym-shard: only the tasks of this shard are collected (the others are no items at all).
    shard: Shard | None = None
    #: The suite's trials, its dataset's rows times the repeats (the shards' together), once collected.
    whole_trials: int = 0
    dataset_path: Path

    def __init__(self, *args: Any, settings: GymSettings | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dataset_path = self.path
        if settings is not None:
            self.configure(settings)

    def configure(self, settings: GymSettings, dataset: Path | None = None) -> None:
        """Take this suite's settings (the run's, or a suite file's merged with them)."""
        self.dataset_path = dataset or self.path
        self.repeats = settings.repeats
        self.agent = settings.agent
        self.min_reward = settings.min_reward
        self.reward_key = settings.reward_key
        self.xfail_low = settings.verdict == "gate"
        self.per_task = settings.verdict == "task"
        self.task_pass = settings.task_pass
        self.keyword_fields = settings.keyword_field or DEFAULT_KEYWORD_FIELDS
        self.label_fields = settings.keyword_field or LABEL_FIELDS
        self.baseline = settings.baseline
        self.marker_field = settings.marker_field
        self.trace_url = settings.trace_url
        self.sequential = settings.sequential
        self.shard = parse_shard(settings.shard, os.environ) if settings.shard else None  # checked at start-up
        # A gate these repeats can never decide (pass@5 at 2 repeats) wastes the whole run: refused now.
        where = "--gym-gate / gym_gate" if type(self) is GymDatasetFile else f"{self.path} (key gates, or --gym-gate)"
        self.required_field = REQUIRED_FIELDS.get(settings.resources_server or "")
        self.gate_problem = unreachable([parse_gate(text) for text in settings.gate], settings.repeats, where)

    def collect(self) -> Iterable[GymTrial | GymTask]:
        if self.gate_problem:
            from pytest_gym.suitefile import SuiteFileError

            raise SuiteFileError(self.gate_problem)
        extra = [f for f in (self.marker_field, self.required_field) if f]
        fields = tuple(dict.fromkeys((*self.keyword_fields, *self.label_fields, *extra)))
        tasks = read_tasks(self.dataset_path, self._row_hook(), fields)
        if not tasks:
            raise DatasetError(
                self.path,
                0,
                "dataset has no rows (empty, blank lines only, or every row dropped by a hook)",
                "add jsonl rows, or remove it from --gym-dataset / gym_dataset",
            )
        self._warn_duplicates(tasks)
        self._warn_missing(tasks)
        self.whole_trials = len(tasks) * self.repeats  # every shard's: a baseline update needs to know the whole
        session = current_session(self.config)
        offset = session.suites.task_offset(self.dataset_path) if session is not None else 0
        fixtureinfo = None
        marks: dict[str, pytest.MarkDecorator] = {}
        for index, task in enumerate(tasks):
            if self.shard is not None and not self.shard.holds(task.hash):
                continue  # another job's task; its index stays the run's (Gym's _ng_task_index)
            task_marks = self._marks(task, marks) if self.marker_field and task.packed_fields else ()
            base = task_name(task.hash, task_label(task.fields, self.label_fields))
            if self.per_task:
                yield self._task_item(task, base, offset + index, task_marks)
                continue
            for repeat in range(self.repeats):
                name = f"{base}[r{repeat}]"
                item = GymTrial.from_parent(self, name=name, callobj=judged_by_the_item, fixtureinfo=fixtureinfo)
                for mark in task_marks:
                    item.add_marker(mark)
                item.spec = TrialSpec(
                    nodeid=item.nodeid,
                    task=task,
                    task_index=offset + index,
                    repeat=repeat,
                    agent=self.agent,
                    min_reward=self.min_reward,
                    reward_key=self.reward_key,
                    xfail_low=self.xfail_low,
                    trace_url=self.trace_url,
                )
                fixtureinfo = item._fixtureinfo  # one resolution per file, as pytest does for parametrize
                yield item

    def _task_item(self, task: Task, name: str, index: int, marks: Iterable[pytest.MarkDecorator]) -> GymTask:
        """--gym-verdict task: one item for all the task's repeats (their node ids stay ``<task>[rN]``)."""
        item: GymTask = GymTask.from_parent(self, name=name, callobj=judged_by_the_item)
        for mark in marks:
            item.add_marker(mark)
        item.rule = self.task_pass
        item.specs = [
            TrialSpec(
                nodeid=f"{item.nodeid}[r{repeat}]",
                task=task,
                task_index=index,
                repeat=repeat,
                agent=self.agent,
                min_reward=self.min_reward,
                reward_key=self.reward_key,
                trace_url=self.trace_url,
            )
            for repeat in range(self.repeats)
        ]
        return item

    def _marks(self, task: Task, made: dict[str, pytest.MarkDecorator]) -> list[pytest.MarkDecorator]:
        """The markers ``--gym-marker-field`` gives this task's trials, registered once (so --strict-markers
        accepts them and no unknown-mark warning is raised)."""
        field = self.marker_field
        found = []
        for name in dict.fromkeys(marker_name(f, v) for f, v in task.fields if f == field):
            if name not in made:
                registered = self.config.stash.setdefault(_REGISTERED, set())
                if name not in registered:
                    known = {line.split(":", 1)[0].split("(", 1)[0].strip() for line in self.config.getini("markers")}
                    if name not in known:
                        self.config.addinivalue_line("markers", f"{name}: trials whose row's {field} is {name}")
                    registered.add(name)
                made[name] = getattr(pytest.mark, name)
            found.append(made[name])
        return found

    def _row_hook(self) -> Any:
        hook = self.ihook.pytest_gym_row
        if not hook.get_hookimpls():
            return None
        path = self.dataset_path

        def apply(row: dict[str, Any], line: int) -> dict[str, Any] | None:
            result = hook(row=row, dataset=path, line=line)
            if result is False:
                return None
            if isinstance(result, dict):
                return result
            if result not in (None, True):
                raise DatasetError(
                    path, line, f"pytest_gym_row returned {type(result).__name__}", "return a dict, False or None"
                )
            return row

        return apply

    def _warn_missing(self, tasks: list[Task]) -> None:
        """Rows without the field their environment scores by: named by line, once per dataset."""
        field_name = self.required_field
        if field_name is None:
            return
        lines = [t.line for t in tasks if not any(name == field_name for name, _ in t.fields)]
        if lines:
            shown = ", ".join(map(str, lines[:10])) + (f" and {len(lines) - 10} more" if len(lines) > 10 else "")
            self.warn(
                GymMissingFieldWarning(
                    f"{self.dataset_path}: {len(lines)} row{'s' * (len(lines) != 1)} without {field_name!r} (a short "
                    f"string), which the environment scores by: every trial of {'them' if len(lines) > 1 else 'it'} "
                    f'would score 0. Lines: {shown}. Add "{field_name}" to each row.'
                )
            )

    def _warn_duplicates(self, tasks: list[Task]) -> None:
        dupes = [t for t in tasks if t.duplicate_lines]
        if not dupes:
            return

        def lines(task: Task) -> str:
            more = " ..." if len(task.duplicate_lines) > 5 else ""
            return ", ".join(map(str, task.duplicate_lines[:5])) + more

        shown = "; ".join(f"lines {lines(t)} repeat line {t.line}" for t in dupes[:5])
        more = f" (and {len(dupes) - 5} more tasks)" if len(dupes) > 5 else ""
        self.warn(
            GymDuplicateRowWarning(
                f"{self.dataset_path}: duplicate rows collapsed into one task each: {shown}{more}. "
                "Repeating a row is not how repeats are asked for: use --gym-repeats N."
            )
        )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        from pytest_gym.suitefile import SuiteFileError

        if isinstance(excinfo.value, (DatasetError, SuiteFileError)):
            # A dataset or suite file may hold (or point at) anything, /proc/self/environ included.
            return clean_text(str(excinfo.value), MAX_MESSAGE)
        return super().repr_failure(excinfo)


def trial_specs(items: Iterable[pytest.Item]) -> list[TrialSpec]:
    """The trials of ``items`` to roll out, in item order (a task item's repeats in repeat order): not those pytest
    skips before their setup whatever happens (their rollouts would be paid for and judged nowhere)."""
    return [
        spec
        for item in items
        if isinstance(item, (GymTrial, GymTask)) and not item.skipped_before_setup
        for spec in item.specs
    ]


def _skipped_before_setup(item: pytest.Item) -> bool:
    """As pytest's ``skipping`` plugin reads the marks: a ``skip``, a ``skipif`` with no condition or ``True``, or
    the first ``xfail`` whose condition holds having ``run=False`` (not under ``--runxfail``). A condition written
    as a string is pytest's to evaluate: not here."""
    if not item.config.pluginmanager.has_plugin("skipping"):
        return False
    marks = [mark for mark in item.iter_markers() if mark.name in _SKIP_MARKS]  # one walk: most items have none
    if not marks:
        return False
    if any(mark.name == "skip" for mark in marks):
        return True
    for mark in (mark for mark in marks if mark.name == "skipif"):
        conditions = _conditions(mark)
        if not conditions or any(condition is True for condition in conditions):
            return True
    if getattr(item.config.option, "runxfail", False):
        return False
    for mark in (mark for mark in marks if mark.name == "xfail"):
        conditions = _conditions(mark)
        if conditions and not all(isinstance(c, bool) for c in conditions):
            return False  # a string decides which mark applies: pytest's to evaluate
        if not conditions or any(conditions):
            return mark.kwargs.get("run", True) is False
    return False


_SKIP_MARKS = frozenset({"skip", "skipif", "xfail"})


def _conditions(mark: pytest.Mark) -> tuple[object, ...]:
    return mark.args or ((mark.kwargs["condition"],) if "condition" in mark.kwargs else ())


def sequential_order(items: list[pytest.Item], seed: int) -> None:
    """--gym-sequential: each such suite's trials (or tasks) in the seeded random order of its tasks, a task's
    repeats together, in place; every other item keeps its place (the suite's items take the places they had)."""
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        parent = item.parent
        if isinstance(item, (GymTrial, GymTask)) and isinstance(parent, GymDatasetFile) and parent.sequential:
            groups.setdefault(item.nodeid.split("::", 1)[0], []).append(i)
    for suite, positions in groups.items():
        chosen: list[GymTrial | GymTask] = [items[i] for i in positions]  # type: ignore[misc]
        rank = {h: n for n, h in enumerate(task_order(seed, suite, [t.specs[0].task.hash for t in chosen]))}
        ordered = sorted(chosen, key=lambda t: (rank[t.specs[0].task.hash], t.specs[0].repeat))
        for i, trial in zip(positions, ordered, strict=True):
            items[i] = trial


class GymSuiteFile(GymDatasetFile):
    """A ``*.gym.yaml`` suite file: its dataset's trials, judged with the file's settings."""

    def collect(self) -> Iterable[GymTrial | GymTask]:
        from pytest_gym.suitefile import suite_hydra, suite_settings

        config = self.config
        settings, suite = suite_settings(
            self.path, config.getoption, config.getini, config.invocation_params.dir, ini_dir(config)
        )
        session = current_session(config)
        assert session is not None  # the suite file was collected through it
        hydra = suite_hydra(self.path, suite)
        if hydra:
            session.suites.add_start(hydra=hydra, where=str(self.path))
        if suite.benchmark:
            data = suite.benchmark_data
            if data and not Path(data).is_absolute():
                data = str(self.path.parent / data)
            dataset = session.suites.benchmark_dataset(suite.benchmark, settings, data, str(self.path))
            self.configure(settings, dataset)
        else:
            assert suite.dataset is not None
            self.configure(settings, Path(suite.dataset))
        return super().collect()
