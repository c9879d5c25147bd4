""".ci/run: a failed install ends CI at once, and stops every process the other jobs started; the main run stays
in CI's own process group; the oldest setup's leg runs with a small CPU share, in a cgroup removed at the end.

The script runs from a scratch folder beside stand-in install scripts. In the first test the browser install
fails, while the Python 3.10 leg has started a long ``sleep`` of its own (a grandchild of CI, as pytest is of
test.sh); in the second every install succeeds and the stand-in test.sh records its process groups.
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


def _ci_folder(tmp_path: Path, stubs: dict[str, str]) -> Path:
    """A scratch copy of ``.ci/run`` beside ``stubs`` as its scripts; its path."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "scripts").mkdir()
    for name, body in stubs.items():
        (tmp_path / "scripts" / name).write_text(f"#!/usr/bin/env bash\n{body}", encoding="utf-8")
    return tmp_path / ".ci" / "run"


#: Where .ci/run puts the oldest setup's leg: a cgroup of cgroup v1's cpu controller, where this machine has one.
CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")


def _run_ci(ci: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Runs CI (bounded); its result and the cgroup it would give the oldest setup's leg (named by CI's pid)."""
    with subprocess.Popen(["bash", str(ci)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as p:
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), CPU_CGROUPS / f"pytest-gym-ci-{p.pid}"


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
    ci = _ci_folder(tmp_path, STUBS)
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "STUB_PIDS": str(pids), "TMPDIR": str(tmp_path)}  # CI's log folder (mktemp -d) too
    started = time.monotonic()
    done, cgroup = _run_ci(ci, env)
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
        assert not cgroup.exists(), "CI left the leg's cgroup behind"
    finally:
        if _alive(leg_sleep):
            os.kill(leg_sleep, signal.SIGKILL)


#: The stand-in test.sh of a passing CI: what each run (``leg``: ``--pythons``; else ``main``) is given, in
#: ``$STUB_SEEN/<run>.*``: its process group and its parent's, its cpu cgroup, that cgroup's shares, its nice value.
RECORDER = (
    'which=$([ "${1:-}" = --pythons ] && echo leg || echo main)\n'
    'echo "$(ps -o pgid= $$) $(ps -o pgid= $PPID)" > "$STUB_SEEN/$which.groups"\n'
    'grep -E "^[0-9]+:cpu(,|:)" /proc/self/cgroup | cut -d: -f3 > "$STUB_SEEN/$which.cgroup"\n'
    'c=/sys/fs/cgroup/cpu$(cat "$STUB_SEEN/$which.cgroup")\n'
    '[ -f "$c/cpu.shares" ] && cat "$c/cpu.shares" > "$STUB_SEEN/$which.shares"\n'
    'ps -o ni= $$ > "$STUB_SEEN/$which.nice"\n'
)


@pytest.fixture(scope="module")
def recorded_ci(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """One passing CI with every install a stand-in and ``RECORDER`` as test.sh: its result, the cgroup it would
    give the oldest setup's leg, and the folder of what the runs recorded."""
    if not (shutil.which("unshare") and shutil.which("ip")):
        pytest.skip(".ci/run would install util-linux and iproute2 first")
    tmp_path = tmp_path_factory.mktemp("recorded-ci")
    seen = tmp_path / "seen"
    seen.mkdir()
    ci = _ci_folder(
        tmp_path,
        {"ensure-uv.sh": "echo uv\n", "install-browser.sh": "true\n", "setup-dev.sh": "true\n", "test.sh": RECORDER},
    )
    done, cgroup = _run_ci(ci, {**os.environ, "STUB_SEEN": str(seen), "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    return done, cgroup, seen


def _seen(seen: Path, name: str) -> str:
    return (seen / name).read_text(encoding="utf-8").strip()


def test_the_main_run_stays_in_cis_process_group_and_the_oldest_setup_leg_has_its_own(
    recorded_ci: tuple[subprocess.CompletedProcess[str], Path, Path],
) -> None:
    """Stopping CI's process group (a runner's timeout) stops the main run; the exit trap stops the legs."""
    _, _, seen = recorded_ci
    main_group, ci_group = (int(g) for g in _seen(seen, "main.groups").split())
    leg_group, _ = (int(g) for g in _seen(seen, "leg.groups").split())
    assert main_group == ci_group, "the main run left CI's process group"
    assert leg_group not in (ci_group, main_group), "the oldest-setup leg shares CI's process group"


def test_the_oldest_setup_leg_runs_with_a_small_cpu_share_and_its_cgroup_is_removed(
    recorded_ci: tuple[subprocess.CompletedProcess[str], Path, Path],
) -> None:
    """Its own cgroup with 256 of the default 1024 shares, where CI may make one (nice alone counts only within a
    session's autogroup, and every Gym is a session of its own); else nice 10 and a line that says so."""
    done, cgroup, seen = recorded_ci
    own = os.nice(0)  # the oldest setup's leg runs this test at nice 10 itself
    assert int(_seen(seen, "main.nice")) == own
    assert int(_seen(seen, "leg.nice")) == min(own + 10, 19)
    leg_cgroup, main_cgroup = _seen(seen, "leg.cgroup"), _seen(seen, "main.cgroup")
    if "no cgroup for the oldest setup's leg" in done.stdout:
        assert leg_cgroup == main_cgroup
    else:
        assert leg_cgroup == f"/{cgroup.name}", leg_cgroup
        assert main_cgroup != leg_cgroup
        assert _seen(seen, "leg.shares") == "256"
    assert not cgroup.exists(), "CI left the leg's cgroup behind"
