"""The tape a replay plays from: recorded model answers, tool results and approval decisions.

`TapeModel` answers the k-th model request with the k-th recorded answer; `TapeTool` answers a
tool call with the recorded result for the same tool and arguments (each recorded result is
used once, in order). Neither calls out. When the replay asks for something the tape lacks,
they raise `ReplayDiverged` with what was recorded and what was asked.

A `TapeTool` applies today's tool contract first, as a live run would: arguments today's
schema rejects get the `invalid_arguments` outcome, whatever the recording says. With
`invoke=True` (a `safe` tool under `tools="safe"`) it calls the real tool instead and uses
today's result; the recorded one is set aside, and the trace shows the difference.

What the harness itself decided for a call is no answer: a recorded `invalid_arguments` whose
arguments today's schema accepts, and a call the tool's or the model's own `timeout` stopped
when that timeout is not today's, diverge (a run today would get a result the tape lacks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_harness.errors import ModelError, ReplayDiverged
from pytest_harness.jsonfast import encoder
from pytest_harness.models.base import (
    ModelRequest,
    ModelResponse,
    ProposedCall,
    TokenUsage,
)
from pytest_harness.recording.model import ApprovalDecision, Recording
from pytest_harness.redaction import redact
from pytest_harness.runtime.driver_base import _Deadline
from pytest_harness.runtime.plan import PlanTool
from pytest_harness.runtime.retrying import (
    first_event_message,
    first_event_prefix,
    timeout_message,
)
from pytest_harness.tools.context import ToolContext
from pytest_harness.tools.registry import ToolOutcome, timeout_text

__all__ = ["Tape", "TapeModel", "TapeTool", "recorded_answer"]


_key_json = encoder(sort_keys=True)
"""`json.dumps(…, sort_keys=True, separators=(",", ":"))`, made once."""


def _key(name: str, args: Mapping[str, Any]) -> str:
    """Tool calls match by name and arguments (compared as canonical, redacted JSON)."""
    return name + _key_json(redact(dict(args)))


def _raised(name: str, message: str) -> Exception:
    """An exception that reads like the one a model raised when the run was recorded.

    The run failed with that exception's type name and message; the replay fails the same way,
    without importing or constructing whatever the original type was.
    """
    kind: type[Exception] = type(name if name.isidentifier() else "ModelRaised", (Exception,), {})
    return kind(message)


def recorded_answer(answer: Mapping[str, Any], request: ModelRequest) -> ModelResponse:
    """A recorded model answer as the provider's answer; a recorded error is raised again.

    A model error (`error`) is raised as the `ModelError` it was, with what it cost and, as
    its `retry_after`, the `wait` its provider asked before a retry (`TapeModel.retry_delay`);
    anything else the model raised (`raised`: a `function` model's exception,
    `ScriptExhausted`) fails the replayed run as it failed the recorded one. A call the run's
    deadline cut (`interrupted: deadline`) is cut again: the run ends `limited` there.
    """
    if answer.get("interrupted") == "deadline":
        raise _Deadline
    if "raised" in answer:
        raise _raised(str(answer["raised"]), str(answer.get("message") or ""))
    usage = answer.get("usage") or {}
    if "error" in answer:
        raise ModelError(
            str(answer["error"]),
            str(answer.get("message") or f"recorded {answer['error']} error"),
            model=request.model,
            usage=(
                (int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)))
                if usage
                else None
            ),
            retry_after=float(answer["wait"]) if answer.get("wait") is not None else None,
        )
    incomplete = answer.get("incomplete")
    return ModelResponse(
        text=answer.get("text"),
        calls=tuple(
            ProposedCall(id=str(c["id"]), name=str(c["name"]), args=dict(c.get("args") or {}))
            for c in answer.get("calls") or ()
        ),
        usage=TokenUsage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))),
        # sent back with the assistant turn exactly as recorded; not part of any decision
        thinking=tuple(dict(b) for b in answer.get("thinking") or ()),
        incomplete=str(incomplete) if incomplete else None,
    )


class Tape:
    """What a recording can answer, and how much of it a replay used."""

    def __init__(
        self,
        recording: Recording,
        *,
        deadline: float | None = None,
        timeouts: Mapping[str, float | None] | None = None,
        first_event_timeouts: Mapping[str, float | None] | None = None,
    ) -> None:
        self.recording = recording
        self.deadline = deadline
        """Today's deadline of the task: a recorded call it cut is cut again only with one."""
        self.timeouts = dict(timeouts or {})
        """Today's `timeout` of each model of the task, by name."""
        self.first_event_timeouts = dict(first_event_timeouts or {})
        """Today's `first_event_timeout` of each model of the task, by name."""
        self.turns = recording.model_turns
        self.turns_used = 0
        self.requests = 0
        self._tools: dict[str, list[ToolOutcome]] = {}
        for result in recording.tool_results:
            outcome = ToolOutcome.from_dict(result.outcome)
            self._tools.setdefault(_key(result.name, result.args), []).append(outcome)
        self._approvals: dict[str, list[ApprovalDecision]] = {}
        for decision in recording.approvals:
            self._approvals.setdefault(_key(decision.tool, decision.args), []).append(decision)

    def next_answer(self, request: ModelRequest) -> ModelResponse:
        """The recorded answer to the next model request."""
        index = self.requests
        self.requests += 1
        if index >= len(self.turns):
            raise ReplayDiverged(
                f"the replay asked for model turn {index + 1}; the recording has {len(self.turns)}",
                expected={"model_turns": len(self.turns)},
                actual={"model_turn": index + 1, "last_message": request.describe()},
            )
        turn = self.turns[index]
        if turn.answer.get("interrupted") == "deadline" and self.deadline is None:
            raise ReplayDiverged(
                f"model turn {index + 1} was cut by the run's deadline when recorded; today's "
                "task has no deadline, so a run today waits for an answer the recording does "
                "not have",
                expected={"model_turn": index + 1, "interrupted": "deadline"},
                actual={"model_turn": index + 1, "deadline": None},
            )
        self._check_timeout(index, turn.answer, request.model)
        self.turns_used += 1
        return recorded_answer(turn.answer, request)

    def _check_timeout(self, index: int, answer: Mapping[str, Any], model: str) -> None:
        """Diverge at a call its model's `timeout` or `first_event_timeout` cut, not today's.

        The recording has no answer the call would have got with more time: whether a run
        today gets one, and which, it cannot say. A provider's own timeout errors (another
        message) are played back as they are.
        """
        if answer.get("error") != "timeout":
            return
        self._check_first_event(index, str(answer.get("message") or ""), model)
        if model not in self.timeouts:
            return
        message, today = str(answer.get("message") or ""), self.timeouts[model]
        ours = timeout_message(model, today)
        if message == ours or not message.startswith(ours.rpartition(" within ")[0] + " within "):
            return
        raise ReplayDiverged(
            f"model turn {index + 1} timed out when recorded ({message}); today model {model}'s "
            f"timeout is {'none' if today is None else f'{today:g}s'}, so whether a run today "
            "gets an answer, and which, the recording cannot say",
            expected={"model_turn": index + 1, "error": "timeout", "message": message},
            actual={"model_turn": index + 1, "timeout": today},
        )

    def _check_first_event(self, index: int, message: str, model: str) -> None:
        """Diverge at an attempt its `first_event_timeout` stopped, when that is not today's.

        Such an attempt holds no answer: with the setting raised or removed a run today may
        get one, which the recording does not have.
        """
        prefix = first_event_prefix(model)
        if model not in self.first_event_timeouts or not message.startswith(prefix):
            return
        today = self.first_event_timeouts[model]
        if today is not None:
            ours = first_event_message(model, today, 0.0)  # without an earlier attempt's wait
            if message == ours or message.startswith(f"{ours}, "):
                return
        raise ReplayDiverged(
            f"model turn {index + 1} got no first event in time when recorded ({message}); "
            f"today model {model}'s first_event_timeout is "
            f"{'none' if today is None else f'{today:g}s'}, so whether a run today gets an "
            "answer, and which, the recording cannot say",
            expected={"model_turn": index + 1, "error": "timeout", "message": message},
            actual={"model_turn": index + 1, "first_event_timeout": today},
        )

    def tool_result(self, name: str, args: Mapping[str, Any]) -> ToolOutcome:
        """The recorded outcome of this call; `ReplayDiverged` when none is left."""
        queue = self._tools.get(_key(name, args))
        if queue:
            return queue.pop(0)
        recorded = [r for r in self.recording.tool_results if r.name == name]
        expected: dict[str, Any] | None = None
        if recorded:
            expected = {"name": name, "args": dict(recorded[0].args)}
        what = "with these arguments" if recorded else "at all"
        raise ReplayDiverged(
            f"tool call {name} was never recorded {what}",
            expected=expected,
            actual={"name": name, "args": dict(args)},
        )

    def take_tool_result(self, name: str, args: Mapping[str, Any]) -> ToolOutcome | None:
        """The recorded outcome of this call, used up, or None when there is none."""
        queue = self._tools.get(_key(name, args))
        return queue.pop(0) if queue else None

    def approval(
        self, tool: str, args: Mapping[str, Any], rule: str | None = None, *, exact: bool = False
    ) -> ApprovalDecision | None:
        """The recorded decision for this call and rule, if any (each used once).

        Unless `exact`, a decision recorded for another rule of the same call stands in when
        none was recorded for `rule` (a renamed rule); its approver is checked against today's
        rule all the same. Ask with `exact` first for every open request of the call, so a
        stand-in never takes the decision recorded for another request that is open too.
        """
        queue = self._approvals.get(_key(tool, args))
        if not queue:
            return None
        for index, decision in enumerate(queue):
            if decision.rule == rule:
                return queue.pop(index)
        return None if exact else queue.pop(0)


