"""JUnit post-processing on files pytest really wrote: schema-valid, suite properties added, nothing lost."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
import xmlschema
from hypothesis import given
from hypothesis import strategies as st
from junitparser import Failure
from junitparser.xunit2 import JUnitXml

from pytest_gym.report.junit import (
    parse_property_markers,
    postprocess_junit,
    property_marker,
    read_suite_properties,
    read_trial_properties,
)
from tests.helpers.paths import ROOT

#: A verbatim copy of the project's shared junit-10.xsd (MIT, header kept). It is Jenkins xUnit's schema
#: with ``<error>`` spelled ``<errors>``, at most three decimals in suite times, and a ``version`` attribute.
VENDORED_XSD = ROOT / "tests" / "data" / "junit-10.xsd"
SHARED_XSD = ROOT.parent / "shared" / "junit-10.xsd"

TESTS = """
import pytest


@pytest.fixture
def gym_unreachable(record_property):
    record_property("gym_error_class", "connection")
    raise RuntimeError("cannot reach Gym")


def test_rewarded(record_property):
    print("some output of the test")
    record_property("gym_reward", 1.0)
    record_property("gym_task_hash", "5f0c")


def test_below_threshold(record_property):
    record_property("gym_reward", 0.0)
    record_property("verifier", "expected B\\ngot E")
    record_property("odd=name|[x]%", "a]]b = c")
    assert False, "reward 0.0 < min_reward 1.0"


def test_fault(gym_unreachable):
    pass


@pytest.mark.skip(reason="not today")
def test_skipped():
    pass


@pytest.mark.parametrize("repeat", [0, 1])
def test_repeat(record_property, repeat):
    record_property("gym_repeat", repeat)


class TestSuiteFile:
    def test_in_class(self, record_property):
        record_property("empty", "")
