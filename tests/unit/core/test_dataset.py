"""Reading datasets: identity hashing, duplicates, streaming, and every bad-input message."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from pytest_gym.core.dataset import DatasetError, RowReader, canonical_json, parse_row, read_tasks, task_hash

ROW = {"responses_create_params": {"input": [{"role": "user", "content": "2+2?"}]}, "expected_answer": "4"}


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_identity_is_sha256_of_canonical_json() -> None:
    reordered = {"expected_answer": "4", "responses_create_params": ROW["responses_create_params"]}
    expected = hashlib.sha256(
        b'{"expected_answer":"4","responses_create_params":{"input":[{"content":"2+2?","role":"user"}]}}'
    ).hexdigest()
    assert task_hash(ROW) == expected
    assert task_hash(reordered) == expected


def test_canonical_json_keeps_unicode_as_utf8() -> None:
    assert canonical_json({"a": "é"}) == '{"a":"é"}'.encode()


def test_duplicates_fold_into_first_line_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    other = {**ROW, "expected_answer": "5"}
    path = write(tmp_path, json.dumps(ROW), "", "   ", json.dumps(other), json.dumps(ROW, indent=None, sort_keys=True))
    tasks = read_tasks(path)
    assert [(t.line, t.duplicate_lines) for t in tasks] == [(1, [5]), (4, [])]
    assert tasks[0].load_row() == ROW
    assert tasks[1].load_row() == other


def test_rows_are_read_back_from_their_offset(tmp_path: Path) -> None:
    rows = [{**ROW, "expected_answer": str(i)} for i in range(50)]
    path = write(tmp_path, *(json.dumps(r) for r in rows))
    tasks = read_tasks(path)
    assert all(t.row_override is None for t in tasks)
    assert [t.load_row() for t in tasks] == rows


def test_the_row_reader_reads_every_row_as_load_row_does_through_one_open_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows longer than one read (16 KiB), and a last line without a newline, come back whole."""
    rows = [{**ROW, "expected_answer": str(i), "pad": "x" * (40_000 if i in (3, 9) else i)} for i in range(10)]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")  # no newline at the end
    tasks = read_tasks(path)
    opened: list[object] = []
    real_open = os.open

    def counted_open(file: object, *args: object, **kwargs: object) -> int:
        opened.append(file)
        return real_open(file, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counted_open)
    reader = RowReader()
    try:
        assert [reader.load(t) for t in reversed(tasks)] == list(reversed(rows))
        assert [t.load_row() for t in tasks] == rows
    finally:
        reader.close()
    assert opened == [path]


def test_the_row_reader_closes_its_files(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps(ROW))
    reader = RowReader()
    reader.load(read_tasks(path)[0])
    (fd,) = reader._files.values()
    reader.close()
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)
    reader.close()  # twice: nothing left to close


def test_the_row_reader_keeps_only_the_most_recently_read_datasets_open(tmp_path: Path) -> None:
    """A run of many datasets must not use up the file descriptors: the least recently read one is closed first."""
    datasets = []
    for n in range(5):
        folder = tmp_path / f"d{n}"
        folder.mkdir()
        datasets.append(
            read_tasks(write(folder, *(json.dumps({**ROW, "expected_answer": f"{n}-{i}"}) for i in range(3))))
        )
    reader = RowReader(most_open=2)
    order = [(0, 0), (1, 0), (0, 1), (2, 0), (0, 2), (1, 1), (3, 0), (4, 0), (4, 1), (0, 0)]
    try:
        for d, i in order:
            assert reader.load(datasets[d][i])["expected_answer"] == f"{d}-{i}"
            assert len(reader._files) <= 2
        assert list(reader._files) == [datasets[4][0].path, datasets[0][0].path]  # least recently read first
        kept = list(reader._files.values())
    finally:
        reader.close()
    for fd in kept:
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)


def test_a_row_changed_after_collection_is_a_dataset_error_with_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps(ROW), json.dumps({**ROW, "expected_answer": "5"}))
    tasks = read_tasks(path)
    with path.open("r+b") as fh:  # the same file, rewritten in place
        fh.seek(tasks[1].offset)
        fh.write(b"{not json")
    reader = RowReader()
    try:
        with pytest.raises(DatasetError, match="invalid JSON") as caught:
            reader.load(tasks[1])
    finally:
        reader.close()
    assert f"{path}:2" in str(caught.value)


@pytest.mark.parametrize(
    ("line", "problem", "fix"),
    [
        ('{"responses_create_params": ', "invalid JSON", "one complete JSON object"),
        ("[1, 2]", "expected a JSON object, got list", "each line must be an object"),
        ('{"input": "hi"}', "no 'responses_create_params' object", 'add "responses_create_params"'),
        ('{"responses_create_params": "hi"}', "must be an object, got str", 'add "responses_create_params"'),
        ('{"responses_create_params": {"input": NaN}}', "NaN is not valid JSON", "one complete JSON object"),
    ],
)
def test_bad_rows_name_file_line_problem_and_fix(tmp_path: Path, line: str, problem: str, fix: str) -> None:
    path = write(tmp_path, json.dumps(ROW), line)
    with pytest.raises(DatasetError) as excinfo:
        read_tasks(path)
    error = excinfo.value
    assert (error.path, error.line) == (path, 2)
    assert problem in error.problem
    assert fix in error.fix
    assert str(error).startswith(f"{path}:2: ")


def test_invalid_utf8_is_a_dataset_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"responses_create_params": {"input": "\xff"}}\n')
    with pytest.raises(DatasetError, match="not valid UTF-8"):
        read_tasks(path)


def test_row_hook_rewrites_and_drops_but_identity_stays_the_original(tmp_path: Path) -> None:
    keep = {**ROW, "expected_answer": "keep"}
    drop = {**ROW, "expected_answer": "drop"}
    path = write(tmp_path, json.dumps(keep), json.dumps(drop))

    def hook(row: dict[str, object], line: int) -> dict[str, object] | None:
        return None if row["expected_answer"] == "drop" else {**row, "extra": line}

    tasks = read_tasks(path, hook)
    assert len(tasks) == 1
    assert tasks[0].hash == task_hash(keep)
    assert tasks[0].load_row() == {**keep, "extra": 1}


def test_parse_row_reports_long_lines_truncated(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as excinfo:
        parse_row(b"{" + b"x" * 10_000, tmp_path / "f.jsonl", 7)
    assert len(str(excinfo.value)) < 400
