"""What reading an archive gives: issues, the verification report, and the playback."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["INCOMPLETE", "ArchiveIssue", "Playback", "VerificationReport"]

INCOMPLETE: frozenset[str] = frozenset(
    {
        "initial_record_missing",
        "payloads_omitted",
        "payload_redacted",
        "artifact_omitted",
        "artifact_missing",
        "artifact_corrupt",
        "not_terminal",
        "outstanding_attempt",
    }
)
"""Issue codes that leave an archive valid but incomplete; every other code makes it invalid."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveIssue:
    """One defect or gap of an archive: a stable `code`, a message, the record's `seq` if any."""

    code: str
    message: str
    seq: int | None = None

    @property
    def affects(self) -> Literal["valid", "complete"]:
        """Whether the issue makes the archive invalid, or only incomplete."""
        return "complete" if self.code in INCOMPLETE else "valid"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`verify --json`)."""
        return {
            "code": self.code,
            "message": self.message,
            "seq": self.seq,
            "affects": self.affects,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class VerificationReport:
    """`verify_archive`'s answer: whether the archive is valid, and complete.

    Valid: structure, checksums, sequence, identities, catalogue and final state all hold.
    Complete, also: the initial record, unredacted payloads, every referenced artifact, a
    terminal state, no outstanding attempt.
    """

    path: str
    valid: bool
    complete: bool
    issues: tuple[ArchiveIssue, ...] = ()
    manifest: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`verify --json`)."""
        return {
            "path": self.path,
            "valid": self.valid,
            "complete": self.complete,
            "issues": [issue.to_dict() for issue in self.issues],
            "manifest": None if self.manifest is None else dict(self.manifest),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Playback:
    """A verified archive, read, with nothing executed.

    Its manifest, its records in `seq` order (each a dict with `seq`, `kind`, `step`,
    `attempt_id`, `execution_key`, `payload`, …), the verification report, and the bytes of
    the artifacts it includes (by SHA-256).
    """

    manifest: Mapping[str, Any]
    records: tuple[Mapping[str, Any], ...]
    report: VerificationReport
    artifacts: Mapping[str, bytes] = field(default_factory=dict)
