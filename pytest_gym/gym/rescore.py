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
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.access import GymAccess, access_hint
from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.endpoint import GymEndpoint, GymError
from pytest_gym.core.masking import Masker, clean_text, mask_secrets
from pytest_gym.core.numbers import is_finite_number
from pytest_gym.core.outcome import TrialOutcome, TrialSpec, usage_of
from pytest_gym.judge.paired import Rule, task_passes
from pytest_gym.rollout.http import FetchError, fetch
from pytest_gym.runfolder.layout import MATERIALIZED_FILE, RESCORE_INFO_FILE, RESCORED_FILE, ROLLOUTS_FILE
from pytest_gym.runfolder.records import (
    AGENT_REF_KEY,
    RESCORE_ERROR_KEY,
    gym_answer,
    read_records,
    rescored_line,
    reward_of,
    stamps,
    trial_key,
)
from pytest_gym.runfolder.rollouts import encode_record

RESOURCES_TYPE = "resources_servers"
#: Keys of a rollout that the verifier needs besides the request (Gym's reverify copies the same two).
_VERIFIER_INPUTS = ("deliverables_dir", "reference_ids")


@dataclass
class Rescored:
    """One rollout's reward then and now (``new_reward`` None with ``error`` when verification failed)."""

    task_index: int
    rollout_index: int
    nodeid: str | None
    task_hash: str | None
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


class UnsafeRescore(GymError):
    """A resources server whose verification depends on the original rollout's state (not ``stateless``)."""


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


def _get_json(url: str, timeout: float, access: GymAccess) -> Any:
    try:
        status, data = fetch(
            "GET", url, timeout=timeout, headers=access.headers_for(url), ssl_context=access.ssl_context
        )
    except FetchError as exc:
        raise GymError(f"cannot reach {url}: {exc}{access_hint(str(exc))}") from None
    if status >= 400:
        text = f"HTTP {status} from {url}: {mask_secrets(data[:200].decode('utf-8', 'replace'))}"
        raise GymError(text + access_hint(text))
    return json.loads(data)


