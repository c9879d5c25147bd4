"""Counts in prose: "1 new failure", "2 new failures", the same way in the terminal, the report and comments."""

from __future__ import annotations


def counted(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word``, plural (``many``, else ``word`` + "s") unless ``n`` is 1."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
