"""Keep credentials out of everything the plugin writes or prints.

The policy key lives only in the environment variable ``GYM_POLICY_API_KEY``;
Gym reads it through an ``${oc.env:...}`` interpolation, so it is never on a
command line. Anything that may echo it back (Gym's log, error bodies,
exported configs) passes through :func:`mask_secrets` first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

POLICY_KEY_ENV = "GYM_POLICY_API_KEY"
MASK = "***"
SECRET_NAME = re.compile(r"(api[_-]?key|token|secret|password|authorization|credential)", re.IGNORECASE)
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._\-]{6,}")


def known_secrets() -> list[str]:
    """Values that must never appear: the policy key and other secret-named env vars."""
    values = []
    for name, value in os.environ.items():
        if (name == POLICY_KEY_ENV or SECRET_NAME.search(name)) and len(value) >= 6:
            values.append(value)
    return sorted(set(values), key=len, reverse=True)


def mask_secrets(text: str) -> str:
    for value in known_secrets():
        text = text.replace(value, MASK)
    return _BEARER.sub(lambda m: m.group(1) + MASK, text)


def mask_mapping(data: Any) -> Any:
    """A copy of a config-like structure with secret-named values masked."""
    if isinstance(data, Mapping):
        return {
            key: (
                MASK
                if isinstance(key, str) and SECRET_NAME.search(key) and value not in (None, "")
                else mask_mapping(value)
            )
            for key, value in data.items()
        }
    if isinstance(data, (list, tuple)):
        return [mask_mapping(item) for item in data]
    if isinstance(data, str):
        return mask_secrets(data)
    return data
