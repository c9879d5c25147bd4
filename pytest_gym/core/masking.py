"""Keep credentials and hostile text out of everything the plugin writes or prints.

The policy key lives only in the environment variable ``GYM_POLICY_API_KEY``;
Gym reads it through an ``${oc.env:...}`` interpolation, so it is never on a
command line. Gym, policies and verifiers may still echo it (or another
credential) back, and their answers are not ours to trust. So every text that
leaves the process goes through one pass, :func:`mask_secrets` (for text) or
:func:`mask_data` (for JSON-like data), which masks:

- the value of ``GYM_POLICY_API_KEY`` and of every secret-named environment variable, also
  when cut short (any 8-character prefix of one is masked with what follows of it);
- credentials in a URL's user-info (``scheme://user:***@host``);
- values of secret-looking keys (api_key, token, secret, password, authorization,
  credential): in mappings, and in ``key=value``, ``key: value``, ``"key": "value"`` and
  ``?key=value`` text;
- ``Bearer``/``Basic`` tokens.

Text from Gym is also bounded and stripped of control characters
(:func:`clean_text`) before it reaches a terminal or a report, and Gym's JSON
answers are checked for depth (:func:`json_depth_exceeds`) before anything
recursive walks them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

POLICY_KEY_ENV = "GYM_POLICY_API_KEY"
MASK = "***"
_SECRET_WORD = (
    r"(?:api[_-]?key|apikey|access[_-]?key|private[_-]?key|secret|passw(?:or)?d|passphrase|authorization"
    r"|credential|token(?!s|iz))"  # not input_tokens, max_tokens, tokenizer: those are counts and names
)
#: A secret-looking name (of an environment variable, a mapping key, a ``key=value`` key).
SECRET_NAME = re.compile(_SECRET_WORD, re.IGNORECASE)
_MIN_SECRET = 6
#: A known secret cut short (an excerpt, a truncated field) still leaks: its prefixes this long are masked too.
_FRAGMENT = 8
_BEARER = re.compile(r"\b(?P<scheme>Bearer|Basic)(?P<space>\s+)(?P<token>[A-Za-z0-9._~+/=\-]{6,})", re.IGNORECASE)
_URL_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.\-])(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^/\s:@?#\"'<>]*)"
    r"(?::(?P<password>[^/\s@?#\"'<>]*))?@"
)
_KEY_VALUE = re.compile(
    rf"""(?<![\w.\-])(?P<q>["']?)(?P<key>(?=[\w.\-]*?{_SECRET_WORD})[\w.\-]+)(?P=q)(?P<sep>\s*[:=]\s*)"""
    r"""(?P<value>\$\{[^}\n]*\}|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'"""
    r"""|(?:(?:Bearer|Basic)\s+)?[^\s,;&"'<>(){}\[\]\\]+)""",
    re.IGNORECASE,
)
#: Cheap tests that tell most text needs no regular expression at all.
#: The "key" words ``SECRET_NAME`` knows, spelled out: a bare "key" is in every Responses object
#: (``prompt_cache_key``), and a hint that always fires would make every record take the slow path.
_KEY_WORDS = tuple(f"{word}{sep}key" for word in ("api", "access", "private") for sep in ("_", "-", ""))
_KEY_HINTS = (*_KEY_WORDS, "secret", "passw", "passphrase", "authorization", "credential", "token")
_SCHEME_HINTS = ("bearer", "basic")
_WORD_HINTS = (*_KEY_WORDS, "secret", "passw", "passphrase", "authorization", "credential", "bearer", "basic")
#: Values a secret-looking key may keep: numbers, JSON/Python literals, an already masked value, and
#: placeholders (``token=...``, ``token=VALUE``, ``token=$GITHUB_TOKEN``: a hint, not a credential).
_PLAIN_VALUE = re.compile(
    r"-?\d{1,9}(?:\.\d+)?|true|false|null|none|\*+|\.{2,}|\u2026|value|\$\{?[A-Za-z_]\w*\}?|", re.IGNORECASE
)
#: Characters a terminal or an XML report must not receive: C0/C1 controls but tab and newline, DEL,
#: bidirectional overrides, and lone surrogates (they crash every UTF-8 encoder).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: The longest text from Gym one field of a message may show.
MAX_FIELD = 2000
#: The longest message (a trial's failure, a note) the plugin prints or reports.
MAX_MESSAGE = 8000
#: How deep a JSON answer from Gym may nest (real answers nest about 10 levels).
MAX_DEPTH = 64


#: Environment variables whose values are secrets whatever their names (``--gym-header NAME=ENVVAR``).
_SECRET_ENV: set[str] = set()


def register_secret_env(name: str) -> None:
    """Mask the value of environment variable ``name`` from now on (it holds a credential)."""
    _SECRET_ENV.add(name)


#: Secret values besides the secret-named environment variables: ``--gym-secret-env NAME``'s value and
#: ``--gym-env KEY=VALUE``'s of a secret-looking KEY (every process registers them from its settings).
_EXTRA_SECRETS: set[str] = set()


def add_secret(value: str) -> None:
    """Mask ``value`` from now on in everything this process writes or prints."""
    if len(value) >= _MIN_SECRET:
        _EXTRA_SECRETS.add(value)


#: Whether an environment variable's name marks its value secret (names repeat: each is matched once).
_SECRET_NAMED: dict[str, bool] = {}
#: The last answer of ``known_secrets`` and what it was computed from.
_LAST_SECRETS: tuple[tuple[Any, ...], list[str]] | None = None


def _secret_named(name: str) -> bool:
    named = _SECRET_NAMED.get(name)
    if named is None:
        named = _SECRET_NAMED[name] = name == POLICY_KEY_ENV or bool(SECRET_NAME.search(name))
    return named or name in _SECRET_ENV


def known_secrets() -> list[str]:
    """Values that must never appear: the policy key and other secret-named env vars, longest first.

    Called for every trial, so it reads only the values of secret-named variables and sorts only when
    they (or the registered secrets) changed: a CI environment has a hundred variables or more.
    """
    global _LAST_SECRETS
    environ = os.environ
    named = tuple((name, environ.get(name, "")) for name in environ if _secret_named(name))
    basis = (named, len(_EXTRA_SECRETS))  # registered secrets are only ever added: their count says it
    last = _LAST_SECRETS
    if last is not None and last[0] == basis:
        return list(last[1])
    values = {value for _, value in named if len(value) >= _MIN_SECRET} | _EXTRA_SECRETS
    secrets = sorted(values, key=len, reverse=True)
    _LAST_SECRETS = (basis, secrets)
    return list(secrets)


class Masker:
    """One masking pass with the known secrets read once (walking a large answer must not re-read them).

    ``same_length`` masks with as many ``*`` as the masked text has UTF-8 bytes, so a file can be
    masked in place while another process still appends to it.
    """

    def __init__(self, secrets: list[str] | None = None, same_length: bool = False) -> None:
        self.secrets = known_secrets() if secrets is None else secrets
        self.same_length = same_length
        self._heads = [secret[:_FRAGMENT] for secret in self.secrets]

    def suspicious(self, text: str) -> bool:
        """Whether ``text`` may hold anything to mask: a few substring tests, so that the usual text
        (and a whole serialized record, checked at once) costs microseconds. False means none."""
        if any(head in text for head in self._heads):
            return True
        if "://" in text and "@" in text:
            return True
        lower = text.lower()
        if any(hint in lower for hint in _WORD_HINTS):
            return True
        # "token" outside the counts Gym reports everywhere (input_tokens, ...) and "tokenizer"
        return lower.count("token") > lower.count("tokens") + lower.count("tokeniz")

    def _mask(self, original: str) -> str:
        if not self.same_length:
            return MASK
        return "*" * len(original.encode("utf-8", "surrogateescape"))

    def text(self, text: str) -> str:
        if not self.suspicious(text):
            return text
        for secret in self.secrets:
            text = self._fragments(text, secret)
        if "://" in text:
            text = _URL_USERINFO.sub(self._userinfo, text)
        lower = text.lower()
        if any(hint in lower for hint in _KEY_HINTS):
            text = _KEY_VALUE.sub(self._key_value, text)
        if any(hint in lower for hint in _SCHEME_HINTS):
            text = _BEARER.sub(lambda m: m.group("scheme") + m.group("space") + self._mask(m.group("token")), text)
        return text

    def _fragments(self, text: str, secret: str) -> str:
        head = secret[:_FRAGMENT]
        if head not in text:
            return text
        parts, start = [], 0
        while (found := text.find(head, start)) >= 0:
            end, matched = found + len(head), len(head)
            while matched < len(secret) and end < len(text) and text[end] == secret[matched]:
                end, matched = end + 1, matched + 1
            parts += [text[start:found], self._mask(text[found:end])]
            start = end
        parts.append(text[start:])
        return "".join(parts)

    def _userinfo(self, match: re.Match[str]) -> str:
        user, password = match.group("user"), match.group("password")
        if password is not None:
            return f"{match.group('scheme')}{user}:{self._mask(password) if password else ''}@"
        return f"{match.group('scheme')}{self._mask(user) if user else ''}@"  # a token as the user name

    def _key_value(self, match: re.Match[str]) -> str:
        value = match.group("value")
        quote = value[0] if value[:1] in ("'", '"') else ""
        inner = value[1:-1] if quote else value
        scheme = re.match(r"(?:Bearer|Basic)\s+", inner, re.IGNORECASE)
        prefix = scheme.group(0) if scheme else ""
        secret = inner[len(prefix) :]
        if _PLAIN_VALUE.fullmatch(secret) or _PLAIN_VALUE.fullmatch(secret.rstrip(".:")) or secret.startswith("${"):
            return match.group(0)
        head = match.group(0)[: match.start("value") - match.start()]
        return f"{head}{quote}{prefix}{self._mask(secret)}{quote}"

    def data(self, data: Any, depth: int = 0) -> Any:
        """A copy with every string masked, and everything under a secret-named key masked whole."""
        if depth > MAX_DEPTH:
            return "<nested too deep>"
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, Mapping):
            out: dict[Any, Any] = {}
            for key, value in data.items():
                name = self.text(key) if isinstance(key, str) else key
                if isinstance(key, str) and SECRET_NAME.search(key):
                    out[name] = self._all(value, depth + 1)
                else:
                    out[name] = self.data(value, depth + 1)
            return out
        if isinstance(data, (list, tuple)):
            return [self.data(item, depth + 1) for item in data]
        return data

    def record(self, data: Any) -> tuple[Any, str | None]:
        """(``data`` masked, its JSON text when that needed no masking): one serialisation tells whether a
        record holds anything to mask, and most do not. The JSON text (compact, strict: no NaN) is None
        when ``data`` was masked, or holds what strict JSON cannot, or nests too deep for it."""
        try:
            text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            return self.data(data), None
        if not self.suspicious(text):
            return data, text
        return self.data(data), None

    def _all(self, data: Any, depth: int) -> Any:
        """Under a secret-named key: every string masked (numbers, booleans and null say nothing)."""
        if depth > MAX_DEPTH:
            return "<nested too deep>"
        if isinstance(data, str):
            return self._mask(data) if data else data
        if isinstance(data, Mapping):
            return {key: self._all(value, depth + 1) for key, value in data.items()}
        if isinstance(data, (list, tuple)):
            return [self._all(item, depth + 1) for item in data]
        return data


