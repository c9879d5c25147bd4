"""--gym-shard without Gym: which shard a task goes to, balance, stability, the CI variables.

Through pytest (collection of a shard, the ini, -k, an empty shard): tests/session/test_shards.py.
"""

from __future__ import annotations

import hashlib
import re

import pytest

from pytest_gym.core.shard import (
    ShardError,
    imbalance,
    imbalance_bound,
    jump_hash,
    parse_shard,
    shard_of,
    shard_sizes,
)


def hashes(count: int, start: int = 0) -> list[str]:
    return [hashlib.sha256(f"row {i}".encode()).hexdigest() for i in range(start, start + count)]


# -- the assignment -----------------------------------------------------------------------------------


def test_jump_hash_matches_the_published_algorithm() -> None:
    # Values of the reference implementation (Lamping and Veach; the same in Go, Rust, ClickHouse).
    assert [jump_hash(256, 1024), jump_hash(0, 60), jump_hash(1, 60), jump_hash(2, 60)] == [520, 0, 55, 46]
    assert jump_hash(0xDEAD10CC, 666) == 361
    assert jump_hash(42, 57) == 43


def test_assignment_is_deterministic_and_in_range() -> None:
    sample = hashes(2000)
    for count in (1, 2, 3, 8, 17):
        first = [shard_of(h, count) for h in sample]
        assert first == [shard_of(h, count) for h in sample]
        assert set(first) == set(range(1, count + 1))
    # Pinned: a shard job of one pytest-gym version must agree with the merge of another.
    assert [shard_of(h, 3) for h in hashes(6)] == [shard_of(h, 3) for h in hashes(6)]
    assert shard_of("5feceb66ffc86f38" + "0" * 48, 3) == 3
    assert shard_of("d4735e3a265e16ee" + "0" * 48, 8) == 1


def test_one_more_shard_moves_only_the_tasks_it_takes() -> None:
    sample = hashes(10_000)
    moved = [h for h in sample if shard_of(h, 8) != shard_of(h, 9)]
    assert all(shard_of(h, 9) == 9 for h in moved)  # every moved task went to the new shard
    assert 0.08 < len(moved) / len(sample) < 0.14  # about 1/9


@pytest.mark.parametrize("tasks", [1_000, 10_000, 100_000])
@pytest.mark.parametrize("count", [2, 3, 8])
def test_shards_are_balanced_within_a_binomial_bound(tasks: int, count: int) -> None:
    sizes = shard_sizes(hashes(tasks), count)
    assert sum(sizes) == tasks
    assert imbalance(sizes) <= imbalance_bound(tasks, count)
    assert imbalance_bound(100_000, 8) < 0.05  # at 100k tasks, 8 shards: within 5% of an even split


# -- the option ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "3"}, "1/3"),  # GitLab counts from 1
        ({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "3"}, "1/3"),  # Buildkite from 0
        ({"CIRCLE_NODE_INDEX": "2", "CIRCLE_NODE_TOTAL": "3"}, "3/3"),
    ],
)
def test_auto_reads_the_ci_variables(environ: dict[str, str], expected: str) -> None:
    assert str(parse_shard("auto", environ)) == expected


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        ("0/3", {}, "names no shard"),
        ("4/3", {}, "names no shard"),
        ("2of3", {}, "write I/N"),
        ("auto", {}, "found no CI shard variables"),
        ("auto", {"CI_NODE_INDEX": "x", "CI_NODE_TOTAL": "3"}, "are not numbers"),
        ("auto", {"CI_NODE_INDEX": "4", "CI_NODE_TOTAL": "3"}, "CI_NODE_INDEX=4"),
    ],
)
def test_bad_shards_explain_themselves(text: str, environ: dict[str, str], message: str) -> None:
    with pytest.raises(ShardError, match=re.escape(message)):
        parse_shard(text, environ)


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        ("1/" + "1" * 400, {}, "1/<more than 18 digits> (from --gym-shard / gym_shard) names no shard"),
        ("1/" + "1" * 5000, {}, "names no shard"),
        ("1/2147483648", {}, "1 <= I <= N <= 2147483647"),
        ("\u0663/\u0665", {}, "write I/N"),
        ("auto", {"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "9" * 5000}, "names no shard"),
        ("auto", {"CI_NODE_INDEX": "\u0663", "CI_NODE_TOTAL": "\u0665"}, "are not numbers"),
    ],
)
def test_shard_counts_too_large_to_hash_or_in_other_digits_explain_themselves(
    text: str, environ: dict[str, str], message: str
) -> None:
    """A 400-digit N overflowed the jump hash (OverflowError at collection), 5000 digits exceeded int()'s limit
    (ValueError, an INTERNALERROR), and Arabic-Indic 3/5 was read as 3/5."""
    with pytest.raises(ShardError, match=re.escape(message)):
        parse_shard(text, environ)
