"""Payload sizes on Temporal: what fits in one payload, and a run's snapshot read in pages.

Temporal refuses a payload (an activity's input or result, a workflow's result, an update's
or a query's answer) over 2 MiB. A run's snapshot (its state, events and journal) grows with
what its tools return and can be many times that, so the workflow never sends it whole: the
`snapshot_page` query answers a slice of its JSON text (`page`), at most `PAGE_BUDGET` bytes
once encoded, and the client reads the slices in order until the text is whole (`read_pages`).
The slices are of the text, not of its entries, so a single entry larger than a page (a
journal checkpoint carrying a long trace) is read back whole too. A page names the revision of
the snapshot it was cut from; when the run changed between two pages, the reader starts over.

What must cross in one payload (a tool's result, a model's answer, the conversation sent to a
model) is measured with `encoded_size` against `PAYLOAD_LIMIT`, and a value over it is a
`PayloadTooLarge` naming what carried it, so the run ends `failed` instead of retrying a
payload Temporal never takes.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pytest_harness.errors import ExecutionError, PayloadTooLarge

__all__ = [
    "PAGE_BUDGET",
    "PAYLOAD_LIMIT",
    "check_fits",
    "encoded_size",
    "outcome_of",
    "page",
    "read_pages",
    "too_large",
    "wire_outcome",
]

PAYLOAD_LIMIT = 2 * 1024 * 1024 - 16 * 1024
"""The largest JSON a value may encode to in one payload: Temporal's 2 MiB payload limit, less
16 KiB for the payload's metadata and the rest of its message."""

PAGE_BUDGET = 1024 * 1024
"""The most a `snapshot_page` answer encodes to (well below `PAYLOAD_LIMIT`)."""

_PAGE_OVERHEAD = 256
"""Room in a page for its other fields (`rev`, `offset`, `total`)."""

_MAX_RESTARTS = 1000


def encoded_size(value: Any) -> int:
    """The bytes `value` takes as Temporal's JSON converter encodes it (compact, ASCII)."""
    return len(json.dumps(value, separators=(",", ":")))


def too_large(what: str, size: int, limit: int = PAYLOAD_LIMIT) -> PayloadTooLarge:
    """The error for `what` (a tool's result, a model's answer, ...) encoding to `size` bytes."""
    return PayloadTooLarge(
        f"{what} is {size} bytes of JSON, over the limit of {limit} bytes of one Temporal "
        f"payload (2 MiB, less {(2 * 1024 * 1024 - limit) // 1024} KiB for the rest of the "
        "message); Temporal cannot carry it, so the run ends here instead of retrying it: "
        "return less (store big data as an artifact, or a reference to it)",
        size=size,
        limit=limit,
        what=what,
    )


def check_fits(value: Any, what: str, limit: int = PAYLOAD_LIMIT) -> None:
    """Raise `PayloadTooLarge` naming `what` when `value` encodes to more than `limit` bytes."""
    size = encoded_size(value)
    if size > limit:
        raise too_large(what, size, limit)


def _escaped(text: str) -> int:
    """The length of `text` (ASCII JSON) once encoded again as a JSON string, quotes included."""
    return len(text) + text.count('"') + text.count("\\") + 2


def page(text: str, offset: int, rev: int, budget: int = PAGE_BUDGET) -> dict[str, Any]:
    """The slice of `text` (ASCII JSON) from `offset` that encodes within `budget` bytes.

    `text` re-encoded as a JSON string grows where it holds quotes and backslashes; the slice
    is cut so that the whole answer (`rev`, `offset`, `total`, `text`) stays within `budget`.
    """
    room = budget - _PAGE_OVERHEAD
    if room < 16:
        raise ValueError(f"a page budget of {budget} bytes holds no text")
    end = min(len(text), offset + room)
    while end > offset and _escaped(text[offset:end]) > room:
        over = _escaped(text[offset:end]) - room
        end -= max(1, over // 2)  # every character encodes to 1 or 2 (text is ASCII JSON)
    return {"rev": rev, "offset": offset, "total": len(text), "text": text[offset:end]}


async def read_pages(fetch: Callable[[int, int | None], Awaitable[Mapping[str, Any]]]) -> Any:
    """The value whose JSON text `fetch(offset, rev)` answers in pages (`page`), decoded.

    A page of another revision than the one being read (the run changed meanwhile) starts the
    reading over from that page's revision.
    """
    rev: int | None = None
    parts: list[str] = []
    have = 0
    for _ in range(_MAX_RESTARTS):
        got = await fetch(have, rev)
        if (rev is not None and int(got["rev"]) != rev) or int(got["offset"]) != have:
            rev, parts, have = None, [], 0  # the run changed: read its new revision whole
            continue
        rev = int(got["rev"])
        piece = str(got["text"])
        parts.append(piece)
        have += len(piece)
        total = int(got["total"])
        if have >= total:
            return json.loads("".join(parts))
        if not piece:
            raise ExecutionError(f"a snapshot page at {have} of {total} held no text")
    raise ExecutionError(
        f"the run changed {_MAX_RESTARTS} times while its snapshot was read in pages; read "
        "it again once it rests"
    )


_WIRED_WHOLE = 256 * 1024
"""Tool results whose text is at most this long are answered with their value too."""


def wire_outcome(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """A tool outcome (`ToolOutcome.to_dict()`) as the tool activity answers it.

    A result's value and its text for the model are mostly the same characters (a string
    result is both); the value is then left out (`value_from: text` or `json`), so a result
    takes its size once, not twice, of the activity's payload. `outcome_of` restores it.
    Only a text over `_WIRED_WHOLE` characters is answered so: a smaller outcome goes whole,
    as a worker of the previous version, which knows no `value_from`, reads it (its workflow
    code may take a newer worker's answer while workers are upgraded one by one).
    """
    value, text = outcome.get("value"), outcome.get("text")
    if value is None or not isinstance(text, str) or len(text) <= _WIRED_WHOLE:
        return dict(outcome)
    if isinstance(value, str):
        if value != text:
            return dict(outcome)
        how = "text"
    else:
        try:
            if json.loads(text) != value:
                return dict(outcome)
        except ValueError:
            return dict(outcome)
        how = "json"
    return {**{k: v for k, v in outcome.items() if k != "value"}, "value_from": how}


def outcome_of(wired: Mapping[str, Any]) -> dict[str, Any]:
    """The tool outcome `wire_outcome` answered (an answer without `value_from` as it is)."""
    outcome = {k: v for k, v in wired.items() if k != "value_from"}
    how = wired.get("value_from")
    if how == "text":
        outcome["value"] = outcome["text"]
    elif how == "json":
        outcome["value"] = json.loads(outcome["text"])
    return outcome
