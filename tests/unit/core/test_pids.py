"""Whether a pid still names the process this run started: pids with their start times (start mode); attached
servers' pids are another host's and never checked."""

from __future__ import annotations

import json
import os

from pytest_gym.core.endpoint import GymEndpoint, ServerInstance
from pytest_gym.core.pids import pid_alive, process_start_time
from tests.helpers.processes import dead_pid


def test_a_pid_names_one_process_only_with_its_start_time() -> None:
    me = os.getpid()
    started = process_start_time(me)
    assert started is not None
    assert started == process_start_time(me)
    assert pid_alive(me)
    assert pid_alive(me, started)
    assert not pid_alive(me, started + 1)  # the pid now names another process: a recycled pid
    gone = dead_pid()
    assert process_start_time(gone) is None
    assert not pid_alive(gone)


def test_only_pids_this_run_started_are_checked() -> None:
    servers = [ServerInstance("gone", "t", "g", "http://127.0.0.1:1", dead_pid())]
    servers.append(ServerInstance("me", "t", "m", "http://127.0.0.1:2", os.getpid()))
    attached = GymEndpoint("http://127.0.0.1:3", servers, {})
    assert attached.dead_servers() == []  # attach mode: the pids are Gym's host's, not ours
    started = GymEndpoint.from_json(json.loads(json.dumps(attached.to_json())))
    started.mark_local()
    assert started.servers[1].start_time == process_start_time(os.getpid())
    assert [s.process_name for s in started.dead_servers()] == ["gone"]
    started.servers[1].start_time = (started.servers[1].start_time or 0) + 1  # as if the pid were reused
    assert [s.process_name for s in started.dead_servers()] == ["gone", "me"]
    assert GymEndpoint.from_json(started.to_json()) == started  # shared with xdist workers as JSON
