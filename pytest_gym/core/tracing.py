"""W3C Trace Context for rollouts: one trace per trial, so a trial opens next to Gym's own spans.

Gym's servers continue an inbound ``traceparent`` when their telemetry exports (``nemo_gym/telemetry``: one
rollout is one trace). Every ``/run`` of a trial carries the trial's ``traceparent`` (version 00, a random
trace id, a random parent span id, sampled), and ``tracestate`` when one is configured
(``--gym-tracestate``); the trial records the trace id (``gym_trace_id``), and ``--gym-trace-url`` turns it
into a link (``https://jaeger.example/trace/{trace_id}``). Standard library only.
"""

from __future__ import annotations

import os
import random
import re

#: ``version-trace_id-parent_id-flags`` (https://www.w3.org/TR/trace-context/#traceparent-header).
TRACEPARENT = re.compile(r"00-(?P<trace_id>[0-9a-f]{32})-(?P<parent_id>[0-9a-f]{16})-(?P<flags>[0-9a-f]{2})")
#: One ``tracestate`` list member: ``key=value`` (https://www.w3.org/TR/trace-context/#tracestate-header).
_MEMBER = re.compile(
    r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)
MAX_TRACESTATE_MEMBERS = 32
MAX_TRACESTATE = 512
#: The placeholder a ``--gym-trace-url`` template must hold.
TRACE_ID_FIELD = "{trace_id}"


#: Where the trace ids come from: seeded from the system's randomness once (again in a forked child), then drawn
#: without a system call. The ids must be unique, not secret; on the dispatcher's thread a system call per trial
#: gives up the interpreter lock, and taking it back from pytest's busy thread costs two thread switches.
_ids = random.Random()
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_ids.seed)


def new_traceparent() -> tuple[str, str]:
    """(``traceparent`` header value, its trace id) for a new trace; neither id is all zeros."""
    while True:
        ids = f"{_ids.getrandbits(192):048x}"
        trace_id, parent_id = ids[:32], ids[32:]
        if trace_id != "0" * 32 and parent_id != "0" * 16:  # pragma: no branch - one chance in 2**64
            return f"00-{trace_id}-{parent_id}-01", trace_id


def tracestate_problem(value: str) -> str | None:
    """Why ``value`` is not a ``tracestate`` header value; None when it is one."""
    if len(value) > MAX_TRACESTATE:
        return f"longer than {MAX_TRACESTATE} characters"
    members = [m.strip() for m in value.split(",") if m.strip()]
    if not members:
        return "no key=value member"
    if len(members) > MAX_TRACESTATE_MEMBERS:
        return f"more than {MAX_TRACESTATE_MEMBERS} members"
    for member in members:
        if not _MEMBER.fullmatch(member):
            return f"{member[:60]!r} is not a key=value member (key: lowercase letters, digits, _-*/ and @)"
    keys = [m.split("=", 1)[0] for m in members]
    if len(set(keys)) != len(keys):
        return "a key is given twice"
    return None


def trace_url_problem(template: str) -> str | None:
    """Why ``template`` is not a trace link template; None when it is one."""
    if TRACE_ID_FIELD not in template:
        return f"holds no {TRACE_ID_FIELD} (e.g. https://jaeger.example/trace/{TRACE_ID_FIELD})"
    if not re.match(r"https?://\S+$", template):
        return "is not an http(s) URL without spaces"
    return None


def trace_link(template: str | None, trace_id: str | None) -> str | None:
    """The link to a trial's trace, when a template and the trial's trace id are known."""
    if not template or not trace_id or not re.fullmatch(r"[0-9a-f]{32}", trace_id):
        return None
    return template.replace(TRACE_ID_FIELD, trace_id)
