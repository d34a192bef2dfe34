"""Safe YAML reading that remembers the line of every key.

`read_yaml` and `parse_yaml` compose the document with PyYAML's safe loader (the C one when
libyaml is available) and build plain Python values from the node tree themselves, so that each
key path (`("tasks", "orders", "tools", 1)`) gets its 1-based line. Building the values by hand
is also where the limits of DESIGN §10 are enforced: a size cap, duplicate keys rejected, alias
expansion and nesting bounded, unknown tags refused. Alias expansion is bounded twice: by the
nodes it adds (`MAX_ALIAS_NODES`) and by the bytes the built document holds, which may not
exceed the file's own size cap (1 MiB for specs and scripts, 32 MiB for recordings), so a
small file that names a large string many times is refused before anything holds its
expansion (a 900 KB spec aliasing a 600 KB string 99,000 times would make 60 GB of JSON).
Every problem is a `SpecError` with the file and line. Nothing here knows about
`harness.yaml`: scripts and recordings use it too.

Mapping keys are always strings: a plain scalar key keeps its text as written, so `on:` is the
key `"on"` (not `True`) and `1:` is `"1"`. Merge keys (`<<: *defaults`) work as in PyYAML.

`plain_yaml` is the fast path for files read in bulk (golden recordings): it builds the values
straight from libyaml's events, keeping no lines, and answers only for plain documents: no
anchor, alias, tag, merge key, duplicate key or non-string key, nested at most `MAX_DEPTH`
deep and within the size cap. For those it returns exactly what `parse_yaml` builds; for any
other text (or any error) it returns `NOT_PLAIN`, and the caller parses the text again with
`parse_yaml`, which builds what the document means or raises the error with its line.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.events import (
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from pytest_harness.errors import SpecError
from pytest_harness.spec.spec import KeyPath, format_key_path

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_BYTES",
    "MAX_DEPTH",
    "NOT_PLAIN",
    "YamlDoc",
    "display_path",
    "parse_yaml",
    "plain_yaml",
    "read_text",
    "read_yaml",
]

MAX_BYTES = 1_048_576
"""The default cap on the size of a YAML file."""
MAX_ALIAS_NODES = 100_000
"""The most nodes that alias expansion may add to a document (the "billion laughs" bound)."""
MAX_DEPTH = 200
"""The deepest nesting of mappings and sequences accepted."""

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class YamlDoc:
    """A parsed YAML file: its plain Python `data`, the line of every key path, and its name."""

    data: Any
    lines: dict[KeyPath, int]
    file: str

    def line(self, path: KeyPath) -> int | None:
        """Return the line of `path`, or of its nearest ancestor that has one."""
        probe = tuple(path)
        while True:
            if probe in self.lines:
                return self.lines[probe]
            if not probe:
                return None
            probe = probe[:-1]

    def error(self, reason: str, path: KeyPath) -> SpecError:
        """Return a `SpecError` pointing at `path` in this file."""
        return SpecError(reason, file=self.file, line=self.line(path), key=format_key_path(path))


def display_path(path: str | Path) -> str:
    """How a file is named in messages: relative to the current directory when inside it."""
    absolute = os.path.abspath(path)  # string work: golden files are named in bulk
    try:
        here = os.getcwd()
    except OSError:
        return absolute
    if absolute == here:
        return "."
    inside = here if here.endswith(os.sep) else here + os.sep
    if not absolute.startswith(inside) or absolute.startswith(os.sep, len(inside)):
        return absolute  # outside (or POSIX's `//x`, which pathlib keeps apart from `/`)
    return absolute[len(inside) :]


def read_yaml(path: Path, *, display: str | None = None, max_bytes: int = MAX_BYTES) -> YamlDoc:
    """Read and parse one YAML file, refusing files over `max_bytes` or not in UTF-8.

    The document built from it may not hold more than `max_bytes` either (alias expansion is
    bounded by what it produces). Only regular files are read: a device (`/dev/zero`), a pipe
    or a socket is refused before anything is read from it.
    """
    file = display if display is not None else display_path(path)
    return parse_yaml(
        read_text(path, file=file, max_bytes=max_bytes), file=file, max_bytes=max_bytes
    )


def read_text(path: Path, *, file: str, max_bytes: int = MAX_BYTES) -> str:
    """The text of the YAML file at `path`, as `read_yaml` reads it (`file` names it in errors)."""
    try:
        kind = os.stat(path).st_mode
        if not stat.S_ISREG(kind) and not stat.S_ISDIR(kind):
            raise SpecError(
                f"a YAML file was expected, this is {_file_kind(kind)}: {path}", file=file
            )
        with open(path, "rb") as stream:
            # Sized by the file, not the cap: `read(n)` allocates n bytes first (32 MiB for a
            # golden file of 4 KiB). A file that grew since `fstat` is read on to the cap.
            size = os.fstat(stream.fileno()).st_size
            raw = stream.read(min(size, max_bytes) + 1)
            if len(raw) > size and len(raw) <= max_bytes:
                raw += stream.read(max_bytes + 1 - len(raw))
            if len(raw) > max_bytes:
                size = os.fstat(stream.fileno()).st_size
                raise SpecError(
                    f"the file is {max(size, len(raw))} bytes, over the cap of {max_bytes} bytes",
                    file=file,
                )
    except FileNotFoundError:
        raise SpecError(f"file not found: {Path(path).absolute()}", file=file) from None
    except IsADirectoryError:
        raise SpecError(f"a YAML file was expected, this is a folder: {path}", file=file) from None
    except PermissionError:
        raise SpecError(f"cannot read the file (permission denied): {path}", file=file) from None
    except OSError as exc:
        raise SpecError(f"cannot read the file: {exc.strerror or exc}: {path}", file=file) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise SpecError(
            f"the file is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}",
            file=file,
            line=line,
        ) from None


def _file_kind(mode: int) -> str:
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def parse_yaml(text: str, *, file: str, max_bytes: int = MAX_BYTES) -> YamlDoc:
    """Parse YAML `text` (one document) into plain values and the line of every key path.

    The built document may hold at most `max_bytes` (its scalars' text and a byte of
    structure per item), however many aliases it uses; a larger one is a `SpecError`.
    """
    loader = _Loader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            raise _syntax_error(exc, file) from None
        except yaml.reader.ReaderError as exc:
            line = text.count("\n", 0, exc.position) + 1
            raise SpecError(f"invalid YAML: {exc.reason}", file=file, line=line) from None
        except yaml.YAMLError as exc:
            raise SpecError(f"invalid YAML: {exc}", file=file) from None
        except RecursionError:
            raise SpecError(
                f"invalid YAML: nested deeper than Python can read (the limit is {MAX_DEPTH})",
                file=file,
            ) from None
        if root is None:
            return YamlDoc(data=None, lines={}, file=file)
        builder = _Builder(loader, file, max_bytes)
        data = builder.build(root, (), 0)
        return YamlDoc(data=data, lines=builder.lines, file=file)
    finally:
        loader.dispose()


def _syntax_error(exc: yaml.MarkedYAMLError, file: str) -> SpecError:
    mark = exc.problem_mark or exc.context_mark
    message = exc.problem or "malformed document"
    if exc.context and not exc.context.startswith("while"):
        message = f"{exc.context}, {message}"  # e.g. "expected a single document…, but found…"
    elif exc.context:
        message += f" ({exc.context}"
        if exc.context_mark is not None and exc.context_mark is not mark:
            message += f" at line {exc.context_mark.line + 1}"
        message += ")"
    line = mark.line + 1 if mark is not None else None
    return SpecError(f"invalid YAML: {message}", file=file, line=line)


class _Builder:
    """Plain values from a node tree, with lines, counting what alias expansion adds."""

    def __init__(self, constructor: SafeConstructor, file: str, max_bytes: int) -> None:
        self.constructor = constructor
        self.file = file
        self.max_bytes = max_bytes
        self._produced = 0
        """Bytes of the document built so far: scalar text plus one per node."""
        self.lines: dict[KeyPath, int] = {}
        self._seen: set[int] = set()
        self._active: set[int] = set()
        self._expanded = 0

    def error(self, reason: str, node: Node, path: KeyPath) -> SpecError:
        return SpecError(
            reason,
            file=self.file,
            line=node.start_mark.line + 1,
            key=format_key_path(path) or None,
        )

    def build(self, node: Node, path: KeyPath, depth: int) -> Any:
        """Return the value of `node` at `path`; `depth` counts the collections around it."""
        self.lines[path] = node.start_mark.line + 1
        key = id(node)
        produced = 1
        if isinstance(node, ScalarNode):
            value = node.value
            produced += len(value) if value.isascii() else len(value.encode("utf-8", "replace"))
        self._produced += produced
        if self._produced > self.max_bytes:
            raise self.error(
                f"the document expands to more than {self.max_bytes} bytes, the cap for this "
                "file (its aliases repeat more than the file holds); write the repeated parts "
                "out or use fewer aliases",
                node,
                (),
            )
        if key in self._seen:  # reached again through an alias: this copy is expansion
            self._expanded += 1
            if self._expanded > MAX_ALIAS_NODES:
                raise self.error(
                    f"alias expansion exceeds the limit of {MAX_ALIAS_NODES} nodes; write the "
                    "repeated parts out or nest fewer aliases",
                    node,
                    (),
                )
        else:
            self._seen.add(key)
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        if depth >= MAX_DEPTH:
            raise self.error(f"nested deeper than {MAX_DEPTH} levels", node, ())
        if key in self._active:
            raise self.error("a recursive alias (an anchor used inside itself)", node, path)
        self._active.add(key)
        try:
            if isinstance(node, SequenceNode) and node.tag == _SEQ:
                return [
                    self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)
                ]
            if isinstance(node, MappingNode) and node.tag == _MAP:
                return self._mapping(node, path, depth)
            raise self.error(f"unsupported YAML tag {node.tag!r}", node, path)
        finally:
            self._active.discard(key)

    def _scalar(self, node: ScalarNode, path: KeyPath) -> Any:
        if node.tag == _STR:
            return node.value
        try:
            return self.constructor.construct_object(node)
        except yaml.MarkedYAMLError as exc:
            raise self.error(f"invalid value: {exc.problem}", node, path) from None
        except (ValueError, OverflowError, IndexError) as exc:  # 2001-13-45, `!!int` of ""
            reason = str(exc) if not isinstance(exc, IndexError) else f"not a {node.tag}"
            raise self.error(f"invalid {node.value!r}: {reason}", node, path) from None

    def _key(self, node: Node, path: KeyPath) -> str:
        if not isinstance(node, ScalarNode):
            raise self.error(
                "a mapping key must be a plain value, not a list or mapping", node, path
            )
        value = self._scalar(node, path)
        return value if isinstance(value, str) else str(node.value)

    def _mapping(self, node: MappingNode, path: KeyPath, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        merges: list[Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                merges.append(value_node)
                continue
            key = self._key(key_node, path)
            here = (*path, key)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise self.error(
                    f"duplicate key {key!r} (first at line {first_line[key]})", key_node, here
                )
            first_line[key] = line
            result[key] = self.build(value_node, here, depth + 1)
            self.lines[here] = line
        for source in merges:
            self._merge(source, result, path, depth)
        return result

    def _merge(self, source: Node, into: dict[str, Any], path: KeyPath, depth: int) -> None:
        """Apply `<<: *x` or `<<: [*x, *y]`: keys already present win, earlier sources first."""
        sources = source.value if isinstance(source, SequenceNode) else [source]
        for item in sources:
            if not (isinstance(item, MappingNode) and item.tag == _MAP):
                raise self.error("a merge key (<<) takes a mapping or a list of them", item, path)
            outer, self.lines = self.lines, {}
            try:
                merged = self.build(item, path, depth)
                merged_lines = self.lines
            finally:
                self.lines = outer
            fresh = {k for k in merged if k not in into}
            for k in fresh:
                into[k] = merged[k]
            for p, line in merged_lines.items():
                if len(p) > len(path) and p[len(path)] in fresh:
                    self.lines[p] = line


# -- the fast path: plain documents, no lines ------------------------------------------------

NOT_PLAIN: Any = object()
"""What `plain_yaml` returns for a text it leaves to `parse_yaml`."""

_PLAIN_TAGS = frozenset(
    {
        "tag:yaml.org,2002:null",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:timestamp",
    }
)
"""The implicit scalar tags `plain_yaml` builds (the others make `parse_yaml` refuse)."""


class _NotPlain(Exception):
    """The document needs `parse_yaml`: an anchor, a tag, a duplicate key, an error, ..."""


def plain_yaml(text: str, *, max_bytes: int = MAX_BYTES) -> Any:
    """The value of a plain YAML document, as `parse_yaml` builds it, or `NOT_PLAIN`.

    Plain: one document (or none) without anchors, aliases, tags, merge keys, duplicate or
    non-string keys, at most `MAX_DEPTH` deep, building at most `max_bytes` as `parse_yaml`
    counts them. Whatever else the text holds, even a syntax error, is `NOT_PLAIN`: the
    caller then calls `parse_yaml`, which answers for it (or raises with the line).
    """
    loader = _Loader(text)
    try:
        try:
            return _PlainBuilder(loader, max_bytes).document()
        except Exception:  # the slow path says what it is, with the line
            return NOT_PLAIN
    finally:
        loader.dispose()


class _PlainBuilder:
    """Values straight from a loader's events (see `plain_yaml`); `_NotPlain` to give up.

    Written for speed: scalars, by far the most common event, are read inline in the loops.
    """

    def __init__(self, loader: Any, max_bytes: int) -> None:
        self.loader = loader
        self.next = loader.get_event
        self.max_bytes = max_bytes
        self.produced = 0
        """Bytes built so far, counted as `parse_yaml` counts them. Checked once, at the end:
        without aliases the document is at most a small multiple of the text, itself capped."""
        self.resolvers: dict[str | None, list[tuple[str, Any]]] = loader.yaml_implicit_resolvers
        self.wildcard: list[tuple[str, Any]] = self.resolvers.get(None, [])
        self.constructors: dict[str, Any] = loader.yaml_constructors
        self.string_keys: set[str] = set()
        """Plain keys already found to be strings (a file repeats its keys)."""

    def document(self) -> Any:
        """Read the stream's one document, as `parse_yaml` would build it."""
        self.next()  # StreamStart
        if isinstance(self.next(), StreamEndEvent):
            return None
        data = self.value(self.next(), 0)
        self.next()  # DocumentEnd
        if not isinstance(self.next(), StreamEndEvent):
            raise _NotPlain("more than one document")
        if self.produced > self.max_bytes:
            raise _NotPlain("over the size cap")
        return data

    def value(self, event: Any, depth: int) -> Any:
        """The value of the node that starts with `event`, `depth` collections down."""
        if event.anchor is not None or event.tag is not None:
            raise _NotPlain("an anchor or a tag")
        kind = type(event)
        if kind is ScalarEvent:
            return self.scalar(event)
        self.produced += 1
        if depth >= MAX_DEPTH:
            raise _NotPlain("nested too deep")
        depth += 1
        get = self.next
        if kind is SequenceStartEvent:
            items: list[Any] = []
            while True:
                event = get()
                kind = type(event)
                if kind is SequenceEndEvent:
                    return items
                if kind is ScalarEvent and event.tag is None and event.anchor is None:
                    items.append(self.scalar(event))
                else:
                    items.append(self.value(event, depth))
        if kind is MappingStartEvent:
            mapping: dict[str, Any] = {}
            while True:
                event = get()
                kind = type(event)
                if kind is MappingEndEvent:
                    return mapping
                if kind is not ScalarEvent or event.anchor is not None or event.tag is not None:
                    raise _NotPlain("a key that is not a plain string")
                key: str = event.value
                if event.implicit[0] and key not in self.string_keys:
                    if self.tag(key) is not None:
                        raise _NotPlain("a key that is not a string (`on`, `1`, `<<`, ...)")
                    self.string_keys.add(key)
                if key in mapping:
                    raise _NotPlain("a duplicate key")
                event = get()
                if type(event) is ScalarEvent and event.tag is None and event.anchor is None:
                    mapping[key] = self.scalar(event)
                else:
                    mapping[key] = self.value(event, depth)
        raise _NotPlain("an alias")

    def scalar(self, event: Any) -> Any:
        """The value of an untagged scalar without an anchor."""
        text: str = event.value
        self.produced += 1 + (len(text) if text.isascii() else len(text.encode("utf-8", "replace")))
        if not event.implicit[0]:  # quoted or a block: a string
            return text
        tag = self.tag(text)
        if tag is None:
            return text
        if tag not in _PLAIN_TAGS:
            raise _NotPlain(f"a {tag} scalar")
        return self.constructors[tag](self.loader, ScalarNode(tag, text))

    def tag(self, text: str) -> str | None:
        """The implicit tag of a plain scalar, as the loader's resolver finds it; None for str."""
        resolvers = self.resolvers.get(text[0] if text else "")
        if resolvers is None and not self.wildcard:
            return None
        for tag, regexp in (resolvers or []) + self.wildcard:
            if regexp.match(text):
                return str(tag)
        return None
