"""Golden files of the runs tests make: their names, writing them, and finding unused ones.

A test's runs are written as `<harness_recordings>/<test module>/<test name>.yaml`, then
`<test name>-2.yaml`, `-3`, … for its further runs, in the order the runs were started. Names
come from the test's node id alone, so every process (each pytest-xdist worker, and the controller
that lists unused files) computes the same ones, and each file belongs to exactly one test.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

from pytest_harness.plugin.settings import RecordMode

if TYPE_CHECKING:
    from pytest_harness.recording.model import Recording

__all__ = [
    "GOLDEN_SUFFIX",
    "WriteStatus",
    "belongs_to",
    "golden_key",
    "golden_name",
    "golden_names",
    "unused_files",
    "write_golden",
]

GOLDEN_SUFFIX = ".yaml"
WriteStatus = Literal["written", "unchanged", "kept"]
"""What recording a golden run did: wrote the file, found it identical, or kept it (`new`)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-\[\]]")
_MAX_NAME = 120


def sanitize(name: str) -> str:
    """A file-name-safe form of a test or module name (parametrized ids keep their brackets)."""
    clean = _UNSAFE.sub("_", name)
    if clean.startswith("."):
        clean = "_" + clean[1:]
    if len(clean) > _MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        clean = f"{clean[:_MAX_NAME]}~{digest}"
    return clean or "_"


def golden_key(nodeid: str) -> tuple[str, str]:
    """`(module folder, base name)` of a test's golden files, from its node id.

    `tests/test_shop.py::TestDesk::test_refund[big]` gives
    `("test_shop", "TestDesk.test_refund[big]")`.
    """
    path, _, names = nodeid.partition("::")
    return sanitize(PurePosixPath(path).stem), sanitize(names.replace("::", "."))


def golden_name(base: str, n: int) -> str:
    """The file name of a test's `n`-th run (1-based): `base.yaml`, then `base-2.yaml`, …."""
    return f"{base}{GOLDEN_SUFFIX}" if n == 1 else f"{base}-{n}{GOLDEN_SUFFIX}"


def golden_names(base: str, count: int) -> list[str]:
    """The file names of a test's first `count` runs."""
    return [golden_name(base, n) for n in range(1, count + 1)]


def belongs_to(file_name: str, base: str) -> bool:
    """Whether `file_name` is one of the golden files of the test with base name `base`."""
    if file_name == base + GOLDEN_SUFFIX:
        return True
    pattern = re.escape(base) + r"-[1-9][0-9]*" + re.escape(GOLDEN_SUFFIX)
    return re.fullmatch(pattern, file_name) is not None


def write_golden(recording: Recording, path: Path, mode: RecordMode) -> WriteStatus:
    """Write one golden run atomically: `new` only where absent, `all` only when it changed.

    Re-recording an unchanged run leaves the file (and its mtime) alone, so a diff shows only
    real drift.
    """
    from pytest_harness.recording.golden import dump_recording

    if mode is RecordMode.NEW and path.exists():
        return "kept"
    if path.exists() and path.read_text(encoding="utf-8") == dump_recording(recording):
        return "unchanged"
    try:
        recording.save(path, overwrite=mode is RecordMode.ALL)
    except FileExistsError:  # `new`, and another process wrote it a moment ago
        return "kept"
    return "written"


def unused_files(
    folder: Path, *, exact: Iterable[str] = (), bases: Iterable[str] = ()
) -> list[Path]:
    """Golden files in `folder` that no test claims.

    `exact` names files that tests wrote or would write; `bases` claims every file of those tests
    (tests that failed or were skipped, whose files are kept whatever they did this time).
    """
    if not folder.is_dir():
        return []
    claimed = set(exact)
    kept = tuple(bases)
    return sorted(
        path
        for path in folder.iterdir()
        if path.suffix == GOLDEN_SUFFIX
        and path.is_file()
        and path.name not in claimed
        and not any(belongs_to(path.name, base) for base in kept)
    )
