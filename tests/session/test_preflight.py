"""Paths as users mean them and Gym's configs checked when pytest starts (issue 24 items 3 and 5): a wrong
--gym-cli, a --gym-config found nowhere, a --gym-resources-server without its config are usage errors before
any trial; ini paths are from the ini file's folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.fake_gym_cli import install_with_root, start_args
from tests.helpers.paths import EXAMPLE

LC = "resources_servers/equivalence_rule/configs/lc.yaml"


@pytest.fixture
def gym(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FAKE_GYM_RECORD", str(pytester.path / "record"))
    shutil.copy(EXAMPLE, pytester.path / "example.jsonl")
    pytester.makeini("[pytest]\n")
    cli, _ = install_with_root(pytester.path / "venv", (LC, "resources_servers/mcqa/configs/mcqa.yaml"))
    return cli


def test_a_wrong_gym_cli_is_a_usage_error_naming_it(pytester: pytest.Pytester, gym: Path) -> None:
    result = pytester.runpytest("--gym-dataset", "example.jsonl", *start_args(pytester.path / "venv" / "gim"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"*--gym-cli: {pytester.path}/venv/gim does not exist. Pass the `gym` of a NeMo*"])


def test_a_relative_gym_cli_is_from_where_pytest_started(pytester: pytest.Pytester, gym: Path) -> None:
    sub = pytester.path / "sub"
    sub.mkdir()
    shutil.move(pytester.path / "example.jsonl", sub / "example.jsonl")
    (sub / "pytest.ini").write_text("[pytest]\n")
    os.chdir(sub)  # pytester restores the working folder
    args = [a if a != "fake" else "mcqa" for a in start_args(Path("../venv/bin/gym"))]
    at = args.index(
        "--gym-cli"
    )  # after a space, ../venv/bin/gym would move pytest's rootdir (tests/session/test_rootdir_check.py)
    args[at : at + 2] = [f"--gym-cli={args[at + 1]}"]
    pytester.runpytest("--gym-dataset", "example.jsonl", *args).assert_outcomes(passed=5)


def test_a_config_found_nowhere_is_a_usage_error_listing_both_places(pytester: pytest.Pytester, gym: Path) -> None:
    args = [a for a in start_args(gym) if a not in ("--gym-resources-server", "fake")]
    result = pytester.runpytest("--gym-dataset", "example.jsonl", *args, "--gym-config", "confs/nope.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    site = pytester.path / "venv" / "lib" / "python3.13" / "site-packages"
    result.stderr.fnmatch_lines(
        [f"*--gym-config confs/nope.yaml was found neither where it was given nor in Gym's install root. Looked in: "
         f"{pytester.path}/confs/nope.yaml, {site}/confs/nope.yaml.*"]
    )  # fmt: skip
    assert not (pytester.path / "record").exists()  # Gym was not started


def test_a_resources_server_named_unlike_its_config_lists_its_configs(pytester: pytest.Pytester, gym: Path) -> None:
    args = [a if a != "fake" else "equivalence_rule" for a in start_args(gym)]
    result = pytester.runpytest("--gym-dataset", "example.jsonl", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["*the configs of equivalence_rule are: lc.yaml. Pass one as --gym-resources-server "
                                 "equivalence_rule/lc*"])  # fmt: skip


def test_ini_paths_are_from_the_ini_files_folder(pytester: pytest.Pytester, gym: Path) -> None:
    """With --rootdir elsewhere, the ini file's dataset and gym CLI are still found beside it."""
    conf = pytester.path / "conf"
    conf.mkdir()
    shutil.move(pytester.path / "example.jsonl", conf / "example.jsonl")
    (conf / "pytest.ini").write_text("[pytest]\ngym_dataset = example.jsonl\ngym_cli = ../venv/bin/gym\n")
    other = pytester.path / "other"
    other.mkdir()
    args = [a if a != "fake" else "mcqa" for a in start_args(gym) if a not in ("--gym-cli", str(gym))]
    result = pytester.runpytest("-c", str(conf / "pytest.ini"), "--rootdir", str(other), *args)
    result.assert_outcomes(passed=5)
