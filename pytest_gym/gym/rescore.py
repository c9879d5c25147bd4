"""Re-score a finished run: send its saved answers to the resources servers' ``/verify``, no model calls.

What ``--gym-rescore RUN_DIR`` needs when a verifier changed and the answers did not: every rollout in
``rollouts.jsonl`` keeps the model's ``response``; joined with its request in
``rollouts_materialized_inputs.jsonl`` (on ``_ng_task_index``, ``_ng_rollout_index``) it is exactly
the body Gym's resources server verifies at the end of ``/run``. This is what Gym's own ``gym eval
reverify`` does (``nemo_gym/rollout_reverification.py``: payload = materialized input + ``response``,
routed agent -> resources server by the config's agent blocks, refused unless every server says
``GET /reverify_mode`` is ``stateless``), done over HTTP against a running deployment so that no
``nemo_gym`` import is needed. Servers whose verification replays state (a sandbox, a database
session: ``unsupported``/``unknown``) are refused unless ``force``: their new rewards may be wrong.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.endpoint import GymEndpoint, GymError
from pytest_gym.core.masking import mask_secrets
from pytest_gym.rollout.http import FetchError, fetch
from pytest_gym.runfolder.rollouts import (
    AGENT_REF_KEY,
    MATERIALIZED_FILE,
    ROLLOUT_INDEX_KEY,
    ROLLOUTS_FILE,
    TASK_INDEX_KEY,
    read_jsonl,
)

RESOURCES_TYPE = "resources_servers"
RESCORED_FILE = "rescored.jsonl"
#: Keys of a rollout that the verifier needs besides the request (Gym's reverify copies the same two).
_VERIFIER_INPUTS = ("deliverables_dir", "reference_ids")


@dataclass
class Rescored:
    """One rollout's reward then and now (``new_reward`` None with ``error`` when verification failed)."""

    task_index: int
    rollout_index: int
    nodeid: str | None
    old_reward: float | None
    new_reward: float | None = None
    error: str | None = None
    answer: dict[str, Any] | None = None

    @property
    def changed(self) -> bool:
        return self.error is None and self.old_reward != self.new_reward


@dataclass
class RescoreResult:
    results: list[Rescored]
    servers: dict[str, str] = field(default_factory=dict)  # agent -> resources server
    modes: dict[str, str] = field(default_factory=dict)  # resources server -> reverify mode
    skipped: int = 0  # rollouts without a response or without their materialized input

    @property
    def changed(self) -> list[Rescored]:
        return [r for r in self.results if r.changed]

    @property
    def errors(self) -> list[Rescored]:
        return [r for r in self.results if r.error is not None]


def agent_resources_servers(config: Any) -> dict[str, str]:
    """agent instance -> resources server instance, from Gym's resolved config (its agent blocks)."""
    mapping: dict[str, str] = {}
    if not isinstance(config, Mapping):
        return mapping
    for name, block in config.items():
        agents = block.get("responses_api_agents") if isinstance(block, Mapping) else None
        if not isinstance(agents, Mapping) or not agents:
            continue
        impl = next(iter(agents.values()))
        ref = impl.get("resources_server") if isinstance(impl, Mapping) else None
        if isinstance(ref, Mapping) and ref.get("name"):
            mapping[str(name)] = str(ref["name"])
    return mapping


def _get_json(url: str, timeout: float) -> Any:
    try:
        status, data = fetch("GET", url, timeout=timeout)
    except FetchError as exc:
        raise GymError(f"cannot reach {url}: {exc}") from None
    if status >= 400:
        raise GymError(f"HTTP {status} from {url}: {mask_secrets(data[:200].decode('utf-8', 'replace'))}")
    return json.loads(data)


def _config(endpoint: GymEndpoint, timeout: float) -> Any:
    import yaml  # as deployment.discover: only when used

    text = _get_json(f"{endpoint.head_url}/global_config_dict_yaml", timeout)
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception as exc:
        raise GymError(f"cannot parse Gym's config: {type(exc).__name__}") from None


def verify_payload(materialized: Mapping[str, Any], rollout: Mapping[str, Any]) -> dict[str, Any]:
    """The ``/verify`` body: the request as sent to ``/run`` plus the answer the model gave."""
    payload = dict(materialized)
    payload["response"] = rollout["response"]
    for key in _VERIFIER_INPUTS:
        if key in rollout:
            payload[key] = rollout[key]
    return payload


