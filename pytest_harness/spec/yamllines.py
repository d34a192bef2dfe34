"""The fastest golden-file path: block YAML as our own dumper writes it, read line by line.

`block_yaml` reads the subset of block YAML that `recording.golden.dump_recording` emits:
block mappings with plain keys, block sequences (indentless under a key too), `{}` and `[]`,
plain scalars on one line, single-quoted and escape-free double-quoted scalars on one line,
and literal blocks (`|`, with an indentation and a chomping indicator). Plain scalars resolve
as PyYAML's safe loader resolves them: `null`, `true`/`false`, decimal integers and decimals
are built here; any other word the loader would read as a bool, a null, a number or a date
makes the reader decline.

It never guesses: anything outside the subset (a tab, a comment, a blank line between keys, a
flow collection, an anchor, a tag, a continued or folded scalar, a quoted key, a key that is
not a string, a duplicate key, a document marker, nesting deeper than `MAX_DEPTH`, ...) makes
it return `NOT_PLAIN`, and the caller reads the text again with `plain_yaml` (libyaml's events)
and then `parse_yaml`, which builds what the document means or raises the error with its
line. For the texts it answers, it returns exactly what `yaml.safe_load` returns.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from pytest_harness.spec.yamlio import NOT_PLAIN

__all__ = ["MAX_DEPTH", "block_yaml"]

MAX_DEPTH = 100
"""The deepest nesting read here (the strict reader takes 200)."""

_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*):(?: (.*))?\Z")
"""A mapping entry with a plain key: `key:` (group 2 None) or `key: value`."""
_QUOTED_KEY = re.compile(r"'((?:[^']|'')*)':(?: (.*))?\Z")
"""... with a single-quoted key (the dumper quotes `'on':`)."""
_BAD_TEXT = re.compile(
    "[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
"""Characters outside the subset: tabs, CR, NEL, line and paragraph separators, a BOM (not
printable in YAML's sense: U+FEFF is printable but a BOM), and what YAML does not print."""
_BAD_ASCII = tuple(chr(c) for c in (*range(0x0A), *range(0x0B, 0x20), 0x7F))
"""`_BAD_TEXT`'s characters in ASCII: the controls but the line break, and DEL. An ASCII text
is searched for each (a `str` search for one character runs at memory speed), a tenth of what
the character class costs over a golden file."""
_AFTER_COLON = ("", " ")
"""What follows the colon of a `key:` or `key: value` entry."""
_HINTS = "123456789"
"""A literal block's indentation indicator (YAML takes 1-9, in ASCII digits only)."""
_LONGEST_KEY = 128
"""Longer keys are left to the loaders (the dumper writes them as `? ` keys; YAML allows an
implicit key of at most 1,024 characters)."""
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_FLOAT = re.compile(r"-?[0-9]+\.[0-9]+\Z")
_NUMBER_START = frozenset("-0123456789")
"""The first characters of what `_INT` and `_FLOAT` match."""
_WORDS: dict[str, Any] = {
    **dict.fromkeys(("null", "Null", "NULL", "~"), None),
    **dict.fromkeys(("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"), True),
    **dict.fromkeys(("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"), False),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), float("inf")),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), float("-inf")),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), float("nan")),
}
"""Plain scalars the safe loader reads as a null, a bool or a special float."""
_RESOLVERS: dict[str, list[tuple[str, re.Pattern[str]]]] = {
    k: v for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items() if k
}
"""First character → the loader's implicit resolvers (a plain scalar they match is no str)."""
_INDICATORS = frozenset(" ,[]{}#&*!|>'\"%@`")
"""First characters that keep a scalar from being plain."""
_PLAIN_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
"""First characters of a value that can only be a plain scalar."""
_CHOMP = {"": "clip", "-": "strip", "+": "keep"}


class _Decline(Exception):
    """The text is outside the subset."""


