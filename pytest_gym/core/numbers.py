"""What counts as a number in JSON read from Gym, a run folder or a dataset: ``True`` is not 1 here.

Python's ``bool`` is an ``int``; a reward, an index or a token count that arrives as ``true`` is a
malformed value, not a one.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value: Any) -> TypeGuard[int | float]:
    return is_number(value) and math.isfinite(value)
