"""The spec cache: a checked spec kept as JSON, so a fresh process skips its validation.

Like Python's `.pyc` files. After `load_spec` has read, merged and checked a `harness.yaml`, it
writes the result to `<the spec's folder>/.harness/cache/<spec name>-<16 hex>.json` (one file
per spec path, environment and `record=`), and the next `load_spec` of the same spec in any
process reads that file instead: no YAML parsing, no pydantic, no CEL compiled until a rule
is evaluated. The entry is used only when its key matches the present exactly:

- the sha256 of the spec file's bytes and of the baseline file's bytes (when it has one);
- the environment chosen (`env=` or `$HARNESS_ENV`) and `record=`;
- the pytest-harness version, the Python and the size and modification time of the modules
  that check a spec and of CEL's files (`spec/stamps.py`; so an edited checker, even at the
  same version, rebuilds every entry);
- the names the installed plugins offer (model providers, stores, guard checks, graders),
  which the checks look names up in.

The entry keeps the digest of the checked document alone; the spec's digest (`Spec.digest`)
adds the bytes of the files the spec names (script files, schema files: `spec.digest`), hashed
as they are at each load, so an edited script changes the digest of a cached spec too, and
needs no new check of the spec.

Anything else (the key differs, the file is truncated, its checksum fails, a value has the
wrong type) means a miss: the spec is checked from its files as if there were no cache, and
the entry is written again. A spec that fails its checks is never written, so every error is
raised exactly as without the cache. Entries are written atomically (a temporary file, then a
rename); a folder that cannot be written is skipped silently. `HARNESS_NO_SPEC_CACHE=1`
turns the cache off (neither read nor written); deleting `.harness/cache` is always safe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import json
import os
import stat
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType, NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pytest_harness.cel import CelProgram
from pytest_harness.spec import stamps
from pytest_harness.spec.digest import spec_digest
from pytest_harness.spec.schema import GuardSpec, RuleSpec, SpecDocument
from pytest_harness.spec.spec import KeyPath, Spec

__all__ = [
    "DISABLE",
    "FORMAT",
    "MAX_FILE_BYTES",
    "PLUGIN_HOOKS",
    "LazyPrograms",
    "cache_file",
    "code_stamp",
    "decode",
    "enabled",
    "encode",
    "file_digest",
    "publish",
    "read",
    "write",
]

FORMAT = 2
"""The layout of an entry; an entry of another layout is a miss (2: the document's digest)."""
DISABLE = "HARNESS_NO_SPEC_CACHE"
"""Set to anything but `""` or `0`, the cache is neither read nor written."""
PLUGIN_HOOKS = (
    "harness_model_providers",
    "harness_stores",
    "harness_guard_checks",
    "harness_graders",
)
"""The plugin registries the spec's checks look names up in: their names are in the key."""
_CHECKERS = (
    "cel.py",
    "errors.py",
    "spec/baseline.py",
    "spec/build.py",
    "spec/cache.py",
    "spec/checks.py",
    "spec/loader.py",
    "spec/schema.py",
    "spec/spec.py",
    "spec/stamps.py",
    "spec/validation.py",
    "spec/where.py",
    "spec/yamlio.py",
    "spec/yamlcache.py",
    "models/scripted.py",
)
"""The modules (under the package) whose code decides what a checked spec is."""
_LIBRARIES = ("cel",)
"""The installed libraries whose code decides it too: a cached CEL source compiled by the CEL
that checked it, so an upgrade (or downgrade) of `common-expression-language` is a miss."""
MAX_FILE_BYTES = 32 * 1024 * 1024
"""The largest file hashed for a key: a bigger one is never cached."""
_DECODE_ERRORS = (
    AttributeError,
    IndexError,
    KeyError,
    RecursionError,
    TypeError,
    UnicodeDecodeError,
    ValueError,
)
"""What malformed entry data can raise while it is decoded: each means a miss."""


def enabled() -> bool:
    """Whether the cache is on (`$HARNESS_NO_SPEC_CACHE` unset, empty or `0`)."""
    return os.environ.get(DISABLE, "") in ("", "0")


def cache_file(spec_path: Path, env: str | None, record: bool | None) -> Path:
    """Where the entry of `spec_path` loaded with `env` and `record` lives."""
    ident = f"{spec_path}\0{env}\0{record}".encode("utf-8", "surrogatepass")
    name = f"{spec_path.stem}-{hashlib.sha256(ident).hexdigest()[:16]}.json"
    return spec_path.parent / ".harness" / "cache" / name


def file_digest(path: Path) -> str | None:
    """The sha256 of a regular file's bytes, or None.

    None for a device, a pipe, a file over `MAX_FILE_BYTES` or one that cannot be read: the
    loader's own read then says what is wrong.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # never a device or a pipe
            return None
        with os.fdopen(os.dup(fd), "rb") as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if len(data) > MAX_FILE_BYTES else hashlib.sha256(data).hexdigest()


def code_stamp() -> list[Any]:
    """The version, the Python, each checking module's and library's files: part of every key."""
    return stamps.code_stamp(_CHECKERS, _LIBRARIES)


def _plugin_names() -> dict[str, list[str]]:
    from pytest_harness.plugins import registry

    return {hook: registry(hook).names() for hook in PLUGIN_HOOKS}


def _key(
    spec_path: Path,
    spec_sha: str,
    env: str | None,
    record: bool | None,
    baseline: tuple[str, str] | None,
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "code": code_stamp(),
        "spec": [str(spec_path), spec_sha],
        "env": env,
        "record": record,
        "baseline": None if baseline is None else list(baseline),
        "home": os.path.expanduser("~"),  # a baseline path may start with ~
        "plugins": _plugin_names(),
    }


# -- reading ------------------------------------------------------------------------------------


def read(spec_path: Path, env: str | None, record: bool | None) -> Spec | None:
    """The cached `Spec` of `spec_path` when its entry is valid for the files as they are now."""
    try:
        raw = cache_file(spec_path, env, record).read_bytes()
    except OSError:
        return None
    spec_sha = file_digest(spec_path)
    if spec_sha is None:
        return None

    def key(baseline: tuple[str, str] | None) -> dict[str, Any]:
        return _key(spec_path, spec_sha, env, record, baseline)

    return decode(raw, key)


def decode(raw: bytes, key: Callable[[tuple[str, str] | None], dict[str, Any]]) -> Spec | None:
    """The `Spec` an entry holds, or None for anything malformed or keyed otherwise.

    `key(baseline)` gives the key the entry must hold, for the `(path, sha256)` of the baseline
    file as it is now (the entry names the baseline file; its bytes are hashed here).
    """
    try:
        checksum, _, text = raw.partition(b"\n")
        if hashlib.sha256(text).hexdigest().encode("ascii") != checksum:
            return None
        entry = json.loads(text)
        stored = entry["key"]
        baseline = stored["baseline"]
        current: tuple[str, str] | None = None
        if baseline is not None:
            if type(baseline) is not list or len(baseline) != 2 or type(baseline[0]) is not str:
                return None
            path = baseline[0]
            sha = file_digest(Path(path))
            if sha is None:
                return None
            current = (path, sha)
        if stored != key(current):
            return None
        return _spec(entry["spec"])
    except _DECODE_ERRORS:
        return None


def _spec(data: Mapping[str, Any]) -> Spec:
    document = build(SpecDocument, data["document"])
    baseline_rules = build(tuple[RuleSpec, ...], data["baseline_rules"])
    baseline_guards = build(tuple[GuardSpec, ...], data["baseline_guards"])
    locations: dict[KeyPath, tuple[str, int]] = {}
    for path, file, line in data["locations"]:
        if not all(isinstance(p, str | int) and not isinstance(p, bool) for p in path):
            raise TypeError("a key path holds strings and integers")
        locations[tuple(path)] = (_typed(str, file), _typed(int, line))
    baseline_path = data["baseline_path"]
    rules, guards, graders = program_sources(document, baseline_rules, baseline_guards)
    path = Path(_typed(str, data["path"]))
    document_digest = _typed(str, data["document_digest"])
    return Spec(
        document=document,
        path=path,
        env=None if data["env"] is None else _typed(str, data["env"]),
        digest=spec_digest(document_digest, document, baseline_guards, path.parent, file_digest),
        locations=MappingProxyType(locations),
        rule_programs=LazyPrograms(rules),
        guard_programs=LazyPrograms(guards),
        grader_programs=LazyPrograms(graders),
        baseline_rules=baseline_rules,
        baseline_guards=baseline_guards,
        baseline_path=None if baseline_path is None else Path(_typed(str, baseline_path)),
    )


def program_sources(
    document: SpecDocument,
    baseline_rules: tuple[RuleSpec, ...],
    baseline_guards: tuple[GuardSpec, ...],
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """The CEL source of every rule, `cel` guard and `cel` grader, by id, as the loader compiles."""
    rules = {r.id: r.when for r in (*baseline_rules, *document.rules)}
    guards = {g.id: g.when or "" for g in (*baseline_guards, *document.guards) if g.check == "cel"}
    graders = {g.id: g.when or "" for g in document.evals.online.graders if g.check == "cel"}
    return rules, guards, graders


class LazyPrograms(Mapping[str, CelProgram]):
    """Compiled CEL by id, each compiled on first use (the sources compiled when checked)."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self._sources = dict(sources)
        self._programs: dict[str, CelProgram] = {}

    def __getitem__(self, key: str) -> CelProgram:
        program = self._programs.get(key)
        if program is None:
            from pytest_harness.cel import compile_expression

            program = self._programs[key] = compile_expression(self._sources[key])
        return program

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)

    def __repr__(self) -> str:
        return f"LazyPrograms({sorted(self._sources)})"


