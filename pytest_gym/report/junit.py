"""Suite-level results in pytest's JUnit XML, added on the controller after pytest wrote the file.

Under xdist ``record_testsuite_property`` never reaches the controller (pytest #7767), so suite results
are added to the file pytest already wrote. pytest writes it in ``LogXML.pytest_sessionfinish``, a plain
hookimpl registered at ``pytest_configure`` and only in the controller (not in xdist workers). Call
:func:`postprocess_junit` from a ``pytest_sessionfinish`` hookimpl with ``trylast=True`` in the controller:
pluggy runs trylast implementations after every plain one, and before the terminal reporter's wrapper
prints the summary, so a problem can still be reported there. ``pytest_unconfigure`` also comes after
the write, but the summary is gone by then.

The project validates against its ``junit-10.xsd`` (Jenkins xUnit's schema with ``<error>`` spelled
``<errors>``; vendored in ``tests/data``), which rejects parts of what pytest writes. With ``xsd_strict``
(the default) the file is rewritten to fit:

* ``<properties>`` inside ``<testcase>`` (pytest writes every ``user_properties`` entry there, in both
  junit families) become ``[[PROPERTY|name=value]]`` lines in the testcase's ``<system-out>``: the
  convention of Testmo's JUnit format, parsed by tools such as testbeats and readable as text everywhere
  else. A value with line breaks uses the block form ``[[PROPERTY|name]]`` ... ``[[/PROPERTY]]`` (as XML
  text, a carriage return reads back as a line feed); ``%``, ``=``, ``|``, brackets and line breaks in a
  name are %-escaped.
* ``<error>`` (a test that broke outside its body, e.g. in a fixture) is not in that schema. Renamed to
  ``<errors>`` it would show as passed in Jenkins, GitLab and junitparser, which read ``<error>``; so it
  becomes ``<failure type="error">`` and the suite's counts move from ``errors`` to ``failures``.
* testcase attributes the schema lacks (``file``, ``line`` and ``url`` of junit_family xunit1) become
  properties ``junit.<attribute>``.

Without ``xsd_strict`` only the suite properties are added. :func:`read_trial_properties` reads either form.

The file fails closed: characters XML 1.0 cannot hold (a dataset file name with a control character
becomes a testcase's ``classname`` as it is) are replaced in pytest's bytes before parsing, as ``#xNN``
like pytest writes them in text; a file that still does not parse is masked as plain text and
:class:`JUnitUnusable` says so (the run then exits non-zero: CI must not read a report with no results).
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from junitparser import JUnitXmlError, Properties, xunit2

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.masking import Masker, clean_text, strip_control
from pytest_gym.core.outcome import TRIALS_PROPERTY as TRIALS
from pytest_gym.judge.summary import RunSummary, SuiteSummary

# junitparser's annotations name the base classes where xunit2 objects come back (its TestSuite iterates
# xunit2 testcases, which carry properties()), so its objects are handled as Any at this boundary.
JUnitNode = Any

SUITE_PREFIX = "gym"
ERROR_TYPE = "error"
_TESTCASE_ATTRIBUTES = frozenset({"name", "time", "classname", "group"})
_NAME_ESCAPED = re.compile(r"[%=|\[\]\r\n]")
_NAME_UNESCAPED = re.compile(r"%([0-9A-F]{2})")
_SINGLE = re.compile(r"\[\[PROPERTY\|([^=]*)=(.*)\]\]")
_BLOCK_START = re.compile(r"\[\[PROPERTY\|([^=]*)\]\]")
_BLOCK_END = "[[/PROPERTY]]"
#: The longest text one element or attribute of the report keeps (Gym's own texts are bounded far below).
MAX_JUNIT_TEXT = 1_000_000
# Characters XML 1.0 cannot hold even escaped; pytest writes them as #xNN too.
_XML_ILLEGAL = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


#: A character reference to one of them (``&#1;``, ``&#x1F;``): just as fatal to a parser.
_ILLEGAL_REFERENCE = re.compile(r"&#(x[0-9A-Fa-f]+|[0-9]+);")


class JUnitUnusable(ValueError):
    """pytest's JUnit file could not be read as XML even after repair: it was masked as text only."""


def _xml_safe(text: str) -> str:
    return _XML_ILLEGAL.sub(lambda m: f"#x{ord(m.group()):02X}", text)


