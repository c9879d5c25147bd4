"""Gym's own Hydra override parser and OmegaConf (run from Gym's venv) read back what pytest-gym puts on
``gym env start``'s command line: the generated overrides, and ``--gym-hydra`` mappings flattened from suite files."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.startargs import flatten_hydra, gym_command, hydra_item, hydra_quote
from tests.helpers.realgym import need_gym

HYDRA_CHECK = """
import json, sys
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

parser = OverridesParser.create()
values = {}
for override in json.loads(sys.stdin.read()):
    parsed = parser.parse_override(override)
    config = OmegaConf.create({"value": parsed.value()})
    values[parsed.key_or_group] = OmegaConf.to_container(config, resolve=True)["value"]
print(json.dumps(values))
"""


def test_gyms_own_hydra_parser_reads_the_overrides_back(tmp_path: Path) -> None:
    gym_python = Path(need_gym()).parent / "python"
    model = 'org/model,v2 "it\'s" ${oc.env:HOME} \\ end\\'
    url = "http://127.0.0.1:9/v1?deployment=eu&x=[1]"
    run_dir = tmp_path / "run, 'odd' ${x}"
    settings = GymSettings(resources_server="mcqa", model=model, model_url=url, server_venv=None)
    argv = gym_command(settings, "gym", None, 12345, run_dir)
    # The venv links folder would carry the run folder's name: quote it as the command does.
    overrides = [a for a in argv if a.startswith("++")] + [f"++uv_venv_dir={hydra_quote(str(run_dir))}"]
    answer = subprocess.run(
        [str(gym_python), "-c", HYDRA_CHECK], input=json.dumps(overrides), capture_output=True, text=True, timeout=120
    )
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout) == {
        "policy_base_url": url,
        "policy_model_name": model,
        "head_server.host": "127.0.0.1",
        "head_server.port": 12345,
        "uv_venv_dir": str(run_dir),
        # --gym-trajectories on (the default): an absolute capture folder inside the run folder, read back whole.
        "observability_enabled": True,
        "model_call_capture_dir": str(run_dir.resolve() / "model_calls"),
    }


def test_hydra_mapping_is_read_back_by_gyms_own_parser(tmp_path: Path) -> None:
    gym_python = Path(need_gym()).parent / "python"

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
