"""The digests a recording keeps of each model request: the whole request, and part by part.

Each digest is `sha256:` of the canonical JSON (`models.base.content_digest`) of the request as
recordings compare it, with generated ids numbered in document order (`redaction.stable_ids`),
so a golden file compares equal whatever ids a run drew. The parts are the system prompt, the
tool schemas and the messages (`PARTS`); the whole request's canonical JSON is the three parts'
under their sorted keys, so it is put together from theirs, not encoded again.

The messages are digested redacted (`redaction.comparable`): they hold the run's data (its
input, tool results), which a golden file keeps redacted and a replay plays back redacted. The
system prompt and the tool schemas are digested as the spec and the tools' code have them:
they are the project's own text, and a golden file keeps them redacted only for display, so an
edit inside text that reads like a credential (`Secret: never reveal …`, a docstring's
`token: …`) still changes the digest. (Golden files recorded before digested those two parts
redacted too; `replay.requests` compares them as they were taken.)

Every request of a task repeats its system prompt and tool schemas. Their canonical JSON is
worked out once per prompt and schemas (`_Fixed`), and reused while the request holds no
generated id (their digests too): `stable_ids` numbers ids across the whole request, so a
request with one anywhere is made comparable whole.

The messages also carry text of the spec: a `deny` rule's `message`, what the model is told
when the rule denies a call, is the content of a tool message. Digested redacted with the rest
of the messages, an edit inside text of it that reads like a credential (`Auth: only …`) would
change no digest. So a request whose tool messages tell the model such a message (one that
redaction changes) gets a fourth digest, `deny_messages`: of those messages' texts as the spec
has them, in order (spec text only: the messages digest itself stays of the redacted run data).
Which of a task's deny messages redaction changes is worked out once per task's rules
(`_hidden_denials`); a task with none (the common case) costs no scan of the messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_harness.models.base import ModelRequest, ToolSchema, canonical_json, text_digest
from pytest_harness.redaction import holds_ids, redact, stable_ids
from pytest_harness.spec.schema import Effect, RuleSpec

__all__ = ["DENY_MESSAGES", "PARTS", "request_digests"]

PARTS = ("system", "tools", "messages")
"""The parts of a model request a recording keeps a digest of, in the order it keeps them."""
DENY_MESSAGES = "deny_messages"
"""The digest, after `PARTS`, of the deny messages redaction changes that the messages hold."""

_CACHED = 64
"""How many prompt-and-schemas pairs are remembered (a process has a few tasks)."""


@dataclass(frozen=True, slots=True)
class _Fixed:
    """A task's system prompt and tool schemas as canonical JSON (when no ids are in them)."""

    system: str
    tools: tuple[ToolSchema, ...]
    """The objects it was worked out from (kept, so their ids cannot be reused meanwhile)."""
    canonical: dict[str, str] | None
    """Canonical JSON of the `system` and `tools` parts; None when they hold ids."""
    digests: dict[str, str] | None
    """The digests of those two texts (None with them)."""


_fixed: dict[tuple[int, int], _Fixed] = {}


def _fixed_parts(request: ModelRequest, content: dict[str, Any]) -> _Fixed:
    key = (id(request.system), id(request.tools))
    found = _fixed.get(key)
    if found is None or found.system is not request.system or found.tools is not request.tools:
        parts = {"system": content["system"], "tools": content["tools"]}
        canonical = digests = None
        if not any(holds_ids(value) for value in parts.values()):
            canonical = {name: canonical_json(value) for name, value in parts.items()}
            digests = {name: text_digest(text) for name, text in canonical.items()}
        found = _Fixed(request.system, request.tools, canonical, digests)
        if len(_fixed) >= _CACHED:
            _fixed.clear()
        _fixed[key] = found
    return found


_CACHED_MESSAGES = 1024
"""How many messages' redacted forms are remembered."""

_CACHED_CHARACTERS = 16 * 1024 * 1024
"""How many characters the remembered messages may hold in all (keys and redacted forms)."""

_messages: dict[str, tuple[str, bool]] = {}
"""Canonical JSON of a message → that of its redacted form, and whether that holds an id."""
_held = 0
"""The characters `_messages` holds."""


