"""Every error pytest-harness raises on purpose.

```
HarnessError
├── SpecError               harness.yaml, a script or a baseline is wrong (file:line key: message)
├── UnknownRun              no run with that id in the store
├── UnknownTask             the spec has no task of that name
├── UnknownExecutionKey     the run has no tool call with that execution key
├── ResolutionError         a decision that does not fit the state (second answer, unknown approval)
├── ApprovalDenied          the approver may not answer this approval
├── SessionDenied           a run may not join that session (another tenant's)
├── RunBusy                 another worker holds the run's lease
├── ScriptExhausted         a scripted model was asked for a turn its script does not have
├── LiveModelBlocked        a live model provider was called where live calls are not allowed
├── ModelError              a model provider failed (rate limit, server error, timeout, refusal)
│   └── ModelTruncated      an answer was cut at its token limit (`on_truncation: fail`)
├── StoreError              the store cannot do what was asked (locked, stale lease, full disk)
├── ArchiveError            a recording file or `.hx` archive is malformed or over a limit
├── ReplayDiverged          a replay asked for something its recording lacks
├── RecordingError          the flight recorder cannot record (a journal write keeps failing)
└── RunError                raised by `RunResult.raise_for_status()`; carries `.result`
    ├── RunFailed
    ├── RunAwaitingInput
    ├── RunRefused
    ├── RunLimitReached
    └── RunCancelled
```

Every message says what was wrong and with what value, so that one line in a log is enough.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_harness.runtime.results import RunResult

__all__ = [
    "ApprovalDenied",
    "ArchiveError",
    "ExecutionError",
    "HarnessError",
    "LiveModelBlocked",
    "ModelError",
    "ModelTruncated",
    "PayloadTooLarge",
    "RecordingError",
    "ReplayDiverged",
    "ResolutionError",
    "RunAwaitingInput",
    "RunBusy",
    "RunCancelled",
    "RunError",
    "RunFailed",
    "RunLimitReached",
    "RunRefused",
    "ScriptExhausted",
    "SessionDenied",
    "SpecError",
    "StoreError",
    "UnknownExecutionKey",
    "UnknownRun",
    "UnknownTask",
]


class HarnessError(Exception):
    """Base class of every error pytest-harness raises on purpose."""


class SpecError(HarnessError):
    """A spec, script or baseline file is malformed or inconsistent.

    The message reads `file:line key.path: what is wrong`; the parts are on `.file`, `.line`,
    `.key` and `.reason` for tools that want them separately.
    """

    def __init__(
        self,
        reason: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        self.reason = reason
        self.file = file
        self.line = line
        self.key = key
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.file:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.key:
            where = f"{where} {self.key}" if where else self.key
        return f"{where}: {self.reason}" if where else self.reason


class UnknownRun(HarnessError):
    """The store holds no run with the given id."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"unknown run {run_id!r}: the store holds no run with this id")


class UnknownTask(HarnessError):
    """The spec has no task of the given name."""

    def __init__(self, task: str, known: list[str]) -> None:
        self.task = task
        self.known = known
        super().__init__(f"unknown task {task!r}{did_you_mean(task, known)}")


class UnknownExecutionKey(HarnessError):
    """The run has no tool call with the given execution key."""

    def __init__(self, run_id: str, execution_key: str) -> None:
        self.run_id = run_id
        self.execution_key = execution_key
        super().__init__(f"run {run_id} has no tool call with execution key {execution_key!r}")


class ResolutionError(HarnessError):
    """A decision that does not fit the state of the run or the tool call."""


class ApprovalDenied(HarnessError):
    """The approver may not answer this approval (missing role, self-approval, other tenant)."""


class SessionDenied(HarnessError):
    """A run may not join the session it names: the session's runs belong to another tenant.

    A session's runs share their conversation, so a run of one tenant (or of none) never joins
    a session another tenant's runs started; the message names the session and the run's
    tenant, not the session's.
    """

    def __init__(self, session_id: str, tenant: str | None) -> None:
        self.session_id = session_id
        self.tenant = tenant
        who = "without a tenant" if tenant is None else f"of tenant {tenant!r}"
        super().__init__(
            f"session {session_id!r} belongs to another tenant: a run {who} cannot join it "
            "(its conversation would be this run's history); start a new session"
        )


class RunBusy(HarnessError):
    """Another worker holds a live lease on the run."""

    def __init__(self, run_id: str, owner: str, expires_in: float) -> None:
        self.run_id = run_id
        self.owner = owner
        self.expires_in = expires_in
        super().__init__(
            f"run {run_id} is busy: worker {owner!r} holds its lease for another "
            f"{expires_in:.1f}s; retry after it expires or let that worker finish"
        )


class ScriptExhausted(HarnessError):
    """A scripted model was asked for a turn beyond the end of its script."""

    def __init__(self, *, task: str, turn: int, length: int, last_request: str) -> None:
        self.task = task
        self.turn = turn
        self.length = length
        self.last_request = last_request
        super().__init__(
            f"script exhausted: task {task!r} asked for turn {turn} but the script has "
            f"{length} turn{'s' if length != 1 else ''}; last request: {last_request}"
        )


