"""The data of YAML files a spec includes (a scripted model's script), cached as JSON.

Part of the spec cache (`spec.cache`, same folder, same switch `HARNESS_NO_SPEC_CACHE`): a
file's parsed data is kept in `.harness/cache/data-<16 hex>.json` next to the spec, keyed by the
sha256 of the file's bytes, the pytest-harness version and the reading code, so a fresh
process reads an unchanged script without importing YAML. Only data that JSON keeps exactly
(strings, numbers, booleans, null, lists, mappings with string keys) is written, and only after
its reader accepted it; an edited file is a miss and is read again, errors and all.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pytest_harness.spec import cache as spec_cache

__all__ = ["MISSING", "data_file", "read", "write"]

MISSING = object()
"""What [`read`][] returns on a miss (None is data: an empty YAML file)."""


def data_file(folder: Path, path: Path) -> Path:
    """Where the data of `path` is kept, for a spec in `folder`."""
    ident = hashlib.sha256(str(path).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return folder / ".harness" / "cache" / f"data-{ident}.json"


def _key(path: Path, sha: str) -> dict[str, Any]:
    return {"format": spec_cache.FORMAT, "code": spec_cache.code_stamp(), "file": [str(path), sha]}


def read(folder: Path, path: Path) -> Any:
    """The cached data of the YAML file `path` as it is now, or `MISSING`."""
    if not spec_cache.enabled():
        return MISSING
    try:
        raw = data_file(folder, path).read_bytes()
    except OSError:
        return MISSING
    sha = spec_cache.file_digest(path)
    if sha is None:
        return MISSING
    try:
        checksum, _, text = raw.partition(b"\n")
        if hashlib.sha256(text).hexdigest().encode("ascii") != checksum:
            return MISSING
        entry = json.loads(text)
        if entry["key"] != _key(path, sha):
            return MISSING
        return entry["data"]
    except (KeyError, TypeError, ValueError, UnicodeDecodeError, RecursionError):
        return MISSING


def write(folder: Path, path: Path, sha: str | None, data: Any) -> None:
    """Keep `data`, read from `path` when its bytes had sha256 `sha`, if JSON keeps it exactly."""
    if not spec_cache.enabled() or sha is None or spec_cache.file_digest(path) != sha:
        return
    try:
        text = json.dumps(
            {"key": _key(path, sha), "data": data},
            ensure_ascii=False,
            allow_nan=False,
            separators=(",", ":"),
        ).encode("utf-8")
        if not same(json.loads(text)["data"], data):
            return
    except (TypeError, ValueError, RecursionError):
        return
    checksum = hashlib.sha256(text).hexdigest().encode("ascii")
    spec_cache.publish(data_file(folder, path), checksum + b"\n" + text)


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (`1`, `1.0` and `true` differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)
