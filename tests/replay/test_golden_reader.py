"""The golden file reader's fast paths (`block_yaml`, `plain_yaml`) agree with the strict one.

`block_yaml` reads the block YAML our dumper writes line by line; `plain_yaml` builds values
straight from libyaml's events and answers only for plain documents; `parse_yaml` builds them
from the node tree with the line of every key. Hypothesis checks, on generated YAML, hostile
YAML and mutated golden files, that whenever a fast path answers it answers exactly what
`yaml.safe_load` and the strict path build (types included), and that it never answers for a
text the strict path refuses: an invalid file is still an error with its line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_harness.errors import ArchiveError, SpecError
from pytest_harness.recording import golden
from pytest_harness.recording.model import Recording
from pytest_harness.spec import yamllines
from pytest_harness.spec.yamlio import NOT_PLAIN, parse_yaml, plain_yaml
from pytest_harness.spec.yamllines import block_yaml
from tests.strategies import json_like

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = sorted((ROOT / "recordings").rglob("*.yaml"))
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down (`1`, `1.0` and `True` differ; nan == nan)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def strict(text: str, max_bytes: int = 1_048_576) -> Any:
    """What `parse_yaml` builds, or the `SpecError` it raises."""
    try:
        return parse_yaml(text, file="x.yaml", max_bytes=max_bytes).data
    except SpecError as exc:
        return exc


def loaded(text: str) -> Any:
    """What `yaml.safe_load` returns, or the error it raises."""
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as exc:
        return exc


def check_agree(text: str, max_bytes: int = 1_048_576) -> Any:
    fast = plain_yaml(text, max_bytes=max_bytes)
    slow = strict(text, max_bytes)
    if isinstance(slow, SpecError):
        assert fast is NOT_PLAIN, f"the fast path read a file the strict one refuses: {slow}"
    elif fast is not NOT_PLAIN:
        assert same(fast, slow), (fast, slow)
    check_lines_agree(text, max_bytes)
    return fast


def check_lines_agree(text: str, max_bytes: int = 1_048_576) -> Any:
    """`block_yaml` answers what both `yaml.safe_load` and `parse_yaml` build, or declines."""
    fast = block_yaml(text, max_bytes=max_bytes)
    if fast is NOT_PLAIN:
        return fast
    slow = strict(text, max_bytes)
    assert not isinstance(slow, SpecError), (
        f"the line reader read a text the strict one refuses: {slow}"
    )
    assert same(fast, slow), (text, fast, slow)
    assert same(fast, loaded(text)), (text, fast, loaded(text))
    return fast


WORDS = ["on", "off", "yes", "no", "y", "n", "1", "0x1f", "1_000", "1.5e3", ".inf", "-.nan", "~"]
WORDS += ["null", "", "2001-12-14", "2001-13-45", "12:30", "<<", "=", "true", "False", "a b"]
data = json_like(WORDS)
dumped = st.builds(
    lambda doc, flow, unicode, start: yaml.safe_dump(
        doc, default_flow_style=flow, allow_unicode=unicode, explicit_start=start
    ),
    data,
    st.sampled_from([False, True, None]),
    st.booleans(),
    st.booleans(),
)
TOKENS = ["a", "on", "1", "1.5", "~", "<<", "'q'", '"\\L"', "|\n  x", ">\n  y", "&x", "*x"]
TOKENS += ["!!str", "!!int", "!tag", "!", "? ", ": ", "- ", "-", "[", "]", "{", "}", ", "]
TOKENS += ["\n", "\n  ", "\n    ", "#c", "---\n", "...\n", "\t", "2001-12-14", '"a\\x00"']
token_text = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)
documents = st.one_of(dumped, token_text, st.text(max_size=200))


@SETTINGS
@given(documents)
def test_the_fast_path_reads_what_the_strict_one_builds_or_declines(text: str) -> None:
    check_agree(text)


@SETTINGS
@given(data)
def test_the_fast_path_reads_every_plain_document_the_dumper_writes(doc: Any) -> None:
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    if isinstance(strict(text), SpecError):
        return  # e.g. a lone surrogate the dumper escapes and the reader refuses
    assert check_agree(text) is not NOT_PLAIN, text


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\na: 2\n",  # a duplicate key
        "on: 1\n",  # a key that resolves to a bool
        "1: one\n",  # ... to an int
        "base: &b {a: 1}\nx: {<<: *b}\n",  # an anchor, an alias, a merge key
        "x: !!str 1\n",  # a tag
        "x: ! y\n",  # the non-specific tag
        "--- a\n--- b\n",  # two documents
        "a: " + "[" * 201 + "]" * 201 + "\n",  # deeper than MAX_DEPTH
        "? [a, b]\n: c\n",  # a complex key
        "x: =\n",  # the value tag, which no constructor builds
        "x: 2001-13-45\n",  # a timestamp that is no date
        "x: [1, 2\n",  # a syntax error
    ],
)
def test_the_fast_path_leaves_what_is_not_plain_to_the_strict_one(text: str) -> None:
    assert plain_yaml(text) is NOT_PLAIN
    check_agree(text)


def test_the_fast_path_counts_the_size_cap_as_the_strict_one() -> None:
    text = 'x: "' + "\\L" * 100 + '"\n'  # 206 bytes of text build 301 bytes (U+2028 is 3)
    assert isinstance(strict(text, max_bytes=250), SpecError)
    assert plain_yaml(text, max_bytes=250) is NOT_PLAIN
    assert plain_yaml(text, max_bytes=400) == {"x": "\u2028" * 100}


def golden_dump(doc: Any) -> str:
    """`doc` written as `dump_recording` writes a recording."""
    return yaml.dump(
        doc,
        Dumper=golden._Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )


STRINGS = ["it's", 'say "hi"', "a: b", "a:b", "- x", "#x", "x #y", " lead", "trail ", "é ✓ 漢"]
STRINGS += ["two\nlines", "two\nlines\n", "\n\nblank first", " lead\nline", "ends\n\n\n", "x\n  y"]
STRINGS += ["'q'", '"q"', "|", ">", "[a]", "{a: 1}", "&a", "*a", "!t", "%", "@", "`", "?", ":"]
STRINGS += ["-", "-1", "+1", "0.5", "1.", "01", "0x1F", "1_0", "1e3", "null", "~", "on", "No"]
STRINGS += ["2001-12-14", "12:30", "<<", "=", "", " ", "a  b", "tab\tin", "x" * 120]
STRINGS += ["a\u2028    b", "p\u2029", "one\ntwo\u2028three\n", "nel\x85x", "\ufeffbom", "x\ufeff"]
golden_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(STRINGS)
    | st.text(alphabet=st.sampled_from(list("ab :#'\"\n-é✓ \u2028\u2029\x85\ufeff")), max_size=12)
    | st.text(max_size=12)
)
golden_like = st.recursive(
    golden_leaf,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["order_id", "on", "a b", "x.y", "_k", "'", "1", "é"])
            | st.text(max_size=6),
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@SETTINGS
@given(golden_like)
def test_the_line_reader_reads_what_safe_load_reads_or_declines(doc: Any) -> None:
    for text in (golden_dump(doc), golden_dump({"format": "x", "doc": doc})):
        check_lines_agree(text)


@SETTINGS
@given(st.dictionaries(st.sampled_from(["task", "input", "k_1"]), golden_leaf, min_size=1))
def test_the_line_reader_reads_plain_golden_values(doc: dict[str, Any]) -> None:
    text = golden_dump(doc)
    plain = all(
        isinstance(v, bool | int | type(None))
        or (isinstance(v, str) and v.isalnum() and v.isascii() and not v.isdigit())
        for v in doc.values()
    )
    answer = check_lines_agree(text)
    if plain and all(v not in ("on", "No", "null") for v in doc.values()):
        assert answer is not NOT_PLAIN, text


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\na: 2\n",  # a duplicate key
        "on: 1\n",  # a key that resolves to a bool
        "a: 1\n\nb: 2\n",  # a blank line between keys
        "a: 1 # c\n",  # a comment
        "a: long\n  continued\n",  # a plain scalar over two lines
        "a: 'quoted\n  on two'\n",  # a quoted one
        'a: "esc\\n"\n',  # a double-quoted escape
        "a: |\n\n  blank first\n",  # a literal block starting blank
        "a:\tb\n",  # a tab
        "a: [1]\n",  # a flow collection
        "a: &x 1\nb: *x\n",  # an anchor and an alias
        "a: 0x1F\n",  # an int the reader leaves to the loader
        "a: 2001-12-14\n",  # a date
        "--- \na: 1\n",  # a document marker
        "a:\n  - 1\n  b: 2\n",  # a syntax error
        "a: 1\n  b: 2\n",  # another
        "a: " + "1" * 5000 + "\n",  # an int over Python's digits
        "a: 'x\u2028    y'\n",  # a line separator (a line break to YAML)
        "a: |\n  one\u2029two\n",  # a paragraph separator in a literal block
        "a: |\n  no final line break",  # the last line of a literal block, unended
        "a: 1",  # any document without its final line break
        "a: |0\n  x\n",  # an indentation indicator out of range
        "a: |\u0662\n  x\n",  # one that is a digit but not ASCII
        "k" * 1100 + ": 1\n",  # a key longer than an implicit key may be
    ],
)
def test_the_line_reader_declines_what_is_outside_its_subset(text: str) -> None:
    assert block_yaml(text, max_bytes=1_048_576) is NOT_PLAIN
    check_agree(text)


@pytest.mark.parametrize(
    "text",
    [
        "- a:x\n",  # no entry: a colon with no space after it is part of a plain scalar
        "- 'on': 1\n- 'no': 2\n",  # quoted keys that would be words unquoted
        "- a.b: 1\n  c-d: 2\n  _e: 3\n",  # keys that are not identifiers, in a sequence
        "a.b:\n  k-1: x\n  k_2:\n  - 1\n",  # ... in a mapping
        "a:\n  b:\n    c: |\n      x\n  d: 1\n",  # back out of two mappings at once
    ],
)
def test_the_line_reader_reads_keys_and_entries_as_safe_load(text: str) -> None:
    assert block_yaml(text, max_bytes=1_048_576) is not NOT_PLAIN
    check_lines_agree(text)


@pytest.mark.parametrize(
    "text",
    [
        "a:x\n",  # a plain scalar where a mapping entry was expected
        "- on: 1\n",  # a word key in a sequence entry
        "a:\n  é: 1\n",  # a key outside ASCII (left to the loaders)
        "- a: 1\n  a: 2\n",  # a duplicate key in a sequence entry's mapping
    ],
)
def test_the_line_reader_declines_these_entries(text: str) -> None:
    assert block_yaml(text, max_bytes=1_048_576) is NOT_PLAIN
    check_agree(text)


@pytest.mark.parametrize("code", [*range(0x80), 0xA0, 0x2028, 0xFEFF])
def test_the_line_reader_declines_a_character_outside_its_subset_wherever_it_is(code: int) -> None:
    """An ASCII text is searched character by character, any other with the class: both the
    same (a tab, a CR, a control, DEL in a plain, quoted or literal scalar, or in a key)."""
    char = chr(code)
    bad = yamllines._BAD_TEXT.search(char) is not None
    for text in (f"a: b{char}c\n", f"a: 'b{char}c'\n", f"a: |\n  b{char}c\n", f"a{char}b: 1\n"):
        if bad:
            assert block_yaml(text, max_bytes=1_048_576) is NOT_PLAIN, repr(text)
        check_agree(text)


def test_the_line_reader_reads_the_projects_golden_files() -> None:
    for path in GOLDENS:
        text = path.read_text(encoding="utf-8")
        if "recording@2" in text:
            assert check_lines_agree(text) is not NOT_PLAIN, path


# -- golden files ---------------------------------------------------------------------------

VALUES = ["5", "on", "null", "[]", "{}", "'x'", "&a x", "*a", "!!str 3", "2001-12-14", "-1.5"]
VALUES += ["{extra: 1}", "[{}]", "completed", "nonsense", "pytest-harness/recording@1"]


def mutate(text: str, line: int, how: str, value: str) -> str:
    lines = text.splitlines(keepends=True)
    i = line % len(lines)
    target = lines[i]
    indent = target[: len(target) - len(target.lstrip())]
    if how == "delete":
        del lines[i]
    elif how == "duplicate":
        lines.insert(i, target)
    elif how == "extra key":
        lines.insert(i, f"{indent}extra_key: {value}\n")
    elif ":" in target:
        key = target.split(":", 1)[0]
        lines[i] = f"{key}: {value}\n"
    return "".join(lines)


golden_texts = st.builds(
    mutate,
    st.sampled_from([p.read_text(encoding="utf-8") for p in GOLDENS]),
    st.integers(min_value=0, max_value=10_000),
    st.sampled_from(["delete", "duplicate", "extra key", "value"]),
    st.sampled_from(VALUES),
)


@SETTINGS
@given(golden_texts)
def test_a_golden_file_reads_the_same_on_both_paths_or_fails_with_its_line(text: str) -> None:
    fast = golden._read_fast(text)
    try:
        slow = golden._read_strict(text, "g.yaml")
    except SpecError as exc:
        assert fast is None, f"the fast path read a golden file the strict one refuses: {exc}"
        assert exc.file == "g.yaml"
        assert exc.line is not None or "format" in str(exc) or "mapping" in str(exc)
        return
    if fast is not None:
        assert same(fast.model_dump(), slow.model_dump())


def test_the_projects_golden_files_take_the_fast_path() -> None:
    current = [p for p in GOLDENS if "recording@2" in p.read_text(encoding="utf-8")]
    assert current
    for path in current:
        text = path.read_text(encoding="utf-8")
        fast = golden._read_fast(text)
        assert fast is not None, path
        assert same(fast.model_dump(), golden._read_strict(text, path.name).model_dump())


def test_a_golden_file_with_an_unknown_key_still_names_its_line(tmp_path: Path) -> None:
    text = GOLDENS[0].read_text(encoding="utf-8").replace("\ninput:", "\nbogus: 1\ninput:", 1)
    line = text[: text.index("bogus:")].count("\n") + 1
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ArchiveError, match=rf"bad\.yaml:{line} bogus: unknown key 'bogus'"):
        Recording.load(path)


def test_a_golden_file_with_anchors_loads_on_the_strict_path(tmp_path: Path) -> None:
    data = yaml.safe_load(GOLDENS[0].read_text(encoding="utf-8"))
    data["principal"] = data["labels"] = {"id": "ann"}  # one object twice: an anchor, an alias
    text = yaml.safe_dump(data, sort_keys=False)
    assert "&id001" in text and "*id001" in text
    assert golden._read_fast(text) is None
    path = tmp_path / "anchored.yaml"
    path.write_text(text, encoding="utf-8")
    loaded = Recording.load(path)
    assert loaded.principal == loaded.labels == {"id": "ann"}
