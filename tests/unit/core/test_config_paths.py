"""``--gym-config`` paths follow Gym's convention (``core.settings.gym_config_path``).

Gym resolves a relative config under ``$NEMO_GYM_EXTRA_ROOTS`` (``--search-dir``), its working folder and
its install root; it runs in the run folder, so only a path found in the invocation folder (the rootdir for
ini values) is made absolute, and any other stays as written for Gym to find. Through pytest with a fake
``gym``: tests/session/test_gym_config_paths.py; with the real one: tests/gym/test_gym_config_paths.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gym.core.settings import gym_config_path

LC = "resources_servers/equivalence_rule/configs/lc.yaml"


def test_a_path_found_nowhere_here_stays_as_written_for_gym(tmp_path: Path) -> None:
    assert gym_config_path(LC, tmp_path) == LC


def test_a_path_found_in_the_base_folder_becomes_absolute(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.yaml").write_text("{}\n")
    assert gym_config_path("configs/mine.yaml", tmp_path) == str(tmp_path / "configs" / "mine.yaml")
    assert gym_config_path(str(tmp_path / "configs" / ".." / "configs" / "mine.yaml"), Path("/")) == str(
        tmp_path / "configs" / "mine.yaml"
    )


def test_a_path_under_an_extra_root_stays_as_written_even_if_also_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Gym looks in the extra roots first: the same path in the invocation folder would shadow it.
    for root in ("extra", "here"):
        (tmp_path / root / "configs").mkdir(parents=True)
        (tmp_path / root / "configs" / "x.yaml").write_text("{}\n")
    monkeypatch.setenv("NEMO_GYM_EXTRA_ROOTS", f"/nonexistent:{tmp_path / 'extra'}")
    assert gym_config_path("configs/x.yaml", tmp_path / "here") == "configs/x.yaml"


def test_a_path_too_long_for_a_file_name_stays_as_written_for_gym(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file system refuses to look it up (ENAMETOOLONG): found nowhere here, not an INTERNALERROR."""
    long = "x" * 300 + ".yaml"
    monkeypatch.setenv("NEMO_GYM_EXTRA_ROOTS", str(tmp_path))
    assert gym_config_path(long, tmp_path) == long
