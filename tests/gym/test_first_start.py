"""A first start against the real Gym (issue 24 items 2-5): a start that fails is reported once with its real
cause and the fix, every other trial in one line; names and paths Gym would refuse are usage errors before
anything starts; a resources server's config alone starts with the model config added."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

LC = "resources_servers/equivalence_rule/configs/lc.yaml"


def _without_uv() -> str:
    """PATH without any folder holding a `uv`: Gym then cannot build its servers' venvs."""
    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not shutil.which("uv", path=d))


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_start_without_uv_says_so_once_with_the_fix(
    pytester: pytest.Pytester, example: Path, gym_cli: str, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    """18 trials, Gym started without --gym-server-venv where there is no uv: the cause (20 lines above Gym's
    own "Process 'mcqa' finished unexpectedly!" in its log) once, with `--gym-server-venv auto` as the fix."""
    monkeypatch.setenv("PATH", _without_uv())
    rows = example.read_text().splitlines()
    (pytester.path / "six.jsonl").write_text("\n".join([*rows, json.dumps({**json.loads(rows[0]), "id": 6})]) + "\n")
    result = pytester.runpytest_subprocess(
        "--gym-dataset", "six.jsonl", "--gym-repeats", "3", "--gym-resources-server", "mcqa",
        "--gym-policy", "scripted", f"--gym-cli={gym_cli}", "--gym-run-dir", "run", "--gym-startup-timeout", "180",
        *workers,
    )  # fmt: skip
    result.assert_outcomes(errors=18)
    output = result.outlines + result.errlines
    text = "\n".join(output)
    assert len(output) < 100, text
    assert 1 <= text.count("uv: command not found") <= 2, text
    assert "During handling of the above exception" not in text
    result.stdout.fnmatch_lines(
        [
            "*Gym exited with code * during start-up.",
            "first error in the log: (*) /bin/bash: line 1: uv: command not found",
            "fix: Gym builds one venv per server with `uv`, which is not on PATH: pass --gym-server-venv auto*",
            "log: */run/gym_env.log, last lines:",
        ]
    )
    assert text.count("ERROR at setup of") == 18
    assert text.count("not run: Gym is unavailable") >= 17


def test_names_gym_would_refuse_are_usage_errors_before_any_start(
    pytester: pytest.Pytester, example: Path, gym_cli: str
) -> None:
    site = next(Path(gym_cli).resolve().parent.parent.glob("lib/python3*/site-packages"))
    common = ("--gym-dataset", "example.jsonl", "--gym-policy", "scripted", f"--gym-cli={gym_cli}")
    result = pytester.runpytest(*common, "--gym-resources-server", "equivalence_rule")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*the configs of equivalence_rule are: *lc.yaml*Pass one as --gym-resources-server equivalence_rule/*"]
    )
    typo = LC.replace("lc.yaml", "lcc.yaml")
    result = pytester.runpytest(*common, "--gym-config", typo)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*Looked in: {pytester.path}/{typo}, *{typo}*"])
    assert str(site.resolve()) in result.stderr.str() or str(site) in result.stderr.str()
    assert not list(pytester.path.rglob("gym_env.log"))  # nothing was started


def test_a_resources_servers_config_alone_starts_with_the_model_config_added(
    pytester: pytest.Pytester, gym_cli: str
) -> None:
    """`--gym-config .../lc.yaml` without openai_model.yaml: Gym gets --model-type openai_model, as with
    --gym-resources-server (before: Gym stopped on a missing policy_model)."""
    site = next(Path(gym_cli).resolve().parent.parent.glob("lib/python3*/site-packages"))
    shutil.copy(site / "resources_servers/equivalence_rule/data/example.jsonl", pytester.path / "lc.jsonl")
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(
        "--gym-dataset", "lc.jsonl", "--gym-config", LC, "--gym-policy", "scripted", "--gym-policy-answer", "6",
        f"--gym-cli={gym_cli}", "--gym-server-venv", "auto", "--gym-run-dir", "run", "--gym-shutdown-grace", "20",
    )  # fmt: skip
    result.assert_outcomes(passed=2, failed=3)
    assert f"--config {LC} --model-type openai_model" in (pytester.path / "run" / "gym_env.log").read_text()
