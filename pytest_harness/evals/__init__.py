"""Online evals (DESIGN §15): graders on ended runs, samples in the store, a report that gates.

The runtime knows this package through one narrow seam: `Harness` holds an `OnlineEvals` when
the spec declares `evals.online.graders`, tells it about each run it ends, and waits for it in
`aclose()`/`flush_evals()`. The replay gate re-grades through `evals.replay`, and the CLI's
`eval report` lives in `evals.report` and `evals.command`.
"""

from __future__ import annotations

from pytest_harness.evals.checks import GradeInput, GraderCheck, GraderError, Verdict
from pytest_harness.evals.online import Grade, Grader, OnlineEvals, sampled
from pytest_harness.store.base import Sample

__all__ = [
    "Grade",
    "GradeInput",
    "Grader",
    "GraderCheck",
    "GraderError",
    "OnlineEvals",
    "Sample",
    "Verdict",
    "sampled",
]
