"""The command of an inner pytest run: a user's run, started by a test."""

from __future__ import annotations

import sys

#: Options of every inner pytest run: pytest's order, and neither Hypothesis's plugin nor anyio's, where installed
#: (the outer run's fuzz tests use the first, httpx brings the second). They cost each inner pytest process about
#: 1.3 s of CPU at start-up, 2/3 of it, and there are hundreds of inner runs.
INNER_RUN_OPTIONS = ("-p", "no:randomly", "-p", "no:hypothesispytest", "-p", "no:anyio")


def pytest_command(*args: str) -> list[str]:
    """``python -m pytest ARGS`` as an inner run: with ``INNER_RUN_OPTIONS`` and no cache folder."""
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *INNER_RUN_OPTIONS, *args]