def _typed(tp: type[Any], value: Any) -> Any:
    if type(value) is not tp:
        raise TypeError(f"expected {tp.__name__}, got {type(value).__name__}")
    return value


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def build(tp: Any, value: Any) -> Any:
    """`value` (JSON data written by [`encode`][]) as the type `tp` of the spec's schema.

    Exact types only (an integer is not a float, nor a boolean an integer): anything else is a
    `TypeError` or `ValueError`, which the reader takes for a miss.
    """
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, UnionType):
        arms = get_args(tp)
        if value is None and NoneType in arms:
            return None
        for arm in arms:
            if arm is not NoneType and _fits(arm, value):
                return build(arm, value)
        raise TypeError(f"{type(value).__name__} fits no member of {tp}")
    if origin is tuple:
        args = get_args(tp)
        if not isinstance(value, list) or len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"expected a list for {tp}")
        return tuple(build(args[0], item) for item in value)
    if origin is list:
        return [build(get_args(tp)[0], item) for item in _typed(list, value)]
    if origin is dict:
        key_type, item_type = get_args(tp)
        return {_typed(key_type, k): build(item_type, v) for k, v in _typed(dict, value).items()}
    if origin is Literal:
        if value not in get_args(tp) or isinstance(value, bool):
            raise ValueError(f"{value!r} is not one of {get_args(tp)}")
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(_typed(str, value))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        fields = dataclasses.fields(tp)
        data = _typed(dict, value)
        if set(data) != {f.name for f in fields}:
            raise ValueError(f"the fields of {tp.__name__} differ")
        hints = _hints(tp)
        return tp(**{f.name: build(hints[f.name], data[f.name]) for f in fields})
    if tp is float and type(value) is int:
        raise TypeError("a float is written with a point")
    if tp in (str, int, float, bool):
        return _typed(tp, value)
    raise TypeError(f"no reading for {tp}")