def _messages_canonical(messages: Any) -> str | None:
    """Canonical JSON of `redact(messages)`, message by message; None when one holds an id.

    A run's requests repeat its earlier messages, so each message's redacted form is kept
    by its own canonical JSON (redaction depends on nothing else): a message seen before
    costs one encoding, not a redaction, an id scan and an encoding. Long ones too: a tool
    result of a few hundred KB would otherwise be redacted again at every later turn of the
    run. What is kept is bounded by count and by characters, and forgotten all at once when
    either is reached. A message that cannot be encoded (or messages that are not a list) go
    the whole way, failing as they did.
    """
    global _held
    if type(messages) is not list and type(messages) is not tuple:
        return None
    parts = []
    for message in messages:
        try:
            raw = canonical_json(message)
        except (TypeError, ValueError, RecursionError):
            return None
        found = _messages.get(raw)
        if found is None:
            redacted = redact(message)
            found = (canonical_json(redacted), holds_ids(redacted))
            size = len(raw) + len(found[0])
            if size <= _CACHED_CHARACTERS:
                if len(_messages) >= _CACHED_MESSAGES or _held + size > _CACHED_CHARACTERS:
                    _messages.clear()
                    _held = 0
                _messages[raw] = found
                _held += size
        if found[1]:
            return None
        parts.append(found[0])
    return f"[{','.join(parts)}]"


_denials: dict[int, tuple[tuple[RuleSpec, ...], frozenset[str]]] = {}
"""A task's rules (by id, kept so the id cannot be reused) → the deny messages redaction changes."""


def _hidden_denials(rules: tuple[RuleSpec, ...]) -> frozenset[str]:
    """The `message`s of `rules` that deny and that redaction changes, once per rules."""
    found = _denials.get(id(rules))
    if found is None or found[0] is not rules:
        hidden = frozenset(
            rule.message
            for rule in rules
            if rule.then == Effect.DENY and rule.message and redact(rule.message) != rule.message
        )
        if len(_denials) >= _CACHED:
            _denials.clear()
        found = _denials[id(rules)] = (rules, hidden)
    return found[1]


def request_digests(
    request: ModelRequest, content: dict[str, Any], rules: tuple[RuleSpec, ...] = ()
) -> tuple[str, dict[str, str]]:
    """The digest of `content` (`request.content()`) as recordings compare it, and its parts'.

    With the task's `rules`, the parts also hold `DENY_MESSAGES` when the messages tell the
    model a deny message that redaction changes.
    """
    digest, parts = _digests(request, content)
    hidden = _hidden_denials(rules) if rules else None
    if hidden:
        told = [
            text
            for message in content["messages"]
            if message.get("role") == "tool"
            and isinstance(text := message.get("content"), str)
            and text in hidden
        ]
        if told:
            parts[DENY_MESSAGES] = text_digest(canonical_json(told))
    return digest, parts


def _digests(request: ModelRequest, content: dict[str, Any]) -> tuple[str, dict[str, str]]:
    fixed = _fixed_parts(request, content)
    if fixed.canonical is not None and fixed.digests is not None:
        messages = _messages_canonical(content["messages"])
        if messages is not None:
            system, tools = fixed.canonical["system"], fixed.canonical["tools"]
            whole = f'{{"messages":{messages},"system":{system},"tools":{tools}}}'
            digests = fixed.digests
            return text_digest(whole), {
                "system": digests["system"],
                "tools": digests["tools"],
                "messages": text_digest(messages),
            }
    # ids somewhere: numbered across the whole request, the messages redacted, as above
    seen = stable_ids(
        {
            "system": content["system"],
            "messages": redact(content["messages"]),
            "tools": content["tools"],
        }
    )
    canonical = {part: canonical_json(seen[part]) for part in PARTS}
    whole = (
        f'{{"messages":{canonical["messages"]},"system":{canonical["system"]},'
        f'"tools":{canonical["tools"]}}}'
    )
    return text_digest(whole), {part: text_digest(canonical[part]) for part in PARTS}
