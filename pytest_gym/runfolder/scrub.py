"""The last masking pass over a run folder: files other processes wrote there (Gym's log, Hydra's
outputs, the policy's log, the deployment record) may hold a credential a server echoed.

The files pytest-gym writes itself are masked as they are written, as data; this pass covers the rest.
Text (logs) is masked in place with as many ``*`` as the secret had bytes, line by line, so a process still
appending to a file (Gym, before it is stopped) loses nothing and readers never see a torn file. JSON and
jsonl files are never masked as text (a masked value could run over a quote and leave a line that no longer
parses): they are masked as data once their writers are gone (``final``), each replaced in one step when
anything in it changed. Symbolic links (the server venvs) are not followed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.masking import Masker
from pytest_gym.runfolder.layout import (
    CASSETTE_FILE,
    FAILURES_FILE,
    MATERIALIZED_FILE,
    MISSES_FILE,
    REPORT_FILE,
    RESCORED_FILE,
    ROLLOUTS_FILE,
)
from pytest_gym.runfolder.records import RecordError, iter_records
from pytest_gym.runfolder.rollouts import masked_record

#: Masked record by record, as data, when written (and the largest files of a run): not read again. The page
#: too: it masks every text it shows as it is built (its copy at ``--gym-html`` has no other masking either).
MASKED_WHEN_WRITTEN = frozenset(
    {ROLLOUTS_FILE, FAILURES_FILE, MATERIALIZED_FILE, CASSETTE_FILE, MISSES_FILE, RESCORED_FILE, REPORT_FILE}
)
#: Files masked as data, never as text.
JSON_SUFFIXES = (".json", ".jsonl")
#: Longer lines are masked in pieces of this size, each with the last bytes of the one before.
_PIECE = 1 << 20
_OVERLAP = 4096
#: Files larger than this are left alone (and named in the problems).
MAX_FILE_BYTES = 1 << 28


def _mask_line(masker: Masker, line: bytes) -> bytes:
    text = line.decode("utf-8", "surrogateescape")
    masked = masker.text(text)
    return line if masked == text else masked.encode("utf-8", "surrogateescape")


def scrub_file(path: Path, masker: Masker) -> bool:
    """Mask ``path`` in place, line by line; whether anything changed.

    A writer appending meanwhile is safe: its bytes go to the end, and a line is only ever overwritten
    with as many bytes as it had. A secret cut at the end of a half-written line is caught by its prefix,
    the rest of it by the next pass. Long lines are read in pieces, each masked together with the end of
    the one before, so a secret across two pieces is still seen whole.
    """
    changed = False
    with open(path, "r+b") as fh:
        offset = 0
        tail = b""  # the end of the previous piece, when it did not end its line
        for piece in iter(lambda: fh.readline(_PIECE), b""):
            data = tail + piece
            masked = _mask_line(masker, data)
            if masked != data:
                if len(masked) != len(data):  # cannot happen with same_length; never shift the file
                    raise ValueError("masking changed the length of a line")
                os.pwrite(fh.fileno(), masked, offset - len(tail))
                changed = True
            offset += len(piece)
            tail = b"" if piece.endswith(b"\n") else masked[-_OVERLAP:]
    return changed


def scrub_json_file(path: Path, masker: Masker) -> bool:
    """Mask a JSON or jsonl file as data, replacing it in one step when anything changed; whether it did.

    A file that is not JSON (a torn line in the middle, a log named .json) is masked as text instead."""
    raw = path.read_bytes()
    if not masker.suspicious(raw.decode("utf-8", "surrogateescape")):
        return False
    try:
        if path.suffix == ".jsonl":
            records = [record for _, record in iter_records(path)]
            pairs = [masked_record(masker, record) for record in records]
            if all(new == old for (new, _), old in zip(pairs, records, strict=True)):
                return False  # only looked suspicious ("token_type", prose): Gym's file stays as it wrote it
            masked = b"".join(line for _, line in pairs)
        else:
            data = json.loads(raw)
            clean = masker.data(data)
            if clean == data:
                return False
            masked = json.dumps(clean, ensure_ascii=False, indent=2).encode("utf-8", "surrogateescape")
    except (RecordError, ValueError, RecursionError):
        return scrub_file(path, Masker(masker.secrets, same_length=True))
    if masked == raw:
        return False
    write_atomically(path, masked, fsync=False)
    return True


def scrub_run_folder(run_dir: Path, final: bool = True) -> list[str]:
    """Mask every file in ``run_dir`` (recursively) that pytest-gym did not mask when writing it.

    ``final``: every writer is gone (Gym stopped), so JSON files are masked (as data) too; before that only
    text is. Returns problems worth a note (a file that could not be read or was too large), never raises.
    """
    masker = Masker(same_length=True)
    data_masker = Masker(masker.secrets)
    problems: list[str] = []
    if not run_dir.is_dir():
        return problems
    for folder, dirs, files in os.walk(run_dir, followlinks=False):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        for name in files:
            path = Path(folder) / name
            if (folder == str(run_dir) and name in MASKED_WHEN_WRITTEN) or path.is_symlink():
                continue
            try:
                if path.stat().st_size > MAX_FILE_BYTES:
                    problems.append(f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB and was not checked for secrets")
                    continue
                if path.suffix in JSON_SUFFIXES:
                    if final:
                        scrub_json_file(path, data_masker)
                else:
                    scrub_file(path, masker)
            except (OSError, ValueError) as exc:
                problems.append(f"could not check {path} for secrets: {type(exc).__name__}: {exc}")
    return problems
