"""`ReplayReport`: how a replay differs from its recording, computed here and rendered as text.

Decisions are aligned by step, kind and key (the n-th decision with the same three on each
side); a pair whose details differ is `changed`, with a field-level diff (deepdiff). Ids,
timestamps and durations are never part of a decision, so never part of a comparison. This
module computes and renders plain text; colour belongs to the terminal renderer.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_harness.runtime.trace import Decision

__all__ = [
    "FAIL_ON",
    "DecisionChange",
    "Deferred",
    "Divergence",
    "FieldDiff",
    "ReplayReport",
    "diff_decisions",
    "diff_fields",
]

FAIL_ON = frozenset({"status", "output", "decisions", "requests"})
"""The kinds of difference a report can fail on (a divergence always fails)."""
DEFAULT_FAIL_ON = frozenset({"status", "output", "decisions"})


@dataclass(frozen=True, slots=True)
class FieldDiff:
    """One field that differs: its path (`args.amount`), the recorded and the replayed value."""

    path: str
    expected: Any
    actual: Any

    def render(self) -> str:
        """`args.amount: 250 → 300`; an error message is shown whole, as it is."""
        if self.path == "error" or self.path.endswith(".error"):
            return f"{self.path}: {_whole(self.expected)} → {_whole(self.actual)}"
        return f"{self.path}: {_show(self.expected)} → {_show(self.actual)}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"path": self.path, "expected": self.expected, "actual": self.actual}


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionChange:
    """A decision the replay added, removed, or made differently."""

    change: Literal["added", "removed", "changed"]
    step: int
    kind: str
    key: str
    expected: Decision | None = None
    actual: Decision | None = None
    fields: tuple[FieldDiff, ...] = ()

    def render(self) -> str:
        """`+ step 2 rule R3 → approve (tool refund)`, `- …`, or `~ … (field: a → b)`."""
        if self.change == "added":
            assert self.actual is not None
            return f"+ step {self.step} {self.actual.summary()}"
        if self.change == "removed":
            assert self.expected is not None
            return f"- step {self.step} {self.expected.summary()}"
        assert self.actual is not None
        detail = "; ".join(f.render() for f in self.fields[:3])
        more = f"; and {len(self.fields) - 3} more" if len(self.fields) > 3 else ""
        return f"~ step {self.step} {self.actual.summary()} ({detail}{more})"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "change": self.change,
            "step": self.step,
            "kind": self.kind,
            "key": self.key,
            "expected": None if self.expected is None else self.expected.to_dict(),
            "actual": None if self.actual is None else self.actual.to_dict(),
            "fields": [f.to_dict() for f in self.fields],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Divergence:
    """Where a replay stopped because its recording lacked something."""

    reason: str
    expected: Any = None
    actual: Any = None
    fields: tuple[FieldDiff, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "reason": self.reason,
            "expected": self.expected,
            "actual": self.actual,
            "fields": [f.to_dict() for f in self.fields],
        }


class Deferred:
    """A report field's value, made when the field is first read (`ReplayReport.replayed`).

    Only this class is deferred: any other value, callable or not, is the field's value.
    """

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayReport:
    """How a replay compares with its recording (DESIGN §6)."""

    task: str
    run_id: str | None = None
    """The recorded run, when replayed from the store."""
    source: str | None = None
    """The recording file, when replayed from one."""
    status: tuple[str, str]
    """(recorded, replayed)."""
    output: tuple[str | None, str | None]
    """(recorded, replayed)."""
    output_diff: tuple[str, ...] = ()
    """A unified diff of the outputs (empty when equal)."""
    decisions: tuple[DecisionChange, ...] = ()
    model_requests_changed: tuple[int, int] = (0, 0)
    """(changed, total) model requests of the replay, compared by digest."""
    requests_explained: tuple[str, ...] = ()
    """Which parts of the changed requests changed (`system prompt: 1 line changed`, …)."""
    prompt_diff: tuple[str, ...] = ()
    """A unified diff of the system prompt, recorded → today (empty when it is the same)."""
    model_answers_used: tuple[int, int] = (0, 0)
    """(used, total) recorded model answers."""
    divergence: Divergence | None = None
    not_regraded: tuple[str, ...] = ()
    """Online eval graders the replay did not re-grade (live judges), with their recorded
    grade; a grader that did re-grade and now fails is a changed `grader` decision."""
    replayed: Any = field(default=None, compare=False, repr=False)
    """The replay's own `Recording` (what `--update-recordings` writes), redacted. The
    replayer passes it as a `Deferred`, made when first read (most reports are never saved)."""

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name != "replayed" or type(value) is not Deferred:
            return value
        value = value.make()
        object.__setattr__(self, "replayed", value)
        return value

    @property
    def diverged(self) -> str | None:
        """Why the replay stopped, or None."""
        return None if self.divergence is None else self.divergence.reason

    @property
    def differences(self) -> frozenset[str]:
        """Which of status, output, decisions and requests differ."""
        found = set()
        if self.status[0] != self.status[1]:
            found.add("status")
        if self.output[0] != self.output[1]:
            found.add("output")
        if self.decisions:
            found.add("decisions")
        if self.model_requests_changed[0]:
            found.add("requests")
        return frozenset(found)

    @property
    def same(self) -> bool:
        """Status, output and decisions equal, and the replay did not diverge."""
        return self.divergence is None and not (self.differences & DEFAULT_FAIL_ON)

    def failed(self, fail_on: Iterable[str] = DEFAULT_FAIL_ON) -> bool:
        """Whether this report fails a build that fails on `fail_on` (a divergence always)."""
        return self.divergence is not None or bool(self.differences & frozenset(fail_on))

    @property
    def subject(self) -> str:
        """`run run_… (orders)` or `recording recordings/x.yaml (orders)`."""
        if self.source is not None:
            return f"recording {self.source} ({self.task})"
        return f"run {self.run_id} ({self.task})"

    def render(self, fail_on: Iterable[str] = DEFAULT_FAIL_ON) -> str:
        """The report as plain text (DESIGN §6).

        Its first word is `diverged`, `changed` (a difference among `fail_on`: status, output
        and decisions unless told, so a build failing on `requests` too heads its report
        `changed`) or `same`.
        """
        recorded, replayed = self.status
        if self.divergence is not None:
            head = (
                f"diverged: {self.subject} ended {recorded}; the replay stopped: "
                f"{self.divergence.reason}"
            )
        else:
            word = "changed" if self.differences & frozenset(fail_on) else "same"
            head = f"{word}: {self.subject} ended {recorded}; the replay ended {replayed}"
        lines = [head]
        if self.divergence is not None:
            if self.divergence.expected is not None:
                lines.append(f"  expected: {_show(self.divergence.expected)}")
            lines.append(f"  actual:   {_show(self.divergence.actual)}")
            lines.extend(f"    {f.render()}" for f in self.divergence.fields)
        elif recorded != replayed:
            lines.append(f"  status: {recorded} → {replayed}")
        if self.decisions:
            lines.append("  decisions:")
            lines.extend(f"    {change.render()}" for change in self.decisions)
        if self.divergence is None:
            if self.output_diff:
                lines.append("  output: changed")
                lines.extend(f"    {line}" for line in self.output_diff)
            else:
                lines.append("  output: same")
        changed, total = self.model_requests_changed
        used, recorded_total = self.model_answers_used
        explain = bool(changed) and total != recorded_total  # two totals side by side
        if changed:
            counted = f" (of the replay's {total} requests)" if explain else ""
            why = f" ({'; '.join(self.requests_explained)})" if self.requests_explained else ""
            lines.append(f"  model requests changed: {changed} of {total}{counted}{why}")
            if self.prompt_diff:
                lines.append("  system prompt:")
                lines.extend(f"    {line}" for line in self.prompt_diff)
        counted = f" (of the {recorded_total} recorded)" if explain else ""
        lines.append(f"  model answers used: {used} of {recorded_total}{counted}")
        lines.extend(f"  not re-graded: {note}" for note in self.not_regraded)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, for CI dashboards."""
        return {
            "task": self.task,
            "run_id": self.run_id,
            "source": self.source,
            "same": self.same,
            "differences": sorted(self.differences),
            "status": {"recorded": self.status[0], "replayed": self.status[1]},
            "output": {
                "recorded": self.output[0],
                "replayed": self.output[1],
                "diff": list(self.output_diff),
            },
            "decisions": [d.to_dict() for d in self.decisions],
            "model_requests_changed": {
                "changed": self.model_requests_changed[0],
                "total": self.model_requests_changed[1],
                "parts": list(self.requests_explained),
                "prompt_diff": list(self.prompt_diff),
            },
            "model_answers_used": {
                "used": self.model_answers_used[0],
                "total": self.model_answers_used[1],
            },
            "diverged": None if self.divergence is None else self.divergence.to_dict(),
            "not_regraded": list(self.not_regraded),
        }


