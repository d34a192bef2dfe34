"""Which model requests a replay changed, and which part of them: `system`, `tools`, `messages`.

A recorded turn keeps the digests of its request's three parts, and the recording keeps the
system prompt and the tool schemas once, so a changed request is explained: `system prompt: 1
line changed` (with a unified diff of the prompt), `tool schemas: refund` (the tools whose
schema changed, appeared or went), `messages: from request 2` (the conversation differs from
that request on, e.g. after a changed tool result). A turn migrated from a `@1` file has only
the whole request's digest: it is compared whole, and the report says the parts are unknown.

The recording also keeps the spec's declaration of each model (`use`, `model`, `options`; what
its environment set as `(environment)`), so a request asked of a model the spec has since
swapped, or whose options changed, counts as changed too: `model default: gpt-4.1-mini →
gpt-4o`. A recording made before declarations were kept is compared without them.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_harness.recording.model import REQUEST_PARTS, Recording
from pytest_harness.redaction import comparable, redact
from pytest_harness.runtime.declared import ENVIRONMENT

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
    for index, turn in enumerate(after):
        if index >= len(before):
            changed += 1
            continue
        old = before[index]
        model = _model_change(recording, old.model, replayed, turn.model)
        if model is not None:
            swapped.setdefault(turn.model, model)
        if old.parts is not None and turn.parts is not None:
            differ = {p for p in REQUEST_PARTS if old.parts.get(p) != turn.parts.get(p)}
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
            explained.append(f"system prompt: {n} line{'' if n == 1 else 's'} changed")
        else:
            explained.append("system prompt")
    if "tools" in parts:
        names = _tools_changed(recording.tool_schemas, replayed.tool_schemas)
        explained.append(f"tool schemas: {', '.join(names)}" if names else "tool schemas")
    if first_messages is not None:
        explained.append(f"messages: from request {first_messages}")
    if whole_only:
        explained.append("which part is unknown: the recording (format @1) keeps whole digests")
    return RequestChanges(changed=changed, explained=tuple(explained), prompt_diff=prompt_diff)


def _model_change(
    recording: Recording, recorded: str, replayed: Recording, asked: str
) -> str | None:
    """How today's declaration of a turn's model differs from the recorded one, or None.

    What both declarations hold is compared, redacted as a golden file keeps it, but for
    values either side has as `ENVIRONMENT` (its run's environment set them; for `options`,
    option by option): `runtime.declared`.
    """
    if recording.models is None or replayed.models is None:
        return None
    was, now = recording.models.get(recorded), replayed.models.get(asked)
    if was is None or now is None or was == now:
        return None
    was, now = redact(dict(was)), redact(dict(now))
    shown = []
    named = [key for key in ("use", "model") if _compared(was, now, key) and was[key] != now[key]]
    if named:  # `gpt-4.1-mini → gpt-4o`, `openai gpt-4.1-mini → anthropic claude-sonnet-4`
        shown.append(f"{_named(was, named)} → {_named(now, named)}")
    if _compared(was, now, "options"):
        before, after = was["options"] or {}, now["options"] or {}
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            changed = sorted(
                k
                for k in {**before, **after}
                if ENVIRONMENT not in (before.get(k), after.get(k))
                and (k not in before or k not in after or before[k] != after[k])
            )
            if changed:
                options = (f"{k} {_option(before, k)} → {_option(after, k)}" for k in changed)
                shown.append(f"options {', '.join(options)}")
    return "; ".join(shown) or None


def _compared(was: Mapping[str, Any], now: Mapping[str, Any], key: str) -> bool:
    """Whether both declarations hold `key`, neither as set by its run's environment."""
    return key in was and key in now and ENVIRONMENT not in (was[key], now[key])


def _named(declared: Mapping[str, Any], keys: Sequence[str]) -> str:
    return " ".join("(none)" if declared[key] is None else str(declared[key]) for key in keys)


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
