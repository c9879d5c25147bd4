"""Where an ini file's relative paths are from (one rule for every setting, suite and dataset)."""

from __future__ import annotations

from pathlib import Path

import pytest


def ini_dir(config: pytest.Config) -> Path:
    """The ini file's own folder (the rootdir when there is no ini file): ``--rootdir`` elsewhere does not move it."""
    return config.inipath.parent if config.inipath is not None else config.rootpath