def output_diff(recorded: str | None, replayed: str | None) -> tuple[str, ...]:
    """`- recorded` / `+ replayed` lines where the outputs differ; `(none)` stands for None."""
    if recorded == replayed:
        return ()
    before = (recorded if recorded is not None else "(none)").splitlines() or [""]
    after = (replayed if replayed is not None else "(none)").splitlines() or [""]
    lines = difflib.unified_diff(before, after, lineterm="", n=2)
    return tuple(
        f"{line[0]} {line[1:]}" for line in lines if not line.startswith(("---", "+++", "@@"))
    )


def diff_decisions(
    recorded: Sequence[Decision], replayed: Sequence[Decision]
) -> tuple[DecisionChange, ...]:
    """Align two traces by (step, kind, key, n-th occurrence) and list what differs."""
    left = _keyed(recorded)
    right = _keyed(replayed)
    changes: list[tuple[tuple[int, int, int], DecisionChange]] = []
    for position, (key, expected) in enumerate(left.items()):
        actual = right.get(key)
        step, kind, name, _ = key
        if actual is None:
            change = DecisionChange(
                change="removed", step=step, kind=kind, key=name, expected=expected
            )
            changes.append(((step, 0, position), change))
        elif (replayed_detail := _comparable(expected, actual)) != (
            recorded_detail := _recorded_detail(expected)
        ):
            fields = diff_fields(recorded_detail, replayed_detail)
            change = DecisionChange(
                change="changed",
                step=step,
                kind=kind,
                key=name,
                expected=expected,
                actual=actual,
                fields=fields,
            )
            changes.append(((step, 0, position), change))
    for position, (key, actual) in enumerate(right.items()):
        if key not in left:
            step, kind, name, _ = key
            change = DecisionChange(change="added", step=step, kind=kind, key=name, actual=actual)
            changes.append(((step, 1, position), change))
    # within a step: what the replay added first (it explains what it removed), in order
    changes.sort(key=lambda item: (item[0][0], -item[0][1], item[0][2]))
    return tuple(change for _, change in changes)


