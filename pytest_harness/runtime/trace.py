"""The trace: the ordered decisions of a run.

A decision never holds an id, a timestamp or a duration, so two traces of the same behaviour
compare equal whatever process or day produced them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, overload

__all__ = ["Decision", "DecisionKind", "ToolCall", "Trace", "decision_dict", "trace_entries"]


class DecisionKind(str, Enum):
    """What a decision is about."""

    MODEL = "model"
    RULE = "rule"
    GUARD = "guard"
    APPROVAL = "approval"
    TOOL = "tool"
    LIMIT = "limit"
    OUTPUT = "output"


def decision_dict(step: int, kind: str, key: str, detail: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON form of a decision (`Decision.to_dict`), for a writer that builds no `Decision`."""
    return {"step": step, "kind": kind, "key": key, "detail": dict(detail)}


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision of a run: at `step`, of `kind`, about `key` (a model, rule, guard, tool, …).

    `detail` holds the facts of the decision as plain JSON values.
    """

    step: int
    kind: str
    key: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """One line without the step, e.g. `rule R3 → approve (tool refund)`."""
        d = self.detail
        kind = self.kind
        if kind == "model":
            calls = d.get("calls") or []
            if calls:
                names = ", ".join(str(c.get("name")) for c in calls)
                what = f"call {names}"
            elif d.get("error"):
                what = f"error {d['error']}"
            else:
                what = f"say {_clip(str(d.get('text') or ''))!r}"
            return f"model {self.key} → {what}"
        if kind == "rule":
            # a condition that failed at run time: its CEL message, whole and as it is
            error = f" error: {d['error']}" if d.get("error") else ""
            return f"rule {self.key} → {d.get('effect')} (tool {d.get('tool')}){error}"
        if kind == "guard":
            return f"guard {self.key} → {d.get('action')} ({d.get('on')})"
        if kind == "approval":
            by = f" by {d['approver']}" if d.get("approver") else ""
            rule = f" (rule {d['rule']})" if d.get("decision") == "moot" and d.get("rule") else ""
            return f"approval {self.key} → {d.get('decision')}{by}{rule}"
        if kind == "tool":
            return f"tool {self.key} → {d.get('outcome')}"
        if kind == "limit":
            if "spent" not in d:  # a deadline: no duration is kept
                return f"limit {self.key} → {d.get('limit')} reached"
            return f"limit {self.key} → {d.get('spent')} of {d.get('limit')}"
        if kind == "output":
            return f"output → {d.get('status')}"
        return f"{kind} {self.key}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of the decision."""
        return decision_dict(self.step, self.kind, self.key, self.detail)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        """Rebuild a decision from `to_dict()`'s form."""
        return cls(
            step=int(data["step"]),
            kind=str(data["kind"]),
            key=str(data["key"]),
            detail=dict(data.get("detail") or {}),
        )


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call as the trace saw it: its arguments and its outcome."""

    step: int
    name: str
    args: Mapping[str, Any]
    outcome: str
    result: Any = None


class Trace(Sequence[Decision]):
    """The ordered decisions of a run, with helpers for assertions."""

    __slots__ = ("_built", "_source")

    def __init__(self, decisions: Sequence[Decision] = ()) -> None:
        self._built: tuple[Decision, ...] | None = tuple(decisions)
        self._source: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def _of_state(cls, data: Sequence[Mapping[str, Any]]) -> Trace:
        """The trace of a run's state, its decisions built when first read.

        Most results' traces are never read. The entries must never change: a drive appends
        whole entries to its state's trace and never changes one (`runtime.state.StateText`).
        """
        trace = cls.__new__(cls)
        trace._built = None
        trace._source = tuple(data)
        return trace

    @property
    def _decisions(self) -> tuple[Decision, ...]:
        built = self._built
        if built is None:  # `_source` is kept: a thread that reads it meanwhile builds the same
            built = self._built = tuple(Decision.from_dict(d) for d in self._source)
        return built

    @overload
    def __getitem__(self, index: int) -> Decision: ...
    @overload
    def __getitem__(self, index: slice) -> Trace: ...
    def __getitem__(self, index: int | slice) -> Decision | Trace:
        if isinstance(index, slice):
            return Trace(self._decisions[index])
        return self._decisions[index]

    def __len__(self) -> int:
        built = self._built
        return len(self._source) if built is None else len(built)

    def __iter__(self) -> Iterator[Decision]:
        return iter(self._decisions)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Trace):
            if self._built is None and other._built is None and self._source == other._source:
                return True  # equal entries build equal decisions: none need building
            return self._decisions == other._decisions
        if isinstance(other, Sequence) and not isinstance(other, str):
            return self._decisions == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(len(self))

    def __repr__(self) -> str:
        return f"Trace({list(self._decisions)!r})"

    def fired(self, rule_or_guard_id: str) -> bool:
        """Whether the rule or guard with this id matched at least once in the run."""
        return any(
            d.key == rule_or_guard_id and d.kind in ("rule", "guard") for d in self._decisions
        )

    def of_kind(self, kind: str) -> list[Decision]:
        """The decisions of one kind, in order."""
        return [d for d in self._decisions if d.kind == kind]

    def tool_calls(self, name: str | None = None) -> list[ToolCall]:
        """The tool calls that reached an outcome (ok, error, denied, declined), in order."""
        return [
            ToolCall(
                step=d.step,
                name=d.key,
                args=dict(d.detail.get("args") or {}),
                outcome=str(d.detail.get("outcome")),
                result=d.detail.get("result"),
            )
            for d in self._decisions
            if d.kind == "tool" and (name is None or d.key == name)
        ]

    def render(self) -> str:
        """The decisions as text, one per line: `step 2 rule R1 → approve (tool refund)`."""
        return "\n".join(f"step {d.step} {d.summary()}" for d in self._decisions)

    def to_list(self) -> list[dict[str, Any]]:
        """The JSON form of every decision."""
        return [d.to_dict() for d in self._decisions]

    @classmethod
    def from_list(cls, data: Sequence[Mapping[str, Any]]) -> Trace:
        """Rebuild a trace from `to_list()`'s form."""
        return cls([Decision.from_dict(d) for d in data])


def _clip(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def trace_entries(trace: Trace) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """Each decision's `(kind, key, detail)`, building no decision.

    A trace read from a state builds its decisions when first read; reading a recording's
    trace here keeps the replay's comparison of it by entries.
    """
    built = trace._built
    if built is None:
        for entry in trace._source:
            yield str(entry.get("kind")), str(entry.get("key")), entry.get("detail") or {}
    else:
        for decision in built:
            yield decision.kind, decision.key, decision.detail
