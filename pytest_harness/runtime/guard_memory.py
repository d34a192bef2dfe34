"""What a recording keeps of a guard decision whose text golden-file redaction hides.

Golden files and archives keep a run's text redacted, and a replay plays that text back: a
`redact` guard that scrubbed an `sk-…` key when the run was recorded is shown `sk-[REDACTED]`
in the replay, finds nothing, and an unchanged spec would replay as drift. A built-in check
(`guards.BuiltinCheck`: `regex`, `contains`, `max_length`, `json_schema`, `cel`) decides the
same on the same text with the same configuration, so its decision on text that redaction
changes keeps three more keys:

* `config`: the digest of the guard's configuration (`config_digest`) and of the guards that
  ran before it on the same text, in order (another guard moved before it could have changed
  what it saw, without a decision to say so);
* `seen`: the digest of what it read (the text; a `cel` guard's variables) as golden files keep it;
* `left_text`: a `redact` guard's, the text it left, as golden files keep it (redacted).

In a replay (`GuardMemory`), a guard whose `config` is the recorded one and that is shown text
redaction leaves as it is (the golden's) whose digest is `seen` takes the recorded decision and
passes `left_text` on. Anything else is checked as a live run would check it: another guard
configuration, other text (another tool result, another conversation), or text that redaction
would change (a real tool's raw result, under `tools="safe"`: the check sees all of it). A guard
whose check is Python code (`pkg.mod:fn`, a plugin's check), or that runs after one on the same
text, keeps none of the keys and is always checked again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_harness.models.base import canonical_json, content_digest, text_digest
from pytest_harness.runtime.trace import trace_entries

if TYPE_CHECKING:
    from pytest_harness.runtime.guards import BuiltinCheck, GuardContext
    from pytest_harness.runtime.trace import Trace
    from pytest_harness.spec.schema import GuardSpec

__all__ = ["CONFIG", "KEPT", "LEFT_TEXT", "SEEN", "GuardMemory", "Seen", "config_digest"]

CONFIG = "config"
"""A kept guard decision's digest of its guard's configuration and of the guards before it."""
SEEN = "seen"
"""A kept guard decision's digest of what its guard read, as golden files keep it."""
LEFT_TEXT = "left_text"
"""A kept `redact` decision's text its guard left, as golden files keep it."""
KEPT = (CONFIG, SEEN, LEFT_TEXT)
"""The keys, in the order a decision keeps them (after `left`)."""


def config_digest(guard: GuardSpec, check: str, params: Mapping[str, Any]) -> str:
    """The digest of a built-in guard's configuration: what decides whether and how it fires.

    `params` are the check's own (`pattern`, `ignore_case`, a `json_schema`'s schema as read
    from its file, ...); a `block` guard's `message` is not here (the refusal is made of
    today's spec either way).
    """
    return content_digest(
        {
            "id": guard.id,
            "on": guard.on.value,
            "action": guard.action.value,
            "tools": None if guard.tools is None else list(guard.tools),
            "check": check,
            "params": dict(params),
        }
    )


class Seen:
    """What a built-in guard was shown on a text, digested only when a decision asks.

    `chain` holds the configurations of the guards on this text so far; only its first
    `length` are this guard's and those before it (the list grows as later guards run).
    """

    __slots__ = ("_chain", "_check", "_context", "_digest", "_length", "_text")

    def __init__(
        self, check: BuiltinCheck, chain: list[str], text: str, context: GuardContext
    ) -> None:
        self._check, self._chain, self._length = check, chain, len(chain)
        self._text, self._context = text, context
        self._digest: tuple[str, bool] | None = None

    @property
    def config(self) -> str:
        """`CONFIG`: the digest of this guard's configuration and of those before it."""
        return text_digest(canonical_json(self._chain[: self._length]))

    def digest(self) -> tuple[str, bool]:
        """The digest of what the guard read as golden files keep it, and whether they hide any.

        Redacted, with generated ids made stable (`redaction.comparable`).
        """
        if self._digest is None:
            from pytest_harness.redaction import comparable  # deferred, as in `guards`

            read: Any = self._text
            if self._check.reads_context:
                read = self._context.variables(self._text)
            kept = comparable(read)
            if isinstance(read, str):
                hidden = kept != read
            else:  # compared as JSON: a tuple of roles is the list golden files keep
                hidden = canonical_json(kept) != canonical_json(read)
            self._digest = (content_digest(kept), hidden)
        return self._digest

    def kept(self, left: str | None) -> dict[str, str]:
        """The keys a decision keeps (`KEPT`): none when golden files hide nothing it read.

        `left`: the text a `redact` guard left.
        """
        digest, hidden = self.digest()
        if not hidden:
            return {}
        keys = {CONFIG: self.config, SEEN: digest}
        if left is not None:
            from pytest_harness.redaction import comparable

            keys[LEFT_TEXT] = str(comparable(left))
        return keys


class GuardMemory:
    """A recording's kept guard decisions (those with `CONFIG` and `SEEN`), for its replay.

    Each is taken once, in the order recorded, by a guard of the same id, configuration and
    action, on the same target and tool, shown the text it was recorded against.
    """

    def __init__(self, decisions: Iterable[tuple[str, str, Mapping[str, Any]]]) -> None:
        """`decisions`: each recorded decision's `(kind, key, detail)` (`trace.trace_entries`)."""
        self._kept: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        for kind, guard_id, detail in decisions:
            if kind != "guard" or not _usable(detail):
                continue
            key = (
                guard_id,
                detail.get("on"),
                detail.get("tool"),
                detail.get("action"),
                detail[CONFIG],
                detail[SEEN],
            )
            self._kept.setdefault(key, []).append(detail)
        self._ids = frozenset(key[0] for key in self._kept)

    @classmethod
    def of(cls, trace: Trace) -> GuardMemory | None:
        """The memory of a recorded trace; None when it kept no guard decision."""
        memory = cls(trace_entries(trace))
        return memory if memory._kept else None

    def remembers(self, guard_id: str) -> bool:
        """Whether a decision of guard `guard_id` is kept."""
        return guard_id in self._ids

    def recall(
        self, guard: GuardSpec, context: GuardContext, seen: Seen
    ) -> Mapping[str, Any] | None:
        """The recorded decision `guard` made on the text it is shown now, taken; else None.

        None for text that golden files would redact (a raw tool result): the check sees it.
        """
        digest, hidden = seen.digest()
        if hidden:
            return None
        key = (guard.id, context.on, context.tool or None, guard.action.value, seen.config, digest)
        queue = self._kept.get(key)
        return queue.pop(0) if queue else None


def _usable(detail: Mapping[str, Any]) -> bool:
    """Whether a guard decision's detail holds the kept keys a replay can take it by."""
    if not isinstance(detail.get(CONFIG), str) or not isinstance(detail.get(SEEN), str):
        return False
    return detail.get("action") != "redact" or isinstance(detail.get(LEFT_TEXT), str)
