"""Plain tools (`tools/plain.py`): what is taken without pydantic is what pydantic would give."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pytest_harness.tools.plain import SchemaCache, check_plain
from pytest_harness.tools.registry import InvalidToolArguments, Tool


def plain(s: str, i: int, x: float, b: bool, a: Any, o: str = "d", untyped=3) -> None:  # type: ignore[no-untyped-def]
    """A plain tool.

    Args:
        s: A string.
        x: A number.
    """


VALUES: list[Any] = [
    "x",
    "",
    "a\ud800",
    "250",
    0,
    1,
    -5,
    2**53,
    2**53 + 1,
    -(2**53) - 1,
    2**70,
    1.5,
    250.0,
    float("nan"),
    float("inf"),
    True,
    False,
    None,
    [1],
    {"k": 1},
]
VALID = {"s": "x", "i": 1, "x": 2.5, "b": True, "a": None}


def exactly(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(exactly(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(exactly(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def cases() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [dict(VALID), {}, {**VALID, "extra": 1}, {**VALID, "o": "p"}]
    for name in ("s", "i", "x", "b", "a", "o", "untyped"):
        out += [{**VALID, name: value} for value in VALUES]
        out.append({k: v for k, v in VALID.items() if k != name})
    return out


@pytest.mark.parametrize("args", cases(), ids=repr)
def test_plain_arguments_are_what_pydantic_gives(args: dict[str, Any]) -> None:
    tool = Tool("plain", plain)
    assert tool._plain is not None
    try:
        expected: Any = tool._validator().validate_python(args)
    except ValidationError:
        expected = None
    taken = check_plain(tool._plain, args)
    if taken is not None:
        assert expected is not None and exactly(taken, expected)
    if expected is None:
        with pytest.raises(InvalidToolArguments):
            tool.validate(args)
    else:
        assert exactly(tool.validate(args), expected)


def test_a_tool_with_a_richer_type_is_not_plain() -> None:
    def rich(items: list[str], when: int | None = None) -> None:
        pass

    tool = Tool("rich", rich)
    assert tool._plain is None
    assert tool.validate({"items": ("a",)}) == {"items": ["a"]}


def test_a_cached_schema_is_the_derived_one_and_builds_no_validator(tmp_path: Path) -> None:
    cache = SchemaCache(tmp_path)
    first = Tool("plain", plain, cache=cache)
    assert first._adapter is not None  # derived, then written
    assert len(list(tmp_path.glob("tool-*.json"))) == 1
    again = Tool("plain", plain, cache=cache)
    assert again._adapter is None
    assert again.schema == first.schema == Tool("plain", plain).schema
    # in the same key order too: the schema is part of every request and its digest
    assert json.dumps(again.schema.parameters) == json.dumps(first.schema.parameters)
    assert again.validate({**VALID, "x": 2}) == {**VALID, "x": 2.0}
    with pytest.raises(InvalidToolArguments, match="unexpected argument 'nope'"):
        again.validate({**VALID, "nope": 1})


def test_a_changed_file_of_a_deriving_library_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file of a library's folder is in the key (`spec/stamps.py`, as the spec cache's)."""
    from pytest_harness.tools import plain as plain_module

    lib = tmp_path / "libs" / "stand_in_pydantic"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("", encoding="utf-8")
    (lib / "fields.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "libs"))
    monkeypatch.setattr(plain_module, "_LIBRARIES", (*plain_module._LIBRARIES, lib.name))
    monkeypatch.setattr(plain_module, "_STAMP", None)
    cache = SchemaCache(tmp_path / "cache")
    assert Tool("plain", plain, cache=cache)._adapter is not None  # derived, then written
    assert Tool("plain", plain, cache=cache)._adapter is None
    info = (lib / "fields.py").stat()
    os.utime(lib / "fields.py", ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
    monkeypatch.setattr(plain_module, "_STAMP", None)  # a new process: the stamp taken again
    assert Tool("plain", plain, cache=cache)._adapter is not None  # an upgrade: a miss


def test_an_edited_docstring_or_a_bad_entry_is_a_miss(tmp_path: Path) -> None:
    cache = SchemaCache(tmp_path)
    Tool("plain", plain, cache=cache)
    (entry,) = tmp_path.glob("tool-*.json")
    data = json.loads(entry.read_text())
    data["description"] = 5
    entry.write_text(json.dumps(data))
    assert Tool("plain", plain, cache=cache)._adapter is not None  # malformed: derived again

    def edited(s: str) -> None:
        """Another description."""

    edited.__name__ = edited.__qualname__ = "plain"
    other = Tool("plain", edited, cache=cache)
    assert other._adapter is not None
    assert other.schema.description == "Another description."


def test_the_same_library_installed_elsewhere_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a deriving library is installed is in the key: equal files elsewhere still miss
    (environments that normalise mtimes would otherwise tell an upgrade by sizes alone)."""
    from pytest_harness.tools import plain as plain_module

    for where in ("one", "two"):
        lib = tmp_path / where / "stand_in_lib"
        lib.mkdir(parents=True)
        for name in ("__init__.py", "fields.py"):
            (lib / name).write_text("X = 1\n", encoding="utf-8")
            os.utime(lib / name, ns=(1_000_000_000, 1_000_000_000))
        os.utime(lib, ns=(1_000_000_000, 1_000_000_000))
    monkeypatch.setattr(plain_module, "_LIBRARIES", (*plain_module._LIBRARIES, "stand_in_lib"))
    cache = SchemaCache(tmp_path / "cache")
    monkeypatch.syspath_prepend(str(tmp_path / "one"))
    monkeypatch.setattr(plain_module, "_STAMP", None)
    assert Tool("plain", plain, cache=cache)._adapter is not None  # derived, then written
    assert Tool("plain", plain, cache=cache)._adapter is None
    monkeypatch.syspath_prepend(str(tmp_path / "two"))
    monkeypatch.setattr(plain_module, "_STAMP", None)  # a new process, another environment
    assert Tool("plain", plain, cache=cache)._adapter is not None
