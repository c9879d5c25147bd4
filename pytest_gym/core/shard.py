"""``--gym-shard I/N``: which tasks one CI job runs when a suite is split across jobs.

A task's shard depends on nothing but its content hash and N (Lamping and Veach's jump consistent hash
of the hash's first 64 bits), so:

- all repeats of a task run in one shard (their verdicts need each other: pass@k, flaky);
- appending, removing or reordering rows moves no other task (a rank-and-deal split would move most);
- going from N to N+1 shards moves only the 1/(N+1) of tasks the new shard takes (``hash % N`` would move
  N/(N+1) of them), so a ``--gym-resume`` of a resharded suite still finds most trials where they were;
- shards are balanced like a fair N-sided die: about T/N tasks each, off by a few sqrt(T/N)
  (``benchmarks/shards.py`` measures it).

Standard library only: collection calls it for every task.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: CI variables ``--gym-shard auto`` reads: (index variable, count variable, first index).
CI_VARIABLES: tuple[tuple[str, str, int], ...] = (
    ("CI_NODE_INDEX", "CI_NODE_TOTAL", 1),  # GitLab CI `parallel:`
    ("BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", 0),  # Buildkite `parallelism:`
    ("CIRCLE_NODE_INDEX", "CIRCLE_NODE_TOTAL", 0),  # CircleCI `parallelism:`
)
_SPEC = re.compile(r"^\s*([0-9]+)\s*/\s*([0-9]+)\s*$")  # ASCII digits: int() also reads "٣"
_DIGITS = re.compile(r"\s*[0-9]+\s*")
#: The most shards: the published jump hash's bucket range (a larger count overflows its float arithmetic).
MAX_SHARDS = 2**31 - 1
_TOO_MANY = 10**18
_MULTIPLIER = 2862933555777941757
_MASK64 = (1 << 64) - 1


class ShardError(ValueError):
    """A ``--gym-shard`` value that does not name one shard; the message says how to write it."""


def jump_hash(key: int, buckets: int) -> int:
    """Jump consistent hash (Lamping and Veach, 2014): a bucket in [0, buckets) for a 64-bit key."""
    if buckets < 1:
        raise ValueError(f"need at least one bucket, got {buckets}")
    bucket, candidate = -1, 0
    while candidate < buckets:
        bucket = candidate
        key = (key * _MULTIPLIER + 1) & _MASK64
        candidate = int((bucket + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return bucket


def shard_of(task_hash: str, count: int) -> int:
    """The shard (1-based) that runs the task with this sha256 hex digest, out of ``count``."""
    return jump_hash(int(task_hash[:16], 16), count) + 1


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based), and where that was read from."""

    index: int
    count: int
    source: str = "--gym-shard"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, task_hash: str) -> bool:
        return self.count == 1 or shard_of(task_hash, self.count) == self.index


def _checked(index: int, count: int, source: str) -> Shard:
    if not 1 <= count <= MAX_SHARDS or not 1 <= index <= count:
        shown = "/".join(str(n) if n < _TOO_MANY else "<more than 18 digits>" for n in (index, count))
        raise ShardError(
            f"pytest-gym: --gym-shard {shown} (from {source}) names no shard: "
            f"write I/N with 1 <= I <= N <= {MAX_SHARDS}, e.g. --gym-shard 2/3 for the second of three jobs"
        )
    return Shard(index, count, source)


def _int(digits: str) -> int:
    """ASCII digits as a number; past 18 of them, one more than any shard count (int() refuses 4300 digits)."""
    digits = digits.strip()
    return int(digits) if len(digits) <= 18 else _TOO_MANY


def parse_shard(text: str, environ: Mapping[str, str]) -> Shard:
    """``I/N`` (1-based), or ``auto``: the first CI's variables found in ``environ``."""
    if text.strip() == "auto":
        for index_var, count_var, first in CI_VARIABLES:
            raw_index, raw_count = environ.get(index_var), environ.get(count_var)
            if raw_index is None or raw_count is None:
                continue
            if not (_DIGITS.fullmatch(raw_index) and _DIGITS.fullmatch(raw_count)):
                raise ShardError(
                    f"pytest-gym: --gym-shard auto: {index_var}={raw_index[:40]!r}, {count_var}={raw_count[:40]!r} "
                    "are not numbers"
                )
            index, count = _int(raw_index) - first + 1, _int(raw_count)
            return _checked(index, count, f"{index_var}={raw_index}, {count_var}={raw_count}")
        names = ", ".join(f"{i}/{c}" for i, c, _ in CI_VARIABLES)
        raise ShardError(
            f"pytest-gym: --gym-shard auto found no CI shard variables ({names}); "
            "pass the shard explicitly, e.g. --gym-shard ${{ matrix.shard }}/3 on GitHub Actions"
        )
    match = _SPEC.match(text)
    if match is None:
        raise ShardError(f"pytest-gym: --gym-shard {text!r}: write I/N (e.g. 2/3, 1-based) or auto")
    return _checked(_int(match.group(1)), _int(match.group(2)), "--gym-shard / gym_shard")


def shard_sizes(task_hashes: Iterable[str], count: int) -> list[int]:
    """How many of these tasks each shard holds (index 0 is shard 1)."""
    sizes = [0] * count
    for task_hash in task_hashes:
        sizes[shard_of(task_hash, count) - 1] += 1
    return sizes


def imbalance(sizes: list[int]) -> float:
    """How much larger the largest shard is than an even split: 0.05 is 5% more tasks than T/N."""
    total = sum(sizes)
    return max(sizes) / (total / len(sizes)) - 1.0 if total else 0.0


def imbalance_bound(tasks: int, count: int, sigmas: float = 5.0) -> float:
    """An imbalance a fair split exceeds with negligible chance: ``sigmas`` binomial deviations of one shard."""
    if tasks == 0 or count == 1:
        return 0.0
    mean = tasks / count
    return sigmas * math.sqrt(mean * (1 - 1 / count)) / mean