_ASKED = ("approvers", "self_approve")
"""What an `approve` rule's decision says about who may answer; recordings made before it did
lack both keys, and are compared without them until they are recorded again."""


_KEPT_SINCE = {
    "guard": ("left", "config", "seen", "left_text"),
    "output": ("error", "message", "message_digest"),
}
"""Detail keys decisions of a kind gained after goldens were first written (a `redact` guard's
`left` since 2026-12-06, a built-in guard's `config`, `seen` and `left_text` on text that
redaction hides, `runtime.guard_memory`, since 2026-12-07; an `output`'s `error` since
2026-12-05, a refusal's `message` since 2026-12-06, the digest of a refusal message redaction
changed, `recording.kept`, since 2026-12-06): a recorded decision without one is compared
without it."""


def _comparable(recorded: Decision, replayed: Decision) -> dict[str, Any]:
    """The replayed decision's detail as the recorded one can be compared with.

    A key a decision of its kind gained after goldens were first written (`_ASKED`,
    `_KEPT_SINCE`) is compared only when the recorded decision has it, until the golden is
    recorded again.
    """
    detail = dict(replayed.detail)
    if recorded.kind == "rule" and "approvers" not in recorded.detail:
        for key in _ASKED:
            detail.pop(key, None)
    else:
        for key in _KEPT_SINCE.get(recorded.kind, ()):
            if key not in recorded.detail:
                detail.pop(key, None)
    return detail


def _recorded_detail(recorded: Decision) -> Mapping[str, Any]:
    """The recorded decision's detail as today's are made.

    A deadline's decision kept the seconds the run took (`spent`) in recordings made before
    2026-12-05; a duration is never compared (DESIGN §6), so it is left out.
    """
    if recorded.kind == "limit" and recorded.key == "deadline" and "spent" in recorded.detail:
        return {k: v for k, v in recorded.detail.items() if k != "spent"}
    return recorded.detail


def _keyed(decisions: Sequence[Decision]) -> dict[tuple[int, str, str, int], Decision]:
    seen: dict[tuple[int, str, str], int] = {}
    keyed = {}
    for decision in decisions:
        base = (decision.step, decision.kind, decision.key)
        n = seen.get(base, 0)
        seen[base] = n + 1
        keyed[(*base, n)] = decision
    return keyed


_PATH_PART = re.compile(r"\['([^']*)'\]|\[(\d+)\]")


def diff_fields(expected: Any, actual: Any) -> tuple[FieldDiff, ...]:
    """Field-level differences between two JSON values (via deepdiff), in path order."""
    from deepdiff import DeepDiff

    diff = DeepDiff(expected, actual, verbose_level=2, view="tree")
    found: list[FieldDiff] = []
    for kind in sorted(diff):
        for level in diff[kind]:
            path = _dotted(level.path())
            before = level.t1 if not _is_missing(level.t1) else None
            after = level.t2 if not _is_missing(level.t2) else None
            found.append(FieldDiff(path=path, expected=before, actual=after))
    found.sort(key=lambda f: f.path)
    return tuple(found)


def _is_missing(value: Any) -> bool:
    return type(value).__name__ == "NotPresent"


def _dotted(path: str) -> str:
    """`root['args']['amount'][0]` → `args.amount[0]`."""
    out = ""
    for name, index in _PATH_PART.findall(path.removeprefix("root")):
        if index:
            out += f"[{index}]"
        else:
            out += f".{name}" if out else name
    return out or "(value)"


def _whole(value: Any) -> str:
    """A value as it is: a string unquoted and uncut (CEL and tool errors read as written)."""
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else _show(value, width=10_000)


def _show(value: Any, width: int = 80) -> str:
    if isinstance(value, Mapping):
        text = "{" + ", ".join(f"{k}: {_show(v, width)}" for k, v in value.items()) + "}"
    elif isinstance(value, list | tuple):
        text = "[" + ", ".join(_show(v, width) for v in value) + "]"
    elif value is None:
        text = "(none)"
    else:
        text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"
