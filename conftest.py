"""Fixtures for all of pytest-gym's own tests (the real-Gym ones: tests/gym/conftest.py; helpers: tests/helpers/)."""

from __future__ import annotations

import importlib
import pkgutil
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# pytester's in-process runs restore sys.modules afterwards, dropping what the plugin imported lazily.
# PyYAML's C loader (yaml._yaml, used by OmegaConf) cannot be re-imported: it keeps the node classes of
# the first import, so a fresh yaml then fails with "could not determine a constructor for the tag None"
# (tests/session/test_suite_files.py run alone). Imported here, yaml is in pytester's snapshot and kept.
import yaml  # noqa: F401

import pytest_gym
from tests.helpers.browser import CHROMEDRIVER, CHROMIUM, need_browser
from tests.helpers.inner_runs import INNER_RUN_OPTIONS
from tests.helpers.paths import EXAMPLE
from tests.helpers.standin import RawServer
from tests.helpers.worker_shares import worker_order


def _import_the_whole_plugin() -> None:
    """Import every module of the plugin (and the template engine its report loads when used) once, here.

    pytester's in-process runs restore sys.modules afterwards, so what the plugin imports lazily was imported
    again by every such run: about 0.5 s of CPU of a 0.6 s run of 20 reused trials (a test that runs 15 of
    them: 626 -> 130 ms each), for hundreds of runs. Imported before pytester's snapshot, it is kept.
    The plugin's own laziness (an unused plugin imports only its options) is checked in subprocesses."""
    for module in pkgutil.walk_packages(pytest_gym.__path__, "pytest_gym."):
        importlib.import_module(module.name)
    importlib.import_module("jinja2")


_import_the_whole_plugin()


@pytest.fixture
def example(pytester: pytest.Pytester) -> Path:
    """The bundled 5-row mcqa example, copied so the rootdir is the test's own folder."""
    path = pytester.path / "example.jsonl"
    shutil.copy(EXAMPLE, path)
    pytester.makeini("[pytest]\n")
    return path


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium (Selenium), for tests marked ``browser``."""
    need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1300,900",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def listener() -> Iterator[RawServer]:
    """A URL on 127.0.0.1 (``base_url``) that counts the connections made to it (and answers none)."""
    with RawServer() as server:
        server.answer = lambda request: b""
        server.close_after = True
        yield server


@pytest.fixture(autouse=True)
def _inner_pytest_runs(request: pytest.FixtureRequest) -> None:
    """Runs made with pytester get ``INNER_RUN_OPTIONS`` (tests/helpers/inner_runs.py says why).

    The outer run may be shuffled (that finds tests that lean on each other); the inner runs are a user's
    runs whose output the tests read line by line. Without Hypothesis's plugin alone the same tests took 43%
    less CPU. pytester clears PYTEST_ADDOPTS, so set it after it.
    """
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
        request.getfixturevalue("monkeypatch").setenv("PYTEST_ADDOPTS", " ".join(INNER_RUN_OPTIONS))


def _is_xdist_twin(item: pytest.Item) -> bool:
    """A parametrized test's ``-n 2`` case whose other case runs the same inner run without xdist."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    return any(isinstance(value, (tuple, list)) and "-n" in value for value in callspec.params.values())


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark the ``-n 2`` twins ``xdist_twin`` (before ``-m`` selects by markers): the oldest-setup leg skips them."""
    if _is_xdist_twin(item):
        item.add_marker(pytest.mark.xdist_twin)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real-Gym tests run first and together (in one process: all of them; under xdist: the shares of at
    most two workers start with them), so the Ray cluster and the Gyms they share (tests/gym/conftest.py,
    scoped to that folder) start once per process and stop as soon as its last real-Gym test is done, not idle
    (about 2-4% of a core each) through the rest of the run. A file's real-Gym tests mostly run in one worker
    (sorted by file, shuffled within each), so the Gyms it keeps (``kept_pool``) serve its other tests.

    Every share ends with short tests, in the order pytest-randomly chose: an idle worker steals from the end
    of a busy one's queue, so the run does not end on one Gym test keeping a worker busy for a minute while the
    others wait (CI's last minute ran at 1-14% CPU before). tests/helpers/worker_shares.py says why no third
    worker starts Gyms. Every worker computes the same order from the same shuffled list, as xdist requires."""
    workers = max(1, int(getattr(config, "workerinput", {}).get("workercount", 1)))
    slow: list[pytest.Item] = []
    fast: list[pytest.Item] = []
    for item in items:
        (slow if item.get_closest_marker("gym") is not None else fast).append(item)
    if not slow or not fast:
        return
    slow.sort(key=lambda item: str(item.path))  # stable: pytest-randomly's order within each file
    items[:] = worker_order(slow, fast, workers)
