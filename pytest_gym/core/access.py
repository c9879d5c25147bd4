"""How pytest-gym reaches a Gym on another host: extra headers (an auth proxy's) and the CA to trust.

``--gym-header NAME=ENVVAR`` names the environment variable that holds the header's value, so the value
never passes through the command line, the ini file, the settings written to the run folder or a log.
The values are read here, once per process (xdist workers inherit the environment), and reach the HTTP
client as a plain mapping; ``--gym-ca-file`` reaches it as an ``ssl.SSLContext``.

Credentials go only to their origin: the headers are sent to the ``--gym-url`` origin (scheme, host,
port) and to each ``--gym-header-origin URL``, never to another server Gym's head lists
(:meth:`GymAccess.headers_for`); an ``https`` head listing an ``http`` server is refused
(:func:`downgrade_problem`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pytest_gym.core.masking import register_secret_env

if TYPE_CHECKING:
    import ssl

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
#: An environment variable's name as CI systems write them; anything else may be a value given by mistake.
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")

HOW_TO_PASS_HEADERS = (
    "a header's value is never taken from the command line or the ini file: write --gym-header NAME=ENVVAR "
    "(e.g. Authorization=GYM_AUTH with GYM_AUTH='Bearer ...' in the environment), ENVVAR being an environment "
    "variable's name (upper-case letters, digits, _)"
)


def header_problem(item: str) -> str | None:
    """Why ``item`` is not ``NAME=ENVVAR`` (said without its value, which may be a secret); None when it is."""
    name, sep, env = item.partition("=")
    if not sep or not _HEADER_NAME.fullmatch(name.strip()):
        return "not NAME=ENVVAR with NAME an HTTP header name"
    if not _ENV_NAME.fullmatch(env.strip()):
        return f"the value of header {name.strip()!r} is not an environment variable's name"
    return None


Origin = tuple[str, str, int]


def origin(url: str) -> Origin | None:
    """(scheme, host, port) of an http(s) URL, the port made explicit; None for anything else."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def origin_text(value: Origin) -> str:
    scheme, host, port = value
    return f"{scheme}://{host}:{port}"


@dataclass(frozen=True)
class GymAccess:
    """Headers sent to Gym, the origins they may go to, and the TLS context for ``https`` Gym URLs (None:
    system trust)."""

    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    #: Where the headers go: the ``--gym-url`` origin and every ``--gym-header-origin``.
    origins: frozenset[Origin] = frozenset()

    def headers_for(self, url: str) -> Mapping[str, str]:
        """The headers a request to ``url`` carries: all of them on an allowed origin, else none."""
        if not self.headers or origin(url) not in self.origins:
            return {}
        return self.headers


def downgrade_problem(head_url: str, server_url: str) -> str | None:
    """Why a server the head lists must not be used: an ``https`` head (trusted, maybe with --gym-ca-file)
    listing an ``http`` server would send rows, answers and headers in clear text. None when it is fine."""
    head, server = origin(head_url), origin(server_url)
    if head is None or server is None or head[0] != "https" or server[0] != "http":
        return None
    return (
        f"Gym's head {head_url} (https) lists a server at {server_url} (plain http): pytest-gym does not send "
        "rows, answers or headers in clear text to a server an https head named; serve it over https (or attach "
        "to an http head on purpose)"
    )


def header_origins(url: str | None, extra: Sequence[str] = ()) -> frozenset[Origin]:
    """The origins headers may go to: ``--gym-url``'s and each ``--gym-header-origin``'s; ValueError for an
    ``--gym-header-origin`` that is not an http(s) URL."""
    found = set()
    if url and (own := origin(url)) is not None:
        found.add(own)
    for item in extra:
        named = origin(item)
        if named is None:
            raise ValueError(f"pytest-gym: --gym-header-origin {item!r} is not an http(s) URL (scheme://host[:port])")
        found.add(named)
    return frozenset(found)


def without_header_variables(env: Mapping[str, str], header: Sequence[str], keep: Sequence[str] = ()) -> dict[str, str]:
    """``env`` without the variables holding ``--gym-header`` values: Gym's processes never need them (they
    are the proxy's credential, for pytest-gym's own requests); ``keep`` names variables Gym does read."""
    drop = {item.partition("=")[2].strip() for item in header if "=" in item} - set(keep)
    return {name: value for name, value in env.items() if name not in drop}


def gym_access(
    header: Sequence[str] = (),
    ca_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    url: str | None = None,
    header_origin: Sequence[str] = (),
) -> GymAccess:
    """The headers' values from the environment, the origins they go to (``url``'s and ``header_origin``'s)
    and the CA bundle loaded; ValueError naming what is wrong.

    The error names the variable or the file, never a header's value.
    """
    environ = os.environ if environ is None else environ
    headers: dict[str, str] = {}
    for item in header:
        problem = header_problem(item)
        if problem:
            raise ValueError(f"pytest-gym: --gym-header {problem}; {HOW_TO_PASS_HEADERS}")
        name, _, env = (part.strip() for part in item.partition("="))
        value = environ.get(env)
        if value is None:
            raise ValueError(
                f"pytest-gym: --gym-header {name}={env}: the environment variable {env} is not set (it holds the "
                f"value of the {name} header sent to Gym)"
            )
        if any(c in value for c in "\r\n\0") or value != value.strip():
            raise ValueError(
                f"pytest-gym: --gym-header {name}={env}: the value of {env} holds a line break, a NUL or surrounding "
                "spaces, which an HTTP header cannot carry"
            )
        if name.lower() in (h.lower() for h in headers):
            raise ValueError(f"pytest-gym: --gym-header {name} is given twice")
        headers[name] = value
        register_secret_env(env)
    context = None
    if ca_file:
        import ssl

        if not os.path.isfile(ca_file):
            raise ValueError(f"pytest-gym: --gym-ca-file {ca_file} is not a file")
        try:
            context = ssl.create_default_context(cafile=ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"pytest-gym: --gym-ca-file {ca_file} is not a PEM CA bundle ({type(exc).__name__})"
            ) from None
    return GymAccess(headers, context, header_origins(url, header_origin))


def access_hint(text: str) -> str:
    """What to add to a failure talking to Gym when it looks like TLS trust or a missing auth header."""
    if "CERTIFICATE_VERIFY_FAILED" in text or "SSLCertVerificationError" in text:
        return " (Gym's TLS certificate is not trusted here: pass the CA bundle that signed it with --gym-ca-file PATH)"
    if re.search(r"\bHTTP (401|403|407)\b", text):
        return " (is Gym behind an authenticating proxy? send its header with --gym-header NAME=ENVVAR)"
    return ""
