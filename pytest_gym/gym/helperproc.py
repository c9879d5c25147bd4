"""One helper process in Gym's interpreter (the ``python`` beside ``gym``): the plugin never imports Gym.

Started early so that Gym's imports overlap the trials, sent its whole input once at the end of the run,
stopped by pid when it is not needed. It runs in its own session (a signal to pytest's group leaves it alone)
and ends by itself when this process goes away (its stdin closes).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


class GymHelper:
    def __init__(
        self, python: Path, script: str, cwd: Path, env: Mapping[str, str] | None = None, args: Sequence[str] = ()
    ) -> None:
        self.python = python
        self.script = script
        self.args = list(args)
        self.cwd = cwd
        self.env = None if env is None else dict(env)  # Gym's code gets no --gym-header variable
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [str(self.python), "-c", self.script, *self.args],
            cwd=self.cwd,  # Gym's imports may write into the working folder: the run folder's, not the user's
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def exchange(self, data: bytes, timeout: float, too_slow: str) -> tuple[bytes, bytes]:
        """Send ``data``, wait for the helper to end (started now if it was not); RuntimeError(``too_slow``)
        after ``timeout`` seconds. The helper is used once: a later call starts another."""
        if self.proc is None:
            self.start()
        assert self.proc is not None
        try:
            return self.proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise RuntimeError(too_slow) from None
        finally:
            self.proc = None

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.kill()  # its own session: only the helper itself
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
            proc.communicate(timeout=10)