def _config(endpoint: GymEndpoint, timeout: float, access: GymAccess) -> Any:
    import yaml  # as deployment.discover: only when used

    text = _get_json(f"{endpoint.head_url}/global_config_dict_yaml", timeout, access)
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
    access: GymAccess | None = None,
) -> RescoreResult:
    """Re-verify every rewarded rollout of ``run_dir`` with ``endpoint``'s resources servers.

    No model is called: only ``GET /reverify_mode`` and ``POST /verify`` of the resources servers.
    Writes ``output`` (relative to ``run_dir``; None: nowhere): one line per rollout, the verifier's
    new answer with the indices, ``_pytest_gym_old_reward`` and ``_pytest_gym_nodeid``.
    Raises GymError when the run folder has nothing to re-score, a rollout's agent has no resources
    server, or a server cannot be re-verified safely (unless ``force``).
    """
    run_dir = Path(run_dir)
    rollouts = read_records(run_dir / ROLLOUTS_FILE)
    inputs = {trial_key(r): r for r in read_records(run_dir / MATERIALIZED_FILE)}
    if not rollouts:
        raise GymError(f"nothing to re-score: {run_dir / ROLLOUTS_FILE} holds no rollouts")
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    skipped = 0
    for record in rollouts:  # a resumed run may hold a trial twice: the later record is the one that counts
        key = trial_key(record)
        if "response" not in record or key not in inputs:
            skipped += 1
            continue
        latest[key] = record

    access = access or GymAccess()
    agents = agent_resources_servers(_config(endpoint, timeout, access))
    urls = {s.process_name: s.url for s in endpoint.servers if s.server_type == RESOURCES_TYPE}
    only = next(iter(urls)) if len(urls) == 1 else None

    def server_for(record: Mapping[str, Any]) -> str:
        request = inputs[trial_key(record)]
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

    routed = [(key, record, server_for(record)) for key, record in sorted(latest.items(), key=_record_order)]
    modes = {name: str(_get_json(f"{urls[name]}/reverify_mode", timeout, access)) for name in {s for _, _, s in routed}}
    unsafe = sorted(name for name, mode in modes.items() if mode != "stateless")
    if unsafe and not force:
        raise UnsafeRescore(
            f"resources server(s) {', '.join(unsafe)} cannot be re-verified safely (reverify_mode "
            f"{', '.join(modes[n] for n in unsafe)}: verification depends on state of the original rollout); "
            "re-score anyway with force=True (--gym-rescore-force) only if that state does not matter"
        )

    def one(item: tuple[tuple[Any, ...], dict[str, Any], str]) -> tuple[Rescored, dict[str, Any]]:
        key, record, server = item
        found = stamps(record)
        result = Rescored(
            task_index=found.task_index or 0,
            rollout_index=found.repeat or 0,
            nodeid=found.nodeid,
            task_hash=found.task_hash,
            old_reward=reward_of(record, reward_key),
        )
        verify(result, inputs[key], record, f"{urls[server]}/verify")
        line = rescored_line(record, result.answer, result.old_reward)
        if result.error is not None:
            line[RESCORE_ERROR_KEY] = result.error
        return result, line

    def verify(result: Rescored, request: dict[str, Any], record: dict[str, Any], url: str) -> None:
        body = json.dumps(verify_payload(request, record), ensure_ascii=False)
        try:
            status, data = fetch(
                "POST",
                url,
                body.encode(),
                timeout=timeout,
                headers=access.headers_for(url),
                ssl_context=access.ssl_context,
            )
        except FetchError as exc:
            result.error = f"cannot reach {url}: {exc}{access_hint(str(exc))}"
            return
        if status >= 400:
            text = f"HTTP {status} from {url}: {mask_secrets(data[:200].decode('utf-8', 'replace'))}"
            result.error = text + access_hint(text)
            return
        try:
            answer = json.loads(data)
            reward = answer[reward_key]
        except (ValueError, KeyError, TypeError):
            result.error = f"{url} answered without a {reward_key!r}"
            return
        if not is_finite_number(reward):
            result.error = f"{url} answered {reward_key}={reward!r}, not a finite number"
            return
        result.new_reward = float(reward)
        result.answer = answer

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        done = list(pool.map(one, routed))
    if output is not None:
        masker = Masker()  # as data, line by line, like the rollouts: a line always stays a record
        write_atomically(run_dir / output, b"".join(encode_record(masker, line) for _, line in done), fsync=False)
    return RescoreResult(results=[r for r, _ in done], servers=agents, modes=modes, skipped=skipped)


# -- the session's side: trials take their outcome from the re-score, the run says what moved -----------------------


@dataclass
class RescoredTrials:
    """The re-score of an earlier run, by (task hash, repeat): each trial's new verdict and its request."""

    source: Path
    error: str | None = None
    lines: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    requests: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    by_index: dict[tuple[Any, Any], dict[str, Any]] = field(default_factory=dict)

    def outcome(self, spec: TrialSpec) -> TrialOutcome:
        """This trial's outcome: the new reward of its saved answer, or why it has none (a fault)."""
        if self.error is not None:
            return TrialOutcome.for_spec(spec, error=self.error, error_class="rescore", rescored=True)
        line = self.lines.get(spec.key) or self.by_index.get((spec.task_index, spec.repeat))
        if line is None:
            return TrialOutcome.for_spec(
                spec,
                error=f"rescore: {self.source} has no rewarded answer for this trial (it failed there or was not "
                "run); run it normally, or deselect it",
                error_class="rescore",
                rescored=True,
            )
        request = self.requests.get(trial_key(line))
        if line.get(RESCORE_ERROR_KEY):
            error = clean_text(f"rescore: {line[RESCORE_ERROR_KEY]}")
            return TrialOutcome.for_spec(spec, error=error, error_class="rescore", request=request, rescored=True)
        answer = gym_answer(line)
        reward = reward_of(answer, spec.reward_key)
        if reward is None:
            return TrialOutcome.for_spec(
                spec,
                error=f"rescore: the verifier's answer has no finite {spec.reward_key!r}",
                error_class="rescore",
                request=request,
                rescored=True,
            )
        return TrialOutcome.for_spec(
            spec, reward=reward, answer=answer, request=request, tokens=usage_of(answer), rescored=True
        )


