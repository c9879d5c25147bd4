"""Which Gym a run uses: attached (``--gym-url``), started for the run, or kept between runs (``--gym-reuse``).

One deployment serves the whole run, also under xdist: the first process that needs it acquires it under a
file lock and records it in the run folder; the others read the record; the process that owns the run (the
xdist controller, or the only process) releases it at the end: stops what the run started, or gives a kept
Gym back.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from pytest_gym.core.access import GymAccess
from pytest_gym.core.endpoint import GymEndpoint, GymError
from pytest_gym.core.locks import locked
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.deployment import Started, read_state, start_deployment, stop_started, write_state
from pytest_gym.gym.discovery import discover
from pytest_gym.runfolder.layout import DEPLOYMENT_LOCK, STATE_FILE


def acquire(
    settings: GymSettings, run_dir: Path, access: GymAccess | None = None, owner_pid: int | None = None
) -> GymEndpoint:
    """The run's deployment: attached, already acquired by another process of the run, kept, or started now.

    ``owner_pid``: the process whose end ends the run when it is not this one (an xdist worker's controller):
    what this process starts outlives it until that process is gone.

    A failed start is recorded too, so every process reports the same error and
    nobody tries again.
    """
    if settings.url:
        endpoint = discover(settings.url, access=access)
        return endpoint
    with locked(run_dir / DEPLOYMENT_LOCK):
        state = read_state(run_dir)
        if state is not None:
            if state.get("error"):
                raise GymError(state["error"])
            return GymEndpoint.from_json(state["endpoint"])
        note = None  # why a Gym --gym-reuse asks to keep is started for this run alone
        try:
            if settings.reuse:
                from pytest_gym.gym.kept import NotKept, acquire_kept

                try:
                    endpoint, record = acquire_kept(settings, run_dir, owner_pid or os.getpid(), access)
                except NotKept as exc:
                    note = str(exc)
                else:
                    write_state(run_dir, {"endpoint": endpoint.to_json(), "kept": record})
                    return endpoint
            endpoint, started = start_deployment(settings, run_dir, owner_pid=owner_pid, access=access)
        except GymError as exc:
            write_state(run_dir, {"error": str(exc)})
            raise
        state = {"endpoint": endpoint.to_json(), "started": asdict(started)}
        write_state(run_dir, {**state, "reuse_note": note} if note else state)
        return endpoint


def release(settings: GymSettings, run_dir: Path) -> list[str]:
    """Stop what this run started, or give a kept Gym back (called once, by the process that owns the run)."""
    if settings.url:
        return []
    with locked(run_dir / DEPLOYMENT_LOCK):
        state = read_state(run_dir)
        if state and "kept" in state and not state.get("released"):
            state["released"] = True
            write_state(run_dir, state)
            from pytest_gym.gym.kept import release_kept

            return release_kept(state["kept"], run_dir)
        if not state or "started" not in state:
            return []
        reuse_note = state.get("reuse_note")  # why --gym-reuse did not keep this run's Gym
        before = [str(reuse_note)] if reuse_note else []
        try:
            started = Started.from_json(state["started"])
        except ValueError as exc:  # a hand-edited state file: nothing is signalled on its word
            return [*before, f"the run's Gym state file ({run_dir / STATE_FILE}): {exc}; stop what it started by hand"]
        notes = stop_started(started, settings.shutdown_grace)
        state["stopped"] = notes
        del state["started"]
        write_state(run_dir, state)
        return [*before, *notes]
