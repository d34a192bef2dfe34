"""What a model provider receives and returns, and the protocol it implements.

Providers import this module and nothing of the run loop: the loop imports providers, never
the reverse.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from pytest_harness.jsonfast import encoder

if TYPE_CHECKING:
    from pytest_harness.errors import ModelError

__all__ = [
    "Message",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "ProposedCall",
    "TokenUsage",
    "ToolSchema",
    "canonical_json",
    "content_digest",
    "estimate_request_tokens",
    "estimate_tokens",
    "text_digest",
]


class Message(TypedDict, total=False):
    """One message of the conversation, in a provider-neutral form.

    `role` is `user`, `assistant` or `tool`. An assistant message may carry `tool_calls`
    (`[{"id", "name", "args"}]`) and the provider's `thinking` blocks (sent back to the provider
    unchanged, signatures included); a tool message answers one by `tool_call_id`.
    """

    role: str
    content: str | None
    tool_calls: list[dict[str, Any]]
    tool_call_id: str
    name: str
    thinking: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """A tool as the model sees it: name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The schema as plain JSON, as a request's content, a journal and a recording keep it.

        Key order counts: request digests and stored texts are of this dict's encoding.
        """
        return {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One model call: the system prompt, the conversation so far and the tools on offer.

    `turn` counts the turns this run has already taken with this model (0 for its first),
    across processes, so a scripted model continues where a resumed run stopped.
    """

    task: str
    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...]
    run_id: str
    turn: int
    input: str
    attempt_id: str = ""
    on_text: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    """Streaming providers call this with each piece of answer text as it arrives."""
    on_first_event: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    """Providers that see the reply start (an HTTP response's first byte, a stream's first
    event) call this then, so the run can hold the model to its `first_event_timeout`. A
    provider that never calls it is timed to its first `on_text` piece or its answer."""

    def content(self) -> dict[str, Any]:
        """The request as plain JSON: what a recording keeps and a replay compares."""
        return {
            "system": self.system,
            "messages": [dict(m) for m in self.messages],
            "tools": [t.to_dict() for t in self.tools],
        }

    def digest(self) -> str:
        """`sha256:` of the canonical JSON of `content()`: equal requests, equal digests."""
        return content_digest(self.content())

    def describe(self) -> str:
        """A short description of the request for error messages."""
        last = self.messages[-1] if self.messages else None
        if last is None:
            return "(no messages)"
        content = last.get("content") or ""
        if last.get("role") == "tool":
            return f"tool result for {last.get('name')}: {content[:80]!r}"
        return f"{last.get('role')}: {content[:80]!r}"


@dataclass(slots=True, unsafe_hash=True)  # not frozen: built per run, never changed
class TokenUsage:
    """Tokens one model answer cost."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(slots=True, unsafe_hash=True)  # not frozen: built per run, never changed
class ProposedCall:
    """A tool call the model asks for."""

    id: str
    name: str
    args: Mapping[str, Any]


@dataclass(slots=True, kw_only=True, unsafe_hash=True)  # not frozen: built per run, never changed
class ModelResponse:
    """A model's answer: text, tool calls, or both.

    `thinking` holds the provider's reasoning blocks as it sent them (Anthropic's signed
    `thinking` and `redacted_thinking`), to be sent back unchanged with the assistant turn.
    `incomplete` says why the answer was cut short (`max_tokens`, `context_window`), or is
    None for a whole answer.
    """

    text: str | None = None
    calls: tuple[ProposedCall, ...] = ()
    usage: TokenUsage = field(default_factory=TokenUsage)
    thinking: tuple[Mapping[str, Any], ...] = ()
    incomplete: str | None = None


class ModelProvider(Protocol):
    """Something that answers model requests.

    `live` providers call out of the process; they are blocked where live calls are not
    allowed (under pytest without `--harness-allow-live`).
    """

    name: str
    live: bool

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request, or raise `ModelError` (`.kind` says whether to retry)."""
        ...

    def retry_delay(self, attempt: int, error: ModelError | None = None) -> float:
        """Seconds to wait before retry number `attempt` (1-based), after `error` if given.

        Live providers honour the wait the server asked for (`error.retry_after`).
        """
        ...


def estimate_tokens(text: str) -> int:
    """A rough token count (four characters a token) for providers that report none."""
    return max(1, (len(text) + 3) // 4) if text else 0


def estimate_request_tokens(request: ModelRequest) -> int:
    """A rough token count of a request's system prompt and messages."""
    size = len(request.system) + sum(len(m.get("content") or "") for m in request.messages)
    return max(1, (size + 3) // 4)


canonical_json: Callable[[Any], str] = encoder(sort_keys=True, ensure_ascii=False)
"""The canonical JSON of `content`: sorted keys, no spaces, text as it is (not escaped); the
text of `json.dumps(…, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`."""


def text_digest(canonical: str) -> str:
    """`sha256:` of a canonical JSON text."""
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def content_digest(content: Any) -> str:
    """`sha256:` of the canonical JSON of `content` (sorted keys, no spaces)."""
    return text_digest(canonical_json(content))
