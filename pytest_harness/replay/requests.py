"""Which model requests a replay changed, and which part of them: `system`, `tools`, `messages`.

A recorded turn keeps the digests of its request's three parts, and the recording keeps the
system prompt and the tool schemas once, so a changed request is explained: `system prompt: 1
line changed` (with a unified diff of the prompt), `tool schemas: refund` (the tools whose
schema changed, appeared or went), `messages: from request 2` (the conversation differs from
that request on, e.g. after a changed tool result). A turn migrated from a `@1` file has only
the whole request's digest: it is compared whole, and the report says the parts are unknown.

The system prompt and tool schemas are digested as the spec and the code have them
(`runtime.request_digests`), though a golden file keeps them redacted for display: an edit
inside text that reads like a credential changes the request, and is explained without showing
either text (`system prompt: changed where the golden file keeps it redacted`). Golden files
recorded before digested those two parts redacted: such a digest is recognised (it is that of
the redacted text the file keeps) and compared with today's text redacted the same way.
A turn whose messages told the model a deny message that redaction changes also keeps the
digest of those messages as the spec has them (`deny_messages`): a different one (or none
today) is a change of the messages, as an edit outside the hidden text is. A turn recorded
before has none, and its messages are compared by their digest alone.

The recording also keeps the spec's declaration of each model (`use`, `model`, `options`; what
its environment set as `(environment)`), so a request asked of a model the spec has since
swapped, or whose options changed, counts as changed too: `model default: gpt-4.1-mini →
gpt-4o`. A recording made before declarations were kept is compared without them. Options are
spec text: one that redaction changes is kept with the digest of its value as the spec has it,
so an edit inside the hidden text is a changed option too (`model default: options
instructions changed where the golden file keeps it redacted`); a golden recorded before such
digests were kept compares those options redacted, as before.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_harness.models.base import canonical_json, text_digest
from pytest_harness.recording.kept import OPTION_DIGESTS, kept_declaration
from pytest_harness.recording.model import REQUEST_PARTS, Recording
from pytest_harness.redaction import comparable, redact
from pytest_harness.runtime.declared import ENVIRONMENT
from pytest_harness.runtime.request_digests import DENY_MESSAGES

__all__ = ["RequestChanges", "request_changes"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestChanges:
    """How many of a replay's requests changed, what changed in them, and the prompt's diff."""

    changed: int
    explained: tuple[str, ...] = ()
    prompt_diff: tuple[str, ...] = ()


def request_changes(recording: Recording, replayed: Recording, asked: int) -> RequestChanges:
    """Compare the replay's requests with the recorded ones, turn by turn.

    `asked` is how many requests the replay made: one past the end of the recording (where
    the replay diverged) counts as changed even though it was never recorded. What the result
    shows of the prompts and tool schemas is redacted here (only a changed part is shown).
    """
    before, after = recording.model_turns, replayed.model_turns
    changed = 0
    parts: set[str] = set()
    first_messages: int | None = None
    whole_only = False
    swapped: dict[str, str] = {}
    legacy = _LegacyDigests(recording, replayed)
    for index, turn in enumerate(after):
        if index >= len(before):
            changed += 1
            continue
        old = before[index]
        model = _model_change(recording, old.model, replayed, turn.model)
        if model is not None:
            swapped.setdefault(turn.model, model)
        if old.parts is not None and turn.parts is not None:
            differ = {
                p
                for p in REQUEST_PARTS
                if old.parts.get(p) != turn.parts.get(p) and not legacy.same(p, old.parts.get(p))
            }
            told = old.parts.get(DENY_MESSAGES)  # absent: recorded before it was kept
            if told is not None and told != turn.parts.get(DENY_MESSAGES):
                differ.add("messages")  # a deny message edited where redaction hides it
            if differ or model is not None:
                changed += 1
                parts |= differ
                if "messages" in differ and first_messages is None:
                    first_messages = index + 1
        elif old.digest != turn.digest or model is not None:
            changed += 1
            whole_only = whole_only or old.digest != turn.digest
    changed += max(0, asked - len(after))
    explained = [f"model {name}: {change}" for name, change in swapped.items()]
    prompt_diff: tuple[str, ...] = ()
    if "system" in parts:
        if recording.system is not None and replayed.system is not None:
            before, after = redact(recording.system), redact(replayed.system)
            prompt_diff = _unified(before, after)
            n = _lines_changed(before, after)
            if n:
                explained.append(f"system prompt: {n} line{'' if n == 1 else 's'} changed")
            else:  # the edit is inside what redaction hides: neither text is shown
                explained.append(f"system prompt: {_HIDDEN} it redacted")
        else:
            explained.append("system prompt")
    if "tools" in parts:
        names = _tools_changed(recording.tool_schemas, replayed.tool_schemas)
        explained.append(f"tool schemas: {', '.join(names)}" if names else "tool schemas")
        if not names and recording.tool_schemas is not None and replayed.tool_schemas is not None:
            same_order = [t.get("name") for t in recording.tool_schemas] == [
                t.get("name") for t in replayed.tool_schemas
            ]
            explained[-1] += (
                f": {_HIDDEN} them redacted" if same_order else ": the same, in another order"
            )
    if first_messages is not None:
        explained.append(f"messages: from request {first_messages}")
    if whole_only:
        explained.append("which part is unknown: the recording (format @1) keeps whole digests")
    return RequestChanges(changed=changed, explained=tuple(explained), prompt_diff=prompt_diff)


_HIDDEN = "changed where the golden file keeps"
"""How a change inside redacted prompt or schema text is explained (the text is not shown)."""


def _digest(value: Any) -> str:
    return text_digest(canonical_json(value))


class _LegacyDigests:
    """Recognises a turn's `system` or `tools` digest taken of the redacted text.

    Golden files recorded before those parts were digested as the spec has them took their
    digests of the text redacted, which is the text the file keeps: a digest equal to that of
    the kept text, and to that of today's text redacted the same way, is an unchanged part.
    (When nothing in the text is redacted the two kinds of digest are one and the same.)
    """

    def __init__(self, recording: Recording, replayed: Recording) -> None:
        self._kept = {"system": recording.system, "tools": recording.tool_schemas}
        self._today = {"system": replayed.system, "tools": replayed.tool_schemas}
        self._digests: dict[str, tuple[str, str] | None] = {}

    def same(self, part: str, digest: str | None) -> bool:
        """Whether `digest` is the old kind of digest of `part`, and today's text matches it."""
        if part not in self._kept or digest is None:
            return False
        if part not in self._digests:
            kept, today = self._kept[part], self._today[part]
            self._digests[part] = (
                None
                if kept is None or today is None
                else (_digest(_listed(kept)), _digest(redact(_listed(today))))
            )
        found = self._digests[part]
        return found is not None and digest == found[0] == found[1]