"""

EXPECTED = {
    "test_trials.test_rewarded": {"gym_reward": "1.0", "gym_task_hash": "5f0c"},
    "test_trials.test_below_threshold": {
        "gym_reward": "0.0",
        "verifier": "expected B\ngot E",
        "odd=name|[x]%": "a]]b = c",
    },
    "test_trials.test_fault": {"gym_error_class": "connection"},
    "test_trials.test_skipped": {},
    "test_trials.test_repeat[0]": {"gym_repeat": "0"},
    "test_trials.test_repeat[1]": {"gym_repeat": "1"},
    "test_trials.TestSuiteFile.test_in_class": {"empty": ""},
}
SUITE_PROPERTIES = {
    "mcqa": {"mean_reward": "0.4", "ci95": "[0.1, 0.7]", "pass@2": "0.5", "gate.min_mean": "failed"},
    "gsm8k": {"mean_reward": "0.9", "baseline_delta": "-0.02"},
}


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(os.environ.get("PYTEST_GYM_JUNIT_XSD") or str(VENDORED_XSD))


def write_junit(pytester: pytest.Pytester, source: str = TESTS, *args: str, subprocess: bool = False) -> Path:
    """Run pytest on ``source`` and return the JUnit XML file it wrote."""
    pytester.makepyfile(test_trials=source)
    xml = pytester.path / f"junit-{len(list(pytester.path.glob('junit-*.xml')))}.xml"
    options = ("-p", "no:gym", "-p", "no:cacheprovider", f"--junitxml={xml}", *args)
    result = pytester.runpytest_subprocess(*options) if subprocess else pytester.runpytest(*options)
    assert xml.is_file(), result.stdout.str()
    return xml


def schema_errors(schema: xmlschema.XMLSchema, path: Path) -> list[str]:
    return [f"{error.path}: {error.reason}" for error in schema.iter_errors(str(path))]


def test_vendored_schema_is_the_shared_one() -> None:
    if not SHARED_XSD.is_file():
        pytest.skip(f"no {SHARED_XSD} to compare with")
    assert VENDORED_XSD.read_bytes() == SHARED_XSD.read_bytes()


def test_testcase_properties_break_the_schema_until_postprocessed(
    pytester: pytest.Pytester, schema: xmlschema.XMLSchema
) -> None:
    passing = "def test_a(record_property):\n    record_property('gym_reward', 1.0)\n"
    xml = write_junit(pytester, passing)
    errors = schema_errors(schema, xml)
    assert errors, "pytest's file should not fit the schema: this test could not fail"
    assert all("properties" in error for error in errors), errors

    postprocess_junit(xml, {})
    assert schema_errors(schema, xml) == []
    assert read_trial_properties(xml) == {"test_trials.test_a": {"gym_reward": "1.0"}}


def test_fixture_errors_break_the_schema_until_postprocessed(
    pytester: pytest.Pytester, schema: xmlschema.XMLSchema
) -> None:
    erroring = "import pytest\n@pytest.fixture\ndef f():\n    raise RuntimeError\ndef test_a(f):\n    pass\n"
    xml = write_junit(pytester, erroring)
    errors = schema_errors(schema, xml)
    assert errors
    assert all("error" in error for error in errors), errors

    postprocess_junit(xml, {})
    assert schema_errors(schema, xml) == []
    [suite] = list[Any](JUnitXml.fromfile(str(xml)))
    [case] = suite
    assert case.is_failure
    assert not case.is_passed
    assert case.result[0].type == "error"
    assert "failed on setup" in case.result[0].message
    assert (suite.errors, suite.failures) == (0, 1)


@pytest.mark.parametrize(("family", "logging"), [("xunit2", "no"), ("xunit2", "system-out"), ("xunit1", "all")])
def test_postprocessed_file_fits_the_schema_and_keeps_everything(
    pytester: pytest.Pytester, schema: xmlschema.XMLSchema, family: str, logging: str
) -> None:
    xml = write_junit(pytester, TESTS, "-o", f"junit_family={family}", "-o", f"junit_logging={logging}")
    assert schema_errors(schema, xml)
    before = read_trial_properties(xml)
    assert before == EXPECTED
    captured = {case.name: case.system_out for suite in JUnitXml.fromfile(str(xml)) for case in suite}

    postprocess_junit(xml, SUITE_PROPERTIES)

    assert schema_errors(schema, xml) == []
    after = read_trial_properties(xml)
    if family == "xunit1":  # its file and line attributes are not in the schema: kept as properties
        for key, props in after.items():
            assert props.pop("junit.file") == "test_trials.py"
            assert props.pop("junit.line").isdigit(), key
    assert after == before

    [suite] = list[Any](JUnitXml.fromfile(str(xml)))
    cases = {case.name: case for case in suite}
    assert set(cases) == {key.rsplit(".", 1)[1] for key in EXPECTED}
    assert cases["test_rewarded"].is_passed
    assert cases["test_below_threshold"].is_failure
    assert cases["test_skipped"].is_skipped
    assert isinstance(cases["test_fault"].result[0], Failure)
    assert cases["test_fault"].result[0].type == "error"
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (7, 2, 0, 1)
    if logging != "no":  # the test's own output comes first, untouched
        assert cases["test_rewarded"].system_out.startswith(captured["test_rewarded"])
        assert "some output of the test" in cases["test_rewarded"].system_out

    suite_properties = {p.name: p.value for p in suite.properties()}
    assert suite_properties == read_suite_properties(xml)
    assert suite_properties == {
        f"gym.{name}.{key}": value for name, values in SUITE_PROPERTIES.items() for key, value in values.items()
    }
    assert suite_properties["gym.mcqa.mean_reward"] == "0.4"


def test_postprocessing_twice_gives_the_same_file(pytester: pytest.Pytester) -> None:
    xml = write_junit(pytester)
    postprocess_junit(xml, SUITE_PROPERTIES)
    once = xml.read_bytes()
    postprocess_junit(xml, SUITE_PROPERTIES)
    assert xml.read_bytes() == once
    postprocess_junit(xml, {"mcqa": {"mean_reward": "0.5"}})
    assert read_suite_properties(xml)["gym.mcqa.mean_reward"] == "0.5"
    assert list(read_suite_properties(xml)).count("gym.mcqa.mean_reward") == 1


def test_without_strict_only_suite_properties_are_added(pytester: pytest.Pytester, schema: xmlschema.XMLSchema) -> None:
    xml = write_junit(pytester)
    postprocess_junit(xml, SUITE_PROPERTIES, xsd_strict=False)
    assert b"<testcase" in xml.read_bytes()
    assert xml.read_bytes().count(b"<properties>") == 1 + sum(1 for props in EXPECTED.values() if props)
    assert b"<error " in xml.read_bytes()
    assert schema_errors(schema, xml)
    assert read_trial_properties(xml) == EXPECTED
    assert read_suite_properties(xml)["gym.gsm8k.baseline_delta"] == "-0.02"


def test_properties_read_the_same_with_and_without_xdist(pytester: pytest.Pytester) -> None:
    serial = write_junit(pytester, TESTS, "-p", "no:xdist", subprocess=True)
    distributed = write_junit(pytester, TESTS, "-n", "2", subprocess=True)
    for path in (serial, distributed):
        postprocess_junit(path, SUITE_PROPERTIES)
    assert read_trial_properties(distributed) == read_trial_properties(serial) == EXPECTED
    assert read_suite_properties(distributed) == read_suite_properties(serial)


HOOK = """
import pytest
from pytest_gym.report.junit import postprocess_junit


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    config = session.config
    if not hasattr(config, "workerinput") and config.option.xmlpath:
        postprocess_junit(config.option.xmlpath, {"demo": {"mean_reward": "0.5"}})
