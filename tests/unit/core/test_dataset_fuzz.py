"""Fuzzing the dataset parser users feed directly (the gate parser: tests/unit/judge/test_gates_fuzz.py).

Every input gets a clear error of the documented kind, or is accepted; never a traceback from
inside the plugin.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gym.core.dataset import DatasetError, parse_row, read_tasks

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_are_a_row_or_a_dataset_error(raw: bytes) -> None:
    try:
        row = parse_row(raw, Path("f.jsonl"), 3)
    except DatasetError as exc:
        assert str(exc).startswith("f.jsonl:3: ")
        assert exc.fix
    else:
        assert isinstance(row["responses_create_params"], dict)


@settings(max_examples=200)
@given(json_values)
def test_arbitrary_json_values_are_a_row_or_a_dataset_error(value: object) -> None:
    raw = json.dumps({"responses_create_params": {"input": value}, "x": value}).encode()
    try:
        parse_row(raw, Path("f.jsonl"), 1)
    except DatasetError as exc:
        assert "is not valid JSON" in exc.problem  # only NaN / Infinity are refused here


def test_deep_nesting_huge_lines_and_invalid_utf8_get_clear_errors() -> None:
    cases = {
        b"[" * 100_000 + b"]" * 100_000: "invalid JSON",
        b'{"responses_create_params": {"input": "' + b"x" * 5_000_000 + b'"}}': None,
        b'{"responses_create_params": {"input": "\xc3\x28"}}': "not valid UTF-8",
        b'{"responses_create_params": {}, "reward": -Infinity}': "is not valid JSON",
    }
    for raw, problem in cases.items():
        try:
            parse_row(raw, Path("f.jsonl"), 1)
        except DatasetError as exc:
            assert problem is not None
            assert problem in exc.problem
        else:
            assert problem is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=20))
def test_whole_files_of_noise_read_or_fail_cleanly(lines: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "noise.jsonl"
        path.write_bytes(b"\n".join(lines))
        try:
            tasks = read_tasks(path)
        except DatasetError as exc:
            assert exc.path == path
            assert exc.line >= 1
        else:
            assert all(t.load_row() for t in tasks)
