"""The ``gym env start`` command line through pytest, against a fake ``gym``: quoted as Hydra expects, head server
pinned, no secret on it (the fake records the argv and, as a digest, the key it was started with)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.startargs import hydra_quote
from tests.helpers.fake_gym_cli import install, recorded_argv, start_args

MARKER = "sk-pytestgym-MARKER-5e1d"
PROBE = """
import json, urllib.request

def test_probe(gym_server):
    with urllib.request.urlopen(gym_server.policy_url + "/_script", timeout=10) as answer:
        script = json.load(answer)
    print("SCRIPT=" + json.dumps(script))
"""


@pytest.fixture
def fake(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytester.makeini("[pytest]\n")
    monkeypatch.setenv("FAKE_GYM_RECORD", str(pytester.path / "record"))
    return install(pytester.path / "bin")


def _script(result: pytest.RunResult) -> dict[str, object]:
    line = next(line for line in result.outlines if "SCRIPT=" in line)
    script: dict[str, object] = json.loads(line.split("SCRIPT=", 1)[1].removesuffix("."))
    return script


NASTY_MODEL = 'org/model,v2 "it\'s" ${oc.env:HOME}'


def test_generated_overrides_are_quoted_and_the_head_server_pinned(pytester: pytest.Pytester, fake: Path) -> None:
    odd = pytester.path / "odd, 'dir'"
    odd.mkdir()
    (odd / "extra.yaml").write_text("{}\n")
    pytester.makepyfile(test_probe=PROBE)
    result = pytester.runpytest(
        "-s",
        *start_args(fake, "--gym-model", NASTY_MODEL, "--gym-config", "odd, 'dir'/extra.yaml", "--gym-policy-answer=-x",
                    "--gym-set", "responses_create_params.max_output_tokens=64"),
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    argv = recorded_argv(pytester.path / "record")
    assert f"++policy_model_name={hydra_quote(NASTY_MODEL)}" in argv
    assert "++policy_model_name='org/model,v2 \"it\\'s\" \\${oc.env:HOME}'" in argv
    assert "++head_server.host=127.0.0.1" in argv
    assert "+responses_create_params.max_output_tokens=64" in argv  # --gym-set stays Hydra syntax as written
    config = Path(argv[argv.index("--config") + 1])
    assert not set(",' ") & set(str(config))
    assert config.resolve() == (odd / "extra.yaml").resolve()
    # The policy got the very name and answer (argv items, no shell and no Hydra in between).
    assert _script(result)["model"] == NASTY_MODEL
    assert _script(result)["answer"] == "-x"


def test_no_secret_reaches_argv_the_log_or_the_run_info(
    pytester: pytest.Pytester, fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)
    pytester.makepyfile(test_probe="def test_probe(gym_server):\n    assert gym_server.agents == ['fake_agent']\n")
    args = start_args(fake, "--gym-model-url", "https://models.example/v1?deployment=eu", "--gym-model", "m")
    args = tuple(a for a in args if a not in ("--gym-policy", "scripted"))
    result = pytester.runpytest("-s", *args)
    result.assert_outcomes(passed=1)
    argv = recorded_argv(pytester.path / "record")
    assert "++policy_base_url='https://models.example/v1?deployment=eu'" in argv
    assert not any(MARKER in item for item in argv)
    # ... the key reaches Gym through its environment (env.yaml: ${oc.env:GYM_POLICY_API_KEY}).
    record = json.loads((pytester.path / "record" / "argv.json").read_text())
    assert record["key_sha256"] == hashlib.sha256(MARKER.encode()).hexdigest()
    assert "${oc.env:GYM_POLICY_API_KEY" in (pytester.path / "run" / "env.yaml").read_text()
    run = pytester.path / "run"
    for name in ("gym_env.log", "pytest_gym_run.json", "deployment.json"):
        assert (run / name).is_file(), name
    state = json.loads((run / "deployment.json").read_text())
    assert state["stopped"] == ["gym: stopped by SIGINT"]  # by its supervisor, asked at the end of the run
    leaks = [str(p) for p in run.rglob("*") if p.is_file() and not p.is_symlink() and MARKER.encode() in p.read_bytes()]
    assert leaks == []
    assert MARKER not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("--gym-model-url", f"https://user:{MARKER}@models.example/v1"), "user-info before '@' in the URL"),
        (("--gym-model-url", f"https://{MARKER}@models.example/v1"), "user-info before '@' in the URL"),
        (("--gym-model-url", f"https://models.example/v1?api_key={MARKER}"), "query key 'api_key'"),
        (("--gym-model-url", f"https://models.example/v1?key={MARKER}&x=1"), "query key 'key'"),
        (("--gym-set", f"policy_api_key={MARKER}"), "setting 'policy_api_key'"),
        (("--gym-set", f"++judge.access_token={MARKER}"), "setting 'judge.access_token'"),
        (("--gym-set", f"judge_model.password={MARKER}"), "setting 'judge_model.password'"),
        (("--gym-set", f"judge_base_url=https://u:{MARKER}@judge/v1"), "a URL in 'judge_base_url' with user-info"),
    ],
)
def test_credentials_on_the_command_line_are_refused(
    pytester: pytest.Pytester, args: tuple[str, ...], problem: str
) -> None:
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    assert problem in text
    assert "GYM_POLICY_API_KEY" in text
    assert "${oc.env:" in text
    assert MARKER not in text


def test_a_gym_url_with_a_query_string_is_refused(pytester: pytest.Pytester) -> None:
    """Routes are appended to --gym-url: a query gives ``/?sig=X/server_instances``; a signed one is a credential."""
    result = pytester.runpytest("--gym-url", f"https://gym.example:11000/?sig={MARKER}", "--gym-dataset", "d.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    assert "--gym-url from command line (--gym-url) holds a credential (query key 'sig')" in text, text
    assert "--gym-header NAME=ENVVAR" in text
    assert MARKER not in text
    result = pytester.runpytest("--gym-url", "https://gym.example:11000/?region=eu", "--gym-dataset", "d.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*holds a query string or fragment: pytest-gym appends Gym's routes*"])
    assert GymSettings(url="https://gym.example:11000/gym").url == "https://gym.example:11000/gym"


def test_credentials_in_the_ini_file_are_refused(pytester: pytest.Pytester) -> None:
    pytester.makeini(f"[pytest]\ngym_model_url = https://models.example/v1?token={MARKER}\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gym-model-url from ini file (gym_model_url) holds a credential (query key 'token')*"]
    )
    assert MARKER not in result.stdout.str() + result.stderr.str()
