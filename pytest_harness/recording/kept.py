"""A run's trace as golden files keep it and replays compare it: redacted, and yet complete.

A refused run's `output` decision holds the message its caller is told: a blocking guard's
`message` or its default wording, text of the spec. Golden files redact free text, so a
message that reads like a credential (`Secret: never try that.`) is kept as `Secret:
[REDACTED] try that.`, and an edit inside that span would change nothing a replay compares.
Such a decision also keeps `message_digest`, the digest of the message as the spec has it (only
when redaction changed the message: spec text, like the prompt a request digest covers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_harness.models.base import canonical_json, text_digest
from pytest_harness.redaction import redact

__all__ = ["MESSAGE_DIGEST", "kept_trace"]

MESSAGE_DIGEST = "message_digest"
"""The key of an `output` decision's digest of a message that redaction changed."""


def kept_trace(decisions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`decisions` (a trace's `to_list()`) redacted, each refusal's message digested when hidden.

    Idempotent: a trace kept so already is returned as it is (redaction changes nothing in it,
    and its digests stay).
    """
    kept: list[dict[str, Any]] = redact(list(decisions))
    for raw, decision in zip(decisions, kept, strict=True):
        detail = raw.get("detail")
        if decision.get("kind") != "output" or not isinstance(detail, Mapping):
            continue
        message = detail.get("message")
        if isinstance(message, str) and redact(message) != message:
            decision["detail"] = {
                **decision["detail"],
                MESSAGE_DIGEST: text_digest(canonical_json(message)),
            }
    return kept
