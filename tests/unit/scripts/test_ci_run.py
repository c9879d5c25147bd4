""".ci/run: a failed install ends CI at once, and stops every process the other jobs started.

The script runs from a scratch folder beside stand-in install scripts: the browser install fails at once, while
the Python 3.10 leg has started a long ``sleep`` of its own (a grandchild of CI, as pytest is of test.sh).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

STUBS = {
    "ensure-uv.sh": "echo uv\n",
    # Fails once the leg's process is there (bounded: CI's own timeout is the test's), so the race is settled.
    "install-browser.sh": (
        'for _ in $(seq 200); do [ -s "$STUB_PIDS/leg-sleep" ] && break; sleep 0.05; done\n'
        "echo 'no browser here' >&2\nexit 1\n"
    ),
    "setup-dev.sh": "sleep 30\n",
    # test.sh --pythons (the oldest-setup leg): a grandchild that would outlive a kill of its shell alone.
    "test.sh": 'sleep 300 &\necho $! > "$STUB_PIDS/leg-sleep"\nwait\n',
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


def test_a_failed_install_stops_the_other_jobs_and_what_they_started(tmp_path: Path) -> None:
    if not (shutil.which("unshare") and shutil.which("ip")):
        pytest.skip(".ci/run would install util-linux and iproute2 first")
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "scripts").mkdir()
    for name, body in STUBS.items():
        (tmp_path / "scripts" / name).write_text(f"#!/usr/bin/env bash\n{body}", encoding="utf-8")
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "STUB_PIDS": str(pids), "TMPDIR": str(tmp_path)}  # CI's log folder (mktemp -d) too
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    leg_sleep = int((pids / "leg-sleep").read_text(encoding="utf-8"))
    try:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "the browser install failed" in done.stderr
        assert "no browser here" in done.stderr
        assert time.monotonic() - started < 25, "CI waited for the other install instead of ending"
        deadline = time.monotonic() + 5
        while _alive(leg_sleep) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(leg_sleep), "the Python 3.10 leg's process outlived CI"
    finally:
        if _alive(leg_sleep):
            os.kill(leg_sleep, signal.SIGKILL)
