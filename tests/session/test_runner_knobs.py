"""Gym fidelity knobs against a fake ``gym``: the exact argv and environment Gym gets, secrets kept out of
everything the run writes, the run timeout, Hydra parameters flattened from suite files, binding a
composable agent. (Against the real Gym: tests/gym/test_benchmark_suites.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.startargs import bind_override, flatten_hydra, gym_command, hydra_item
from tests.helpers.fake_gym_cli import MARK, install, recorded_argv, start_args, wait_gone
from tests.helpers.paths import GYMROOT
from tests.helpers.realgym import need_gym

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
    monkeypatch.setenv("FAKE_GYM_ENV_NAMES", "DEPLOY_SETTING,PLAIN,HF_TOKEN")
    monkeypatch.setenv("FAKE_GYM_ECHO", "DEPLOY_SETTING,HF_TOKEN")
    result = pytester.runpytest(
        *start_args(fake), "--gym-dataset", "rows.jsonl", "--junitxml", "report.xml",
        "--gym-env", "PLAIN=visible-value", "--gym-env", f"HF_TOKEN={ENV_SECRET}",
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
    assert "pytest-gym: environment: PLAIN=visible-value HF_TOKEN=*** DEPLOY_SETTING=(passed through)" in log
    assert "fake gym: DEPLOY_SETTING is ***" in log  # echoed by Gym, masked in place


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


@pytest.mark.gym
def test_hydra_mapping_is_read_back_by_gyms_own_parser(tmp_path: Path) -> None:
    gym_python = Path(need_gym()).parent / "python"
    from test_start_args import HYDRA_CHECK

    nested = {"a": {"s": "x, y [z] = 'q' \"r\"", "n": 3, "f": 0.5, "t": True, "none": None, "l": ["a b", 1]},
              "b": {"url": "http://h:1/v1?x=1", "env": "${oc.env:HOME}", "dollar": "a ${oc.env:HOME}",
                    "empty": ""}}  # fmt: skip
    overrides = [hydra_item(item) for item in flatten_hydra(nested)]
    answer = subprocess.run(
        [str(gym_python), "-c", HYDRA_CHECK], input=json.dumps(overrides), capture_output=True, text=True, timeout=120
    )
    assert answer.returncode == 0, answer.stderr
    # exactly ${oc.env:NAME} is Gym's environment reference (resolved here); any other ${ stays as written
    assert json.loads(answer.stdout) == {
        "a.s": nested["a"]["s"], "a.n": 3, "a.f": 0.5, "a.t": True, "a.none": None, "a.l": ["a b", 1],
        "b.url": "http://h:1/v1?x=1", "b.env": os.environ["HOME"], "b.dollar": "a ${oc.env:HOME}", "b.empty": "",
    }  # fmt: skip


def test_a_composable_agent_is_bound_to_the_only_resources_server(tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text(
        "my_agent:\n  responses_api_agents:\n    simple_agent:\n      resources_server:\n"
        "        type: resources_servers\n        name: ???\n"
    )
    (tmp_path / "rs.yaml").write_text("my_rs:\n  resources_servers:\n    mcqa: {entrypoint: app.py}\n")
    configs = (str(tmp_path / "agent.yaml"), str(tmp_path / "rs.yaml"))
    expected = "++my_agent.responses_api_agents.simple_agent.resources_server.name=my_rs"
    assert bind_override(GymSettings(config=configs), "gym", tmp_path) == expected
    assert expected in gym_command(GymSettings(config=configs), "gym", None, 1, tmp_path)
    assert bind_override(GymSettings(config=configs, bind_resources_server="off"), "gym", tmp_path) is None
    named = bind_override(GymSettings(config=configs, bind_resources_server="other"), "gym", tmp_path)
    assert named == "++my_agent.responses_api_agents.simple_agent.resources_server.name=other"
    (tmp_path / "rs2.yaml").write_text("rs2:\n  resources_servers:\n    mcqa: {entrypoint: app.py}\n")
    two = (*configs, str(tmp_path / "rs2.yaml"))
    assert bind_override(GymSettings(config=two), "gym", tmp_path) is None  # which one? Gym's error says
