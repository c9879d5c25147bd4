"""The ``gym_server`` fixture's object: the session's deployment, and ``run(row)`` for hand-written tests."""

from __future__ import annotations

from typing import Any

from pytest_gym.core.access import GymAccess
from pytest_gym.core.endpoint import GymEndpoint, GymError
from pytest_gym.core.settings import GymSettings


class GymServer:
    """The session's Gym deployment, as the ``gym_server`` fixture gives it to tests.

    ``run(row)`` posts a hand-written row to ``/run`` like a trial does and returns
    Gym's answer, so a test can inspect what the verifier said.
    """

    def __init__(
        self,
        endpoint: GymEndpoint,
        settings: GymSettings,
        default_agent: str | None,
        access: GymAccess | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.settings = settings
        self.default_agent = default_agent
        #: Headers and TLS trust for Gym's servers (``--gym-header``, ``--gym-ca-file``).
        self.access = access or GymAccess()

    @property
    def url(self) -> str:
        return self.endpoint.head_url

    @property
    def agents(self) -> list[str]:
        return self.endpoint.agents

    @property
    def log_path(self) -> str | None:
        return self.endpoint.log_path

    @property
    def policy_url(self) -> str | None:
        return self.endpoint.policy_url

    def run(
        self,
        row: dict[str, Any],
        agent: str | None = None,
        timeout: float | None = None,
        task_index: int = 0,
        repeat: int = 0,
    ) -> dict[str, Any]:
        """POST ``row`` to the agent's ``/run`` route; Gym's answer, or TrialFault."""
        # Imported when used: asyncio is not needed by a process that runs no rollout (the xdist controller).
        from pytest_gym.rollout.transport import build_request, post_rollout_once, row_agent

        name = agent or row_agent(row) or self.default_agent
        if name is None:
            raise GymError(f"no agent for this row: pass agent=..., one of {', '.join(self.agents)}")
        url = self.endpoint.route_for(name)
        body = build_request(row, name, task_index, repeat)
        answer, _, _ = post_rollout_once(
            url, body, timeout or self.settings.trial_timeout, self.settings.reward_key, self.access
        )
        return answer
