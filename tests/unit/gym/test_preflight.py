"""What a Gym start needs, checked before it (issue 24 items 3 and 5): the gym CLI, every --gym-config found where
it was given or in Gym's install root, --gym-resources-server NAME's config (else the configs that exist), and
the model config a --gym-config without one is completed with. Through pytest: tests/session/test_preflight.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gym.core.endpoint import GymError
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.preflight import check_start
from pytest_gym.gym.startargs import gym_command, gym_site
from tests.helpers.fake_gym_cli import install_with_root

LC = "resources_servers/equivalence_rule/configs/lc.yaml"
MCQA = "resources_servers/mcqa/configs/mcqa.yaml"


@pytest.fixture
def gym(tmp_path: Path) -> tuple[str, Path]:
    cli, site = install_with_root(tmp_path / "venv", (LC, MCQA, "resources_servers/math/configs/math.yaml"))
    return str(cli), site


def test_gyms_install_root_is_read_off_the_cli(gym: tuple[str, Path], tmp_path: Path) -> None:
    cli, site = gym
    assert gym_site(cli) == site
    assert gym_site(str(tmp_path / "nope")) is None


@pytest.mark.parametrize("cli", ["/no/such/gym", "no-such-gym-command"])
def test_a_missing_cli_names_itself_and_the_fix(cli: str) -> None:
    fix = r"--gym-cli: .*(does not exist|not found on PATH).*--gym-cli .venvs/gym/bin/gym"
    with pytest.raises(GymError, match=fix):
        check_start(GymSettings(cli=cli, resources_server="mcqa"), ())


def test_nothing_is_checked_when_nothing_is_started() -> None:
    check_start(GymSettings(cli="/no/such/gym"), ())
    check_start(GymSettings(cli="/no/such/gym", resources_server="mcqa", url="http://127.0.0.1:1"), ())


def test_a_config_found_nowhere_lists_both_places(gym: tuple[str, Path], tmp_path: Path) -> None:
    cli, site = gym
    with pytest.raises(GymError) as caught:
        check_start(GymSettings(cli=cli, config=("configs/nope.yaml",)), (tmp_path / "here",))
    message = str(caught.value)
    assert f"Looked in: {tmp_path / 'here' / 'configs/nope.yaml'}, {site / 'configs/nope.yaml'}." in message
    check_start(GymSettings(cli=cli, config=(LC,)), (tmp_path,))  # Gym's own relative path: found in its root


def test_a_resources_server_without_its_config_lists_the_configs_it_has(gym: tuple[str, Path]) -> None:
    cli, _ = gym
    with pytest.raises(GymError, match=r"configs of equivalence_rule are: lc.yaml\. Pass one as "
                       r"--gym-resources-server equivalence_rule/lc"):  # fmt: skip
        check_start(GymSettings(cli=cli, resources_server="equivalence_rule"), ())
    check_start(GymSettings(cli=cli, resources_server="equivalence_rule/lc"), ())
    check_start(GymSettings(cli=cli, resources_server="mcqa"), ())


def test_an_unknown_resources_server_lists_those_there_are(gym: tuple[str, Path]) -> None:
    cli, _ = gym
    with pytest.raises(GymError, match=r"no resources server 'mcq'.*Did you mean mcqa\?.*Gym has: equivalence_rule, "
                       r"math, mcqa$"):  # fmt: skip
        check_start(GymSettings(cli=cli, resources_server="mcq"), ())


def _model_type(args: list[str]) -> str | None:
    return args[args.index("--model-type") + 1] if "--model-type" in args else None


def test_a_config_without_a_model_gets_the_model_type(gym: tuple[str, Path], tmp_path: Path) -> None:
    cli, _ = gym
    settings = GymSettings(cli=cli, config=(LC,), model_type="openai_model")
    assert _model_type(gym_command(settings, cli, None, 1, tmp_path / "run")) == "openai_model"
    model = tmp_path / "model.yaml"
    model.write_text("policy_model:\n  responses_api_models:\n    openai_model: {}\n")
    with_model = GymSettings(cli=cli, config=(LC, str(model)))
    assert _model_type(gym_command(with_model, cli, None, 1, tmp_path / "run")) is None
    unknown = GymSettings(cli=cli, config=("somewhere/else.yaml",))  # not found here: as given, Gym decides
    assert _model_type(gym_command(unknown, cli, None, 1, tmp_path / "run")) is None
