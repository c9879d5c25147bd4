"""What a Gym start needs, checked when pytest starts (not after Gym ran): the gym CLI, every ``--gym-config``
and the ``--gym-resources-server`` config, found where Gym will look.

Gym's install root is read off the gym CLI's environment (``startargs.gym_site``); nothing imports ``nemo_gym``.
Where that root is unknown (a gym CLI outside a Gym venv), only the CLI is checked: Gym reports the rest.
"""

from __future__ import annotations

import difflib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from pytest_gym.core.endpoint import GymError
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.startargs import gym_site


def check_start(settings: GymSettings, bases: Sequence[Path]) -> None:
    """Raise ``GymError`` naming the option, the places looked in and the fix, when a start cannot work.

    ``bases``: where relative paths were resolved from (the folder pytest was started in, the ini file's).
    """
    if not settings.starts_gym or not (settings.config or settings.resources_server or settings.benchmark):
        return
    cli = check_cli(settings.cli)
    site = gym_site(cli)
    if site is None:
        return
    roots = [*extra_roots(settings), site]
    for config in settings.config:
        check_config(config, roots, bases, site)
    if settings.resources_server:
        check_resources_server(settings.resources_server, roots, site)


def check_cli(cli: str) -> str:
    """The gym executable ``--gym-cli`` names (already absolute when given as a path)."""
    found = shutil.which(cli)
    if found is not None:
        return found
    is_path = "/" in cli or os.sep in cli
    what = (
        f"{cli} is not an executable file"
        if is_path and Path(cli).is_file()
        else f"{cli} does not exist"
        if is_path
        else f"{cli!r} was not found on PATH"
    )
    raise GymError(
        f"pytest-gym: --gym-cli: {what}. Pass the `gym` of a NeMo Gym install (e.g. --gym-cli .venvs/gym/bin/gym; "
        "a relative path is from the folder pytest was started in, or from the ini file's folder), put its bin/ "
        "on PATH (scripts/install-gym.sh installs Gym), or attach to a running Gym with --gym-url"
    )


def extra_roots(settings: GymSettings) -> list[Path]:
    """Roots Gym searches before its install root: ``--gym-search-dir`` and ``$NEMO_GYM_EXTRA_ROOTS``."""
    roots = [Path(d) for d in settings.search_dir]
    return roots + [Path(d) for d in os.environ.get("NEMO_GYM_EXTRA_ROOTS", "").split(os.pathsep) if d]


def check_config(config: str, roots: Sequence[Path], bases: Sequence[Path], site: Path) -> None:
    """A ``--gym-config`` (absolute when found where it was given, else as written) must exist somewhere."""
    path = Path(config)
    if path.is_absolute():
        if not path.is_file():
            raise GymError(f"pytest-gym: --gym-config {config}: no such file")
        return
    if any((root / path).is_file() for root in roots):
        return
    places = [*dict.fromkeys(str(base / path) for base in bases), *(str(root / path) for root in roots)]
    raise GymError(
        f"pytest-gym: --gym-config {config} was found neither where it was given nor in Gym's install root. "
        f"Looked in: {', '.join(places)}. A relative path is from the folder pytest was started in (the ini "
        f"file's folder for gym_config), or from Gym's install root ({site}), e.g. "
        "resources_servers/mcqa/configs/mcqa.yaml"
    )


def check_resources_server(value: str, roots: Sequence[Path], site: Path) -> None:
    """``--gym-resources-server NAME[/FLAVOR]`` is Gym's ``resources_servers/NAME/configs/FLAVOR.yaml``
    (FLAVOR defaults to NAME): when it does not exist, list the configs that do."""
    name, _, flavor = value.partition("/")
    relative = Path("resources_servers") / name / "configs" / f"{flavor or name}.yaml"
    if any((root / relative).is_file() for root in roots):
        return
    flavors = sorted({p.stem for root in roots for p in (root / "resources_servers" / name / "configs").glob("*.yaml")})
    if flavors:
        choices = ", ".join(f"--gym-resources-server {name}/{f}" for f in flavors)
        raise GymError(
            f"pytest-gym: --gym-resources-server {value}: Gym has no {relative} (looked in {site} and the search "
            f"dirs); the configs of {name} are: {', '.join(f + '.yaml' for f in flavors)}. Pass one as {choices} "
            f"(or --gym-config resources_servers/{name}/configs/{flavors[0]}.yaml)"
        )
    servers = sorted(
        {
            d.parent.name
            for root in roots
            for d in (root / "resources_servers").glob("*/configs")
            if d.is_dir() and not d.parent.name.startswith("_")
        }
    )
    close = difflib.get_close_matches(name, servers, n=3)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    raise GymError(
        f"pytest-gym: --gym-resources-server {value}: Gym has no resources server {name!r} (looked in "
        f"{site / 'resources_servers'} and the search dirs).{hint} Resources servers Gym has: {', '.join(servers)}"
    )
