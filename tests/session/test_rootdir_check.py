"""A path given to a pytest-gym option after a space must not silently move pytest's rootdir (and skip the project's
ini file): pytest looks for its configuration before plugins register their options."""

from __future__ import annotations

from pathlib import Path

import pytest

INI = "[pytest]\ngym_dataset = example.jsonl\ngym_url = http://127.0.0.1:9\n"


def test_a_folder_outside_the_project_after_a_space_is_a_usage_error_naming_the_equals_form(
    pytester: pytest.Pytester, example: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pytester.makeini(INI)
    outside = tmp_path_factory.mktemp("runs")
    result = pytester.runpytest("--collect-only", "-q", "--gym-run-dir", str(outside))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*pytest took its rootdir * from the value of --gym-run-dir ({outside}), not {pytester.path}, "
            f"so it did not read {pytester.path / 'tox.ini'}:*"
        ]
    )
    result.stderr.fnmatch_lines([f"*Write --gym-run-dir={outside} (or pass --rootdir).*"])


def test_the_same_folder_with_equals_reads_the_projects_ini(
    pytester: pytest.Pytester, example: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pytester.makeini(INI)
    outside = tmp_path_factory.mktemp("runs")
    result = pytester.runpytest("--collect-only", "-q", f"--gym-run-dir={outside}")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["5 tests collected*"])


def test_a_path_inside_the_project_after_a_space_changes_nothing(pytester: pytest.Pytester, example: Path) -> None:
    pytester.makeini(INI)
    (pytester.path / "runs").mkdir()
    result = pytester.runpytest("--collect-only", "-q", "--gym-run-dir", "runs", "--gym-dataset", "example.jsonl")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["5 tests collected*"])


def test_a_value_inside_the_project_run_from_elsewhere_is_no_error(
    pytester: pytest.Pytester, example: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The rootdir comes from the test path given (another project, with its ini); the value, in that project,
    moves nothing."""
    project = tmp_path_factory.mktemp("project")
    (project / "tox.ini").write_text(INI)
    (project / "example.jsonl").write_text((pytester.path / "example.jsonl").read_text())
    (project / "runs").mkdir()
    result = pytester.runpytest("--collect-only", "-q", str(project), "--gym-run-dir", str(project / "runs"))
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["5 tests collected*"])


def test_with_no_configuration_file_to_miss_a_path_outside_after_a_space_is_no_error(
    pytester: pytest.Pytester, example: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """pytest's rootdir moves, but no ini file goes unread: the run goes on as before."""
    for name in ("tox.ini", "pytest.ini", "setup.cfg", "pyproject.toml"):
        (pytester.path / name).unlink(missing_ok=True)
    data = tmp_path_factory.mktemp("data") / "example.jsonl"
    data.write_text((pytester.path / "example.jsonl").read_text())
    result = pytester.runpytest("--collect-only", "-q", "--gym-url", "http://127.0.0.1:9", "--gym-dataset", str(data))
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.stdout.fnmatch_lines(["5 tests collected*"])


def test_a_value_too_long_for_a_file_name_after_a_space_is_no_internal_error(
    pytester: pytest.Pytester, example: Path
) -> None:
    """A long answer text is no path: asking the file system whether it exists fails (ENAMETOOLONG) and means no."""
    pytester.makeini(INI)
    result = pytester.runpytest("--collect-only", "-q", "--gym-policy-answer", "x" * 300)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["5 tests collected*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
