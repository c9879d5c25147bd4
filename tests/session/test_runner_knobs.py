"""Gym fidelity knobs against a fake ``gym``: the exact argv and environment Gym gets, secrets kept out of
everything the run writes, the run timeout, Hydra parameters flattened from suite files. (Against the real Gym:
tests/gym/test_benchmark_suites.py, tests/gym/test_gym_reads_our_hydra_overrides.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.fake_gym_cli import install, recorded_argv, start_args
from tests.helpers.paths import GYMROOT
from tests.helpers.processes import MARK, wait_gone

SECRET = "zz-knob-secret-MARKER-4f1c"
ENV_SECRET = "zz-env-token-MARKER-77aa"
ROW = '{"responses_create_params": {"input": "q%d"}}\n'


@pytest.fixture
def fake(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytester.makeini("[pytest]\n")
    monkeypatch.setenv("FAKE_GYM_RECORD", str(pytester.path / "record"))
    (pytester.path / "rows.jsonl").write_text("".join(ROW % i for i in range(4)))
    return install(pytester.path / "bin")


def _everything(pytester: pytest.Pytester, result: pytest.RunResult) -> str:
    texts = [result.stdout.str(), result.stderr.str()]
    for path in (pytester.path / "run").rglob("*"):
        if path.is_file() and not path.is_symlink():
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    texts.append((pytester.path / "report.xml").read_text())
    return "\n".join(texts)


def test_env_and_secret_env_reach_gym_and_no_secret_is_written(
    pytester: pytest.Pytester, fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEPLOY_SETTING", SECRET)  # not a secret-looking name: only --gym-secret-env says so
    monkeypatch.setenv("HF_TOKEN", ENV_SECRET)
    monkeypatch.setenv("FAKE_GYM_ENV_NAMES", "DEPLOY_SETTING,PLAIN,HF_TOKEN")
    monkeypatch.setenv("FAKE_GYM_ECHO", "DEPLOY_SETTING,HF_TOKEN")
    result = pytester.runpytest(
        *start_args(fake), "--gym-dataset", "rows.jsonl", "--junitxml", "report.xml",
        "--gym-env", "PLAIN=visible-value", "--gym-secret-env", "HF_TOKEN",
        "--gym-secret-env", "DEPLOY_SETTING", "-v",
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    record = json.loads((pytester.path / "record" / "argv.json").read_text())
    digest = {name: hashlib.sha256(value.encode()).hexdigest() for name, value in
              (("DEPLOY_SETTING", SECRET), ("PLAIN", "visible-value"), ("HF_TOKEN", ENV_SECRET))}  # fmt: skip
    assert record["env_sha256"] == digest
    assert not any(SECRET in a or ENV_SECRET in a for a in record["argv"])
    everything = _everything(pytester, result)
    assert SECRET not in everything
    assert SECRET[:8] not in everything
    assert ENV_SECRET not in everything
    log = (pytester.path / "run" / "gym_env.log").read_text()
    assert (
        "pytest-gym: environment: PLAIN=visible-value HF_TOKEN=(passed through) DEPLOY_SETTING=(passed through)" in log
    )
    assert "fake gym: DEPLOY_SETTING is ***" in log  # echoed by Gym, masked in place
    assert "fake gym: HF_TOKEN is ***" in log


@pytest.mark.parametrize("where", ["cli", "ini"])
def test_a_secret_looking_gym_env_is_refused_pointing_to_secret_env(
    pytester: pytest.Pytester, fake: Path, where: str
) -> None:
    """``--gym-env OPENAI_API_KEY=sk-...`` would put the key in pytest_gym_run.json: refused, without its value."""
    item = f"OPENAI_API_KEY={ENV_SECRET}"
    if where == "ini":
        pytester.makeini(f"[pytest]\ngym_env =\n    PLAIN=1\n    {item}\n")
        result = pytester.runpytest(*start_args(fake), "--gym-dataset", "rows.jsonl")
    else:
        result = pytester.runpytest(*start_args(fake), "--gym-dataset", "rows.jsonl", "--gym-env", item)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "holds a credential (secret-looking key 'OPENAI_API_KEY')" in err, err
    assert "--gym-secret-env NAME" in err, err
    assert ENV_SECRET not in result.stdout.str() + err
    assert not (pytester.path / "record").exists()  # Gym never started


def test_gym_processes_do_not_get_the_header_variables(
    pytester: pytest.Pytester, fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The --gym-header variables hold a proxy's credential for pytest-gym's own requests: Gym never needs them."""
    monkeypatch.setenv("PROXY_AUTH_VALUE", f"Bearer {ENV_SECRET}")
    monkeypatch.setenv("GYM_POLICY_API_KEY", SECRET)
    monkeypatch.setenv("FAKE_GYM_ENV_NAMES", "PROXY_AUTH_VALUE,GYM_POLICY_API_KEY")
    result = pytester.runpytest(
        *start_args(fake), "--gym-dataset", "rows.jsonl", "--gym-header", "X-Proxy-Auth=PROXY_AUTH_VALUE"
    )
    result.assert_outcomes(passed=4)
    record = json.loads((pytester.path / "record" / "argv.json").read_text())
    assert record["env_sha256"]["PROXY_AUTH_VALUE"] is None
    assert record["env_sha256"]["GYM_POLICY_API_KEY"] == hashlib.sha256(SECRET.encode()).hexdigest()


