"""The spec digest: the effective document's digest, and the bytes of the files it names.

A spec names files whose contents change what a run does: a scripted model's `script:` file
and a `json_schema` guard's `schema:` file (the spec's own guards and the baseline's; both
resolve against the spec's folder). [`referenced_files`][] is the one list of them: the
digest covers their bytes, and it is computed from the files as they are whenever a spec is
loaded, from its files or from the spec cache (whose entry keeps only the document's part).

A spec that names no such file has the document's digest as its digest, as before files were
counted. One that names some has the sha256 of that digest and of each file's key path and
sha256 (null for a file that is missing or cannot be read: the run reports it), so editing a
script changes the digest, and moving the checkout does not (paths are not in it). Online
graders' schema files are left out, as graders are: they never change what a run does. Python
code a spec names (tools, `function` models, callable guards) is not in the digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_harness.spec.schema import resolve_path
from pytest_harness.spec.spec import KeyPath

if TYPE_CHECKING:
    from pytest_harness.spec.schema import GuardSpec, SpecDocument

__all__ = ["referenced_files", "spec_digest"]


def referenced_files(
    document: SpecDocument, baseline_guards: tuple[GuardSpec, ...], root: Path
) -> list[tuple[KeyPath, Path]]:
    """The files the effective spec names whose bytes change what a run does, by key path."""
    found: list[tuple[KeyPath, Path]] = []
    for name, model in document.models.items():
        if isinstance(model.script, str):
            found.append((("models", name, "script"), resolve_path(root, model.script)))
    for prefix, guards in (
        (("baseline", "guards"), baseline_guards),
        (("guards",), document.guards),
    ):
        for i, guard in enumerate(guards):
            if isinstance(guard.schema_, str):
                found.append(((*prefix, i, "schema"), resolve_path(root, guard.schema_)))
    return found


def spec_digest(
    document_digest: str,
    document: SpecDocument,
    baseline_guards: tuple[GuardSpec, ...],
    root: Path,
    file_digest: Callable[[Path], str | None],
) -> str:
    """The spec's digest: `document_digest` with the bytes of its [`referenced_files`][].

    `file_digest` is `spec.cache.file_digest` (passed in: the cache imports this module).
    """
    files = referenced_files(document, baseline_guards, root)
    if not files:
        return document_digest
    hashed = sorted(([list(path), file_digest(file)] for path, file in files), key=json.dumps)
    payload = {"document": document_digest, "files": hashed}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
