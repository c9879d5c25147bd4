"""The README documents every option the plugin registers."""

from __future__ import annotations

import pytest

from pytest_gym.core.options import SPECS
from pytest_gym.suitefile import SuiteFile
from tests.helpers.paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_option_and_ini_name_is_in_the_readme_table() -> None:
    missing = [s.flag for s in SPECS if f"| `{s.flag}" not in README or f"`{s.ini}`" not in README]
    assert missing == []


def test_help_lists_every_option_and_ini_setting(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    assert result.ret == pytest.ExitCode.OK
    text = result.stdout.str()
    assert [s.flag for s in SPECS if s.flag not in text] == []
    assert [s.ini for s in SPECS if s.ini not in text] == []
    result.stdout.fnmatch_lines(["*--gym-max-errors=N|P%*", "*P% of the run's*"])


def test_readme_lists_the_keys_a_suite_file_takes() -> None:
    start = README.index("The keys a suite file takes: ")
    listed = README[start : README.index("(exactly one of", start)]
    keys = [part.strip(" `,\n") for part in listed.removeprefix("The keys a suite file takes: ").split(",")]
    assert keys == list(SuiteFile.model_fields)


def test_required_plugins_in_the_ini_stops_a_run_that_would_skip_the_evals(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's CI advice, both ways: with the plugin the run collects the evals; without it (autoloading off)
    pytest stops instead of running the other tests green. The name must be the distribution's as pytest sees it."""
    assert "add `required_plugins = pytest-gym` to it" in README
    pytester.makeini("[pytest]\nrequired_plugins = pytest-gym\ngym_dataset = d.jsonl\ngym_url = http://127.0.0.1:9\n")
    pytester.makefile(".jsonl", d='{"responses_create_params": {"input": "q"}}\n')
    pytester.makepyfile(test_other="def test_other():\n    pass\n")
    loaded = pytester.runpytest_subprocess("--co", "-q", "-p", "no:randomly")
    assert loaded.ret == pytest.ExitCode.OK
    loaded.stdout.fnmatch_lines(["d.jsonl::*r0]", "test_other.py::test_other", "2 tests collected*"])
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    missing = pytester.runpytest_subprocess("--co", "-q")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*Missing required plugins: pytest-gym*"])