def _legal_reference(match: re.Match[str]) -> str:
    number = match.group(1)
    code = int(number[1:], 16) if number[0] in "xX" else int(number)
    if code > 0x10FFFF or _XML_ILLEGAL.fullmatch(chr(code)):
        return f"#x{code:02X}"
    return match.group(0)


def repair_xml(data: bytes) -> bytes:
    """pytest's JUnit bytes with what XML 1.0 cannot hold replaced by ``#xNN``: control characters (raw or as
    character references), lone surrogates and bytes that are not UTF-8."""
    text = data.decode("utf-8", "surrogateescape")
    repaired = _ILLEGAL_REFERENCE.sub(_legal_reference, _xml_safe(text))
    return data if repaired == text else repaired.encode("utf-8")


def _elem(node: JUnitNode) -> ET.Element:
    """The ElementTree element behind a junitparser object: renaming and attributes have no junitparser API."""
    element: ET.Element = node._elem
    return element


def property_marker(name: str, value: str) -> str:
    """One property as ``system-out`` text (no trailing newline)."""
    name = _NAME_ESCAPED.sub(lambda m: f"%{ord(m.group()):02X}", name)
    if "\n" in value or "\r" in value:
        return f"[[PROPERTY|{name}]]\n{value}\n{_BLOCK_END}"
    return f"[[PROPERTY|{name}={value}]]"


