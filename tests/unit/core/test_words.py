from __future__ import annotations

import pytest

from pytest_gym.core.words import counted


@pytest.mark.parametrize(
    ("n", "word", "many", "text"),
    [
        (0, "new failure", None, "0 new failures"),
        (1, "new failure", None, "1 new failure"),
        (2, "new failure", None, "2 new failures"),
        (1, "known-failure entry", "known-failure entries", "1 known-failure entry"),
        (3, "known-failure entry", "known-failure entries", "3 known-failure entries"),
    ],
)
def test_a_count_of_one_is_singular_any_other_plural(n: int, word: str, many: str | None, text: str) -> None:
    assert counted(n, word, many) == text
