"""What a YAML file found beside the recordings holds when it is plainly not a recording.

A folder given to replay (`pytest-harness replay FOLDER`, `pytest --replay-recordings
FOLDER`) means every recording under it (DESIGN §8), and a project often keeps its
`harness.yaml`, a model script or a baseline in the same tree. Those are told apart only after
a file has failed to load as a recording, so the files that load cost nothing more, and only by
what the file plainly is: anything that names the recording format, holds one of a
recording's own keys, or is not readable YAML stays a recording, whose load error is reported
as before. A damaged golden file is never passed over as something else.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from pytest_harness.errors import SpecError
from pytest_harness.models.script_turns import TURN_KEYS
from pytest_harness.spec.yamlio import read_text

__all__ = ["not_a_recording"]

_MARK = "pytest-harness/recording@"
_RECORDING_KEYS = frozenset(
    {"format", "task", "input", "principal", "model_turns", "tool_results", "outcome", "trace"}
)
_SPEC_KEYS = frozenset({"tasks", "models", "tools"})
_MATCH_ENTRY_KEYS = frozenset({"task", "input", "turns"})
_LIMIT = 1 << 20
"""Bytes read at most: specs, baselines and scripts are held to 1 MiB when loaded too."""


def not_a_recording(path: Path) -> str | None:
    """What `path` holds when it is plainly not a recording, else None.

    `"a harness spec"` (a mapping with `tasks`, `models` or `tools`), `"a baseline"` (a
    mapping with `locks`) or `"a model script"` (either shape `parse_script` takes: a list of
    scripted turns, or a mapping with only `match`, a list of `{task, input, turns}` entries).
    None for an `.hx` archive, a file that names the recording format or has a recording's
    keys, a file that cannot be read or parsed, and anything else.
    """
    if path.suffix not in (".yaml", ".yml"):
        return None
    try:  # what cannot be read as a YAML file (too big, not UTF-8, not a file) stays a recording
        text = read_text(path, file=str(path), max_bytes=_LIMIT)
    except SpecError:
        return None
    if _MARK in text:
        return None
    try:
        document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    if type(document) is dict:
        keys = {k for k in document if type(k) is str}
        if keys & _RECORDING_KEYS:
            return None
        if keys & _SPEC_KEYS:
            return "a harness spec"
        if "locks" in keys:
            return "a baseline"
        if _is_match_script(document):
            return "a model script"
        return None
    if _is_turn_list(document):
        return "a model script"
    return None


def _is_turn_list(turns: object) -> bool:
    """A non-empty list of scripted turns (`- say: ...`, `- call: ...`)."""
    return type(turns) is list and bool(turns) and all(_is_turn(turn) for turn in turns)


def _is_turn(turn: object) -> bool:
    return type(turn) is dict and bool(turn) and all(k in TURN_KEYS for k in turn)


def _is_match_script(document: dict[object, object]) -> bool:
    """A script in `parse_script`'s mapping form: `{match: [{task, input, turns}, ...]}`.

    The mapping has only `match`, a non-empty list whose every entry is a mapping with
    `turns` (a list of turns) and no key but `task`, `input` and `turns`.
    """
    entries = document.get("match")
    if set(document) != {"match"} or type(entries) is not list or not entries:
        return False
    return all(
        type(entry) is dict
        and "turns" in entry
        and set(entry) <= _MATCH_ENTRY_KEYS
        and type(entry["turns"]) is list
        and all(_is_turn(turn) for turn in entry["turns"])
        for entry in entries
    )
