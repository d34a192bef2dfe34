"""Plain tools: every parameter `str`, `int`, `float`, `bool` or untyped, defaults JSON scalars.

Most tools are plain, and for them two things need no pydantic (DESIGN §10, issue #13: a fresh
`approve.py` should not pay for importing it):

- `check_plain` checks the model's arguments when each already has its parameter's exact type
  (an `int` for a `float` becomes that `float`), and gives the dict pydantic would give. Any
  other input (a missing or unknown argument, `"250"` for an `int`, a `bool` for an `int`) is
  None: `Tool` hands it to pydantic, which converts it or words the error as always.
- `SchemaCache` keeps the JSON schema pydantic derived for a plain tool in the spec's
  `.harness/cache` (like `.pyc` files), named by the sha256 of everything it was derived from:
  the signature, the docstring, the deriving code's files and pydantic's and
  docstring_parser's (size and mtime: `spec/stamps.py`, as the spec cache's key). An entry that is
  missing, malformed or keyed otherwise is a miss, and the schema is derived again and written.
  `HARNESS_NO_SPEC_CACHE=1` turns it off with the spec cache.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_harness.spec.stamps import code_stamp

__all__ = [
    "PlainParam",
    "SchemaCache",
    "check_plain",
    "detached",
    "plain_params",
    "schema_key",
]

PlainParam = tuple[str, str, bool]
"""A plain parameter: its name, its kind (`str`, `int`, `float`, `bool`, `any`), required."""

_KINDS: dict[Any, str] = {str: "str", int: "int", float: "float", bool: "bool", Any: "any"}
_EXACT: dict[str, type[Any]] = {"str": str, "int": int, "float": float, "bool": bool}
"""The type an argument must have exactly to be taken as it is (`bool` is no `int` here)."""
_SCALARS = (str, int, float, bool, type(None))
_EXACT_FLOAT = 2**53
"""The largest `int` a `float` parameter takes here as `float(value)` (pydantic agrees)."""
_DERIVERS = (
    "tools/registry.py",
    "tools/schema.py",
    "tools/plain.py",
    "models/base.py",
    "spec/stamps.py",
)
"""The modules (under the package) whose code decides a tool's schema."""
_LIBRARIES = ("pydantic", "pydantic_core", "docstring_parser", "typing_extensions")
FORMAT = 1


def plain_params(signature: inspect.Signature) -> tuple[PlainParam, ...] | None:
    """The parameters of a plain tool, or None when one is not plain (or not by keyword)."""
    params: list[PlainParam] = []
    for param in signature.parameters.values():
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            return None
        annotation = Any if param.annotation is param.empty else param.annotation
        try:
            kind = _KINDS.get(annotation)
        except TypeError:  # an unhashable annotation
            return None
        if kind is None:
            return None
        required = param.default is param.empty
        if not required and not _json_scalar(param.default):
            return None
        params.append((param.name, kind, required))
    return tuple(params)


def _json_scalar(value: Any) -> bool:
    if type(value) is float:
        return math.isfinite(value)
    return type(value) in _SCALARS


def detached(args: Mapping[str, Any]) -> Mapping[str, Any]:
    """`args` as a tool may have them: a deep copy when any value is a container.

    The run keeps the proposed arguments in its state and its messages; a tool that changes a
    list or dict it was given must not change what the run committed and sends the model next.
    """
    if all(type(value) in _SCALARS for value in args.values()):
        return args
    return copy.deepcopy(dict(args))


def check_plain(params: tuple[PlainParam, ...], args: Mapping[str, Any]) -> dict[str, Any] | None:
    """The arguments as pydantic would validate them, or None when pydantic must look at them."""
    if len(args) > len(params):
        return None
    out: dict[str, Any] = {}
    for name, kind, required in params:
        if name not in args:
            if required:
                return None
            continue
        value = args[name]
        cls = type(value)
        if kind == "any" or _EXACT.get(kind) is cls:
            out[name] = value
        elif kind == "float" and cls is int and -_EXACT_FLOAT <= value <= _EXACT_FLOAT:
            out[name] = float(value)
        else:
            return None
    if len(out) != len(args):  # an argument the tool does not take (or a non-str key)
        return None
    return out


def schema_key(
    name: str,
    fn: Callable[..., Any],
    params: tuple[PlainParam, ...],
    signature: inspect.Signature,
    doc: str | None,
) -> dict[str, Any]:
    """Everything the schema of a plain tool is derived from."""
    defaults = [
        [p.name, None if p.default is p.empty else [p.default]]
        for p in signature.parameters.values()
    ]
    return {
        "format": FORMAT,
        "tool": name,
        "module": getattr(fn, "__module__", None),
        "params": [list(p) for p in params],
        "defaults": defaults,
        "doc": doc,
        "code": _code_stamp(),
    }


_STAMP: str | None = None


def _code_stamp() -> str:
    """The sha256 of the version, the Python, the deriving modules' and the libraries' files.

    Worked out once; a digest, so every tool's key (encoded at each lookup) stays short.
    """
    global _STAMP
    if _STAMP is None:
        text = json.dumps(code_stamp(_DERIVERS, _LIBRARIES), separators=(",", ":"))
        _STAMP = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return _STAMP


class SchemaCache:
    """Derived schemas of plain tools, one file each in a spec's `.harness/cache`."""

    __slots__ = ("folder",)

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _entry(self, key: Mapping[str, Any]) -> tuple[Path, bytes] | None:
        try:
            text = json.dumps(key, sort_keys=True, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError):
            return None
        data = text.encode("utf-8", "surrogatepass")
        return self.folder / f"tool-{hashlib.sha256(data).hexdigest()[:32]}.json", data

    def read(self, key: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The description and parameters schema kept for `key`, or None."""
        entry = self._entry(key)
        if entry is None:
            return None
        path, _ = entry
        try:
            stored = json.loads(path.read_bytes())
            if stored["key"] != key:
                return None
            description, parameters = stored["description"], stored["parameters"]
        except (OSError, ValueError, TypeError, KeyError, RecursionError):
            return None
        if type(description) is not str or type(parameters) is not dict:
            return None
        return description, parameters

    def write(self, key: Mapping[str, Any], description: str, parameters: dict[str, Any]) -> None:
        """Keep what was derived for `key`, when it survives the trip through JSON unchanged."""
        from pytest_harness.spec.cache import publish

        entry = self._entry(key)
        if entry is None:
            return
        path, _ = entry
        body = {"key": key, "description": description, "parameters": parameters}
        try:
            text = json.dumps(body, allow_nan=False)  # the schema's key order is kept
            again = json.loads(text)
        except (TypeError, ValueError):
            return
        if again != body:
            return
        publish(path, text.encode("utf-8", "surrogatepass"))
