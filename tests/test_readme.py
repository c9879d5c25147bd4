"""The README documents every option the plugin registers."""

from __future__ import annotations

from pathlib import Path

from pytest_gym.settings import SPECS

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def test_every_option_and_ini_name_is_in_the_readme_table() -> None:
    missing = [s.flag for s in SPECS if f"| `{s.flag}" not in README or f"`{s.ini}`" not in README]
    assert missing == []
