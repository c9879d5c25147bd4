"""Installed but unused, the plugin costs nothing: no run folder, none of its heavy imports.

A pytest run with no dataset, no suite file and no gym option only registers the options. Checked in a
subprocess (a fresh interpreter, as a user's run has), from inside the run itself: a conftest records
every loaded module of each process (with ``-n 2`` the controller and both workers) at its end.
"""

from __future__ import annotations

import json

import pytest

#: What registering the options may load: the plugin module, its option table, hook specs and xdist wiring
#: with the small standard-library modules those use (the dataset's errors are masked: core.masking).
CHEAP = {
    "pytest_gym",
    "pytest_gym.plugin",
    "pytest_gym.hookspecs",
    "pytest_gym.xdist_hooks",
    "pytest_gym.current",
    "pytest_gym.core",
    "pytest_gym.core.options",
    "pytest_gym.core.outcome",
    "pytest_gym.core.tracing",
    "pytest_gym.core.numbers",
    "pytest_gym.core.dataset",
    "pytest_gym.core.masking",
    "pytest_gym.runfolder",
    "pytest_gym.runfolder.layout",
    "pytest_gym.runfolder.location",
}
#: Third-party packages only a used plugin needs (the roots of their module names).
HEAVY = {"pydantic", "pydantic_core", "yaml", "omegaconf", "junitparser", "mlflow", "httpx"}

# At sessionfinish too: an xdist worker may be ended before its unconfigure once the controller has its results.
RECORDER = """
import json, os, sys

def record(config):
    who = getattr(config, "workerinput", {}).get("workerid", "controller")
    path = os.path.join(os.environ["LOADED_DIR"], who + ".json")
    with open(path + ".tmp", "w") as fh:
        json.dump(sorted(sys.modules), fh)
    os.replace(path + ".tmp", path)  # whole or not at all, should the process end meanwhile

def pytest_sessionfinish(session):
    record(session.config)

def pytest_unconfigure(config):
    record(config)
"""


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_run_that_uses_no_gym_loads_and_creates_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: tuple[str, ...]
) -> None:
    if xdist:
        pytest.importorskip("xdist")
    loaded_dir = pytester.mkdir("loaded")
    monkeypatch.setenv("LOADED_DIR", str(loaded_dir))
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(RECORDER)
    pytester.makepyfile(test_plain="def test_one():\n    assert 1 + 1 == 2\n\ndef test_two():\n    pass\n")
    result = pytester.runpytest_subprocess(*xdist)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["plugins:*gym-*"])  # installed and loaded, just not in use
    assert not list(pytester.path.rglob(".pytest_gym")), "an unused plugin made a run folder"
    records = {p.stem: json.loads(p.read_text()) for p in loaded_dir.glob("*.json")}
    assert set(records) == ({"controller", "gw0", "gw1"} if xdist else {"controller"})
    for who, modules in records.items():
        ours = {m for m in modules if m.split(".")[0] == "pytest_gym"}
        assert "pytest_gym.plugin" in ours, who
        assert ours <= CHEAP, f"{who} loaded {sorted(ours - CHEAP)}"
        heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
        assert not heavy, f"{who} loaded {heavy}"


def test_the_recorder_sees_a_used_plugin_load_its_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: the same run with a gym option loads the session and pydantic."""
    loaded_dir = pytester.mkdir("loaded")
    monkeypatch.setenv("LOADED_DIR", str(loaded_dir))
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(RECORDER)
    pytester.makepyfile(test_plain="def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("--gym-repeats", "2")
    result.assert_outcomes(passed=1)
    modules = set(json.loads((loaded_dir / "controller.json").read_text()))
    assert "pytest_gym.session" in modules
    assert "pydantic" in modules
