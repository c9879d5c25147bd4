"""Keep credentials and hostile text out of everything the plugin writes or prints.

The policy key lives only in the environment variable ``GYM_POLICY_API_KEY``;
Gym reads it through an ``${oc.env:...}`` interpolation, so it is never on a
command line. Gym, policies and verifiers may still echo it (or another
credential) back, and their answers are not ours to trust. So every text that
leaves the process goes through one pass, :func:`mask_secrets` (for text) or
:func:`mask_data` (for JSON-like data). What is not a secret is never touched: a row, a prompt, an
answer is evidence, stored as it came unless it holds a credential. The pass masks:

- known secret values, exactly, wherever they appear: ``GYM_POLICY_API_KEY``'s, ``--gym-secret-env``'s,
  the ``--gym-header`` variables', and those of secret-named environment variables whose values look
  like credentials (:func:`credential_like`: not a URL, not a path, not a plain word or number, 8
  characters or more). One cut short (an excerpt) is masked too: a prefix of 8 characters or more that
  ends where the text's token ends;
- credentials in a URL's user-info (``scheme://user:***@host``; a user name alone only when it looks
  like a token);
- credential-*shaped* text (:func:`token_like`, :func:`keyed_secret`): ``Bearer``/``Basic`` followed by
  a token of credential length and alphabet, and values of secret-looking keys (api_key, token, secret,
  password, authorization, credential, sig) that look like one, in mappings and in ``key=value``,
  ``key: value``, ``"key": "value"`` and ``?key=value`` text. Prose is not: ``Basic authentication``,
  ``The secret: the butler did it``, ``Token: a unit of text`` stay as they are.

Text from Gym is also bounded and stripped of control characters
(:func:`clean_text`) before it reaches a terminal or a report, and Gym's JSON
answers are checked for depth (:func:`json_depth_exceeds`) before anything
recursive walks them.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from typing import Any

POLICY_KEY_ENV = "GYM_POLICY_API_KEY"
MASK = "***"
_SECRET_WORD = (
    r"(?:api[_-]?key|apikey|access[_-]?key|private[_-]?key|secret|passw(?:or)?d|passphrase|authorization"
    r"|credential|token(?!s|iz)"  # not input_tokens, max_tokens, tokenizer: those are counts and names
    r"|(?<![a-z])sig(?:nature)?(?![a-z]))"  # a signed URL's sig=, not design or signal
)
#: A secret-looking name (of an environment variable, a mapping key, a ``key=value`` key).
SECRET_NAME = re.compile(_SECRET_WORD, re.IGNORECASE)
#: The shortest value given as a secret (the policy key, --gym-secret-env, a --gym-header variable) masked.
_MIN_SECRET = 6
#: The shortest credential-shaped token, and the shortest prefix of a known secret masked as a cut-short copy.
_FRAGMENT = 8
#: A known secret cut short ends where the token of the text ends (an excerpt's "...", the end of a line).
_TOKEN_CHAR = re.compile(r"[A-Za-z0-9]")
_BEARER = re.compile(r"\b(?P<scheme>Bearer|Basic)(?P<space>\s+)(?P<token>[A-Za-z0-9._~+/=\-]+)", re.IGNORECASE)
#: A password runs to the last ``@`` before the host, as URL parsers read it (``user:p@ss@host``: ``p@ss``).
_URL_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.\-])(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^/\s:@?#\"'<>]*)"
    r"(?::(?P<password>[^/\s?#\"'<>]*))?@"
)
#: ``\"key\": \"value\"`` too: JSON quoted inside a JSON string or a log line (a wrapped error body); and a
#: URL query's bare ``key`` (``?key=AIza...``), which the settings refuse as a credential too.
_KEY_VALUE = re.compile(
    rf"""(?<![\w.\-])(?P<q>\\?["']|)(?P<key>(?=[\w.\-]*?{_SECRET_WORD})[\w.\-]+|(?<=[?&])key(?==))(?P=q)"""
    r"""(?P<sep>\s*[:=]\s*)(?P<value>\$\{[^}\n]*\}|\\"[^"\n]*?\\"|\\'[^'\n]*?\\'"""
    r"""|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'"""
    r"""|(?:(?:Bearer|Basic)\s+)?[^\s,;&"'<>(){}\[\]\\]+)""",
    re.IGNORECASE,
)
_SCHEME_PREFIX = re.compile(r"(?:Bearer|Basic)\s+", re.IGNORECASE)
#: Cheap tests that tell most text needs no regular expression at all.
#: The "key" words ``SECRET_NAME`` knows, spelled out: a bare "key" is in every Responses object
#: (``prompt_cache_key``), and a hint that always fires would make every record take the slow path.
_KEY_WORDS = tuple(f"{word}{sep}key" for word in ("api", "access", "private") for sep in ("_", "-", ""))
#: "sig" only as a key (``sig=``, ``"sig":``): as a bare word it is in design, signal, assign.
_SIG_HINTS = ("sig=", 'sig"', "sig'", "sig:", "signature")
#: A URL query's bare ``key`` (``?key=``, ``&key=``).
_QUERY_KEY_HINTS = ("?key=", "&key=")
_KEY_HINTS = (*_KEY_WORDS, "secret", "passw", "passphrase", "authorization", "credential", "token", *_SIG_HINTS)
_KEY_HINTS += _QUERY_KEY_HINTS
_SCHEME_HINTS = ("bearer", "basic")
_WORD_HINTS = (*_KEY_WORDS, "secret", "passw", "passphrase", "authorization", "credential", "bearer", "basic")
_WORD_HINTS += (*_SIG_HINTS, *_QUERY_KEY_HINTS)


def group_hints(hints: tuple[str, ...], cores: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(core, the hints that hold it) for each core any hint holds, then (hint, ()) for each other hint: ``core in
    text`` is needed for any of its hints, so a text without it is cleared with one search instead of one per
    hint (every record and answer is checked: 21 searches of a 1.5 KB record took 14 us)."""
    groups: list[tuple[str, tuple[str, ...]]] = []
    left = list(hints)
    for core in cores:
        members = tuple(hint for hint in left if core in hint)
        if members:
            groups.append((core, members))
            left = [hint for hint in left if core not in hint]
    groups.extend((hint, ()) for hint in left)
    return tuple(groups)


def holds_a_hint(lower: str, groups: tuple[tuple[str, tuple[str, ...]], ...]) -> bool:
    """Whether ``lower`` holds one of the grouped hints: what ``any(hint in lower for hint in hints)`` says."""
    for core, members in groups:
        if core in lower and (not members or any(member in lower for member in members)):
            return True
    return False


#: The cores of the hints, each searched once before its hints (``key=`` holds the query hints).
_HINT_CORES = ("api", "access", "private", "sig", "pass", "key=")
_WORD_HINT_GROUPS = group_hints(_WORD_HINTS, _HINT_CORES)

#: Values a secret-looking key may keep: numbers, JSON/Python literals, an already masked value, and
#: placeholders (``token=...``, ``token=VALUE``, ``token=$GITHUB_TOKEN``: a hint, not a credential).
_PLAIN_VALUE = re.compile(
    r"-?\d{1,9}(?:\.\d+)?|true|false|null|none|\*+|\.{2,}|\u2026|value|\$\{?[A-Za-z_]\w*\}?|", re.IGNORECASE
)
#: A path (``/work/x``, ``~/.config``, ``./a``, ``C:\x``, ``keys/sa.json``): where a credential is, not one.
_PATH = re.compile(r"(?:~|\.{1,2})?/.*|[A-Za-z]:[\\/].*|[\w.-]+(?:/[\w.-]+)+\.[A-Za-z0-9]{1,8}", re.DOTALL)
#: A plain word, capitalised word, acronym or number: a setting's value (``disabled``, ``Production``, ``3600``).
_WORD = re.compile(r"[A-Z]?[a-z]{1,15}|[A-Z]{1,15}|\d[\d.]*")
#: A word of prose, CamelCase included (``authentication``, ``OAuth``, ``JavaScript``).
_LETTER_WORD = re.compile(r"(?:[A-Z]?[a-z]+)+|[A-Z]+[a-z]*")
#: Characters that mark a value as machine-made when letters mix with them (not prose's . - _ / @ ! ?).
_SYMBOLS = frozenset("~+=*#$%&^|`<>{}[]\\")
#: Visible ASCII: what a credential is written in (no spaces, no other alphabets).
_VISIBLE = re.compile(r"[!-~]+")
#: Characters that may end an unquoted value without being part of it (``Token: text.``).
_TRAILING = ".,:;)"
#: Characters a terminal or an XML report must not receive: C0/C1 controls but tab and newline, DEL,
#: bidirectional overrides, and lone surrogates (they crash every UTF-8 encoder).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: The longest text from Gym one field of a message may show.
MAX_FIELD = 2000
#: The longest message (a trial's failure, a note) the plugin prints or reports.
MAX_MESSAGE = 8000
#: How deep a JSON answer from Gym may nest (real answers nest about 10 levels).
MAX_DEPTH = 64


def credential_like(value: str) -> bool:
    """Whether a secret-named environment variable's value may be a credential, and so is masked wherever
    it appears: 8 characters or more without spaces, and not a URL, a path, a plain word or a number.

    ``ACTIONS_ID_TOKEN_REQUEST_URL=https://...`` and ``GOOGLE_APPLICATION_CREDENTIALS=/work/sa.json`` are
    where a credential is, not one: masking them would cut every ``https://`` and the run folder's path.
    """
    return (
        len(value) >= _FRAGMENT
        and not any(c.isspace() for c in value)
        and "://" not in value
        and not _PATH.fullmatch(value)
        and not _WORD.fullmatch(value)
    )


def _kinds(text: str) -> int:
    """How many kinds of characters ``text`` mixes: lower case, upper case (past the first), digits, symbols."""
    lower = upper = digit = symbol = False
    for i, c in enumerate(text):
        if "a" <= c <= "z":
            lower = True
        elif "A" <= c <= "Z":
            upper = upper or i > 0
        elif "0" <= c <= "9":
            digit = True
        elif c in _SYMBOLS:
            symbol = True
    return lower + upper + digit + symbol


def credential_shaped(value: str, min_length: int = _MIN_SECRET) -> bool:
    """Whether ``value`` looks like a credential, not prose: long enough, ASCII without spaces, not a URL,
    a path, a number or a placeholder, not words joined by ``-`` or ``.``, and mixing kinds of characters
    (letters with digits, case or symbols) unless it is 24 characters or more.

    ``sk-proj-4f9a...``, ``dXNlcjpwYXNz``, ``hunter22`` are; ``authentication``, ``the``, ``HTTP-Auth``,
    ``/work/run``, ``input_ids`` are not.
    """
    if len(value) < min_length or not _VISIBLE.fullmatch(value):
        return False
    if "://" in value or _PATH.fullmatch(value) or _PLAIN_VALUE.fullmatch(value) or value.isdigit():
        return False
    parts = [part for part in re.split(r"[-.]", value) if part]
    if parts and all(_LETTER_WORD.fullmatch(part) for part in parts):
        return False
    return _kinds(value) >= 2 or len(value) >= 24


def token_like(token: str) -> bool:
    """Whether the text after ``Bearer``/``Basic`` is a credential (``Basic authentication`` is prose)."""
    return credential_shaped(token, _FRAGMENT)


_KEY_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
#: The last word of a key that names a secret itself (``client_secret``, ``access_token``, ``x-api-key``).
_SECRET_LAST = frozenset(
    {"apikey", "secret", "secrets", "password", "passwords", "passwd", "passphrase", "authorization", "credential",
     "credentials", "token", "sig", "signature"}
)  # fmt: skip
_KEY_PREFIX = frozenset({"api", "access", "private", "secret"})
#: Keys that are also words of prose and names of data fields (a tokenizer's "token", a riddle's "secret").
_PROSE_KEYS = frozenset({"token", "secret", "sig", "signature"})


def key_kind(key: str, quoted: bool = False) -> str:
    """How to judge the value of a secret-looking ``key``: ``"secret"`` when the key names the secret itself
    (``api_key``, ``client_secret``, ``GITHUB_TOKEN``, ``"password"``), so any value of credential length and
    alphabet is one; ``"shape"`` when it may name data or be a word of prose (``token``, ``The secret:``,
    ``Password:`` unquoted in text, ``token_type``, ``password_hint``), so only a credential-shaped value is.
    ``quoted``: a quoted key in text, or a mapping's key (machine-made, not prose).
    """
    words = [w.lower() for w in _KEY_SPLIT.split(key) if w]
    while words and words[-1].isdigit():
        words.pop()
    if not words:
        return "shape"
    last = words[-1]
    if len(words) == 1 and (last in _PROSE_KEYS or not quoted):
        return "shape"
    names = last in _SECRET_LAST or (last == "key" and len(words) >= 2 and words[-2] in _KEY_PREFIX)
    return "secret" if names else "shape"


def _judged_secret(value: str, kind: str, after_scheme: bool) -> bool:
    """Whether the value of a secret-looking key is a credential. Under a key that names the secret
    (``kind`` "secret": ``api_key``, ``"password"``) one of credential length and alphabet is: 6 visible
    ASCII characters or more, no spaces (``hunter22``, ``plain-text-key``, not ``a unit of text`` nor
    ``pw``); under a key that may be prose or name data (``Token:``, ``token_type``) only a
    credential-shaped one (:func:`credential_shaped`; after ``Bearer``/``Basic``: :func:`token_like`)."""
    if _PLAIN_VALUE.fullmatch(value) or not value.strip("*"):
        return False
    if kind == "secret" and len(value) >= _MIN_SECRET and _VISIBLE.fullmatch(value):
        return True
    return token_like(value) if after_scheme else credential_shaped(value)


#: Environment variables whose values are secrets whatever their names (``--gym-header NAME=ENVVAR``).
_SECRET_ENV: set[str] = set()


def register_secret_env(name: str) -> None:
    """Mask the value of environment variable ``name`` from now on (it holds a credential)."""
    _SECRET_ENV.add(name)


#: Secret values besides the secret-named environment variables: ``--gym-secret-env NAME``'s value
#: (every process registers them from its settings).
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


def _given_as_secret(name: str) -> bool:
    """The policy key and the --gym-header variables: secrets whatever their values look like."""
    return name == POLICY_KEY_ENV or name in _SECRET_ENV


#: The secret-named environment variables and what they were found from (the variables' raw names, the count
#: of registered names): walking ``os.environ`` decodes every name, most of what a ``Masker`` costs.
_LAST_NAMES: tuple[tuple[Any, ...], int, list[str]] | None = None


def _secret_names() -> list[str]:
    """The names of the environment variables whose values may be secrets, found again only when the set of
    variables (or of the registered names) changed."""
    global _LAST_NAMES
    raw = getattr(os.environ, "_data", None)  # CPython's undecoded mapping; without it, walk the names every time
    keys = tuple(raw) if isinstance(raw, dict) else None
    last = _LAST_NAMES
    if keys is not None and last is not None and last[0] == keys and last[1] == len(_SECRET_ENV):
        return last[2]
    names = [name for name in os.environ if _secret_named(name)]
    if keys is not None:
        _LAST_NAMES = (keys, len(_SECRET_ENV), names)
    return names


def known_secrets() -> list[str]:
    """Values that must never appear, longest first: the policy key, the ``--gym-header`` variables', the
    ``--gym-secret-env`` values, and secret-named environment variables' that look like credentials.

    Called for every trial, so it reads only the values of secret-named variables and sorts only when
    they (or the registered secrets) changed: a CI environment has a hundred variables or more.
    """
    global _LAST_SECRETS
    environ = os.environ
    named = tuple((name, environ.get(name, "")) for name in _secret_names())
    basis = (named, len(_EXTRA_SECRETS))  # registered secrets are only ever added: their count says it
    last = _LAST_SECRETS
    if last is not None and last[0] == basis:
        return list(last[1])
    values = {
        value
        for name, value in named
        if (len(value) >= _MIN_SECRET and _given_as_secret(name)) or credential_like(value)
    } | _EXTRA_SECRETS
    secrets = sorted(values, key=len, reverse=True)
    _LAST_SECRETS = (basis, secrets)
    return list(secrets)


@functools.lru_cache(maxsize=8)
def _cut_and_heads(secrets: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(the credential words of ``secrets``, longest first; the first characters of each secret and word):
    computed once per set of secrets, not per ``Masker`` (one is made for each message)."""
    words = {word for secret in secrets for word in secret.split() if credential_like(word)}
    cut = sorted(words, key=len, reverse=True)
    return cut, sorted({s[:_FRAGMENT] for s in secrets} | {w[:_FRAGMENT] for w in cut})


class Masker:
    """One masking pass with the known secrets read once (walking a large answer must not re-read them).

    ``same_length`` masks with as many ``*`` as the masked text has UTF-8 bytes, so a file can be
    masked in place while another process still appends to it.
    """

    def __init__(self, secrets: list[str] | None = None, same_length: bool = False) -> None:
        self.secrets = known_secrets() if secrets is None else secrets
        self.same_length = same_length
        #: The credentials among (the words of) the secrets: only these are also masked when cut short. A
        #: secret URL's or path's prefix ("https://", "/work/pr") is no secret.
        self._cut, self._heads = _cut_and_heads(tuple(self.secrets))

    def suspicious(self, text: str) -> bool:
        """Whether ``text`` may hold anything to mask: a few substring tests, so that the usual text
        (and a whole serialized record, checked at once) costs microseconds. False means none."""
        if any(head in text for head in self._heads):
            return True
        if "://" in text and "@" in text:
            return True
        lower = text.lower()
        if holds_a_hint(lower, _WORD_HINT_GROUPS):
            return True
        # "token" outside the counts Gym reports everywhere (input_tokens, ...) and "tokenizer"
        return lower.count("token") > lower.count("tokens") + lower.count("tokeniz")

    def _mask(self, original: str) -> str:
        if not self.same_length:
            return MASK
        return "*" * len(original.encode("utf-8", "surrogateescape"))

    def text(self, text: str) -> str:
        return self._masked(text, prose=True)

    def evidence(self, text: str) -> str:
        """``text`` as evidence (a recorded prompt or answer that will be replayed): only known secret values
        (whole or cut short), a URL's password, and a ``Bearer``/``Basic`` token that looks like a credential are
        masked. The prose rules (``password: ...``, ``token=...``) are not applied: a model's answer that merely
        looks like it holds a credential is kept byte for byte, so what is replayed is what was recorded."""
        return self._masked(text, prose=False)

    def _masked(self, text: str, prose: bool) -> str:
        """Known values (whole or cut short), URL passwords, Bearer/Basic tokens; with ``prose``, also the values
        of secret-named keys in ``key=value``/``key: value`` text."""
        if not self.suspicious(text):
            return text
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, self._mask(secret))
        for word in self._cut:
            text = self._fragments(text, word)
        if "://" in text:
            text = _URL_USERINFO.sub(self._userinfo, text)
        lower = text.lower()
        if prose and any(hint in lower for hint in _KEY_HINTS):
            text = _KEY_VALUE.sub(self._key_value, text)
        if any(hint in lower for hint in _SCHEME_HINTS):
            text = _BEARER.sub(self._bearer, text)
        return text

    def _fragments(self, text: str, secret: str) -> str:
        """``text`` with each cut-short copy of ``secret`` masked: 8 of its first characters or more, ending
        where the text's token ends (``sk-proj-4f...``, the end of a line), not inside a longer word."""
        head = secret[:_FRAGMENT]
        if head not in text:
            return text
        parts, start = [], 0
        while (found := text.find(head, start)) >= 0:
            end, matched = found + len(head), len(head)
            while matched < len(secret) and end < len(text) and text[end] == secret[matched]:
                end, matched = end + 1, matched + 1
            if matched < len(secret) and end < len(text) and _TOKEN_CHAR.match(text[end]):
                parts.append(text[start:end])  # another word that starts like the secret
            else:
                parts += [text[start:found], self._mask(text[found:end])]
            start = end
        parts.append(text[start:])
        return "".join(parts)

    def _userinfo(self, match: re.Match[str]) -> str:
        user, password = match.group("user"), match.group("password")
        if password is not None:
            masked = self._mask(password) if password and password.strip("*") else password
            return f"{match.group('scheme')}{user}:{masked}@"
        if credential_shaped(user, _FRAGMENT):  # a token as the user name (not git@, not a login)
            return f"{match.group('scheme')}{self._mask(user)}@"
        return match.group(0)

    def _bearer(self, match: re.Match[str]) -> str:
        token = match.group("token")
        if not token_like(token):
            return match.group(0)
        return match.group("scheme") + match.group("space") + self._mask(token)

    def _key_value(self, match: re.Match[str]) -> str:
        value = match.group("value")
        quote = value[:2] if value[:2] in ("\\'", '\\"') else value[:1] if value[:1] in ("'", '"') else ""
        inner = value[len(quote) : -len(quote)] if quote else value
        scheme = _SCHEME_PREFIX.match(inner)
        prefix = scheme.group(0) if scheme else ""
        secret = inner[len(prefix) :]
        core = secret if quote else secret.rstrip(_TRAILING)
        if _PLAIN_VALUE.fullmatch(core) or core.startswith("${") or not core.strip("*"):
            return match.group(0)
        key = match.group("key")
        if match.start() > 0 and match.string[match.start() - 1] in "?&":
            pass  # a URL's query (``?sig=...&token=...``) is no prose: any value there is the credential
        elif not _judged_secret(core, key_kind(key, quoted=bool(match.group("q"))), bool(prefix)):
            return match.group(0)
        head = match.group(0)[: match.start("value") - match.start()]
        return f"{head}{quote}{prefix}{self._mask(core)}{secret[len(core) :]}{quote}"

    def _value(self, value: str, kind: str) -> str:
        """A string under a secret-named key, masked as :func:`key_kind` and :func:`_judged_secret` say (after
        ``Bearer``/``Basic``: the token); anything else is text like any other."""
        if not value or _PLAIN_VALUE.fullmatch(value) or value.startswith("${"):
            return value
        scheme = _SCHEME_PREFIX.match(value)
        rest = value[scheme.end() :] if scheme else value
        if _judged_secret(rest, kind, scheme is not None):
            return (scheme.group(0) if scheme else "") + self._mask(rest)
        return self.text(value)

    def data(self, data: Any, depth: int = 0, kind: str | None = None) -> Any:
        """A copy with every string masked, and the values under secret-named keys as :func:`key_kind` says
        (``kind``: that of the nearest secret-named key above, whose rule holds for everything under it)."""
        if depth > MAX_DEPTH:
            return "<nested too deep>"
        if isinstance(data, str):
            return self.text(data) if kind is None else self._value(data, kind)
        if isinstance(data, Mapping):
            out: dict[Any, Any] = {}
            for key, value in data.items():
                name = self.text(key) if isinstance(key, str) else key
                inner = kind
                if kind != "secret" and isinstance(key, str) and SECRET_NAME.search(key):
                    inner = key_kind(key, quoted=True)
                out[name] = self.data(value, depth + 1, inner)
            return out
        if isinstance(data, (list, tuple)):
            return [self.data(item, depth + 1, kind) for item in data]
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
