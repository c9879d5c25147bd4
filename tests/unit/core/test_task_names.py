"""A task's readable name: the hash prefix and the row's label (``core.dataset.task_label``/``task_name``)."""

from __future__ import annotations

import pytest

from pytest_gym.core.dataset import LABEL_MAX, row_fields, task_label, task_name
from pytest_gym.core.outcome import is_trial_nodeid

DIGEST = "de0cfdda8ebe" + "0" * 52


@pytest.mark.parametrize(
    ("row", "label"),
    [
        ({"id": "q5"}, "q5"),
        ({"task_id": 17, "name": "later"}, "17"),  # the first of id, task_id, name
        ({"name": "two words/and::[brackets]"}, "two_words_and_brackets"),
        ({"id": "  --x--  "}, "x"),
        ({"id": "é"}, ""),  # nothing readable left: the hash alone
        ({"id": True}, ""),
        ({"tags": ["a"]}, ""),
        ({"id": "a" * 80}, "a" * LABEL_MAX),
    ],
)
def test_label_from_the_row(row: dict[str, object], label: str) -> None:
    assert task_label(row_fields(row, ("id", "task_id", "name", "tags"))) == label


def test_other_label_fields() -> None:
    fields = row_fields({"id": "q1", "category": "geo metry"}, ("id", "category"))
    assert task_label(fields, ("category",)) == "geo_metry"


def test_name_and_trial_node_ids() -> None:
    assert task_name(DIGEST) == "de0cfdda8ebe"
    assert task_name(DIGEST, "q5") == "de0cfdda8ebe-q5"
    for name in (task_name(DIGEST), task_name(DIGEST, "q5"), task_name(DIGEST, "a.b@c+d-e_f")):
        assert is_trial_nodeid(f"mine.jsonl::{name}[r2]")
    assert not is_trial_nodeid("mine.jsonl::gate[mean_reward>=0.5]")
    assert not is_trial_nodeid("mine.jsonl::de0cfdda8ebe-q 5[r2]")