class LiveModelBlocked(HarnessError):
    """A live model provider was called where live calls are not allowed."""

    def __init__(self, provider: str, model: str, hint: str | None = None) -> None:
        self.provider = provider
        self.model = model
        self.hint = hint
        """What to do instead, when the caller knows better than the general advice (a pytest
        test without a golden file is told the command that records one)."""
        super().__init__(
            f"live model blocked: model {model!r} uses provider {provider!r}, and live calls are "
            "not allowed here; "
            + (
                hint
                or "run offline with a scripted model (env 'offline'), or allow live "
                "calls with --harness-allow-live or pytest_harness.allow_live_models()"
            )
        )


class ModelError(HarnessError):
    """A model provider failed; `.kind` is `rate_limit`, `server`, `timeout` or `refusal`.

    Live providers add `auth` (a missing or rejected API key), `bad_request` (the server
    refused the request as malformed) and `malformed` (the answer does not fit the wire format:
    a chunk that is not JSON, an unknown content block); none of them is retried.
    `.retry_after` is the wait in seconds the server asked for (`Retry-After`), when it asked
    for one; `.usage` is `(input_tokens, output_tokens)` when the failed answer reported what it
    cost (an error inside a stream), so the run counts it against its budget.
    """

    RETRYABLE = frozenset({"rate_limit", "server", "timeout"})

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        model: str | None = None,
        retry_after: float | None = None,
        usage: tuple[int, int] | None = None,
    ) -> None:
        self.kind = kind
        self.model = model
        self.retry_after = retry_after
        self.usage = usage
        super().__init__(message)

    @property
    def retryable(self) -> bool:
        """Whether another attempt may succeed (rate limits, server errors, time-outs)."""
        return self.kind in self.RETRYABLE


class ModelTruncated(ModelError):
    """A model's answer was cut at its output token limit and the model says `on_truncation: fail`.

    `.reason` is `max_tokens` or `context_window`. The run ends `failed` with this error; the
    tokens the answer cost are counted.
    """

    def __init__(self, model: str, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__("truncated", detail, model=model)


class StoreError(HarnessError):
    """The store could not do what was asked; nothing partial was written.

    `.stale` is true when the write was fenced off by a newer lease token: retrying it cannot
    succeed (another worker drives the run now).
    """

    def __init__(self, message: str, *, stale: bool = False) -> None:
        self.stale = stale
        super().__init__(message)


class ExecutionError(HarnessError):
    """Runs cannot execute where the spec's `execution:` says (DESIGN §14).

    A Temporal server that cannot be reached, a missing `pytest-harness[temporal]` extra, a
    workflow that was ended outside pytest-harness.
    """


class PayloadTooLarge(ExecutionError):
    """A value too large for one Temporal payload: the run ends `failed` with it.

    A tool's result, a model's answer or the conversation sent to a model over the limit ends
    the run with this error instead of a payload Temporal refuses and retries forever.

    `.size` and `.limit` are in bytes of encoded JSON; `.what` names what carried it.
    """

    def __init__(self, message: str, *, size: int, limit: int, what: str) -> None:
        self.size = size
        self.limit = limit
        self.what = what
        super().__init__(message)


class ArchiveError(HarnessError):
    """A recording file or archive is malformed, of an unknown version, or over a limit."""


class ReplayDiverged(HarnessError):
    """A replay asked for something its recording lacks.

    `.expected` is what the recording holds (the recorded call, or the number of turns) and
    `.actual` what the replay asked for, so a report can show them field by field.
    """

    def __init__(self, reason: str, *, expected: Any = None, actual: Any = None) -> None:
        self.reason = reason
        self.expected = expected
        self.actual = actual
        super().__init__(reason)


class RecordingError(HarnessError):
    """A recorded run cannot write its journal: the boundary did not advance.

    Raised when a journal write still fails after retries (each retry keeps the entries' ids,
    so no boundary is written twice), or when a recording setting conflicts with the one a
    session or run saved (recording is never turned on for a run that did not record), or
    when a run that was not recorded is asked for its recording (to replay or export it).
    """


class RunError(HarnessError):
    """Raised by `RunResult.raise_for_status()` for a run that did not complete; see `.result`."""

    def __init__(self, result: RunResult) -> None:
        self.result = result
        detail = ""
        if result.error:
            detail = f": {result.error['type']}: {result.error['message']}"
        elif result.limit:
            detail = f": limit {result.limit!r} reached"
        super().__init__(f"run {result.run_id} ({result.task}) ended {result.status.value}{detail}")


class RunFailed(RunError):
    """The run failed (an error it could not recover from)."""


class RunAwaitingInput(RunError):
    """The run waits for an approval or a resolution."""


class RunRefused(RunError):
    """A guard or rule blocked the run."""


class RunLimitReached(RunError):
    """A budget or the deadline ended the run."""


class RunCancelled(RunError):
    """The run was cancelled or paused."""


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """Return ` (did you mean 'x'?)` for the closest known name, else the known names."""
    from difflib import get_close_matches

    names = sorted(known)
    close = get_close_matches(value, names, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    if names:
        return f" (known: {', '.join(names)})"
    return ""
