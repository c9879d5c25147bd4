"""A path given to a pytest-gym option after a space must not move pytest's rootdir.

pytest looks for its configuration file (and so its rootdir) before it loads plugins: at that moment
``--gym-reuse /tmp/kept`` is an unknown option followed by a path, and the path counts as one of the test
paths. A folder outside the project then makes pytest miss the project's ini file: its ``gym_*`` settings are
not read, and "no tests collected" is all it says. ``--gym-reuse=/tmp/kept`` is not affected. This module finds
the case after the fact (pytest's own search again, with and without those values): where it made pytest miss
a configuration file, a usage error names the fix.
"""

from __future__ import annotations

import inspect
import itertools
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.options import SPECS
from pytest_gym.core.settings import path_exists

#: Options that take a value, as spelled on the command line.
VALUE_FLAGS = frozenset(spec.flag for spec in SPECS if spec.kind != "flag")


def values_after_a_space(args: Sequence[str], invocation_dir: Path) -> list[tuple[str, str]]:
    """(flag, value) for each pytest-gym option given as ``--gym-x VALUE`` whose value is an existing path."""
    found = []
    for flag, value in itertools.pairwise(args):
        if flag in VALUE_FLAGS and not value.startswith("-") and path_exists(invocation_dir / value):
            found.append((flag, value))
    return found


def _setup(config: pytest.Config, args: Sequence[str]) -> tuple[Path, Path | None] | None:
    """The rootdir and configuration file pytest's own search gives for these test paths; None where this pytest's
    search is not the one known here."""
    try:
        from _pytest.config.findpaths import determine_setup
    except ImportError:
        return None
    option = config.option
    kwargs: dict[str, Any] = {
        "inifile": getattr(option, "inifilename", None),
        "args": list(args),
        "rootdir_cmd_arg": getattr(option, "rootdir", None) or None,
        "invocation_dir": config.invocation_params.dir,
    }
    parameters = inspect.signature(determine_setup).parameters
    if "override_ini" in parameters:
        kwargs["override_ini"] = getattr(option, "override_ini", None)
    if not set(kwargs) <= set(parameters):
        return None
    try:
        found = determine_setup(**kwargs)
    except Exception:  # pytest's own errors (a bad -c) are reported by pytest
        return None
    return Path(found[0]), None if found[1] is None else Path(found[1])


def check_rootdir(config: pytest.Config) -> None:
    """Raise a UsageError when a pytest-gym option's value, given after a space, moved pytest's rootdir."""
    invocation = config.invocation_params
    args = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *invocation.args]
    suspects = values_after_a_space(args, invocation.dir)
    if not suspects:
        return
    # The test paths: every argument that is not an option nor a known option's value (pytest's own, xdist's,
    # ours); pytest's early search took ours for test paths too.
    try:
        test_paths = [str(arg) for arg in config._parser.parse_known_args(args).file_or_dir]
    except Exception:
        return
    moved = _setup(config, [*test_paths, *(value for _, value in suspects)])
    meant = _setup(config, test_paths)
    if moved is None or meant is None or moved[0] != config.rootpath:
        return  # not what this pytest did: say nothing rather than something wrong
    if meant[1] is None or meant[1] == moved[1]:
        return  # no configuration file was missed (a moved rootdir alone changes nothing the run reads)
    flag, value = suspects[0]
    raise pytest.UsageError(
        f"pytest took its rootdir ({config.rootpath}) from the value of {flag} ({value}), not {meant[0]}, so it did "
        f"not read {meant[1]}: pytest looks for its configuration file before it loads plugins, when a plugin "
        f"option's value after a space counts as a test path. Write {flag}={value} (or pass --rootdir)."
    )
