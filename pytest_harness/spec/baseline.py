"""The org baseline: its document, and the locks and `record=` it applies to a spec's data.

Locks compare the values as written (after YAML parsing): `lease: 30` does not satisfy a lock
`state.lease: 30s`. A lock whose key is absent is applied, creating the mappings on its path; its
location is then the lock's line in the baseline file.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_harness.errors import SpecError
from pytest_harness.spec import cache as spec_cache
from pytest_harness.spec.schema import STRICT, GuardSpec, RuleSpec, resolve_path
from pytest_harness.spec.spec import KeyPath
from pytest_harness.spec.where import BASELINE, Where, has_key, kind, show, validate_at

__all__ = ["Baseline", "BaselineDocument", "apply_locks", "apply_record", "load_baseline"]

_LOCK_SEGMENT = re.compile(r"([^.\[\]]+)((?:\[\d+\])*)")


@dataclass(frozen=True, kw_only=True)
class BaselineDocument:
    """An org baseline: locked keys, and rules and guards prepended to every task."""

    __pydantic_config__ = STRICT

    locks: dict[str, Any] = field(default_factory=dict)
    rules: tuple[RuleSpec, ...] = ()
    guards: tuple[GuardSpec, ...] = ()


@dataclass(frozen=True)
class Baseline:
    """A baseline file as loaded: where it is, and its checked document."""

    path: Path
    file: str
    document: BaselineDocument
    sha256: str | None
    """The digest of the bytes read (for the spec cache)."""


def load_baseline(data: dict[str, Any], spec_path: Path, where: Where) -> Baseline | None:
    """Load and check the file the spec's `baseline:` names (None without one)."""
    raw = data.get("baseline")
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise where.error(f"`baseline` must be the path of a YAML file, not {show(raw)}", BASELINE)
    path = resolve_path(spec_path.parent, raw)
    if not path.is_file():
        raise where.error(f"baseline file not found: {path}", BASELINE)
    from pytest_harness.spec.yamlio import read_yaml

    sha256 = spec_cache.file_digest(path)
    doc = read_yaml(path)
    content = {} if doc.data is None else doc.data
    if not isinstance(content, dict):
        raise SpecError(
            f"a baseline must be a mapping with `locks`, `rules` and `guards`, not {kind(content)}",
            file=doc.file,
            line=doc.line(()),
        )
    where.add(doc, BASELINE)
    document = validate_at(BaselineDocument, content, where, BASELINE)
    return Baseline(path=path, file=doc.file, document=document, sha256=sha256)


def apply_locks(
    data: dict[str, Any],
    baseline: Baseline,
    where: Where,
    env: str | None,
    env_paths: set[KeyPath],
) -> None:
    """Apply the baseline's locks to `data`; a value that differs is an error naming its source."""
    for dotted, value in baseline.document.locks.items():
        lock_at = (*BASELINE, "locks", dotted)
        path = _lock_path(dotted)
        if path is None:
            raise where.error(
                f"a lock key must be a dotted key path like state.record, not {dotted!r}", lock_at
            )
        found, current = _get(data, path)
        if found:
            if not _same(current, value):
                touched = any(p[: len(path)] == path or path[: len(p)] == p for p in env_paths)
                by = f"environment {env!r}" if touched else "this file"
                raise where.error(
                    f"locked to {show(value)} by {baseline.file} (locks.{dotted}); "
                    f"{by} sets {show(current)}",
                    path,
                )
        elif _put(data, path, copy.deepcopy(value)):
            file, line = where.locate(lock_at)
            if line is not None:
                where.locations[path] = (file, line)
        else:
            raise where.error(
                f"cannot apply the lock {dotted} from {baseline.file}: a value on its path is "
                "not a mapping",
                path,
            )


def apply_record(
    data: dict[str, Any], record: bool, baseline: Baseline | None, where: Where
) -> None:
    """Set `state.record` to `record`, unless the baseline locks it to another value."""
    if baseline is not None:
        for dotted, value in baseline.document.locks.items():
            if _lock_path(dotted) == ("state", "record") and not _same(value, record):
                raise where.error(
                    f"record={record} was asked for, but {baseline.file} locks state.record to "
                    f"{show(value)} (locks.{dotted})",
                    (*BASELINE, "locks", dotted),
                )
    if data.get("state") is None:
        data["state"] = {}
    if isinstance(data["state"], dict):
        data["state"]["record"] = record


def _lock_path(dotted: str) -> KeyPath | None:
    """`("models", "default", "retries")` for `models.default.retries`; `a[0]` indexes a list."""
    path: list[str | int] = []
    for segment in dotted.split("."):
        match = _LOCK_SEGMENT.fullmatch(segment)
        if match is None:
            return None
        path.append(match.group(1))
        path.extend(int(i) for i in re.findall(r"\d+", match.group(2)))
    return tuple(path)


def _get(data: Any, path: KeyPath) -> tuple[bool, Any]:
    node = data
    for part in path:
        if not has_key(node, part):
            return (False, None)
        node = node[part]
    return (True, node)


def _put(data: dict[str, Any], path: KeyPath, value: Any) -> bool:
    """Set `path` to `value`, creating missing mappings; False when something is in the way."""
    node: Any = data
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if isinstance(part, str) and isinstance(node, dict):
            if last:
                node[part] = value
            elif part not in node or node[part] is None:
                node[part] = {}
            node = node[part]
        elif isinstance(part, int) and isinstance(node, list) and part < len(node):
            if last:
                node[part] = value
            node = node[part]
        else:
            return False
    return True


def _same(a: Any, b: Any) -> bool:
    """Equality that does not take `true` for `1`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)