def mask_secrets(text: str) -> str:
    """``text`` with every credential masked (see the module's docstring for what counts)."""
    return Masker().text(text)


def mask_data(data: Any) -> Any:
    """A copy of JSON-like data with every string masked and secret-named keys' values masked whole."""
    return Masker().data(data)


def mask_mapping(data: Any) -> Any:
    """The former name of :func:`mask_data` (exporters use it)."""
    return mask_data(data)


def strip_control(text: str) -> str:
    """``text`` without the characters a terminal or a report must not receive (tab and newline stay)."""
    return _CONTROL.sub("", text)


def clean_text(text: str, limit: int = MAX_FIELD, masker: Masker | None = None) -> str:
    """Text fit for a terminal or a report: control characters dropped (tab and newline kept), masked, and
    cut to ``limit`` characters with a note of how much was left out. Dropping comes first (a control
    character inside a key would hide it from the mask), cutting last (so would a cut)."""
    text = (masker or Masker()).text(strip_control(text))
    if len(text) > limit:
        omitted = len(text) - limit
        text = f"{text[:limit]}... [{omitted} more characters]"
    return text


def json_depth_exceeds(data: Any, limit: int = MAX_DEPTH, text: str | None = None) -> bool:
    """Whether JSON-like data nests deeper than ``limit`` (without recursion: the data may be hostile).

    With its JSON ``text``, data with no more brackets than ``limit`` is answered without a walk."""
    if text is not None and text.count("[") + text.count("{") <= limit:
        return False
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