def block_yaml(text: str, *, max_bytes: int) -> Any:
    """The value of `text` as `yaml.safe_load` builds it, or `NOT_PLAIN` outside the subset.

    Only a document of at most `max_bytes` / 8 characters is read here (what it builds then
    stays far below the cap `plain_yaml` and `parse_yaml` count).
    """
    if len(text) * 8 > max_bytes or not text.endswith("\n") or _bad_text(text):
        return NOT_PLAIN  # the dumper ends every file with a line break
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines:
        return NOT_PLAIN
    reader = _Reader(lines)
    try:
        data = reader.node(0, lines[0], 0)
    except (_Decline, RecursionError, ValueError):  # ValueError: an int over Python's digits
        return NOT_PLAIN
    if reader.i != len(lines):
        return NOT_PLAIN
    return data


def _bad_text(text: str) -> bool:
    """Whether `text` holds a character of `_BAD_TEXT`."""
    if text.isascii():
        return any(c in text for c in _BAD_ASCII)
    return _BAD_TEXT.search(text) is not None


def _key_entry(content: str) -> tuple[str, str | None]:
    """The key and the rest of a mapping entry `content` (`_KEY` or `_QUOTED_KEY`)."""
    match = _KEY.match(content)
    if match is not None:
        key, rest = match.groups()
        if key in _WORDS:  # a key the loader reads as a bool or a null
            raise _Decline
        return key, rest
    match = _QUOTED_KEY.match(content)
    if match is None:
        raise _Decline
    key, rest = match.groups()
    return key.replace("''", "'"), rest


def _dash(content: str) -> bool:
    """Whether `content` starts a block sequence entry (`-` alone or `- ...`)."""
    return content[:1] == "-" and (len(content) == 1 or content[1] == " ")