"""


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_a_trylast_sessionfinish_hook_runs_after_pytest_wrote_the_file(
    pytester: pytest.Pytester, schema: xmlschema.XMLSchema, xdist: tuple[str, ...]
) -> None:
    pytester.makeconftest(HOOK)
    xml = write_junit(pytester, TESTS, *xdist, subprocess=True)
    assert schema_errors(schema, xml) == []
    assert read_suite_properties(xml) == {"gym.demo.mean_reward": "0.5"}
    assert read_trial_properties(xml) == EXPECTED


def test_replacing_the_file_is_atomic_and_keeps_its_mode(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    xml = write_junit(pytester)
    xml.chmod(0o640)
    before = xml.read_bytes()

    def crash(src: str, dst: str) -> None:
        raise OSError("power cut before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        postprocess_junit(xml, SUITE_PROPERTIES)
    monkeypatch.undo()
    assert xml.read_bytes() == before
    assert not list(xml.parent.glob(f".{xml.name}.*")), "a temporary file was left behind"

    postprocess_junit(xml, SUITE_PROPERTIES)
    assert stat.S_IMODE(xml.stat().st_mode) == 0o640
    assert xml.read_bytes().startswith(b"<?xml version='1.0' encoding='utf-8'?>")


def test_suite_values_that_xml_cannot_hold_are_escaped(pytester: pytest.Pytester, schema: xmlschema.XMLSchema) -> None:
    xml = write_junit(pytester)
    postprocess_junit(xml, {"s": {"note": "bell\x07 tab\t"}})
    assert schema_errors(schema, xml) == []
    assert read_suite_properties(xml)["gym.s.note"] == "bell#x07 tab\t"
    with pytest.raises(ValueError, match="suite name"):
        postprocess_junit(xml, {"": {"x": "1"}})


_names = st.text(st.characters(codec="utf-8", blacklist_characters="\r"), min_size=1)
_values = st.text(st.characters(codec="utf-8", blacklist_characters="\r")).filter(
    lambda v: "[[/PROPERTY]]" not in v.split("\n")
)


@given(st.lists(st.tuples(_names, _values), max_size=5), st.text(st.characters(blacklist_characters="[\r")))
def test_markers_round_trip(properties: list[tuple[str, str]], output: str) -> None:
    text = output + "\n" + "\n".join(property_marker(name, value) for name, value in properties) + "\n"
    assert parse_property_markers(text) == properties


def test_marker_forms() -> None:
    assert property_marker("gym_reward", "1.0") == "[[PROPERTY|gym_reward=1.0]]"
    assert property_marker("a=b", "x]]") == "[[PROPERTY|a%3Db=x]]]]"
    assert property_marker("log", "one\ntwo") == "[[PROPERTY|log]]\none\ntwo\n[[/PROPERTY]]"
    assert parse_property_markers("[[PROPERTY|a%3Db=x]]]]\n[[PROPERTY|log]]\none\n[[/PROPERTY]]") == [
        ("a=b", "x]]"),
        ("log", "one"),
    ]


# --- failing closed (issue 20) --------------------------------------------------------------------------------

MARKER = "sk-pytestgym-MARKER-7f3a9c"
#: A plain test beside the Gym trials whose failure shows the key (assertion rewriting prints the value).
LEAKY_TEST = """
import os


