"""Who asks and who approves.

In the lowest layer (beside `errors`): a tool's context (`tools/context.py`), the run loop,
the stores' callers and the Temporal client all hold one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Principal", "as_principal"]


@dataclass(frozen=True, slots=True)
class Principal:
    """A user or service that starts a run or answers an approval.

    `roles` decide which approvals it may answer; `tenant` scopes idempotency keys and runs.
    """

    id: str
    roles: tuple[str, ...] = ()
    tenant: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"Principal.id must be a non-empty string, got {self.id!r}")
        if isinstance(self.roles, str):
            object.__setattr__(self, "roles", (self.roles,))
        else:
            object.__setattr__(self, "roles", tuple(self.roles))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in the store and given to CEL rules."""
        return {"id": self.id, "roles": list(self.roles), "tenant": self.tenant}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Principal:
        """Rebuild a principal from `to_dict()`'s form."""
        return cls(id=data["id"], roles=tuple(data.get("roles") or ()), tenant=data.get("tenant"))


def as_principal(value: Principal | str) -> Principal:
    """Accept a `Principal` or a bare id (`"ann"` means `Principal(id="ann")`)."""
    if isinstance(value, Principal):
        return value
    if isinstance(value, str):
        return Principal(id=value)
    raise TypeError(f"principal must be a Principal or a string id, got {value!r}")
