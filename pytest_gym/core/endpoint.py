"""Where a Gym deployment's servers are: plain data, shared with xdist workers as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pytest_gym.core.pids import pid_alive

AGENT_TYPE = "responses_api_agents"
ENVIRONMENT_TYPE = "environment_servers"


class GymError(Exception):
    """Gym could not be started or reached; the message says why and where to look."""


@dataclass
class ServerInstance:
    process_name: str
    server_type: str
    name: str
    url: str
    pid: int | None = None


@dataclass
class GymEndpoint:
    """Where a deployment's servers are; plain data, shared with xdist workers as JSON."""

    head_url: str
    servers: list[ServerInstance]
    run_routes: dict[str, str]
    log_path: str | None = None
    policy_url: str | None = None

    @property
    def agents(self) -> list[str]:
        return sorted(s.process_name for s in self.servers if s.server_type == AGENT_TYPE)

    def route_for(self, agent: str) -> str:
        """The ``/run`` URL Gym's collector uses for ``agent``: its environment server, else the agent."""
        try:
            return self.run_routes[agent]
        except KeyError:
            raise GymError(
                f"agent {agent!r} is not served by this Gym deployment; its agents: {', '.join(self.agents) or 'none'}"
            ) from None

    def dead_servers(self) -> list[ServerInstance]:
        """Servers whose process is gone (pids are local: Gym runs on this machine in start mode)."""
        return [server for server in self.servers if server.pid and not pid_alive(int(server.pid))]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GymEndpoint:
        servers = [ServerInstance(**s) for s in data["servers"]]
        return cls(**{**data, "servers": servers})
