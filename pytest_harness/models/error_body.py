"""What a provider's error body says: its message and detail, and the kind of error it stands for.

Servers report errors in a JSON body (`{"error": {...}}`) or inside an answer or a stream:
a message, a `type`/`code` by name, sometimes a numeric code that stands for an HTTP status
(OpenRouter), and metadata relaying an upstream provider's own error. `HttpProvider` turns
these into `ModelError`s; this module only reads them (no httpx).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pytest_harness.redaction import redact

__all__ = [
    "REPORTED_KINDS",
    "error_codes",
    "error_detail",
    "error_status",
    "is_refusal",
    "json_or_none",
    "snippet",
    "status_kind",
]

_REFUSAL_CODES = frozenset(
    {"content_filter", "content_policy_violation", "responsibleaipolicyviolation"}
)
REPORTED_KINDS = {
    "rate_limit_error": "rate_limit",
    "rate_limit_exceeded": "rate_limit",
    "authentication_error": "auth",
    "permission_error": "auth",
    "invalid_request_error": "bad_request",
}
"""Error types reported in a body or a stream, by kind; any other is a `server` error."""
_DETAIL_CHARS = 300


def json_or_none(content: bytes) -> Any:
    """The JSON in `content`, or None when it holds none."""
    try:
        return json.loads(content)
    except ValueError:
        return None


def snippet(content: bytes | str) -> str:
    """The start of a body, on one line and quoted, for a message."""
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
    text = " ".join(text.split())
    if not text:
        return "(empty body)"
    return repr(text[:_DETAIL_CHARS] + ("…" if len(text) > _DETAIL_CHARS else ""))


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text[:_DETAIL_CHARS] + ("…" if len(text) > _DETAIL_CHARS else "")


def _error_message(error: Any) -> str | None:
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return _clip(error["message"])
    if isinstance(error, str) and error.strip():
        return error.strip()[:_DETAIL_CHARS]
    return None


def error_detail(error: Any) -> str | None:
    """The error's message with what the server says behind it (credential keys redacted).

    OpenRouter relays the upstream provider's own error in `metadata.raw` and names that
    provider in `metadata.provider_name`; its `message` alone is often only "Provider returned
    error".
    """
    message = _error_message(error)
    metadata = error.get("metadata") if isinstance(error, Mapping) else None
    if not isinstance(metadata, Mapping):
        return message
    metadata = redact(metadata)
    parts = [message] if message else []
    provider = metadata.get("provider_name")
    if isinstance(provider, str) and provider.strip():
        parts.append(f"provider {provider.strip()!r}")
    raw = metadata.get("raw")
    if raw is not None and raw != "":
        text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
        parts.append(f"raw: {_clip(text)}")
    return "; ".join(parts) or None


def error_status(error: Any) -> int | None:
    """The HTTP status an error body's numeric `code` (or `status`) stands for, if any."""
    if not isinstance(error, Mapping):
        return None
    for field in ("code", "status"):
        value = error.get(field)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    return None


def status_kind(status: int) -> str:
    """The kind of error an HTTP error status stands for."""
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limit"
    if status == 408:
        return "timeout"
    if status == 409 or status >= 500:
        return "server"
    return "bad_request"


def error_codes(error: Any) -> list[str]:
    """The `type`, `code` and `innererror.code` of an error body, lower-cased."""
    if not isinstance(error, Mapping):
        return []
    inner = error.get("innererror")
    values = [error.get("type"), error.get("code")]
    if isinstance(inner, Mapping):
        values.append(inner.get("code"))
    return [v.lower() for v in values if isinstance(v, str) and v and not v.strip().isdigit()]


def is_refusal(error: Any) -> bool:
    """Whether the error is a content filter's refusal."""
    return any(code in _REFUSAL_CODES for code in error_codes(error))
