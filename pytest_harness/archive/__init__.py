"""`.hx` incident archives (DESIGN §12): export, verification and playback of a run's journal.

Version 1 of the format is a ZIP holding `manifest.json`, `records.jsonl` (one journal entry
per line, `seq` from 1) and `artifacts/<sha256>` (artifact bytes, when exported). Writing and
reading happen in memory: export never starts the run, reading never extracts a member to
disk and never imports anything from the archive.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pytest_harness.archive.export import ExportPolicy, export_incident, export_run, open_store
from pytest_harness.archive.format import BundleLimits
from pytest_harness.archive.reader import playback, verify_archive
from pytest_harness.archive.report import ArchiveIssue, Playback, VerificationReport

if TYPE_CHECKING:
    from pytest_harness.recording.model import Recording

__all__ = [
    "ArchiveIssue",
    "BundleLimits",
    "ExportPolicy",
    "Playback",
    "VerificationReport",
    "export_incident",
    "export_run",
    "open_store",
    "playback",
    "recording_from_archive",
    "verify_archive",
]


def recording_from_archive(path: str | os.PathLike[str]) -> Recording:
    """The `Recording` of a `.hx` archive exported with payloads (`Recording.from_archive`)."""
    from pytest_harness.recording.model import Recording

    return Recording.from_archive(path)
