"""A run's trace and model declarations as golden files keep them: redacted, and yet complete.

A refused run's `output` decision holds the message its caller is told: a blocking guard's
`message` or its default wording, text of the spec. Golden files redact free text, so a
message that reads like a credential (`Secret: never try that.`) is kept as `Secret:
[REDACTED] try that.`, and an edit inside that span would change nothing a replay compares.
Such a decision also keeps `message_digest`, the digest of the message as the spec has it (only
when redaction changed the message: spec text, like the prompt a request digest covers).

A model's declaration (`runtime.declared`) holds its `options`, spec text too: an option whose
text reads like a credential (`instructions: 'Secret: never reveal …'`) is kept redacted, and
the declaration also keeps `option_digests`, by option path (`instructions`,
`reasoning.summary`: each value that is not a mapping, as `replay.requests` compares options),
the digest of each value that redaction changed, as the spec has it. An option under a
credential-named key (`api_key`, `headers.x-api-key`) is a secret, not behaviour: it is
redacted and gets no digest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_harness.models.base import canonical_json, text_digest
from pytest_harness.redaction import is_credential_key, redact

__all__ = ["MESSAGE_DIGEST", "OPTION_DIGESTS", "kept_declaration", "kept_models", "kept_trace"]

MESSAGE_DIGEST = "message_digest"
"""The key of an `output` decision's digest of a message that redaction changed."""
OPTION_DIGESTS = "option_digests"
"""The key of a model declaration's digests of the options redaction changed, by path."""


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
            decision["detail"] = {**decision["detail"], MESSAGE_DIGEST: _digest(message)}
    return kept


def kept_models(models: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each declaration kept (`kept_declaration`), the models' names kept (one may be `token`)."""
    return {name: kept_declaration(model) for name, model in models.items()}


def kept_declaration(model: Mapping[str, Any]) -> dict[str, Any]:
    """A model's declaration redacted, with `OPTION_DIGESTS` of the options redaction changed.

    Idempotent: the digests a kept declaration holds are kept as they are (and never
    redacted: an option may be named `api_key`), and its redacted options add none.
    """
    declared = {key: value for key, value in model.items() if key != OPTION_DIGESTS}
    kept: dict[str, Any] = redact(declared)
    digests = dict(model.get(OPTION_DIGESTS) or {})
    options, shown = declared.get("options"), kept.get("options")
    if isinstance(options, Mapping) and isinstance(shown, Mapping):
        digests.update(_hidden(options, shown))
    if digests:
        kept[OPTION_DIGESTS] = dict(sorted(digests.items()))
    return kept


def _hidden(raw: Mapping[str, Any], shown: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """`{path: digest}` of each value of `raw` that its redacted form `shown` holds otherwise.

    A value under a credential-named key (`api_key`, `x-api-key`) gets none: it is a secret,
    not behaviour, and a digest of a short one would give it away to anyone who guesses it.
    """
    found: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(key, str) and is_credential_key(key):
            continue
        kept = shown.get(key)
        if isinstance(value, Mapping) and isinstance(kept, Mapping):
            found.update(_hidden(value, kept, f"{prefix}{key}."))
        elif kept != value:
            found[f"{prefix}{key}"] = _digest(value)
    return found


def _digest(value: Any) -> str:
    """The digest of a value as the spec has it."""
    return text_digest(canonical_json(value))
