"""The report page's embedded data, and Chromium through Selenium for the browser tests (fixture ``browser``:
conftest.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.paths import ROOT


def page_data(html: str) -> Any:
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert found is not None
    return json.loads(found.group(1))


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def need_browser() -> None:
    """Skip without Chromium, its driver or Selenium locally; fail in CI, where they must be."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if missing:
        message = f"{', '.join(missing)} missing (scripts/install-browser.sh; pip install selenium)"
        if os.environ.get("CI"):
            pytest.fail(message + ": browser tests must run in CI")
        pytest.skip(message)


def artifacts_dir() -> Path:
    path = Path(os.environ.get("PYTEST_GYM_ARTIFACTS") or ROOT / ".pytest_gym" / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def console_errors(driver: Any) -> list[dict[str, Any]]:
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def screenshot(driver: Any, target: Path) -> Path:
    """The whole page (the window grown to its height), as a PNG."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1300, min(int(height) + 120, 12_000))
    driver.save_screenshot(str(target))
    return target


def rows_shown(driver: Any) -> int:
    return int(driver.execute_script("return document.querySelectorAll('table.tasks tr.row').length"))


def click(driver: Any, selector: str) -> None:
    driver.execute_script("document.querySelector(arguments[0]).click()", selector)
