"""Bad option values are usage errors that say what is accepted: --gym-max-errors, --gym-gate, --gym-concurrency,
--gym-reuse with --gym-url."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_bad_error_budget_is_a_usage_error(pytester: pytest.Pytester, example: Path) -> None:
    result = pytester.runpytest("--gym-dataset", "example.jsonl", "--gym-max-errors", "150%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_malformed_gate_is_a_usage_error_showing_the_grammar(pytester: pytest.Pytester, example: Path) -> None:
    result = pytester.runpytest("--gym-dataset", "example.jsonl", "--gym-gate", "mean_reward => 0.8")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*bad gate from --gym-gate*mean_reward => 0.8*", "*pass@K*"])


def test_concurrency_must_be_a_positive_integer(pytester: pytest.Pytester, example: Path) -> None:
    result = pytester.runpytest("--gym-url", "http://127.0.0.1:9", "--gym-concurrency", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid value '0' for concurrency from command line (--gym-concurrency)*"])


def test_reuse_with_an_attached_gym_is_a_usage_error_naming_both(pytester: pytest.Pytester, example: Path) -> None:
    result = pytester.runpytest(
        "--gym-url", "http://127.0.0.1:9", "--gym-dataset", "example.jsonl", "--gym-reuse", "kept"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gym-reuse keeps a Gym this run starts*with --gym-url nothing is started*"])
    assert not (pytester.path / "kept").exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--gym-min-reward", "nan"),
        ("--gym-min-reward", "-inf"),
        ("--gym-trial-timeout", "inf"),
        ("--gym-startup-timeout", "1e400"),
        ("--gym-max-regression", "Infinity"),
        ("--gym-policy-latency-ms", "inf"),
    ],
)
def test_nan_and_infinity_are_no_setting_values(
    pytester: pytest.Pytester, example: Path, option: str, value: str
) -> None:
    """A minimum reward of nan failed every trial and one of -inf passed every one; a timeout of inf was taken."""
    result = pytester.runpytest("--co", "--gym-dataset", "example.jsonl", f"{option}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    name = option.removeprefix("--gym-").replace("-", "_")
    result.stderr.fnmatch_lines([f"*invalid value '{value}' for {name} from command line ({option})*finite number*"])


def test_nan_in_the_ini_file_is_no_minimum_reward(pytester: pytest.Pytester, example: Path) -> None:
    pytester.makeini("[pytest]\ngym_min_reward = nan\n")
    result = pytester.runpytest("--co", "--gym-dataset", "example.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid value 'nan' for min_reward from ini file (gym_min_reward)*finite number*"])


@pytest.mark.parametrize(
    "option", ["--gym-resume", "--gym-rescore", "--gym-baseline-run", "--gym-merge", "--gym-run-dir", "--gym-dataset"]
)
def test_a_path_too_long_for_the_file_system_is_a_usage_error(
    pytester: pytest.Pytester, example: Path, option: str
) -> None:
    """Its first exists() or is_dir() raised OSError (ENAMETOOLONG): an INTERNALERROR."""
    result = pytester.runpytest("--co", "--gym-dataset", "example.jsonl", f"{option}={'x' * 300}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    name = option.removeprefix("--gym-").replace("-", "_")
    result.stderr.fnmatch_lines(
        [f"*invalid value for {name} from command line ({option}): a name of 300 characters ('xxxx*'...) is too long*"]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ("not json", "Expecting value"),
        ("[1, 2]", "a JSON list, not an object"),
        ('{"latency_ms": "fast"}', "could not convert string to float"),
        ('{"answr": "B"}', "unknown script keys: answr"),
    ],
)
def test_a_bad_policy_script_variable_is_a_usage_error_before_anything_starts(
    pytester: pytest.Pytester, example: Path, monkeypatch: pytest.MonkeyPatch, script: str, problem: str
) -> None:
    """It failed the scripted policy's process: every trial errored, with the policy's traceback as the reason."""
    monkeypatch.setenv("PYTEST_GYM_POLICY_SCRIPT", script)
    result = pytester.runpytest(
        "--gym-dataset", "example.jsonl", "--gym-policy", "scripted", "--gym-resources-server", "mcqa",
        "--gym-cli=/bin/false",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*$PYTEST_GYM_POLICY_SCRIPT is no policy script ({problem}*); give a JSON object*"])


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--gym-gate="], "--gym-gate"),
        (["--gym-gate", "mean_reward >= 0.5", "--gym-gate", " "], "--gym-gate"),
        (["--gym-repeats="], "--gym-repeats"),
        (["--gym-dataset="], "--gym-dataset"),
        (["--gym-policy-answer", ""], "--gym-policy-answer"),
    ],
)
def test_an_empty_value_on_the_command_line_is_a_usage_error(
    pytester: pytest.Pytester, example: Path, args: list[str], flag: str
) -> None:
    """``--gym-gate="$GATE"`` with GATE unset dropped the gate, and the ungated run passed; ``--gym-repeats=$N``
    ran one repeat whatever the ini file said."""
    pytester.makeini("[pytest]\ngym_repeats = 3\ngym_gate = mean_reward >= 2\n")
    result = pytester.runpytest("--co", "--gym-url", "http://127.0.0.1:9", "--gym-dataset", "example.jsonl", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    ini = flag.removeprefix("--").replace("-", "_")
    result.stderr.fnmatch_lines([f"*{flag} was given an empty value on the command line*leave {flag} out*{ini}*"])


def test_an_empty_value_in_the_ini_file_still_means_not_set(pytester: pytest.Pytester, example: Path) -> None:
    pytester.makeini("[pytest]\ngym_repeats =\n")
    result = pytester.runpytest("--co", "-q", "--gym-url", "http://127.0.0.1:9", "--gym-dataset", "example.jsonl")
    assert result.ret == pytest.ExitCode.OK
    assert "[r1]" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*::*r0]", "5 tests collected*"])


def test_a_misspelt_ini_setting_is_a_usage_error_naming_the_setting_meant(
    pytester: pytest.Pytester, example: Path
) -> None:
    """pytest only warns about an unknown ini key (at the end of the run): ``gym_gates`` ran the suite ungated."""
    pytester.makeini("[pytest]\ngym_gates = mean_reward >= 2\ngym_repeats = 2\n")
    result = pytester.runpytest("--co", "--gym-url", "http://127.0.0.1:9", "--gym-dataset", "example.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown setting gym_gates (did you mean gym_gate?) (from */tox.ini or -o)*"])


def test_a_misspelt_setting_given_with_o_is_a_usage_error_too(pytester: pytest.Pytester, example: Path) -> None:
    result = pytester.runpytest("--co", "-o", "gym_reepeats=3", "-o", "gym_min_rewad=0.5", "--gym-dataset", "x.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*unknown settings gym_min_rewad (did you mean gym_min_reward?), gym_reepeats (did you mean gym_repeats?)*"]
    )


def test_gym_keys_another_plugin_registered_and_other_unknown_keys_are_left_to_pytest(
    pytester: pytest.Pytester, example: Path
) -> None:
    pytester.makeconftest('def pytest_addoption(parser):\n    parser.addini("gym_world", "another plugin\'s")\n')
    pytester.makeini("[pytest]\ngym_world = mars\nother_plugins_key = 1\ngym_repeats = 2\n")
    result = pytester.runpytest("--co", "-q", "--gym-url", "http://127.0.0.1:9", "--gym-dataset", "example.jsonl")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["10 tests collected*"])
    assert "Unknown config option: other_plugins_key" in result.stdout.str()  # pytest's own warning
