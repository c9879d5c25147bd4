"""xdist glue, registered only when pytest-xdist is installed."""

from __future__ import annotations

from typing import Any

import pytest


class XdistHooks:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl
    def pytest_configure_node(self, node: Any) -> None:
        """Send the run folder to each worker: they share the controller's deployment."""
        from pytest_gym.plugin import RUN_KEY, WORKER_RUN_DIR

        node.workerinput[WORKER_RUN_DIR] = str(self.config.stash[RUN_KEY].run_dir)