def rescore(
    run_dir: str | Path,
    endpoint: GymEndpoint,
    *,
    reward_key: str = "reward",
    concurrency: int = 8,
    timeout: float = 120.0,
    force: bool = False,
    output: str | Path | None = RESCORED_FILE,
) -> RescoreResult:
    """Re-verify every rewarded rollout of ``run_dir`` with ``endpoint``'s resources servers.

    No model is called: only ``GET /reverify_mode`` and ``POST /verify`` of the resources servers.
    Writes ``output`` (relative to ``run_dir``; None: nowhere): one line per rollout, the verifier's
    new answer with the indices, ``_pytest_gym_old_reward`` and ``_pytest_gym_nodeid``.
    Raises GymError when the run folder has nothing to re-score, a rollout's agent has no resources
    server, or a server cannot be re-verified safely (unless ``force``).
    """
    run_dir = Path(run_dir)
    rollouts = read_jsonl(run_dir / ROLLOUTS_FILE)
    inputs = {(r.get(TASK_INDEX_KEY), r.get(ROLLOUT_INDEX_KEY)): r for r in read_jsonl(run_dir / MATERIALIZED_FILE)}
    if not rollouts:
        raise GymError(f"nothing to re-score: {run_dir / ROLLOUTS_FILE} holds no rollouts")
    latest: dict[tuple[Any, Any], dict[str, Any]] = {}
    skipped = 0
    for record in rollouts:  # a resumed run may hold a trial twice: the later record is the one that counts
        key = (record.get(TASK_INDEX_KEY), record.get(ROLLOUT_INDEX_KEY))
        if "response" not in record or key not in inputs:
            skipped += 1
            continue
        latest[key] = record

    agents = agent_resources_servers(_config(endpoint, timeout))
    urls = {s.process_name: s.url for s in endpoint.servers if s.server_type == RESOURCES_TYPE}
    only = next(iter(urls)) if len(urls) == 1 else None

    def server_for(record: Mapping[str, Any]) -> str:
        request = inputs[(record.get(TASK_INDEX_KEY), record.get(ROLLOUT_INDEX_KEY))]
        ref = record.get(AGENT_REF_KEY) or request.get(AGENT_REF_KEY)
        agent = ref.get("name") if isinstance(ref, Mapping) else None
        name = (agents.get(str(agent)) if agent else None) or only
        if name is None or name not in urls:
            known = ", ".join(sorted(agents)) or "none"
            raise GymError(
                f"cannot find the resources server of agent {agent!r} in this deployment (its agents: {known}; "
                f"resources servers: {', '.join(sorted(urls)) or 'none'})"
            )
        return name

    routed = [(key, record, server_for(record)) for key, record in sorted(latest.items(), key=lambda kv: kv[0])]
    modes = {name: str(_get_json(f"{urls[name]}/reverify_mode", timeout)) for name in {s for _, _, s in routed}}
    unsafe = sorted(name for name, mode in modes.items() if mode != "stateless")
    if unsafe and not force:
        raise GymError(
            f"resources server(s) {', '.join(unsafe)} cannot be re-verified safely (reverify_mode "
            f"{', '.join(modes[n] for n in unsafe)}: verification depends on state of the original rollout); "
            "pass force=True to re-score anyway"
        )

    def one(item: tuple[tuple[Any, Any], dict[str, Any], str]) -> tuple[Rescored, dict[str, Any] | None]:
        (task, repeat), record, server = item
        old = record.get(reward_key)
        result = Rescored(
            task_index=int(task or 0),
            rollout_index=int(repeat or 0),
            nodeid=record.get("_pytest_gym_nodeid"),
            old_reward=float(old) if isinstance(old, (int, float)) and not isinstance(old, bool) else None,
        )
        body = json.dumps(verify_payload(inputs[(task, repeat)], record), ensure_ascii=False).encode()
        url = f"{urls[server]}/verify"
        try:
            status, data = fetch("POST", url, body, timeout=timeout)
        except FetchError as exc:
            result.error = f"cannot reach {url}: {exc}"
            return result, None
        if status >= 400:
            result.error = f"HTTP {status} from {url}: {mask_secrets(data[:200].decode('utf-8', 'replace'))}"
            return result, None
        try:
            answer = json.loads(data)
            reward = answer[reward_key]
        except (ValueError, KeyError, TypeError):
            result.error = f"{url} answered without a {reward_key!r}"
            return result, None
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            result.error = f"{url} answered {reward_key}={reward!r}, not a finite number"
            return result, None
        result.new_reward = float(reward)
        result.answer = answer
        line = {TASK_INDEX_KEY: task, ROLLOUT_INDEX_KEY: repeat, **answer}
        line["_pytest_gym_old_reward"] = result.old_reward
        line["_pytest_gym_nodeid"] = result.nodeid
        return result, line

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        done = list(pool.map(one, routed))
    if output is not None:
        lines = [json.dumps(line, ensure_ascii=False) for _, line in done if line is not None]
        write_atomically(run_dir / output, mask_secrets("".join(f"{x}\n" for x in lines)).encode(), fsync=False)
    return RescoreResult(results=[r for r, _ in done], servers=agents, modes=modes, skipped=skipped)
