"""Hostile files: bombs are refused fast with bounded memory, and errors never echo content.

Every YAML the product reads (spec, baseline, script, JSON-schema file, golden recording) goes
through one reader whose alias expansion is bounded by the bytes it produces: the expanded
document may not exceed the file's own cap (1 MiB for specs and scripts, 32 MiB for
recordings). A bomb is a `SpecError` (an `ArchiveError` for a recording), in well under a
second, with the memory it takes bounded (measured with `tracemalloc`).
"""

from __future__ import annotations

import os
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

import pytest_harness as ph
import pytest_harness.runtime.harness
import pytest_harness.spec.loader
from pytest_harness.errors import ArchiveError, HarnessError, SpecError
from pytest_harness.recording.model import Recording

SECRET = "root:$6$Xy1Zsalt$Qm9vdGhhc2hoYXNoaGFzaA:19000:0:99999:7:::"
"""A line of /etc/shadow: a file a spec may point at, whose content no error may echo."""


def spec_bomb(folder: Path) -> Path:
    """The issue's shape: a 600 KB string aliased 99,000 times (60 GB of JSON if expanded)."""
    path = folder / "harness.yaml"
    aliases = ",".join(["*a"] * 99_000)
    path.write_text(
        f"version: 1\nname: bomb\nlabels: &a '{'x' * 600_000}'\n"
        f"tasks:\n  t: {{prompt: p}}\nmore: [{aliases}]\n",
        encoding="utf-8",
    )
    return path


def recording_bomb(folder: Path) -> Path:
    """A 3.4 MB recording aliasing a 3 MB string 99,000 times."""
    path = folder / "bomb.yaml"
    aliases = ", ".join(["*big"] * 99_000)
    path.write_text(
        "format: pytest-harness/recording@1\ntask: t\n"
        f"input: &big '{'x' * 3_000_000}'\nprincipal: {{id: ann}}\n"
        f"outcome: {{status: completed}}\nhistory: [{aliases}]\n",
        encoding="utf-8",
    )
    return path


def laughs(folder: Path) -> Path:
    """The billion laughs: nine levels of nine aliases (387 million strings if expanded)."""
    path = folder / "harness.yaml"
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def spec_with(folder: Path, body: str) -> Path:
    path = folder / "harness.yaml"
    path.write_text(
        "version: 1\nname: host\nmodels:\n  default: {use: scripted, script: []}\n"
        "tasks:\n  t: {prompt: p}\n" + body,
        encoding="utf-8",
    )
    return path


def script_bomb(folder: Path) -> Path:
    script = folder / "script.yaml"
    aliases = ",".join(["*t"] * 99_000)
    script.write_text(f"[&t {{say: '{'x' * 600_000}'}},{aliases}]\n", encoding="utf-8")
    path = folder / "harness.yaml"
    path.write_text(
        "version: 1\nname: host\nmodels:\n  default: {use: scripted, script: script.yaml}\n"
        "tasks:\n  t: {prompt: p}\n",
        encoding="utf-8",
    )
    return path


def measured(load: Callable[[], object]) -> tuple[BaseException, float, int]:
    """Run `load`, which must raise: the error, the seconds it took, and its peak of memory.

    The time is taken on a plain run; the peak (bytes allocated at once) on a second run under
    `tracemalloc`, which slows allocation down several times.
    """
    caught: list[BaseException] = []
    for traced in (False, True):
        if traced:
            tracemalloc.start()
        started = time.perf_counter()
        try:
            load()
        except BaseException as exc:
            caught.append(exc)
        else:
            pytest.fail("the hostile file loaded")
        finally:
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            else:
                took = time.perf_counter() - started
    return caught[0], took, peak


MIB = 1024 * 1024

BOMBS = {
    "spec": (spec_bomb, lambda p: ph.load(p), SpecError, 64 * MIB),
    "script": (script_bomb, lambda p: ph.load(p), SpecError, 64 * MIB),
    "laughs": (laughs, lambda p: ph.load(p), SpecError, 64 * MIB),
    "recording": (recording_bomb, Recording.load, ArchiveError, 160 * MIB),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_a_bomb_is_refused_with_memory_bounded(name: str, tmp_path: Path) -> None:
    make, load, error, memory = BOMBS[name]
    path = make(tmp_path)
    exc, took, peak = measured(lambda: load(path))
    assert isinstance(exc, error), repr(exc)
    assert "expands to more than" in str(exc) or "alias expansion exceeds" in str(exc)
    # Time is reported, not asserted (shared machines are noisy): the bounded peak memory shows
    # the expansion never happened, and pytest-timeout turns a hang into a failure.
    assert peak < memory, f"{name}: peak {peak / MIB:.0f} MiB"
    size = max(f.stat().st_size for f in tmp_path.iterdir())
    print(f"{name} bomb: {size} bytes refused in {took:.3f}s, peak {peak / MIB:.1f} MiB")


def test_a_document_within_the_cap_may_use_aliases(tmp_path: Path) -> None:
    path = spec_with(tmp_path, "x-note: &n 'a note'\nx-more: [*n, *n, *n]\n")
    with pytest.raises(SpecError, match="unknown key 'x-note'"):
        ph.load(path)  # the aliases were fine: the unknown key is what fails


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_as_a_spec_is_named_as_a_device() -> None:
    with pytest.raises(SpecError) as err:
        ph.load("/dev/zero")
    assert "this is a device: /dev/zero" in str(err.value)
    assert "0 bytes" not in str(err.value)


@pytest.mark.skipif(sys.platform == "win32", reason="named pipes")
def test_a_named_pipe_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "harness.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="this is a named pipe"):
        ph.load(fifo)


def shadow(folder: Path) -> Path:
    path = folder / "shadow"
    path.write_text(f"{SECRET}\ndaemon:*:19000:0:99999:7:::\n", encoding="utf-8")
    return path


POINTED = {
    "spec": lambda folder, target: target,
    "baseline": lambda folder, target: spec_with(folder, f"baseline: {target}\n"),
    "script": lambda folder, target: (
        (folder / "s.yaml").write_text(
            "version: 1\nname: host\nmodels:\n"
            f"  default: {{use: scripted, script: {target}}}\ntasks:\n  t: {{prompt: p}}\n",
            encoding="utf-8",
        )
        and folder / "s.yaml"
    ),
    "json schema": lambda folder, target: spec_with(
        folder,
        "guards:\n  - {id: g, on: output, check: json_schema, "
        f"schema: {target}, action: block}}\n",
    ),
}


@pytest.mark.parametrize("where", list(POINTED))
def test_an_error_never_echoes_the_content_of_a_file_that_is_not_ours(
    where: str, tmp_path: Path
) -> None:
    target = shadow(tmp_path)
    spec = POINTED[where](tmp_path, target)
    try:
        ph.load(spec)
    except HarnessError as exc:
        message = str(exc)
    else:
        assert where == "json schema"  # a mapping of unknown keywords is a (lax) JSON schema
        message = ""
    assert "$6$" not in message and "99999" not in message and "daemon" not in message, message
    with pytest.raises(ArchiveError) as err2:
        Recording.load(target)
    assert "$6$" not in str(err2.value)


def test_a_misspelt_key_is_still_quoted(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"unknown key 'taks' \(did you mean 'tasks'\?\)"):
        ph.load(spec_with(tmp_path, "taks: {}\n"))
