"""Online evals of Temporal runs (DESIGN §15): which runs are graded, and waiting for grades.

A run on Temporal is graded by a worker, in the `harness_grade` activity its workflow runs
once the run has ended (the run's status is final before it starts, so nothing waits for it),
and its samples go to the `state:` store, where local runs' samples go and where `samples()`
and `pytest-harness eval report` read them. The client that starts the run decides whether it
is graded (`graded`: the same decision as locally, sampled by run id and a grader for its
task) and puts the answer in the workflow's configuration, so the run is graded once, whoever
drives or answers it, and a grade retried after a worker died is stored once (one sample per
run and grader). `PendingGrades` keeps the runs a harness started or answered, so
`flush_evals()` can wait until the ended ones are graded: a run's workflow closes once its
samples are stored.
"""

from __future__ import annotations

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError

from pytest_harness.evals.online import OnlineEvals
from pytest_harness.runtime.harness_base import EndedRuns
from pytest_harness.runtime.results import RunStatus

__all__ = ["PendingGrades", "graded"]


def graded(evals: EndedRuns | None, task: str, run_id: str) -> bool:
    """Whether the run `run_id` of `task` is graded by the online evals `evals`."""
    return isinstance(evals, OnlineEvals) and evals.wants(task, run_id)


class PendingGrades:
    """The graded runs a harness started or answered whose grades it has not waited for."""

    def __init__(self) -> None:
        self.runs: set[str] = set()

    def note(self, run_id: str) -> None:
        """Wait for the grades of `run_id` at the next `flush` (once the run has ended)."""
        self.runs.add(run_id)

    async def flush(self, client: Client) -> None:
        """Wait until every noted run that has ended is graded; keep those still under way."""
        for run_id in sorted(self.runs):
            handle = client.get_workflow_handle(run_id)
            try:
                described = await handle.describe()
                if described.status is WorkflowExecutionStatus.RUNNING:
                    snap = await handle.query("snapshot", result_type=dict)
                    if not RunStatus(snap["status"]).ended:
                        continue  # graded when it ends: a later flush waits for it
                    await handle.result()  # the workflow closes once the grades are stored
            except (RPCError, WorkflowFailureError):
                pass  # gone or failed on a worker: no grade to wait for
            self.runs.discard(run_id)
