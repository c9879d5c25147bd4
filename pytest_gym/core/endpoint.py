"""Where a Gym deployment's servers are: plain data, shared with xdist workers as JSON."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_gym.core.pids import pid_alive, process_start_time

AGENT_TYPE = "responses_api_agents"
ENVIRONMENT_TYPE = "environment_servers"
#: Gym's next server type for ``/run`` (in Gym's main, not in 0.7.0): a processor serving ``/run`` takes rows
#: as an agent does (Gym PR #3100 calls it ``processors``; its milestone issue ``episode_processors``).
PROCESSOR_TYPES = frozenset({"processors", "episode_processors"})


class GymError(Exception):
    """Gym could not be started or reached; the message says why and where to look."""


class UnknownAgent(GymError):
    """An agent the suites name is not one Gym serves: every trial would fail the same way, so the run stops."""


def unknown_agents(wanted: Iterable[str | None], served: Sequence[str]) -> UnknownAgent | None:
    """The first agent of ``wanted`` that Gym does not serve, with the closest one it does ("did you mean")."""
    import difflib

    for name in dict.fromkeys(a for a in wanted if a):
        if name not in served:
            close = difflib.get_close_matches(name, served, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            return UnknownAgent(
                f"agent {name!r} (--gym-agent, or a suite file's agent:) is not served by this Gym deployment: "
                f"{hint}its agents: {', '.join(served) or 'none'}. No trial was run."
            )
    return None


@dataclass
class ServerInstance:
    process_name: str
    server_type: str
    name: str
    url: str
    #: The pid Gym reports: this machine's only when the run started Gym (``GymEndpoint.local_pids``).
    pid: int | None = None
    #: When that process started (``process_start_time``), recorded by the run that started it.
    start_time: int | None = None


@dataclass
class GymEndpoint:
    """Where a deployment's servers are; plain data, shared with xdist workers as JSON."""

    head_url: str
    servers: list[ServerInstance]
    run_routes: dict[str, str]
    log_path: str | None = None
    policy_url: str | None = None
    #: Whether the servers' pids are processes of this machine that this run started (start mode). An
    #: attached Gym may run on another host or in a container: its pids mean nothing here.
    local_pids: bool = False
    #: Where Gym captures model calls (``model_call_capture_dir`` with ``observability_enabled``), if it does.
    capture_dir: str | None = None

    @property
    def agents(self) -> list[str]:
        """Where rows can go: the agents, and the processors that serve ``/run``."""
        return sorted({s.process_name for s in self.servers if s.server_type == AGENT_TYPE} | set(self.run_routes))

    def route_for(self, agent: str) -> str:
        """The ``/run`` URL Gym's collector uses for ``agent``: its environment server, else the agent."""
        try:
            return self.run_routes[agent]
        except KeyError:
            raise GymError(
                f"agent {agent!r} is not served by this Gym deployment; its agents: {', '.join(self.agents) or 'none'}"
            ) from None

    def mark_local(self) -> None:
        """The run started these processes here: their pids are local; record when each started."""
        self.local_pids = True
        for server in self.servers:
            if server.pid:
                server.start_time = process_start_time(int(server.pid))

    def dead_servers(self) -> list[ServerInstance]:
        """Servers whose process is gone (or whose pid now names another process); none unless pids are local."""
        if not self.local_pids:
            return []
        return [s for s in self.servers if s.pid and not pid_alive(int(s.pid), s.start_time)]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GymEndpoint:
        servers = [ServerInstance(**s) for s in data["servers"]]
        return cls(**{**data, "servers": servers})