def test_shows_the_key():
    print("key:", os.environ["GYM_POLICY_API_KEY"])
    assert os.environ["GYM_POLICY_API_KEY"] == ""
"""
#: Spoils the JUnit file after pytest wrote it, as a crashing plugin or a full disk would.
SPOIL = """
import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    path = session.config.option.xmlpath
    if path and not hasattr(session.config, "workerinput"):
        with open(path, "rb") as fh:
            data = fh.read()
        with open(path, "wb") as fh:
            fh.write(data[: len(data) // 2])
"""


def _attached_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, dataset: str, *args: str) -> Any:
    from tests.helpers.standin import serving
    from tests.session.test_hostile_gym import AGENT, ROW

    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)
    pytester.makeini("[pytest]\n")
    (pytester.path / dataset).write_text("".join(ROW % i for i in range(2)), encoding="utf-8")
    with serving(AGENT) as gym:
        return pytester.runpytest(
            "--gym-url", gym.url, "--gym-agent", AGENT, f"--gym-dataset={dataset}", "--gym-run-dir", "run",
            "--junitxml", "report.xml", "-p", "no:cacheprovider", *args,
        )  # fmt: skip


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_control_character_in_a_dataset_name_gives_a_valid_masked_junit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, schema: xmlschema.XMLSchema, workers: list[str]
) -> None:
    pytester.makepyfile(test_leaky=LEAKY_TEST)
    result = _attached_run(pytester, monkeypatch, "rows\x01\x1b.jsonl", "test_leaky.py", *workers)
    result.assert_outcomes(passed=2, failed=1)
    xml = pytester.path / "report.xml"
    data = xml.read_bytes()
    assert MARKER.encode() not in data  # masked: the file was read, not skipped
    assert schema_errors(schema, xml) == []
    assert read_suite_properties(xml)["gym.rows.jsonl.mean_reward"] == "1.0"  # control characters dropped
    trials = [key for key in read_trial_properties(xml) if key.startswith("rows#x01#x1B.jsonl.")]
    assert len(trials) == 2  # as pytest writes such characters in text


def test_a_junit_that_cannot_be_parsed_is_masked_and_fails_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(SPOIL)
    pytester.makepyfile(test_leaky=LEAKY_TEST.replace('== ""', '!= ""'))  # passes, and prints the key
    result = _attached_run(pytester, monkeypatch, "rows.jsonl", "test_leaky.py", "-o", "junit_logging=all")
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*the JUnit file *report.xml is not valid XML*its text was masked*the run fails*"])
    data = (pytester.path / "report.xml").read_bytes()
    assert b"key: ***" in data
    assert MARKER[:8].encode() not in data


def test_repair_replaces_only_what_xml_cannot_hold() -> None:
    from pytest_gym.report.junit import repair_xml

    good = '<a b="x&#10;é&#x1F600;">\t\n</a>'.encode()
    assert repair_xml(good) == good
    assert repair_xml(b'<a b="\x01">&#1;&#x1b;\xff</a>') == b'<a b="#x01">#x01#x1B#xDCFF</a>'
