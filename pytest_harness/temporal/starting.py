"""A new Temporal run's first snapshot: what its `HarnessRun` workflow starts from.

The workflow holds the run (DESIGN §14); the client that starts it writes its first state:
the record (task, input, principal, tenant, labels, session), status `running`, an empty
run state, the `run_started` event and, for a run that records, the journal's `run.started`
entry, whose payload (`runtime.journal.started_payload`) is the one a local run journals.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pytest_harness.runtime.journal import draft
from pytest_harness.runtime.results import RunStatus
from pytest_harness.runtime.state import RunState
from pytest_harness.temporal.segment import journal_dict

__all__ = ["first_snapshot"]


def first_snapshot(
    run_id: str, session_id: str, started: Mapping[str, Any], *, record: bool
) -> dict[str, Any]:
    """A new run's snapshot, as its workflow starts (its journal: the `run.started` entry)."""
    now = time.time()
    journal = []
    if record:
        journal.append({**journal_dict(draft("run.started", started, step=0)), "seq": 1})
    return {
        "run_id": run_id,
        "session_id": session_id,
        "task": started["task"],
        "tenant": started["tenant"],
        "principal": started["principal"],
        "input": started["input"],
        "labels": started["labels"],
        "record": record,
        "journal": journal,
        "status": RunStatus.RUNNING.value,
        "state": RunState().to_dict(),
        "control": None,
        "approvals": [],
        "events": [{"type": "run_started", "data": {"task": started["task"]}}],
        "created_at": now,
        "updated_at": now,
    }
