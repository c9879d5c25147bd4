"""Whether the Gym deployment still serves: the one place that declares it dead.

Start mode (this run started Gym, so the pids Gym reports are processes of this
machine): a watchdog looks at the servers' processes every second, and again
right after a failed request. A pid counts as alive only while it names the
process that was started (same start time), so a recycled pid is not mistaken
for a server.

Attach mode (``--gym-url``): Gym may run on another host or in a container and
its pids mean nothing here. Health comes from HTTP only: after a failed request,
every server's ``/health`` (and the head's ``/readyz``, named in the message) is
probed; any HTTP answer means the server is there. A server that refuses
connections twice a moment apart, or fails the probe on ``FAILED_CHECKS`` checks
in a row, is dead.

Once dead, every later trial fails at once with the reason, and the rollouts in
flight are abandoned (they wait on ``signal()`` alongside their answer).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket

from pytest_gym.core.endpoint import GymEndpoint
from pytest_gym.rollout.http import BodyTooLarge, HTTPPool

#: Failed probes in a row (timeouts, garbage) after which a server counts as dead.
FAILED_CHECKS = 3
#: Wait before probing a server that refused a connection once more.
RECHECK_S = 0.25
_PROBE_MAX_BODY = 1024 * 1024
_UNREACHABLE = frozenset({errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN})


class Health:
    """The deployment's health as this process sees it; used from the dispatcher's event loop."""

    def __init__(self, endpoint: GymEndpoint, http: HTTPPool, probe_timeout_s: float = 5.0) -> None:
        self.endpoint = endpoint
        #: Why the deployment is known dead: every later trial fails at once with this.
        self.dead: str | None = None
        self._http = http
        self._probe_timeout_s = probe_timeout_s
        self._signal: asyncio.Future[None] | None = None
        self._probing: asyncio.Future[None] | None = None
        self._failures: dict[str, int] = {}

    @property
    def watches(self) -> bool:
        """Whether a watchdog has anything to look at: processes this run started here."""
        return self.endpoint.local_pids and any(server.pid for server in self.endpoint.servers)

    def signal(self) -> asyncio.Future[None]:
        """A future done once the deployment is known dead (one for all rollouts: nothing per trial)."""
        if self._signal is None:
            self._signal = asyncio.get_running_loop().create_future()
            if self.dead is not None:
                self._signal.set_result(None)
        return self._signal

    async def watch(self, interval_s: float = 1.0) -> None:
        """Look at the started processes every ``interval_s`` until one is gone (cancel to stop)."""
        while self.dead is None:
            await asyncio.sleep(interval_s)
            self._check_processes()

    async def check(self) -> str | None:
        """After a failed request: why the deployment is dead, or None when the failure was the call's own."""
        if self.dead is None:
            if self.endpoint.local_pids:
                self._check_processes()
            else:
                if self._probing is None:  # one round of probes for all the rollouts that failed meanwhile
                    self._probing = asyncio.ensure_future(self._probe_all())
                    self._probing.add_done_callback(self._probed)
                await asyncio.shield(self._probing)
        return self.dead

    def _probed(self, probing: asyncio.Future[None]) -> None:
        self._probing = None
        if not probing.cancelled():
            probing.exception()  # retrieved: a bug in a probe must not be logged as "never retrieved"

    def _declare(self, reason: str) -> None:
        if self.dead is None:
            self.dead = reason
            if self._signal is not None and not self._signal.done():
                self._signal.set_result(None)

    def _check_processes(self) -> None:
        dead = self.endpoint.dead_servers()
        if dead:
            names = ", ".join(f"{d.process_name} (pid {d.pid})" for d in dead)
            log = f"; see {self.endpoint.log_path}" if self.endpoint.log_path else ""
            self._declare(f"Gym server {names} is no longer running{log}")

    async def _probe_all(self) -> None:
        """Probe every server, and the head for context: a dead server is decisive, the head alone is not (its
        ``/readyz`` only says that the ``gym`` process answers; its servers may outlive it)."""
        servers = self.endpoint.servers
        if not servers:
            return
        head = self.endpoint.head_url
        urls = [f"{head}/readyz"] + [f"{s.url}/health" for s in servers]
        results = list(await asyncio.gather(*(self._probe(url) for url in urls)))
        refused = [i for i, (kind, _) in enumerate(results) if kind == "unreachable"]
        if refused:  # once more, a moment later: one refusal could be a fluke
            await asyncio.sleep(RECHECK_S)
            again = await asyncio.gather(*(self._probe(urls[i]) for i in refused))
            for i, result in zip(refused, again, strict=True):
                results[i] = result
        dead = []
        for server, (kind, reason) in zip(servers, results[1:], strict=True):
            name = server.process_name
            if kind == "ok":
                self._failures.pop(name, None)
                continue
            if kind == "failing":
                failures = self._failures[name] = self._failures.get(name, 0) + 1
                if failures < FAILED_CHECKS:
                    continue
                reason = f"{reason}; {failures} checks in a row"
            dead.append(f"{name} at {server.url} ({reason})")
        if dead:
            head_kind, head_reason = results[0]
            also = f"; the head server at {head} is not answering either ({head_reason})" if head_kind != "ok" else ""
            self._declare(f"Gym server {', '.join(dead)} is not answering{also}")

    async def _probe(self, url: str) -> tuple[str, str]:
        """("ok" | "unreachable" | "failing", why) for one GET: any HTTP answer is "ok"."""
        try:
            await asyncio.wait_for(self._http.request("GET", url, None, _PROBE_MAX_BODY), self._probe_timeout_s)
        except BodyTooLarge:
            pass  # it answered
        except asyncio.TimeoutError:
            return "failing", f"no answer within {self._probe_timeout_s:g} s"
        except socket.gaierror as exc:
            return "unreachable", f"cannot resolve its host: {exc.strerror}"
        except OSError as exc:
            if exc.errno in _UNREACHABLE:
                return "unreachable", os.strerror(exc.errno).lower()
            if exc.errno is None and f"[Errno {errno.ECONNREFUSED}]" in str(exc):  # each of its addresses refused
                return "unreachable", "connection refused"
            return "failing", f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # garbage, a connection closed mid-answer
            return "failing", f"{type(exc).__name__}: {exc}"
        return "ok", ""
