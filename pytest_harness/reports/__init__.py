"""Replay report files by suffix: `.json`, `.html`, `.md`, and those plugins add (DESIGN §7.1).

`--replay-report PATH` (repeatable) picks a renderer by PATH's suffix. A renderer is a function
of the report document (a JSON-ready mapping, the content of the `.json` report) returning the
file's text or bytes. The built-ins are registered by `pytest_harness.builtins` through the
`harness_report_renderers` hook, like a plugin's: a package adds a suffix by implementing it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_harness.errors import HarnessError

__all__ = [
    "REPORT_FORMAT",
    "ReportError",
    "render_json",
    "renderer_for",
    "suffixes",
    "write_report",
]

REPORT_FORMAT = "pytest-harness/replay-report@1"


class ReportError(HarnessError):
    """A replay report that cannot be rendered or written (unknown suffix, a failing renderer)."""


def render_json(document: Mapping[str, Any]) -> str:
    """The `.json` report: the document itself, indented."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def suffixes() -> list[str]:
    """Every suffix a report can be written as, sorted (`.html`, `.json`, `.md`, …)."""
    from pytest_harness.plugins import registry

    return registry("harness_report_renderers").names()


def renderer_for(path: str | os.PathLike[str]) -> Any:
    """The renderer for `path`'s suffix, or `ReportError` naming the path and the choices."""
    from pytest_harness.plugins import registry

    suffix = Path(path).suffix.lower()
    found = registry("harness_report_renderers").get(suffix)
    if found is None:
        shown = f"suffix {suffix!r}" if suffix else "no suffix"
        raise ReportError(
            f"--replay-report {os.fspath(path)}: {shown}; choose from "
            f"{', '.join(suffixes())} (a plugin adds more through harness_report_renderers)"
        )
    return found


def write_report(path: Path, document: Mapping[str, Any]) -> None:
    """Render `document` by `path`'s suffix and write it atomically (temp file, rename).

    Raises `ReportError` for an unknown suffix or a renderer that fails or returns neither
    text nor bytes, and `OSError` when the file cannot be written.
    """
    renderer = renderer_for(path)
    try:
        content = renderer(document)
    except Exception as exc:
        raise ReportError(
            f"the {path.suffix} report renderer failed writing {path}: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(content, str):
        data = content.encode("utf-8")
    elif isinstance(content, bytes | bytearray):
        data = bytes(content)
    else:
        raise ReportError(
            f"the {path.suffix} report renderer returned {type(content).__name__} for {path}; "
            "a renderer returns str or bytes"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
