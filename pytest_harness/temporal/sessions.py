"""The runs of a session on Temporal, found where Temporal is strongly consistent.

Temporal's list of workflows (its visibility) is eventually consistent: a run that ended a
moment ago may not be listed yet, so a session's next run could miss its conversation. Instead,
the runs of a session take *slots*: the n-th run of session S on task queue Q has the workflow
id `slot_id(Q, S, n)`, derived from those three, and a workflow id is read by `describe()`,
which is strongly consistent. A session's runs are therefore found by reading slots 1, 2, …
until the first free one, which the next run takes; two runs started at once in one session
cannot take the same slot (the id is never reused: the second start is refused and takes the
next slot). Runs started with an idempotency key keep the id derived from their tenant, task
and key (`keyed_id`) and no slot; the visibility list still finds them, a moment later.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from pytest_harness.errors import SessionDenied
from pytest_harness.models.base import Message
from pytest_harness.runtime.results import RunStatus

__all__ = ["keyed_id", "place", "session_history", "session_slots", "slot_id"]


def slot_id(queue: str, session_id: str, n: int) -> str:
    """The run id of the `n`-th run (from 1) of session `session_id` on task queue `queue`."""
    name = f"pytest-harness:{queue}:{session_id}:{n}"
    return f"run_{uuid.uuid5(uuid.NAMESPACE_URL, name).hex}"


async def session_slots(
    client: Client, queue: str, session_id: str, tenant: str | None
) -> tuple[list[str], int]:
    """The run ids in the session's taken slots, in order, and the number of the first free slot.

    `SessionDenied` when a run in a slot belongs to another tenant than `tenant` (its memo says
    so). `RPCError` other than not-found (an unreachable server) is raised as it is.
    """
    taken: list[str] = []
    while True:
        run_id = slot_id(queue, session_id, len(taken) + 1)
        try:
            described = await client.get_workflow_handle(run_id).describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return taken, len(taken) + 1
            raise
        _check_tenant(await described.memo(), session_id, tenant)
        taken.append(run_id)


def _tenant(memo: Mapping[str, Any]) -> str | None:
    """The tenant of the run whose start `memo` describes.

    A run of no tenant has no `tenant` in its memo: Temporal drops a memo value that is null.
    """
    tenant = memo.get("tenant")
    return tenant if isinstance(tenant, str) else None


def _check_tenant(memo: Mapping[str, Any], session_id: str, tenant: str | None) -> None:
    """`SessionDenied` when the run whose start `memo` describes is not of `tenant`."""
    if _tenant(memo) != tenant:
        raise SessionDenied(session_id, tenant)


async def session_history(
    client: Client,
    queue: str,
    session_id: str,
    taken: Sequence[str],
    snapshot: Callable[[str], Awaitable[dict[str, Any] | None]],
    tenant: str | None,
) -> list[Message]:
    """The messages of the session's completed runs, oldest first.

    The runs in its `taken` slots, and the completed runs of the session that the visibility
    list shows (runs started with an idempotency key have no slot). `snapshot` reads a run
    (None: its workflow failed or was ended outside the harness). `SessionDenied` when one of
    those the list shows belongs to another tenant than `tenant`.
    """
    ids = dict.fromkeys(taken)
    query = (
        f"WorkflowType = 'HarnessRun' AND TaskQueue = '{queue}' AND ExecutionStatus = 'Completed'"
    )
    async for wf in client.list_workflows(query):
        memo = await wf.memo()
        if wf.id not in ids and memo.get("session") == session_id:
            _check_tenant(memo, session_id, tenant)
            ids[wf.id] = None
    earlier = []
    for run_id in ids:
        snap = await snapshot(run_id)
        if snap is not None and snap["status"] == RunStatus.COMPLETED.value:
            earlier.append(snap)
    earlier.sort(key=lambda snap: float(snap["created_at"]))
    return [m for snap in earlier for m in snap["state"].get("messages") or ()]


async def keyed_id(client: Client, tenant: str | None, task: str, key: str) -> str:
    """The run id of idempotency key `key` for runs of `task` by `tenant`.

    Derived from the three, so another tenant's (or task's) run with the same key is never
    returned. A run an earlier version started with the key keeps the id it derived from the
    key alone: that id is used when its run's memo names the same tenant and task, so a retry
    across an upgrade finds its run instead of starting a second one.
    """
    name = json.dumps(["pytest-harness:idempotency", tenant, task, key])
    derived = f"run_{uuid.uuid5(uuid.NAMESPACE_URL, name).hex}"
    earlier = f"run_{uuid.uuid5(uuid.NAMESPACE_URL, key).hex}"
    try:
        described = await client.get_workflow_handle(earlier).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return derived
        raise
    memo = await described.memo()
    return earlier if _tenant(memo) == tenant and memo.get("task") == task else derived


async def place(
    client: Client,
    queue: str,
    session_id: str,
    *,
    idempotency_key: str | None,
    new: bool,
    snapshot: Callable[[str], Awaitable[dict[str, Any] | None]],
    tenant: str | None,
    task: str,
) -> tuple[str, list[Message]]:
    """A new run's id and its session's earlier conversation.

    The run takes the session's first free slot (slot 1 of a `new` session, read nothing);
    with an idempotency key, its id is `keyed_id`'s instead. `SessionDenied` when the
    session's runs belong to another tenant than `tenant`; `RPCError` when the server cannot
    be read.
    """
    taken: list[str] = []
    free = 1
    if not new:
        taken, free = await session_slots(client, queue, session_id, tenant)
    if idempotency_key is not None:
        run_id = await keyed_id(client, tenant, task, idempotency_key)
    else:
        run_id = slot_id(queue, session_id, free)
    if new:
        return run_id, []
    return run_id, await session_history(client, queue, session_id, taken, snapshot, tenant)
