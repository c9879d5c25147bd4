"""``core.jsonl.AppendedLines``: the whole lines appended since the last look (the ledger's and the trajectory
step's way of following a run-folder file other processes append to)."""

from __future__ import annotations

from pathlib import Path

from pytest_gym.core.jsonl import AppendedLines


def test_a_file_not_there_yet_has_no_lines_then_each_line_is_read_once_when_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    appended = AppendedLines(path)
    assert appended.read() == []
    path.write_bytes(b'{"a": 1}\n{"b": ')
    assert appended.read() == [b'{"a": 1}\n']
    assert appended.read() == []  # the torn line waits for its end
    with path.open("ab") as fh:
        fh.write(b'2}\n\n{"c": 3}\n')
    assert appended.read() == [b'{"b": 2}\n', b"\n", b'{"c": 3}\n']
    assert appended.read() == []