def _fits(tp: Any, value: Any) -> bool:
    """Whether JSON `value` has the shape of `tp` (which member of a union it was written as)."""
    origin = get_origin(tp)
    if tp is Any:
        return True
    if origin in (tuple, list):
        return isinstance(value, list)
    if origin is dict or (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
        return isinstance(value, dict)
    if origin is Literal:
        return value in get_args(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return isinstance(value, str)
    return type(value) is tp


# -- writing ------------------------------------------------------------------------------------


def encode(value: Any) -> Any:
    """A value of the spec's schema as JSON data; `TypeError` for what JSON cannot hold as is."""
    if value is None or type(value) in (str, int, bool):
        return value
    if type(value) is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise TypeError("JSON has no NaN or infinity")
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if type(value) in (tuple, list):
        return [encode(item) for item in value]
    if type(value) is dict:
        if not all(type(k) is str for k in value):
            raise TypeError("JSON keys are strings")
        return {k: encode(v) for k, v in value.items()}
    raise TypeError(f"cannot keep a {type(value).__name__} in the spec cache")


def write(
    spec: Spec,
    record: bool | None,
    spec_sha: str | None,
    baseline_sha: str | None,
    document_digest: str,
) -> None:
    """Keep `spec`, checked from a spec file of sha256 `spec_sha`, unless the files moved on.

    Nothing is written when a file changed since it was read (`spec_sha` and `baseline_sha`
    are the digests of the bytes the checks read; a file the spec names, when the digest read
    back differs), when a value does not survive the trip through JSON unchanged, or when the
    folder cannot be written. `document_digest` is the digest of the document alone, as
    `spec.build` computed it.
    """
    if spec_sha is None or file_digest(spec.path) != spec_sha:
        return
    baseline: tuple[str, str] | None = None
    if spec.baseline_path is not None:
        if baseline_sha is None or file_digest(spec.baseline_path) != baseline_sha:
            return
        baseline = (str(spec.baseline_path), baseline_sha)
    try:
        body = {
            "document": encode(spec.document),
            "baseline_rules": encode(spec.baseline_rules),
            "baseline_guards": encode(spec.baseline_guards),
            "locations": [[list(p), f, line] for p, (f, line) in spec.locations.items()],
            "path": str(spec.path),
            "env": spec.env,
            "document_digest": document_digest,
            "baseline_path": None if spec.baseline_path is None else str(spec.baseline_path),
        }
        entry = {"key": _key(spec.path, spec_sha, spec.env, record, baseline), "spec": body}
        text = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        again = _spec(json.loads(text)["spec"])
    except (TypeError, ValueError):
        return
    if not _same(again, spec):
        return
    checksum = hashlib.sha256(text).hexdigest().encode("ascii")
    publish(cache_file(spec.path, spec.env, record), checksum + b"\n" + text)


def _same(a: Spec, b: Spec) -> bool:
    """Whether two specs hold the same values (compiled programs compared by their ids)."""
    return (
        a.document == b.document
        and a.path == b.path
        and a.env == b.env
        and a.digest == b.digest
        and dict(a.locations) == dict(b.locations)
        and a.baseline_rules == b.baseline_rules
        and a.baseline_guards == b.baseline_guards
        and a.baseline_path == b.baseline_path
        and list(a.rule_programs) == list(b.rule_programs)
        and list(a.guard_programs) == list(b.guard_programs)
        and list(a.grader_programs) == list(b.grader_programs)
    )


def publish(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically; give up silently when the folder is not writable."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
