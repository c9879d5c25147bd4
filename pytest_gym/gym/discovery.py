"""Where a running Gym's servers are: its head's ``/server_instances`` and config, read and checked.

Hostile or malformed answers become one ``GymError`` naming the problem, recorded with the deployment so
every xdist worker reports the same error.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_gym.core.access import GymAccess, access_hint, downgrade_problem
from pytest_gym.core.endpoint import AGENT_TYPE, ENVIRONMENT_TYPE, GymEndpoint, GymError, ServerInstance
from pytest_gym.core.masking import clean_text, strip_control
from pytest_gym.core.numbers import is_int
from pytest_gym.gym.trajectories import attached_capture_dir


def _environment_servers_by_agent(config: Any) -> dict[str, str]:
    """agent instance name -> environment server instance name, from Gym's resolved config."""
    routes: dict[str, str] = {}
    if not isinstance(config, dict):
        return routes
    for instance_name, instance in config.items():
        servers = instance.get(ENVIRONMENT_TYPE) if isinstance(instance, dict) else None
        if not isinstance(servers, dict):
            continue
        for server in servers.values():
            ref = server.get("agent_server") if isinstance(server, dict) else None
            if isinstance(ref, dict) and ref.get("name"):
                routes.setdefault(str(ref["name"]), str(instance_name))
    return routes


#: Bounds on Gym's /server_instances answer: far above any real deployment, far below harm.
_MAX_SERVERS = 1000


_MAX_NAME = 256


_MAX_URL = 2048


def parse_server_instances(instances: Any, head_url: str) -> list[ServerInstance]:
    """Gym's ``/server_instances`` answer as servers, checked; a GymError naming the first problem otherwise.

    A GymError (unlike the KeyError or TypeError a malformed answer raised before) is recorded with the
    deployment, so every xdist worker reports it instead of starting Gym again.
    """

    def bad(problem: str) -> GymError:
        return GymError(
            clean_text(f"Gym's {head_url}/server_instances answer is malformed: {problem}", 1000)
            + "; is this a NeMo Gym head server (same version as the plugin expects)?"
        )

    if not isinstance(instances, list):
        raise bad(f"a JSON {type(instances).__name__}, not a list of servers")
    if len(instances) > _MAX_SERVERS:
        raise bad(f"{len(instances)} servers, more than the {_MAX_SERVERS} pytest-gym reads")
    servers = []
    for index, entry in enumerate(instances):
        if not isinstance(entry, dict):
            raise bad(f"entry {index} is a JSON {type(entry).__name__}, not an object")
        fields: dict[str, str] = {}
        for key, required, limit in (
            ("process_name", True, _MAX_NAME),
            ("server_type", True, _MAX_NAME),
            ("name", False, _MAX_NAME),
            ("url", True, _MAX_URL),
        ):
            value = entry.get(key)
            if value is None and not required:
                value = ""
            if not isinstance(value, str) or (required and not value):
                raise bad(f"entry {index}: {key!r} is {type(value).__name__}, not a non-empty string")
            if len(value) > limit or value != strip_control(value):
                raise bad(f"entry {index}: {key!r} is longer than {limit} characters or holds control characters")
            fields[key] = value
        if not fields["url"].startswith(("http://", "https://")):
            raise bad(f"entry {index}: 'url' is not an http(s) URL")
        pid = entry.get("pid")
        if pid is not None and (not is_int(pid) or not 0 < pid < 2**31):
            raise bad(f"entry {index}: 'pid' is {type(pid).__name__} {pid!r:.40}, not a process id")
        servers.append(
            ServerInstance(
                process_name=fields["process_name"],
                server_type=fields["server_type"],
                name=fields["name"],
                url=fields["url"].rstrip("/"),
                pid=pid,
            )
        )
    return servers


def discover(head_url: str, timeout: float = 10.0, access: GymAccess | None = None) -> GymEndpoint:
    """Ask a running head server for its servers and how rows reach each agent (with ``access``'s headers/TLS)."""
    import yaml  # imported when used: pytest start-up is paid by every run and every xdist worker

    from pytest_gym.rollout.http import FetchError, fetch

    head_url = head_url.rstrip("/")
    access = access or GymAccess()

    def get_json(route: str) -> Any:
        status, data = fetch(
            "GET",
            f"{head_url}/{route}",
            timeout=timeout,
            headers=access.headers_for(head_url),
            ssl_context=access.ssl_context,
        )
        if status >= 300:
            redirect = " (a redirect, which pytest-gym does not follow)" if status < 400 else ""
            raise FetchError(f"HTTP {status} from {head_url}/{route}{redirect}")
        return json.loads(data)

    try:
        instances = get_json("server_instances")
        config_text = get_json("global_config_dict_yaml")
    except (FetchError, ValueError, RecursionError) as exc:
        raise GymError(clean_text(f"cannot read Gym's servers from {head_url}: {exc}{access_hint(str(exc))}")) from None
    servers = parse_server_instances(instances, head_url)
    for server in servers:
        problem = downgrade_problem(head_url, server.url)
        if problem:
            raise GymError(clean_text(problem, 2000))
    if not isinstance(config_text, str):
        raise GymError(
            f"Gym's {head_url}/global_config_dict_yaml is a JSON {type(config_text).__name__}, not the string of "
            "YAML a Gym head server returns; is this a NeMo Gym head server?"
        )
    # The config may hold the policy key unmasked: it is parsed here and never written out. Plain YAML:
    # interpolations such as ${oc.env:...} stay unresolved strings (only the servers' names are read).
    try:
        config = yaml.load(config_text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception as exc:
        raise GymError(
            f"cannot parse Gym's config from {head_url}/global_config_dict_yaml: {type(exc).__name__}"
        ) from None
    env_for_agent = _environment_servers_by_agent(config)
    by_name = {s.process_name: s for s in servers}
    routes: dict[str, str] = {}
    for server in servers:
        if server.server_type != AGENT_TYPE:
            continue
        env_name = env_for_agent.get(server.process_name)
        target = by_name.get(env_name) if env_name else None
        routes[server.process_name] = (target or server).url + "/run"
    return GymEndpoint(head_url=head_url, servers=servers, run_routes=routes, capture_dir=attached_capture_dir(config))