class _Reader:
    """A cursor over the lines; each method reads one node and leaves `i` after it."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.i = 0

    def node(self, col: int, content: str, depth: int) -> Any:
        """The collection starting with `content`, the part of line `i` from column `col`."""
        if depth >= MAX_DEPTH:
            raise _Decline
        if _dash(content):
            return self.sequence(col, content, depth + 1)
        return self.mapping(col, content, depth + 1)

    def mapping(
        self, col: int, content: str, depth: int, entry: tuple[str, str | None] | None = None
    ) -> dict[str, Any]:
        """A block mapping whose keys are at column `col`; its first entry is `content`.

        `entry`: the key and the rest of `content`, when the caller has split them.
        """
        lines = self.lines
        count = len(lines)
        result: dict[str, Any] = {}
        rest: str | None
        i = self.i
        while True:
            if entry is None:
                # `key: rest` or `key:` with an identifier key: split without a regex
                key, colon, after = content.partition(":")
                if colon and key.isidentifier() and key.isascii() and key not in _WORDS:
                    if not after:
                        rest = None
                    elif after[0] == " ":
                        rest = after[1:]
                    else:
                        raise _Decline  # `key:x` is a plain scalar, no entry
                else:
                    key, rest = _key_entry(content)
            else:
                key, rest = entry
                entry = None
            if key in result or len(key) > _LONGEST_KEY:
                raise _Decline
            i += 1
            if rest is None:
                self.i = i
                result[key] = self.nested(col, depth, indentless=True)
                i = self.i
            elif rest[:1] in _PLAIN_START:  # the common case, inline
                if rest[0] in _RESOLVERS or rest[-1] in ": " or ": " in rest or " #" in rest:
                    result[key] = _plain(rest)  # resolved, or declined
                else:
                    result[key] = rest  # what `_plain` returns for it, without the call
            else:
                self.i = i - 1
                result[key] = self.inline(col, rest)
                i = self.i
            if i >= count:
                self.i = i
                return result
            line = lines[i]
            content = line.lstrip(" ")
            indent = len(line) - len(content)
            if indent != col:
                if indent < col:
                    self.i = i
                    return result
                raise _Decline
            if not content or (content[0] == "-" and _dash(content)):
                raise _Decline

    def sequence(self, col: int, content: str, depth: int) -> list[Any]:
        """A block sequence whose dashes are at column `col`; its first entry is `content`."""
        lines = self.lines
        count = len(lines)
        items: list[Any] = []
        while True:
            if content == "-":
                self.i += 1
                items.append(self.nested(col, depth, indentless=False))
            else:
                rest = content[2:]
                if rest[:1] == " " or not rest:
                    raise _Decline
                if _dash(rest):
                    items.append(self.sequence(col + 2, rest, depth + 1))
                else:
                    key, colon, after = rest.partition(":")
                    if (
                        colon
                        and key.isidentifier()
                        and key.isascii()
                        and key not in _WORDS
                        and after[:1] in _AFTER_COLON
                    ):  # `- key: ...` with an identifier key: a mapping, split without a regex
                        entry = key, after[1:] if after else None
                        items.append(self.mapping(col + 2, rest, depth + 1, entry))
                    elif _KEY.match(rest) is not None or _QUOTED_KEY.match(rest) is not None:
                        items.append(self.mapping(col + 2, rest, depth + 1))
                    else:
                        items.append(self.inline(col, rest))
            i = self.i
            if i >= count:
                return items
            line = lines[i]
            content = line.lstrip(" ")
            indent = len(line) - len(content)
            if indent < col or (indent == col and not _dash(content)):
                return items
            if indent > col:
                raise _Decline

    def nested(self, col: int, depth: int, *, indentless: bool) -> Any:
        """The value after `key:` or a lone `-` held at column `col`: the lines below, or null.

        A sequence under a key may start at the key's own column (`indentless`).
        """
        if self.i >= len(self.lines):
            return None
        line = self.lines[self.i]
        content = line.lstrip(" ")
        indent = len(line) - len(content)
        if not content:
            raise _Decline
        if indent > col:
            return self.node(indent, content, depth)
        if indentless and indent == col and _dash(content):
            return self.sequence(col, content, depth + 1)
        return None

    def inline(self, col: int, rest: str) -> Any:
        """The scalar (or empty collection) `rest` of line `i`, held by the entry at `col`."""
        self.i += 1
        if not rest:
            raise _Decline  # `key: ` with a trailing space
        first = rest[0]
        if first == "'":
            inner = rest[1:-1]
            if len(rest) < 2 or rest[-1] != "'" or "'" in inner.replace("''", ""):
                raise _Decline
            return inner.replace("''", "'")
        if first == '"':
            inner = rest[1:-1]
            if len(rest) < 2 or rest[-1] != '"' or '"' in inner or "\\" in inner:
                raise _Decline
            return inner
        if first == "|":
            return self.literal(col, rest)
        if rest == "{}":
            return {}
        if rest == "[]":
            return []
        return _plain(rest)

    def literal(self, col: int, header: str) -> str:
        """A literal block (`|`, `|-`, `|+`, `|2-`, ...) held by the entry at column `col`."""
        indicators = header[1:]
        hint = 0
        if indicators[:1] and indicators[0] in _HINTS:
            hint, indicators = int(indicators[0]), indicators[1:]
        elif indicators[1:2] and indicators[1] in _HINTS:
            hint, indicators = int(indicators[1]), indicators[0]
        chomp = _CHOMP.get(indicators)
        if chomp is None or hint > 9:
            raise _Decline
        lines = self.lines
        count = len(lines)
        i = self.i
        if hint:
            indent = col + hint
        else:
            if i >= count:
                raise _Decline
            line = lines[i]
            indent = len(line) - len(line.lstrip(" "))
            if indent <= col or indent == len(line):
                raise _Decline
        parts: list[str] = []
        while i < count:
            line = lines[i]
            content = line.lstrip(" ")
            if content and len(line) - len(content) < indent:
                break
            parts.append(line[indent:])
            i += 1
        self.i = i
        kept = len(parts)
        while kept and not parts[kept - 1]:
            kept -= 1
        if not kept:
            raise _Decline
        body = "\n".join(parts[:kept])
        if chomp == "strip":
            return body
        if chomp == "clip":
            return body + "\n"
        return body + "\n" * (len(parts) - kept + 1)


def _plain(text: str) -> Any:
    """A plain scalar on one line, as the safe loader resolves it; `_Decline` for the others."""
    first = text[0]
    if (
        first in _INDICATORS
        or (first in "-?:" and (len(text) == 1 or text[1] == " "))
        or text[-1] in ": "
        or ": " in text
        or " #" in text
    ):
        raise _Decline
    if first not in _RESOLVERS:
        return text
    if text in _WORDS:
        return _WORDS[text]
    if first in _NUMBER_START:
        if _INT.match(text):
            return int(text)
        if _FLOAT.match(text):
            return float(text)
    for _tag, pattern in _RESOLVERS[first]:
        if pattern.match(text):
            raise _Decline
    return text
