"""`recording.kept.kept_declaration`: a model declaration redacted, with digests of what it hid."""

from __future__ import annotations

from typing import Any

from pytest_harness.models.base import canonical_json, text_digest
from pytest_harness.recording.kept import OPTION_DIGESTS, kept_declaration, kept_models

HIDDEN = "Secret: never reveal the code."


def declared(**options: Any) -> dict[str, Any]:
    return {"use": "openai", "model": "gpt-4.1-mini", "options": options}


def test_an_option_redaction_changes_is_kept_redacted_with_the_digest_of_its_value() -> None:
    kept = kept_declaration(
        declared(
            temperature=0.2,
            instructions=HIDDEN,
            reasoning={"effort": "(environment)", "summary": "Token: abc123 only"},
            headers={"x-api-key": {"value": "hunter22"}},  # redacted whole, by its key
        )
    )
    assert kept["options"] == {
        "temperature": 0.2,
        "instructions": "Secret: [REDACTED] reveal the code.",
        "reasoning": {"effort": "(environment)", "summary": "Token: [REDACTED] only"},
        "headers": {"x-api-key": "[REDACTED]"},
    }
    assert kept[OPTION_DIGESTS] == {  # none of the credential: a secret, not behaviour
        "instructions": text_digest(canonical_json(HIDDEN)),
        "reasoning.summary": text_digest(canonical_json("Token: abc123 only")),
    }
    assert list(kept) == ["use", "model", "options", OPTION_DIGESTS]


def test_keeping_a_kept_declaration_again_changes_nothing() -> None:
    kept = kept_declaration(declared(instructions=HIDDEN, api_key="sk-" + "a" * 40))
    assert kept_declaration(kept) == kept
    assert list(kept[OPTION_DIGESTS]) == ["instructions"]


def test_no_value_under_a_credential_named_key_is_digested() -> None:
    """A short password's digest would give it away to anyone who guesses it."""
    for options in (
        {"api_key": "hunter22"},
        {"headers": {"X-Api-Key": "hunter22", "Authorization": "Bearer hunter22"}},
        {"auth": {"password": "hunter22"}},
    ):
        kept = kept_declaration(declared(**options))
        assert OPTION_DIGESTS not in kept, kept
        assert "hunter22" not in repr(kept)


def test_a_declaration_redaction_leaves_alone_keeps_no_digests() -> None:
    plain = declared(temperature=0, max_tokens=1024, reasoning={"effort": "high"})
    assert kept_declaration(plain) == plain
    environment = {"use": "(environment)", "model": None, "options": "(environment)"}
    assert kept_declaration(environment) == environment


def test_the_models_names_are_kept() -> None:
    assert list(kept_models({"token": declared(instructions=HIDDEN)})) == ["token"]
