"""Property tests: the spec, script, recording and archive loaders get only typed errors.

Hypothesis feeds each loader arbitrary bytes, arbitrary text, YAML documents built from the
loader's own vocabulary (so examples get past parsing into validation), and hostile YAML
(alias bombs, deep nesting, unsafe tags, bad scalars, duplicate and complex keys, several
documents, control characters). Each example must either load or raise the loader's typed
error (`SpecError` for specs and scripts, `ArchiveError` for recordings): never another
exception, a `MemoryError`, or a hang.

`HARNESS_PROPERTY_EXAMPLES` sets the examples per loader (default 150); each test prints how
many it ran (`-s`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest_harness as ph
from pytest_harness.errors import ArchiveError, HarnessError, SpecError
from pytest_harness.recording.model import Recording
from tests.strategies import json_like

EXAMPLES = int(os.environ.get("HARNESS_PROPERTY_EXAMPLES", "150"))

SPEC_WORDS = [
    "version",
    "name",
    "models",
    "default",
    "use",
    "scripted",
    "function",
    "script",
    "call",
    "tools",
    "rules",
    "guards",
    "tasks",
    "t",
    "prompt",
    "state",
    "sqlite",
    "memory",
    "path",
    "lease",
    "environments",
    "offline",
    "baseline",
    "when",
    "then",
    "approve",
    "deny",
    "id",
    "on",
    "check",
    "regex",
    "pattern",
    "action",
    "block",
    "budget",
    "steps",
    "deadline",
    "replay",
    "safe",
    "timeout",
    "say",
    "args",
    "match",
    "turns",
    "input",
    "error",
    "delay",
    "usage",
    "format",
    "task",
    "principal",
    "outcome",
    "status",
    "completed",
    "trace",
    "model_turns",
    "tool_results",
    "approvals",
    "history",
    "labels",
    "tenant",
    "output",
    "pytest-harness/recording@1",
    "pytest-harness/recording@2",
    "answer",
    "request_digest",
]

HOSTILE = [
    "a: &a ['x','x','x','x','x','x','x','x','x']\n"
    + "\n".join(
        f"b{i}: &b{i} [" + ",".join([f"*{'a' if i == 0 else f'b{i - 1}'}"] * 9) + "]"
        for i in range(8)
    ),
    "x: &x " + "'" + "y" * 5000 + "'\n" + "z: [" + ",".join(["*x"] * 400) + "]\n",
    "[" * 1500 + "]" * 1500,
    "{a: " * 1500 + "1" + "}" * 1500,
    "".join(" " * i + "- \n" for i in range(0, 3000, 2)),
    "!!python/object/apply:os.system ['echo owned']",
    "x: !!python/name:os.system\n",
    "x: !!binary aGVsbG8=\n",
    "x: !!set {a, b}\n",
    "x: !!omap [{a: 1}]\n",
    "!custom {a: 1}",
    "? [a, b]\n: c\n",
    "? {a: 1}\n: c\n",
    "x: 1e999999\n",
    "x: .nan\ny: -.inf\n",
    "x: 2001-13-45\n",
    "x: 99999999999999999999999999999999999999\n",
    "a: 1\na: 2\n",
    "base: &b {a: 1}\nx: {<<: *b, <<: *b}\n",
    "x: {<<: 5}\n",
    "x: {<<: [*undefined]}\n",
    "x: *nowhere\n",
    "&a [*a]\n",
    "--- a\n--- b\n",
    "\t- tab\n",
    "\ufeffversion: 1\n",
    'x: "\\ud800"\n',
    'x: "\\x00\\x01"\n',
    "\x00\x01\x02",
    "x: '" + "a" * 200_000 + "'\n",
    "version: 1\nname: n\ntasks: {t: {prompt: p}}\nmodels: {default: {use: scripted, "
    "script: [{say: hi, delay: -5}]}}\n",
    "format: pytest-harness/recording@99\ntask: t\n",
    "format: pytest-harness/recording@1\ntask: t\ninput: x\nprincipal: {id: a}\n"
    "outcome: {status: nonsense}\n",
    "format: pytest-harness/recording@0\n",
    "- {calls: [{name: x, args: 5}]}\n",
    "match: [{turns: [{say: x}], input: '[[['}]\n",
    "match: 5\n",
    "- say: x\n  usage: {input_tokens: -1}\n",
    "- error: meteor\n",
]

vocabulary_docs = json_like(SPEC_WORDS).map(lambda doc: yaml.safe_dump(doc, allow_unicode=True))


def hostile_mix(base: str, extra: str) -> str:
    return base if not extra else f"{extra}\n{base}"


documents = st.one_of(
    st.binary(max_size=600),
    st.text(max_size=600),
    vocabulary_docs,
    st.sampled_from(HOSTILE),
    st.builds(hostile_mix, vocabulary_docs, st.sampled_from(HOSTILE)),
)


ARCHIVE_MEMBERS = [
    "manifest.json",
    "records.jsonl",
    "artifacts/" + "0" * 64,
    "../evil",
    "/abs",
    "a\\b",
    "dup",
    "artifacts/x",
]


def zipped(members: list[tuple[str, bytes]], compress: bool) -> bytes:
    import io
    import warnings
    import zipfile

    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w", method) as archive:
        warnings.simplefilter("ignore")  # duplicate member names are one of the hostile cases
        for name, data in members:
            try:
                archive.writestr(name, data)
            except (IndexError, ValueError):
                continue  # a name zipfile reduces to nothing ("/", NUL): it cannot write it
    return buffer.getvalue()


json_bytes = vocabulary_docs.map(lambda text: text.encode("utf-8")) | st.sampled_from(
    [
        b'{"format": "pytest-harness/archive@1"}',
        b'{"format": "pytest-harness/archive@9", "records": 1}',
        b'{"a": 1, "a": 2}',
        b"[1e999999]",
        b'{"seq": 1, "kind": "run.started", "payload": {}}\n{"seq": 3}',
    ]
)
archives = st.one_of(
    st.binary(max_size=600),
    st.builds(
        zipped,
        st.lists(
            st.tuples(
                st.sampled_from(ARCHIVE_MEMBERS) | st.text(min_size=1, max_size=12), json_bytes
            ),
            max_size=4,
        ),
        st.booleans(),
    ),
)


def write(path: Path, doc: str | bytes) -> None:
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc, encoding="utf-8", errors="surrogatepass")


SCRIPT_HOST = (
    "version: 1\nname: p\nmodels:\n  default: {use: scripted, script: script.yaml}\n"
    "tasks:\n  t: {prompt: p}\n"
)

LOADERS: dict[str, tuple[str, Callable[[Path], object], type[HarnessError]]] = {
    # the file the example is written to, how it is loaded, the typed error it may raise
    "spec": ("harness.yaml", lambda folder: ph.load(folder / "harness.yaml"), SpecError),
    "script": ("script.yaml", lambda folder: ph.load(folder / "host.yaml"), SpecError),
    "recording": (
        "recording.yaml",
        lambda folder: Recording.load(folder / "recording.yaml"),
        ArchiveError,
    ),
    "archive": ("incident.hx", lambda folder: _archive(folder / "incident.hx"), ArchiveError),
}


def _archive(path: Path) -> object:
    """Both readers of a `.hx`: playback (a malformed archive raises) and `Recording.load`."""
    ph.playback(path)
    return Recording.load(path)


@pytest.mark.slow
@pytest.mark.parametrize("loader", list(LOADERS))
def test_a_loader_gets_only_its_typed_error(loader: str, tmp_path: Path) -> None:
    name, load, expected = LOADERS[loader]
    (tmp_path / "host.yaml").write_text(SCRIPT_HOST, encoding="utf-8")
    tally = {"examples": 0, "loaded": 0, "typed errors": 0}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(archives if loader == "archive" else documents)
    def check(doc: str | bytes) -> None:
        tally["examples"] += 1
        write(tmp_path / name, doc)
        try:
            load(tmp_path)  # a loaded harness is not opened: nothing to close
        except expected:
            tally["typed errors"] += 1
        else:
            tally["loaded"] += 1

    check()
    print(
        f"\n{loader}: {tally['examples']} examples, {tally['typed errors']} typed errors, "
        f"{tally['loaded']} loaded, 0 untyped errors"
    )
    assert tally["examples"] >= min(EXAMPLES, 50)