def _listed(value: Any) -> Any:
    """Tool schemas as the list of mappings a request digest encodes (a prompt as it is)."""
    if isinstance(value, str):
        return value
    return [dict(item) for item in value]


def _model_change(
    recording: Recording, recorded: str, replayed: Recording, asked: str
) -> str | None:
    """How today's declaration of a turn's model differs from the recorded one, or None.

    What both declarations hold is compared, redacted as a golden file keeps it, but for
    values either side has as `ENVIRONMENT` (its run's environment set them; for `options`,
    option by option, and key by key within an option that is a mapping on both sides):
    `runtime.declared`. An option that redaction changed is also compared by the digest of
    its value as the spec has it, when both sides hold one (`recording.kept`), and shown as
    changed where the golden file keeps it redacted.
    """
    if recording.models is None or replayed.models is None:
        return None
    was, now = recording.models.get(recorded), replayed.models.get(asked)
    if was is None or now is None or was == now:
        return None
    was, now = kept_declaration(was), kept_declaration(now)
    shown = []
    named = [key for key in ("use", "model") if _compared(was, now, key) and was[key] != now[key]]
    if named:  # `gpt-4.1-mini → gpt-4o`, `openai gpt-4.1-mini → anthropic claude-sonnet-4`
        shown.append(f"{_named(was, named)} → {_named(now, named)}")
    if _compared(was, now, "options"):
        before, after = was["options"] or {}, now["options"] or {}
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            changed = _options_changed(before, after)
            # an edit inside what redaction hides: the digests of the values as the spec has
            # them differ (a path the golden holds none for was recorded before they were
            # kept, or not hidden; one today holds none for is set by the environment, gone
            # or not hidden: the redacted values show it)
            recorded_digests = was.get(OPTION_DIGESTS) or {}
            today_digests = now.get(OPTION_DIGESTS) or {}
            for path, digest in recorded_digests.items():
                if today_digests.get(path, digest) != digest and path not in changed:
                    changed[path] = f"{_HIDDEN} it redacted"
            if changed:
                options = (f"{path} {change}" for path, change in changed.items())
                shown.append(f"options {', '.join(options)}")
    return "; ".join(shown) or None


def _compared(was: Mapping[str, Any], now: Mapping[str, Any], key: str) -> bool:
    """Whether both declarations hold `key`, neither as set by its run's environment."""
    return key in was and key in now and ENVIRONMENT not in (was[key], now[key])


def _named(declared: Mapping[str, Any], keys: Sequence[str]) -> str:
    return " ".join("(none)" if declared[key] is None else str(declared[key]) for key in keys)


def _options_changed(
    before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = ""
) -> dict[str, str]:
    """`{temperature: 0 → 0.7, reasoning.summary: "auto" → "detailed"}`: each option that differs.

    A value either side holds as `ENVIRONMENT` is not compared; an option that is a mapping on
    both sides is compared key by key (an environment may have set one key of it).
    """
    changed: dict[str, str] = {}
    for key in sorted({**before, **after}):
        was, now = before.get(key), after.get(key)
        if ENVIRONMENT in (was, now):
            continue
        if isinstance(was, Mapping) and isinstance(now, Mapping):
            changed.update(_options_changed(was, now, f"{prefix}{key}."))
        elif key not in before or key not in after or was != now:
            changed[f"{prefix}{key}"] = f"{_option(before, key)} → {_option(after, key)}"
    return changed


def _option(options: Mapping[str, Any], key: str) -> str:
    if key not in options:
        return "(unset)"
    return json.dumps(options[key], ensure_ascii=False, sort_keys=True, default=str)


def _lines_changed(before: str, after: str) -> int:
    matcher = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    return sum(
        max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
    )


def _unified(before: str, after: str) -> tuple[str, ...]:
    lines = difflib.unified_diff(
        before.splitlines(), after.splitlines(), "recorded", "today", lineterm="", n=2
    )
    return tuple(lines)


def _tools_changed(
    before: Sequence[Mapping[str, Any]] | None, after: Sequence[Mapping[str, Any]] | None
) -> list[str]:
    """The tools whose schema changed, then those that appeared (new), then those that went."""
    if before is None or after is None:
        return []
    old = {str(t.get("name")): comparable(dict(t)) for t in redact(list(before))}
    new = {str(t.get("name")): comparable(dict(t)) for t in redact(list(after))}
    names = [n for n in new if n in old and old[n] != new[n]]
    names += [f"{n} (new)" for n in new if n not in old]
    names += [f"{n} (removed)" for n in old if n not in new]
    return names
