"""What leaves the store: credential-shaped keys redacted, generated ids made stable.

A mapping key that names a credential (`api_key`, `authorization`, `password`, `secret`,
`token`, …, in any case, alone or at the end of a longer key such as `client_secret` or
`X-Api-Key`) has its value replaced by `[REDACTED]`, at any depth, also inside strings that hold
JSON. The same input always gives the same output, so a redacted recording still replays: a
model answer and the tool call it recorded are redacted alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["REDACTED", "comparable", "is_credential_key", "redact", "stable_ids"]

REDACTED = "[REDACTED]"

_KEY_HINT = re.compile(
    r"(?:key|auth|authorization|passwd|password|passphrase|secret|token|credentials?|cookie|"
    r"bearer)\\*\"\s*:"
)
"""A superset of credential keys as they end in lower-cased JSON text (also inside strings)."""
_KEY_WORDS = ("key", "auth", "passw", "secret", "token", "credential", "cookie", "bearer")
_ID_PREFIXES = ("run_", "ses_", "exk_", "apr_", "att_")
_VOLATILE_ID = re.compile(r"\b(run|ses|exk|apr|att)_[0-9a-f]{32}\b")
_CREDENTIAL = re.compile(
    r"(?:^|[_\-.\s])(?:api[_\-]?key|apikey|authorization|auth|password|passwd|passphrase|"
    r"secret|token|access[_\-]?key|private[_\-]?key|credentials?|cookie|set[_\-]?cookie|"
    r"session[_\-]?key|bearer)$",
    re.IGNORECASE,
)


def is_credential_key(key: str) -> bool:
    """Whether a mapping key names a credential (`password`, `client_secret`, `X-Api-Key`)."""
    return bool(_CREDENTIAL.search(key))


def redact(value: Any) -> Any:
    """`value` with every credential-shaped key's value replaced by `[REDACTED]`.

    Returns new containers where something changed; `value` itself when nothing could (a
    quick scan of its JSON text finds no key that could name a credential).
    """
    if isinstance(value, Mapping | list | tuple) and not _may_hold_credentials(_text(value)):
        return value
    return _redact(value)


def _redact(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if isinstance(k, str) and is_credential_key(k) else _redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(v) for v in value]
    if isinstance(value, str):
        return _redact_json_string(value)
    return value


def _redact_json_string(text: str) -> str:
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "{[":
        return text
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    cleaned = _redact(parsed)
    if cleaned == parsed:
        return text
    return json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))


def stable_ids(data: Any) -> Any:
    """Replace generated ids (`run_…`, `ses_…`, `exk_…`, `apr_…`) by numbered stand-ins.

    The first execution key met becomes `exk_1`, the next `exk_2`, and so on, in document
    order, so the same run recorded twice gives the same file.
    """
    if isinstance(data, Mapping | list | tuple) and not _may_hold_ids(_text(data)):
        return data
    return _stable(data)


def _stable(data: Any) -> Any:
    seen: dict[str, str] = {}
    counters: dict[str, int] = {}

    def stand_in(match: re.Match[str]) -> str:
        found = match.group(0)
        if found not in seen:
            prefix = match.group(1)
            counters[prefix] = counters.get(prefix, 0) + 1
            seen[found] = f"{prefix}_{counters[prefix]}"
        return seen[found]

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _VOLATILE_ID.sub(stand_in, value) if "_" in value else value
        if isinstance(value, Mapping):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, Sequence):
            return [walk(v) for v in value]
        return value

    return walk(data)


def comparable(value: Any) -> Any:
    """`value` as recordings compare it: redacted, with generated ids made stable.

    One scan of its JSON text decides which of the two walks are needed (redaction only ever
    removes text, so it cannot bring an id in).
    """
    if not isinstance(value, Mapping | list | tuple):
        return stable_ids(redact(value))
    text = _text(value)
    if _may_hold_credentials(text):
        value = _redact(value)
    if _may_hold_ids(text):
        value = _stable(value)
    return value


def _may_hold_credentials(text: str) -> bool:
    low = text.lower()
    return any(word in low for word in _KEY_WORDS) and _KEY_HINT.search(low) is not None


def _may_hold_ids(text: str) -> bool:
    return any(prefix in text for prefix in _ID_PREFIXES) and _VOLATILE_ID.search(text) is not None


def _text(value: Any) -> str:
    """JSON text of `value` for the quick scans (any key that could name a credential, any id)."""
    return json.dumps(value, ensure_ascii=False, default=str)