def parse_property_markers(text: str) -> list[tuple[str, str]]:
    """The ``[[PROPERTY|...]]`` entries in a ``system-out`` text, in order."""

    def unescape(name: str) -> str:
        return _NAME_UNESCAPED.sub(lambda m: chr(int(m.group(1), 16)), name)

    found: list[tuple[str, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        single = _SINGLE.fullmatch(lines[i])
        block = None if single else _BLOCK_START.fullmatch(lines[i])
        if single:
            found.append((unescape(single.group(1)), single.group(2)))
        elif block and _BLOCK_END in lines[i + 1 :]:
            end = lines.index(_BLOCK_END, i + 1)
            found.append((unescape(block.group(1)), "\n".join(lines[i + 1 : end])))
            i = end
        i += 1
    return found


def _load(path: Path | str) -> JUnitNode:
    return xunit2.JUnitXml.fromfile(str(path))


def _direct_cases(suite: JUnitNode) -> Iterator[JUnitNode]:
    yield from suite.iterchildren(xunit2.TestCase)


def _all_suites(suites: list[JUnitNode]) -> Iterator[JUnitNode]:
    for suite in suites:
        yield suite
        yield from _all_suites(list(suite.testsuites()))


def nodeid_case_key(nodeid: str) -> str:
    """The :func:`case_key` pytest's JUnit writer gives a node id (its ``mangle_test_address``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names)


def _strict_case(case: JUnitNode, keep_errors: bool = False, extra: list[tuple[str, str]] | None = None) -> int:
    """Make one testcase fit the schema; returns how many ``<error>`` became ``<failure>``.

    ``keep_errors`` leaves ``<error>`` as pytest wrote it: CI dashboards (Jenkins, GitLab) tell an
    infrastructure fault from a low reward by it, which matters more than this schema's spelling.
    ``extra``: properties learnt after the test ran (Gym's health verdict at the end of the run).
    """
    element = _elem(case)
    # A task's trials (--gym-verdict task) are in the run folder and the report; JUnit names the task only.
    moved = [(p.name, p.value or "") for props in case.iterchildren(Properties) for p in props if p.name != TRIALS]
    moved += [(name, clean_text(value, 2000)) for name, value in extra or []]
    for name in [key for key in element.attrib if key not in _TESTCASE_ATTRIBUTES]:
        moved.append((f"junit.{name}", element.attrib.pop(name)))
    for props in list(element.iterfind("properties")):
        element.remove(props)
    if moved:
        text = case.system_out or ""
        if text and not text.endswith("\n"):
            text += "\n"
        case.system_out = text + "\n".join(property_marker(name, value) for name, value in moved) + "\n"
    converted = 0
    for error in [] if keep_errors else element.findall("error"):
        error.tag = "failure"
        kind = error.get("type")
        error.set("type", ERROR_TYPE if kind is None else f"{ERROR_TYPE}:{kind}")
        converted += 1
    return converted


def _move_counts(node: JUnitNode, converted: int) -> None:
    """Errors turned failures are counted as failures, where the element keeps counts at all."""
    attrib = _elem(node).attrib
    if not converted or "errors" not in attrib:
        return
    attrib["errors"] = str(max(0, int(attrib["errors"]) - converted))
    attrib["failures"] = str(int(attrib.get("failures", "0")) + converted)


def _strict(
    xml: JUnitNode, keep_errors: bool = False, extra: Mapping[str, list[tuple[str, str]]] | None = None
) -> None:
    total = 0
    extra = extra or {}
    for suite in _all_suites(list(xml)):
        converted = sum(_strict_case(case, keep_errors, extra.get(case_key(case))) for case in _direct_cases(suite))
        _move_counts(suite, converted)
        total += converted
    _move_counts(xml, total)


def _set_suite_properties(suite: JUnitNode, suite_properties: Mapping[str, Mapping[str, str]]) -> None:
    """Replace our properties on the suite (so a second run does not duplicate them), first in the suite."""
    wanted = {}
    for suite_name, properties in suite_properties.items():
        if not suite_name:
            raise ValueError("a suite name cannot be empty")
        for name, value in properties.items():
            wanted[f"{SUITE_PREFIX}.{suite_name}.{name}"] = _xml_safe(str(value))
    if not wanted:
        return
    element = _elem(suite)
    props = element.find("properties")
    if props is None:
        props = ET.Element("properties")
        element.insert(0, props)
    for prop in list(props.iterfind("property")):
        if prop.get("name") in wanted:
            props.remove(prop)
    for name, value in wanted.items():
        ET.SubElement(props, "property", name=name, value=value)


def _clean(xml: JUnitNode) -> None:
    """Mask every text and attribute of the report, drop control characters, bound each: the last pass
    before the file leaves the process (a user's conftest or a plugin may have put anything there)."""
    for element in _elem(xml).iter():
        for name, value in element.attrib.items():
            element.set(name, clean_text(value, MAX_JUNIT_TEXT))
        if element.text:
            element.text = clean_text(element.text, MAX_JUNIT_TEXT)
        if element.tail:
            element.tail = clean_text(element.tail, MAX_JUNIT_TEXT)


def _write_atomically(xml: JUnitNode, path: Path) -> None:
    buffer = io.BytesIO()
    xml.write(buffer)
    write_atomically(path, buffer.getvalue())


def postprocess_junit(
    path: Path | str,
    suite_properties: Mapping[str, Mapping[str, str]],
    xsd_strict: bool = True,
    keep_errors: bool = False,
    case_properties: Mapping[str, list[tuple[str, str]]] | None = None,
) -> None:
    """Add ``gym.<suite>.<name>`` properties to the file's testsuite and, if strict, make it fit the schema.

    ``suite_properties`` maps a suite name to its flat name -> value results (mean reward, CI, pass@k,
    gates, baseline delta). They go on the first ``<testsuite>``, the one pytest writes. The file is
    replaced in one step, so a reader sees pytest's file or ours, never half of one; running this twice
    gives the same file.
    """
    path = Path(path)
    data = path.read_bytes()
    repaired = repair_xml(data)
    try:
        xml = xunit2.JUnitXml.fromfile(io.BytesIO(repaired))
    except (SyntaxError, JUnitXmlError) as exc:  # ElementTree's and lxml's ParseError are SyntaxErrors
        _mask_as_text(path, repaired)
        raise JUnitUnusable(
            f"the JUnit file {path} is not valid XML ({exc}), even with the characters XML cannot hold replaced: "
            "its text was masked, but CI tools cannot read it and it holds no suite results; the run fails"
        ) from None
    try:
        suites = list(xml)
        if not suites:
            raise ValueError("it holds no <testsuite> to add suite properties to")
        if xsd_strict:  # ``case_properties``: node id -> properties learnt after the trial was reported
            extra = {nodeid_case_key(nodeid): props for nodeid, props in (case_properties or {}).items()}
            _strict(xml, keep_errors, extra)
        _set_suite_properties(suites[0], suite_properties)
        _clean(xml)
        _write_atomically(xml, path)
    except Exception as exc:  # never leave pytest's unmasked file behind
        _mask_as_text(path, repaired)
        raise JUnitUnusable(
            f"the JUnit file {path} could not be completed ({type(exc).__name__}: {clean_text(str(exc), 500)}): its "
            "text was masked, but it holds no suite results; the run fails"
        ) from None


def _mask_as_text(path: Path, data: bytes) -> None:
    """The last resort for a file that is not usable XML: every credential in it masked, as plain text."""
    masked = Masker().text(strip_control(data.decode("utf-8", "replace")))
    write_atomically(path, masked.encode("utf-8"))


def case_key(case: JUnitNode) -> str:
    """``classname.name``, how JUnit tools name a testcase."""
    return f"{case.classname}.{case.name}" if case.classname else str(case.name)


def read_trial_properties(path: Path | str) -> dict[str, dict[str, str]]:
    """Each testcase's properties (``<properties>`` and ``[[PROPERTY|...]]`` markers) by :func:`case_key`.

    A name recorded twice keeps its last value.
    """
    found: dict[str, dict[str, str]] = {}
    for suite in _all_suites(list(_load(path))):
        for case in _direct_cases(suite):
            props = found.setdefault(case_key(case), {})
            props.update((p.name, p.value or "") for p in case.properties())
            props.update(parse_property_markers(case.system_out or ""))
    return found


def read_suite_properties(path: Path | str) -> dict[str, str]:
    """The properties of the file's testsuites, merged."""
    found: dict[str, str] = {}
    for suite in _all_suites(list(_load(path))):
        found.update((p.name, p.value or "") for p in suite.properties())
    return found


def flat_properties(s: SuiteSummary) -> dict[str, str]:
    """Suite-level JUnit properties: name -> text."""
    props = {
        "tasks": str(s.tasks),
        "trials": str(s.all_trials),
        "errors": str(s.errors),
        "mean_reward": str(s.mean_reward),
        "ci_low": str(s.ci_low),
        "ci_high": str(s.ci_high),
    }
    props.update({f"pass@{k}": str(v) for k, v in s.pass_at.items()})
    props.update({f"pass^{k}": str(v) for k, v in s.pass_hat.items()})
    props["flaky"] = str(len(s.flaky_tasks))
    props["flaky_rate"] = str(s.flaky_rate)
    if s.flaky_tasks:
        props["flaky_tasks"] = ", ".join(task.shown for task in s.flaky_tasks)
    if s.totals is not None:
        props.update({f"totals.{name}": str(value) for name, value in s.totals.model_dump().items()})
    props.update({f"efficiency.{name}": str(value) for name, value in s.efficiency.items() if value is not None})
    props.update({f"skipped.{kind}": str(count) for kind, count in s.skipped.items()})
    if s.skipped:
        props["trials_saved"] = str(s.trials_saved)
    if s.cut_short:
        props["cut_short"] = s.cut_short
    if s.budget is not None:
        props["budget"] = s.budget.line()
    if s.sequential is not None:
        seq = s.sequential
        props["sequential.seed"] = str(seq.seed)
        props["sequential.decided_at"] = str(seq.decided_at)
        props["sequential.tasks"] = str(seq.tasks)
        if seq.message:
            props["sequential"] = seq.message
    for label, gate in s.gates.items():
        props[f"gate[{label}]"] = f"{'pass' if gate.passed else 'fail'}: {gate.reason}"
    c = s.baseline
    if c is not None:
        props["baseline_delta"] = str(c.mean_delta)
        props["baseline_p_drop"] = str(c.p_drop)
        props["baseline_p_beyond"] = str(c.p_beyond)
        props["baseline_method"] = c.method
        props["baseline_compared"] = c.compared
        props["baseline_regressed"] = str(c.regressed).lower()
        props["baseline_passed"] = str(c.passed).lower()
        if c.missing:
            props["baseline_missing"] = "true"
        if c.reason:
            props["baseline_reason"] = c.reason
        props["baseline_new_failures"] = str(len(c.new_failures))
        props["baseline_fixed"] = str(len(c.fixed))
        if c.new_failure_tasks:
            props["baseline_new_failure_tasks"] = ", ".join(t.label for t in c.new_failure_tasks)
        if c.fixed_tasks:
            props["baseline_fixed_tasks"] = ", ".join(t.label for t in c.fixed_tasks)
    return props


def summary_properties(summary: RunSummary | None) -> dict[str, dict[str, str]]:
    """Every suite's JUnit properties; the run's budget (spend against it) goes with each suite's."""
    if summary is None:
        return {}
    found = {name: flat_properties(suite) for name, suite in summary.suites.items()}
    if summary.budget is not None:
        spent = f"{summary.budget.line()} on {summary.budget.trials} trials, {summary.budget.skipped} not run"
        for props in found.values():
            props["run_budget"] = spent
    return found
