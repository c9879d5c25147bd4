"""scripts/netns-run: a loopback-only network namespace, made once however deeply it is nested."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.helpers.paths import ROOT

NETNS_RUN = str(ROOT / "scripts" / "netns-run")


def run(*command: str, **env: str) -> str:
    """``netns-run COMMAND`` from outside any namespace it made (unless ``env`` names one)."""
    base = {k: v for k, v in os.environ.items() if k != "NETNS_RUN_NAMESPACE"}
    done = subprocess.run(
        [NETNS_RUN, *command], capture_output=True, text=True, timeout=60, check=False, env={**base, **env}
    )
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip(f"no network namespaces here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(autouse=True)
def _tools() -> None:
    if not (shutil.which("unshare") and shutil.which("ip")):
        pytest.skip("netns-run needs unshare and ip")


def test_the_command_runs_in_a_new_namespace_with_only_loopback_up() -> None:
    outside = os.readlink("/proc/self/ns/net")
    inside, links = run("bash", "-c", "readlink /proc/self/ns/net; ip -o link show up").splitlines()[:2]
    assert inside != outside
    assert links.split(":")[1].strip() == "lo"


def test_run_from_inside_its_own_namespace_it_stays_there() -> None:
    """The README's commands run by a test inside netns-run reach that test's Ray cluster (same namespace)."""
    outer, inner = run("bash", "-c", f"readlink /proc/self/ns/net; {NETNS_RUN} readlink /proc/self/ns/net").split()
    assert outer == inner


def test_a_namespace_named_in_the_environment_but_not_the_current_one_makes_a_new_one() -> None:
    outside = os.readlink("/proc/self/ns/net")
    assert run("readlink", "/proc/self/ns/net", NETNS_RUN_NAMESPACE="net:[1]").strip() != outside