def test_a_relative_gym_cli_is_found_from_where_pytest_started(pytester: pytest.Pytester, fake: Path) -> None:
    """``--gym-cli=bin/gym`` names the file under the folder pytest ran in, not under the run folder Gym starts in."""
    args = [a for a in start_args(fake) if a not in ("--gym-cli", str(fake))]
    result = pytester.runpytest(*args, "--gym-cli=bin/gym", "--gym-dataset", "rows.jsonl")
    result.assert_outcomes(passed=4)
    assert json.loads((pytester.path / "record" / "argv.json").read_text())["argv"][0] == str(fake)


def test_which_gym_env_values_are_credentials() -> None:
    from pytest_gym.core.settings import env_credentials

    for harmless in ("PLAIN=sk-not-secret-name", "TOKEN_TTL=3600", "HF_TOKEN_PATH=/work/hf", "USE_AUTH_TOKEN=true",
                     "ACTIONS_ID_TOKEN_REQUEST_URL=https://pipelines.example/x", "GIT_TOKEN="):  # fmt: skip
        assert env_credentials(harmless) is None, harmless
    for secret in ("OPENAI_API_KEY=sk-abc", "HF_TOKEN=hf_xyz", "DB_PASSWORD=hunter2", "SVC_URL_TOKEN=https://u:p@h"):
        assert env_credentials(secret), secret


def test_a_secret_env_that_is_not_set_is_an_error_naming_it(pytester: pytest.Pytester, fake: Path) -> None:
    result = pytester.runpytest(*start_args(fake), "--gym-dataset", "rows.jsonl", "--gym-secret-env", "NOPE_UNSET")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(["*--gym-secret-env NOPE_UNSET: not set in pytest's environment*"])


def test_hydra_benchmark_and_search_dir_reach_gyms_command_line(pytester: pytest.Pytester, fake: Path) -> None:
    shutil.copytree(GYMROOT, pytester.path / "gymroot")
    pytester.makefile(
        ".gym.yaml",
        suite="benchmark: minibench\nbenchmark_data: rows.jsonl\nagent: fake_agent\n"
        "hydra:\n  minibench_mcqa_resources_server:\n    resources_servers:\n      mcqa:\n"
        "        description: \"a, b [c] = 'd'\"\n        verified: true\n",
    )
    result = pytester.runpytest(
        *start_args(fake), "--gym-search-dir", "gymroot", "--gym-hydra", "head_server_deps=[x, 'y z']",
        "--gym-hydra", "a.b=12", "--gym-bind-resources-server", "off", "suite.gym.yaml",
    )  # fmt: skip
    result.assert_outcomes(passed=8)  # 4 rows, num_repeats 2 from the benchmark's config
    argv = recorded_argv(pytester.path / "record")
    assert argv[argv.index("--search-dir") + 1] == str(pytester.path / "gymroot")
    assert argv[argv.index("--benchmark") + 1] == "minibench"
    assert "++head_server_deps=[x,'y z']" in argv
    assert "++a.b=12" in argv
    assert "++minibench_mcqa_resources_server.resources_servers.mcqa.description='a, b [c] = \\'d\\''" in argv
    assert "++minibench_mcqa_resources_server.resources_servers.mcqa.verified=true" in argv


def test_two_suite_files_that_disagree_on_a_gym_parameter_are_refused(pytester: pytest.Pytester, fake: Path) -> None:
    pytester.makefile(".gym.yaml", one="dataset: rows.jsonl\nhydra: {x: {y: 1}}\n")
    pytester.makefile(".gym.yaml", two="dataset: rows.jsonl\nhydra: {x: {y: 2}}\n")
    result = pytester.runpytest(*start_args(fake))
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*sets Gym parameter x.y differently from*one.gym.yaml*"])


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_run_timeout_errors_the_rest_and_stops_gym(
    pytester: pytest.Pytester, fake: Path, monkeypatch: pytest.MonkeyPatch, xdist: tuple[str, ...]
) -> None:
    token = f"runtimeout-{os.getpid()}-{len(xdist)}"
    monkeypatch.setenv(MARK, token)
    monkeypatch.setenv("FAKE_GYM_RUN_S", "2")
    (pytester.path / "rows.jsonl").write_text("".join(ROW % i for i in range(6)))
    result = pytester.runpytest_subprocess(
        *start_args(fake), "--gym-dataset", "rows.jsonl", "--gym-run-timeout", "6", "--gym-concurrency", "1",
        *xdist, timeout=120,
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", 0) >= 3, outcomes
    assert outcomes.get("errors", 0) + outcomes.get("passed", 0) == 6, outcomes
    result.stdout.fnmatch_lines(["*the run timeout (--gym-run-timeout 6 s) was hit*"])
    assert "During handling" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*rows.jsonl: 6 tasks, 6 trials, * errors*"])
    alive, _ = wait_gone(token, 30)
    assert not alive
