"""A pytest-gym ini setting spelled wrong is a usage error, not a warning at the end of the run.

pytest warns about an ini key no plugin registered ("Unknown config option") and runs without it (an error only
under ``--strict-config``): a misspelt ``gym_gates = pass@4 >= 0.9`` ran the suite ungated, and it passed. pytest-gym
owns the ``gym_`` names: a key of that prefix that no plugin registered is refused, with the nearest setting named.
Keys another plugin registered, and keys of other prefixes, are left to pytest.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import pytest

from pytest_gym.core.options import SPECS


def unknown_keys(config: pytest.Config, keys: Iterable[str]) -> list[str]:
    """The keys given that no plugin registered (``getini`` refuses exactly those)."""
    unknown = []
    for key in keys:
        try:
            config.getini(key)
        except ValueError:
            unknown.append(key)
    return sorted(unknown)


def check_ini_keys(config: pytest.Config, keys: Iterable[str]) -> None:
    """Raise a UsageError naming every unknown key of ``keys`` (the ``gym_`` ones given) and the setting it was
    likely meant to be."""
    unknown = unknown_keys(config, keys)
    if not unknown:
        return
    names = [spec.ini for spec in SPECS]
    shown = []
    for key in unknown:
        close = difflib.get_close_matches(key, names, n=1)
        shown.append(key + (f" (did you mean {close[0]}?)" if close else ""))
    where = f"{config.inipath} or -o" if config.inipath is not None else "-o"
    many = len(shown) > 1
    raise pytest.UsageError(
        f"pytest-gym: unknown setting{'s' if many else ''} {', '.join(shown)} (from {where}); pytest would run "
        f"without {'them' if many else 'it'}. Every pytest-gym setting is an option's name with gym_ (--gym-repeats "
        "is gym_repeats): the README's option table lists them"
    )
