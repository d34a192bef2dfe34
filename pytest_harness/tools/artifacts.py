"""`Artifact`: bytes a tool produces (a PDF, an image, a CSV), kept by the store by SHA-256.

A tool returns one (alone, or inside a list or dict it returns), or attaches one with
`current_tool_context().attach(...)`. The run's payloads never carry the bytes: they carry a
reference, `{"artifact": "artifact:sha256:<hex>", "media_type", "name", "size"}`, and a
recorded run's store keeps the bytes under that hash, so an `.hx` export can include them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_harness.errors import HarnessError

__all__ = ["ARTIFACT_URI", "Artifact", "artifact_uri", "collect_artifacts"]

ARTIFACT_URI = re.compile(r"artifact:sha256:([0-9a-f]{64})")
"""How a payload refers to an artifact; group 1 is the hex SHA-256 of its bytes."""

_MEDIA_TYPE = re.compile(r"^[A-Za-z0-9][\w!#$&^.+-]*/[A-Za-z0-9][\w!#$&^.+-]*(\s*;.*)?$")


def artifact_uri(sha256: str) -> str:
    """`artifact:sha256:<hex>` for a hex SHA-256."""
    return f"artifact:sha256:{sha256}"


@dataclass(frozen=True, slots=True)
class Artifact:
    """Bytes with a media type (`application/pdf`) and an optional file name.

    `HarnessError` when `data` is not bytes, or the media type is not `type/subtype`.
    """

    data: bytes
    media_type: str
    name: str | None = None
    sha256: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.data, bytearray | memoryview):
            object.__setattr__(self, "data", bytes(self.data))
        if not isinstance(self.data, bytes):
            raise HarnessError(
                f"Artifact data must be bytes, got {type(self.data).__name__} "
                f"(media type {self.media_type!r}); encode text first"
            )
        if not isinstance(self.media_type, str) or not _MEDIA_TYPE.match(self.media_type):
            raise HarnessError(
                f"Artifact media_type must look like 'type/subtype' (e.g. 'application/pdf'), "
                f"got {self.media_type!r}"
            )
        if self.name is not None and not isinstance(self.name, str):
            raise HarnessError(f"Artifact name must be a string or None, got {self.name!r}")
        object.__setattr__(self, "sha256", hashlib.sha256(self.data).hexdigest())

    @property
    def uri(self) -> str:
        """`artifact:sha256:<hex>`, how payloads refer to it."""
        return artifact_uri(self.sha256)

    def reference(self) -> dict[str, Any]:
        """The JSON that stands for the artifact in a tool result."""
        return {
            "artifact": self.uri,
            "media_type": self.media_type,
            "name": self.name,
            "size": len(self.data),
        }


_PLAIN: frozenset[type] = frozenset({str, int, float, bool, type(None)})
"""Types that are never an `Artifact` nor hold one (exact types: a subclass is walked)."""


def collect_artifacts(value: Any, found: list[Artifact]) -> Any:
    """`value` with every `Artifact` in it replaced by its reference.

    Lists, tuples and dicts are walked at any depth; the artifacts are appended to `found`. A
    container with none is returned as it is (a circular one too).
    """
    return _collect(value, found, set())


def _collect(value: Any, found: list[Artifact], active: set[int]) -> Any:
    if isinstance(value, Artifact):
        found.append(value)
        return value.reference()
    if not isinstance(value, Mapping | list | tuple) or id(value) in active:
        return value
    before = len(found)
    active.add(id(value))
    try:
        # a plain value is what it is: no call for it (most of a result's leaves)
        if isinstance(value, Mapping):
            walked: Any = {
                k: v if type(v) in _PLAIN else _collect(v, found, active) for k, v in value.items()
            }
        else:
            walked = [v if type(v) in _PLAIN else _collect(v, found, active) for v in value]
    finally:
        active.discard(id(value))
    return walked if len(found) > before else value