def load_rescored(run_dir: Path, source: Path) -> RescoredTrials:
    """What ``rescore`` wrote into ``run_dir`` (this run's folder), joined with ``source``'s requests."""
    trials = RescoredTrials(source=source)
    try:
        info = json.loads((run_dir / RESCORE_INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = {"error": f"rescore: {run_dir / RESCORE_INFO_FILE} is missing: the re-score did not run"}
    if isinstance(info, dict) and info.get("error"):
        trials.error = clean_text(str(info["error"]))
        return trials
    for line in read_records(run_dir / RESCORED_FILE):
        found = stamps(line)
        if found.repeat is None:
            continue
        if found.key is not None:
            trials.lines[found.key] = line
        else:  # a folder Gym's own collector wrote: its rows are known by position only
            trials.by_index[(found.task_index, found.repeat)] = line
    for request in read_records(source / MATERIALIZED_FILE):
        trials.requests[trial_key(request)] = request
    return trials


def _record_order(item: tuple[tuple[Any, ...], dict[str, Any]]) -> tuple[int, int, str]:
    """Rollouts in dataset order (the indices may be missing or of any type in a hand-edited folder)."""
    key, record = item
    found = stamps(record)
    return (
        found.task_index if found.task_index is not None else -1,
        found.repeat if found.repeat is not None else -1,
        str(key),
    )


def _task_of(item: Rescored) -> str:
    return (item.nodeid or "").rsplit("[", 1)[0] or str(item.task_hash or item.task_index)


def moved(result: RescoreResult, min_reward: float = 1.0, rule: Rule = "all") -> dict[str, Any]:
    """What the verifier change moved: the rewards (old -> new) and the tasks whose pass/fail flipped."""
    changed = [
        {"nodeid": r.nodeid, "task_index": r.task_index, "repeat": r.rollout_index, "old": r.old_reward,
         "new": r.new_reward}
        for r in result.changed
    ]  # fmt: skip
    tasks: dict[str, list[Rescored]] = {}
    for item in result.results:
        if item.error is None and item.old_reward is not None and item.new_reward is not None:
            tasks.setdefault(_task_of(item), []).append(item)
    flipped = []
    for task, items in sorted(tasks.items()):
        before = task_passes([r.old_reward for r in items if r.old_reward is not None], min_reward, rule)
        after = task_passes([r.new_reward for r in items if r.new_reward is not None], min_reward, rule)
        if before != after:
            flipped.append({"task": task, "before": "pass" if before else "fail", "after": "pass" if after else "fail"})
    return {
        "rescored": len(result.results) - len(result.errors),
        "errors": len(result.errors),
        "skipped": result.skipped,
        "moved": changed,
        "flipped_tasks": flipped,
        "modes": dict(result.modes),
    }


def moved_note(source: Path, report: dict[str, Any], shown: int = 10) -> str:
    """One line for the terminal and the summary's notes: how many rewards moved, and which tasks flipped."""
    changes = report["moved"]
    text = (
        f"rescore: re-verified {report['rescored']} saved answers of {source} with the current resources server "
        f"({', '.join(f'{k}: {v}' for k, v in sorted(report['modes'].items())) or 'none'}), no model called; "
        f"{len(changes)} reward{'s' if len(changes) != 1 else ''} moved"
    )
    if changes:
        parts = [f"{c['nodeid'] or c['task_index']} {c['old']:g} -> {c['new']:g}" for c in changes[:shown]
                 if c["old"] is not None]  # fmt: skip
        text += ": " + ", ".join(parts) + (f" (and {len(changes) - shown} more)" if len(changes) > shown else "")
    flipped = report["flipped_tasks"]
    if flipped:
        shown_tasks = ", ".join(f"{f['task']} {f['before']} -> {f['after']}" for f in flipped[:shown])
        more = f" (and {len(flipped) - shown} more)" if len(flipped) > shown else ""
        text += f"; tasks whose pass/fail flipped: {shown_tasks}{more}"
    if report["errors"]:
        text += f"; {report['errors']} could not be re-verified (their trials error)"
    return text


def write_rescore_info(run_dir: Path, source: Path, report: dict[str, Any] | None, error: str | None = None) -> None:
    data = {"source": str(source), "error": error, **(report or {})}
    write_atomically(run_dir / RESCORE_INFO_FILE, mask_secrets(json.dumps(data, indent=2)).encode(), fsync=False)
