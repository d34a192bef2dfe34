"""The run loop's side of the flight recorder (DESIGN §12): journal entries for each boundary.

A driver of a run that records notes an entry at each boundary (`model.started`,
`tool.dispatched`, …); the notes travel with the driver's next commit, in the same transaction
as the state they describe, so the journal never runs ahead of or behind the checkpoint. Each
entry gets its UUID when noted: a commit that fails is retried with the same entries, and the
store skips an id it already holds, so a boundary is never written twice. When the write keeps
failing, the run stops at that boundary with `RecordingError`.

Kinds are the closed set `KINDS`; `event` entries copy the public events committed with them,
and a `checkpoint` entry is written with every commit that leaves the run not `running`
(suspended or ended), with the outcome so far, so an archive of the journal alone replays.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_harness.errors import RecordingError, StoreError
from pytest_harness.runtime import clock
from pytest_harness.runtime.declared import copied
from pytest_harness.runtime.texts import tool_schemas
from pytest_harness.store.base import EventDraft, JournalDraft
from pytest_harness.store.helpers import PreparedJSON

if TYPE_CHECKING:
    from pytest_harness.models.base import Message
    from pytest_harness.principal import Principal
    from pytest_harness.runtime.plan import TaskPlan
    from pytest_harness.spec.spec import Spec

__all__ = ["KINDS", "Journal", "started_payload", "write_with_retries"]

KINDS: frozenset[str] = frozenset(
    {
        "run.started",
        "run.resumed",
        "model.started",
        "model.response",
        "model.processed",
        "model.completed",
        "model.failed",
        "model.interrupted",
        "tool.started",
        "tool.dispatched",
        "tool.returned",
        "tool.processed",
        "tool.failed",
        "tool.interrupted",
        "tool.resolved",
        "approval.requested",
        "approval.answered",
        "checkpoint",
        "event",
        "command.failed",
    }
)
"""Every journal entry kind (DESIGN §12)."""

RETRY_DELAYS: tuple[float, ...] = (0.05, 0.1, 0.2)
"""Waits before each retry of a failed journal write; then `RecordingError`."""

T = TypeVar("T")


def draft(
    kind: str,
    payload: Mapping[str, Any],
    *,
    step: int,
    attempt_id: str | None = None,
    execution_key: str | None = None,
) -> JournalDraft:
    """A new journal entry with a fresh id (`clock.entry_stamp`) and the current time."""
    assert kind in KINDS, kind
    return _draft(kind, payload, step, attempt_id, execution_key)


def started_payload(
    spec: Spec,
    plan: TaskPlan,
    input: str,
    who: Principal,
    tenant: str | None,
    labels: Mapping[str, str],
    idempotency_key: str | None,
    history: list[Message],
    *,
    given_labels: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The payload of a run's `run.started` entry, a local run's and a Temporal run's alike.

    `labels` are the run's (its task's, then the caller's); `given_labels` the caller's alone,
    so a replay merges them with today's task labels, as a run today would.
    """
    return {
        "task": plan.name,
        "input": input,
        "principal": who.to_dict(),
        "tenant": tenant,
        "labels": dict(labels),
        "given_labels": dict(given_labels or {}),
        "idempotency_key": idempotency_key,
        "spec": spec.document.name,
        "spec_digest": spec.digest,
        "history": list(history),
        # kept once: every request of the run has this prompt and these schemas
        "system": plan.spec.prompt,
        "tool_schemas": tool_schemas(plan.schemas),
        "models": copied(plan.declared),  # its own: a store may keep the object
    }


_new = object.__new__
_set = object.__setattr__


def _draft(
    kind: str,
    payload: Mapping[str, Any],
    step: int,
    attempt_id: str | None,
    execution_key: str | None,
) -> JournalDraft:
    """`JournalDraft(...)` of a fresh entry, made without the keyword call.

    Its fields are set as the frozen class's own `__init__` sets them (`object.__setattr__`;
    it has no `__post_init__`): a recorded run notes some thirty entries. A `PreparedJSON`
    payload (built for this entry, its text put together from parts) is kept as it is.
    """
    entry_id, ts = clock.entry_stamp()
    entry: JournalDraft = _new(JournalDraft)
    _set(entry, "id", entry_id)
    _set(entry, "kind", kind)
    _set(entry, "step", step)
    _set(entry, "ts", ts)
    _set(entry, "payload", payload if type(payload) is PreparedJSON else dict(payload))
    _set(entry, "attempt_id", attempt_id)
    _set(entry, "execution_key", execution_key)
    return entry


class Journal:
    """The entries a driver noted since its last commit (nothing when the run does not record).

    `kinds` keeps only entries of those kinds (None: every kind); a replay's own journal keeps
    only what its recording is derived from.
    """

    def __init__(self, recording: bool, *, kinds: frozenset[str] | None = None) -> None:
        self.recording = recording
        self.kinds = kinds
        self.pending: list[JournalDraft] = []

    def keeps(self, kind: str) -> bool:
        """Whether a note of `kind` would be kept (its payload is worth building)."""
        return self.recording and (self.kinds is None or kind in self.kinds)

    def note(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        step: int,
        attempt_id: str | None = None,
        execution_key: str | None = None,
    ) -> None:
        """Queue an entry for the next commit."""
        if self.recording and (self.kinds is None or kind in self.kinds):
            assert kind in KINDS, kind
            self.pending.append(_draft(kind, payload, step, attempt_id, execution_key))

    def for_commit(
        self, events: Sequence[EventDraft], step: int, checkpoint: Mapping[str, Any] | None
    ) -> list[JournalDraft]:
        """The entries of the next commit: the notes, copies of its events, its checkpoint.

        Copies and the checkpoint are added to the notes once, so a retried commit sends the
        very same entries (same ids).
        """
        if not self.recording:
            return []
        if self.keeps("event"):
            for event in events:
                self.note("event", {"event": event.kind, "data": dict(event.data)}, step=step)
        if checkpoint is not None:
            self.note("checkpoint", checkpoint, step=step)
        return list(self.pending)

    def committed(self, entries: Sequence[JournalDraft]) -> None:
        """These notes (the first ones) are in the store; later ones wait for the next commit."""
        del self.pending[: len(entries)]


async def write_with_retries(write: Callable[[], Awaitable[T]], *, what: str, journaled: bool) -> T:
    """Run `write`; when it carries journal entries, retry a failed one, then `RecordingError`.

    A stale fencing token is never retried (another worker drives the run now): its
    `StoreError` is raised as it is, as is any failure of a write without journal entries.
    """
    delays = RETRY_DELAYS if journaled else ()
    for delay in (*delays, None):
        try:
            return await write()
        except StoreError as exc:
            if exc.stale or not journaled:
                raise
            if delay is None:
                raise RecordingError(
                    f"the flight recorder could not write the journal of {what} after "
                    f"{len(delays) + 1} attempts; the run stopped at this boundary (nothing "
                    f"after it ran): {exc}"
                ) from exc
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