class TapeModel:
    """A model provider that plays the tape's answers."""

    name = "replay"
    live = False

    def __init__(self, tape: Tape) -> None:
        self.tape = tape

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The next recorded answer."""
        return self.tape.next_answer(request)

    def retry_delay(self, attempt: int, error: ModelError | None = None) -> float:
        """The wait recorded with the error (none in a recording made before waits were kept).

        The replay charges it to the retry budget and the deadline without sleeping it.
        """
        if error is not None and error.retry_after is not None:
            return error.retry_after
        return 0.0


class TapeTool:
    """A tool whose results come from the tape (or, with `invoke`, from the real tool)."""

    def __init__(self, tool: PlanTool, tape: Tape, *, invoke: bool = False) -> None:
        self.name = tool.name
        self.spec = tool.spec
        self.tool = tool
        self.tape = tape
        self.invoke_real = invoke

    async def invoke(
        self,
        args: Mapping[str, Any],
        context: ToolContext,
        *,
        overall_timeout: float | None = None,
    ) -> ToolOutcome:
        """Today's verdict on the arguments, then the recorded outcome of the same call.

        A recorded `invalid_arguments` outcome is the harness's verdict, not the tool's: when
        today's schema accepts those arguments, a run today would invoke the tool, and the
        recording has no result of it, so the replay diverges (`ReplayDiverged`).
        """
        check = getattr(self.tool, "check", None)
        if check is not None:
            rejected: ToolOutcome | None = check(args)
            if rejected is not None:
                return rejected
        if self.invoke_real:
            self.tape.take_tool_result(self.name, args)
            return await self.tool.invoke(args, context, overall_timeout=overall_timeout)
        outcome = self.tape.tool_result(self.name, args)
        today = self.spec.timeout
        if (
            outcome.kind == "timeout"
            and outcome.text.startswith(f"tool {self.name!r} timed out after ")
            and (today is None or outcome.text != timeout_text(self.name, today))
        ):
            call = {"name": self.name, "args": dict(args)}
            raise ReplayDiverged(
                f"tool call {self.name} timed out when recorded ({outcome.text}); today its "
                f"timeout is {'none' if today is None else f'{today:g}s'}, so whether a run "
                "today gets a result, and which, the recording cannot say",
                expected={**call, "outcome": "timeout", "error": outcome.text},
                actual={**call, "timeout": today},
            )
        if check is not None and outcome.kind == "invalid_arguments":
            call = {"name": self.name, "args": dict(args)}
            raise ReplayDiverged(
                f"tool call {self.name} was rejected when recorded (invalid_arguments); today's "
                "schema accepts its arguments, so a run today would invoke it, and the "
                "recording has no result of it",
                expected={**call, "outcome": "invalid_arguments", "error": outcome.text},
                actual={**call, "outcome": "invoked (its arguments are valid today)"},
            )
        return outcome
