"""The schema of a golden file's trace decisions (`recording.golden` checks files with it).

A decision's detail is the run's own JSON and is kept as it was written (its keys' order too,
so a file re-written from it is the same bytes). Only the keys a replay acts on are checked: a
guard decision's kept keys (`runtime.guard_memory`), which a replay takes in place of checking
again, must be what the runtime writes, or the file is refused naming the key and its value:
`config` and `seen` digests, both or neither, and a `redact` guard's `left_text` with them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator

from pytest_harness.runtime.guard_memory import CONFIG, KEPT, LEFT_TEXT, SEEN

__all__ = ["TraceDecision"]

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _digest(value: str) -> str:
    if _DIGEST.fullmatch(value) is None:
        raise ValueError("expected a digest, 'sha256:' and 64 lowercase hex digits")
    return value


_Digest = Annotated[str, AfterValidator(_digest)]


class _GuardDetail(BaseModel):
    """The kept keys of a guard decision's detail; its other keys are not checked here."""

    model_config = ConfigDict(extra="allow", strict=True)
    config: _Digest | None = None
    seen: _Digest | None = None
    left_text: str | None = None


class TraceDecision(BaseModel):
    """One decision of a golden file's trace."""

    model_config = ConfigDict(extra="forbid")
    step: int
    kind: str
    key: str
    detail: dict[str, Any] = {}

    @field_validator("detail")
    @classmethod
    def _kept_guard_keys(cls, detail: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """A guard decision's kept keys are well formed and come together (the detail as given)."""
        if info.data.get("kind") != "guard" or not any(k in detail for k in KEPT):
            return detail
        _GuardDetail.model_validate(detail)  # its errors name the key: `detail.config`
        missing = [key for key in (CONFIG, SEEN) if detail.get(key) is None]
        if missing:
            raise ValueError(
                f"a guard decision keeps `{CONFIG}` and `{SEEN}` together (with "
                f"`{LEFT_TEXT}`): expected both, got a mapping without `{missing[0]}`"
            )
        if detail.get("action") == "redact" and detail.get(LEFT_TEXT) is None:
            raise ValueError(
                f"a redact guard's kept decision holds `{LEFT_TEXT}`, the text it left: "
                f"got a mapping without it"
            )
        return detail
