"""The runs of a session on Temporal, found where Temporal is strongly consistent.

Temporal's list of workflows (its visibility) is eventually consistent: a run that ended a
moment ago may not be listed yet, so a session's next run could miss its conversation. Instead,
the runs of a session take *slots*: the n-th run of session S on task queue Q has the workflow
id `slot_id(Q, S, n)`, derived from those three, and a workflow id is read by `describe()`,
which is strongly consistent. A session's runs are therefore found by reading slots 1, 2, …
until the first free one, which the next run takes; two runs started at once in one session
cannot take the same slot (the id is never reused: the second start is refused and takes the
next slot). Runs started with an idempotency key keep the id derived from their key and no
slot; the visibility list still finds them, a moment later.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from pytest_harness.models.base import Message
from pytest_harness.runtime.results import RunStatus

__all__ = ["place", "session_history", "session_slots", "slot_id"]


def slot_id(queue: str, session_id: str, n: int) -> str:
    """The run id of the `n`-th run (from 1) of session `session_id` on task queue `queue`."""
    name = f"pytest-harness:{queue}:{session_id}:{n}"
    return f"run_{uuid.uuid5(uuid.NAMESPACE_URL, name).hex}"


async def session_slots(client: Client, queue: str, session_id: str) -> tuple[list[str], int]:
    """The run ids in the session's taken slots, in order, and the number of the first free slot.

    `RPCError` other than not-found (an unreachable server) is raised as it is.
    """
    taken: list[str] = []
    while True:
        run_id = slot_id(queue, session_id, len(taken) + 1)
        try:
            await client.get_workflow_handle(run_id).describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return taken, len(taken) + 1
            raise
        taken.append(run_id)


async def session_history(
    client: Client,
    queue: str,
    session_id: str,
    taken: Sequence[str],
    snapshot: Callable[[str], Awaitable[dict[str, Any] | None]],
) -> list[Message]:
    """The messages of the session's completed runs, oldest first.

    The runs in its `taken` slots, and the completed runs of the session that the visibility
    list shows (runs started with an idempotency key have no slot). `snapshot` reads a run
    (None: its workflow failed or was ended outside the harness).
    """
    ids = dict.fromkeys(taken)
    query = (
        f"WorkflowType = 'HarnessRun' AND TaskQueue = '{queue}' AND ExecutionStatus = 'Completed'"
    )
    async for wf in client.list_workflows(query):
        if wf.id not in ids and (await wf.memo()).get("session") == session_id:
            ids[wf.id] = None
    earlier = []
    for run_id in ids:
        snap = await snapshot(run_id)
        if snap is not None and snap["status"] == RunStatus.COMPLETED.value:
            earlier.append(snap)
    earlier.sort(key=lambda snap: float(snap["created_at"]))
    return [m for snap in earlier for m in snap["state"].get("messages") or ()]


async def place(
    client: Client,
    queue: str,
    session_id: str,
    *,
    idempotency_key: str | None,
    new: bool,
    snapshot: Callable[[str], Awaitable[dict[str, Any] | None]],
) -> tuple[str, list[Message]]:
    """A new run's id and its session's earlier conversation.

    The run takes the session's first free slot (slot 1 of a `new` session, read nothing);
    with an idempotency key, its id is derived from the key instead. `RPCError` when the
    server cannot be read.
    """
    taken: list[str] = []
    free = 1
    if not new:
        taken, free = await session_slots(client, queue, session_id)
    if idempotency_key is not None:
        run_id = f"run_{uuid.uuid5(uuid.NAMESPACE_URL, idempotency_key).hex}"
    else:
        run_id = slot_id(queue, session_id, free)
    if new:
        return run_id, []
    return run_id, await session_history(client, queue, session_id, taken, snapshot)
