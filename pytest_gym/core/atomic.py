"""Replace a file in one step, so a reader (or a crash) never meets half of it."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

_ATTEMPTS = 100


def _create_beside(path: Path) -> tuple[int, str]:
    """A new temporary file beside ``path``, created 0666 so that the umask decides its mode, as for
    any file a program creates (mkstemp's 0600 would hide a committed baseline or report from others)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for _ in range(_ATTEMPTS):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path} after {_ATTEMPTS} attempts")


def write_atomically(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Write ``data`` to a temporary file beside ``path``, then ``os.replace`` it.

    A file that exists keeps its mode; a new one gets the mode the umask leaves of 0666. ``fsync``
    makes it survive a power cut too; status files that only matter while the run lives can skip it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode: int | None = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = None
    fd, tmp = _create_beside(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
