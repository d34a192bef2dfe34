"""A run's conversation sent to the model activities once, then only what each turn adds.

Every model attempt of a run on Temporal is a `harness_model` activity, and an activity's input
is kept in the workflow's history. Sending the whole conversation with each attempt would make
a run's history grow with the square of its turns (a long run would hit Temporal's history
limit). So the workflow sends the full messages once, then only the new ones (`tail`) with
`known`, how many the worker was sent before, and `digest`, a chained SHA-256 over those: a
worker that holds that conversation (it served the run's previous attempt) appends the tail to
it; any other (a new worker, a restarted one, one that evicted the run) answers
`ConversationUnknown`, and the workflow sends the whole conversation again. Both outcomes are in
the history, so a replaying worker makes the same choice.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pytest_harness.models.base import Message

__all__ = ["UNKNOWN", "Conversations", "Sent", "chain"]

UNKNOWN = "ConversationUnknown"
"""The activity's error type when its worker does not hold the conversation a tail extends."""


def chain(digest: str, messages: Sequence[Mapping[str, Any]]) -> str:
    """The digest of a conversation `digest` stands for, followed by `messages`."""
    for message in messages:
        # ASCII escapes: any text a message can hold (a lone surrogate too) has a digest
        text = json.dumps(message, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(f"{digest}\n{text}".encode("ascii")).hexdigest()
    return digest


class Sent:
    """The workflow's side: what the run's last model attempt sent, to send only the rest."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.digest = ""

    def wire(self, messages: Sequence[Mapping[str, Any]], *, full: bool) -> dict[str, Any]:
        """The `conversation` of an attempt's input: the tail past what was sent, or all.

        The tail is only used when the conversation still starts with what was sent (a
        conversation the engine rewrote, or `full`, sends it whole).
        """
        given = [dict(m) for m in messages]
        known = len(self.messages)
        if full or given[:known] != self.messages:
            known, digest = 0, ""
        else:
            digest = self.digest
        return {"known": known, "digest": digest, "tail": given[known:]}

    def sent(self, messages: Sequence[Mapping[str, Any]], wire: Mapping[str, Any]) -> None:
        """The attempt with `wire` reached a worker that now holds `messages`."""
        self.messages = copy.deepcopy([dict(m) for m in messages])  # as sent, whatever changes
        self.digest = chain(str(wire["digest"]), wire["tail"])


class Conversations:
    """The worker's side: the conversations of the runs it served last, to extend with tails."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._held: OrderedDict[str, tuple[list[Message], str]] = OrderedDict()

    def messages(self, run_id: str, wire: Mapping[str, Any]) -> list[Message] | None:
        """The attempt's whole conversation, now held for the next one; None when unknown."""
        known, digest = int(wire["known"]), str(wire["digest"])
        tail = cast("list[Message]", [dict(m) for m in wire["tail"]])
        if known == 0:
            whole = tail
        else:
            held = self._held.get(run_id)
            if held is None or len(held[0]) != known or held[1] != digest:
                return None
            whole = held[0] + tail
        self._held[run_id] = (whole, chain(digest, tail))
        self._held.move_to_end(run_id)
        while len(self._held) > self.limit:
            self._held.popitem(last=False)
        return list(whole)
