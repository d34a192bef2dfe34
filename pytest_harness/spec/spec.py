"""`Spec`: a loaded, checked `harness.yaml`, and where each of its keys came from."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_harness.errors import SpecError, UnknownTask
from pytest_harness.spec.schema import GuardSpec, RuleSpec, SpecDocument, TaskSpec, resolve_path

if TYPE_CHECKING:
    from pytest_harness.cel import CelProgram

__all__ = ["KeyPath", "Spec", "format_key_path", "is_name", "quote_key"]

KeyPath = tuple[str | int, ...]
"""A key path into the document: `("tasks", "orders", "tools", 1)`."""


_NAME = re.compile(r"[^\W\d][\w.\-/@+]{0,63}|\d[\w.\-]{0,15}")
"""What a key of a file we read looks like: a name (`orders`, `api-key`, `state.record`)."""


def is_name(key: object) -> bool:
    """Whether `key` looks like a name a person wrote, safe to quote in a message.

    A key that does not (a line of `/etc/shadow` read as a key, 300 characters of base64) is
    file content: messages describe it instead of quoting it, so an error never echoes what a
    file that is not ours holds.
    """
    return isinstance(key, str) and _NAME.fullmatch(key) is not None


def quote_key(key: object) -> str:
    """`'orders'` for a name; a description (never the text) for any other key."""
    if is_name(key):
        return repr(key)
    size = len(key) if isinstance(key, str) else 0
    return f"<a key that is not a name, {size} characters>"


def format_key_path(path: KeyPath) -> str:
    """`tasks.orders.tools[1]` for `("tasks", "orders", "tools", 1)`.

    A key that is not a name ([`is_name`][]) shows as `<?>`: key paths quote names, never the
    content of a file that is not ours.
    """
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part) if is_name(part) else "<?>"
            out += f".{text}" if out else text
    return out


@dataclass(frozen=True, kw_only=True)
class Spec:
    """The effective spec: `document` after the environment overlay and the org baseline.

    `locations` maps key paths to the `(file, line)` they were read from, so later stages
    (tools, providers, scripts) can raise `SpecError`s that point at the right line.
    """

    document: SpecDocument
    path: Path
    env: str | None
    digest: str
    """sha256 of the effective document in canonical JSON and of the files it names (script
    and schema files, `spec.digest`): equal specs, equal digests; an edited script, another."""
    locations: Mapping[KeyPath, tuple[str, int]] = field(default_factory=dict)
    rule_programs: Mapping[str, CelProgram] = field(default_factory=dict)
    """Compiled `when` of every rule, by rule id."""
    guard_programs: Mapping[str, CelProgram] = field(default_factory=dict)
    """Compiled `when` of every `cel` guard, by guard id."""
    grader_programs: Mapping[str, CelProgram] = field(default_factory=dict)
    """Compiled `when` of every `cel` grader of `evals.online`, by grader id."""
    baseline_rules: tuple[RuleSpec, ...] = ()
    baseline_guards: tuple[GuardSpec, ...] = ()
    baseline_path: Path | None = None

    @property
    def root(self) -> Path:
        """The spec file's folder, against which relative paths resolve."""
        return self.path.parent

    @property
    def name(self) -> str:
        """The spec's `name`."""
        return self.document.name

    def resolve(self, value: str) -> Path:
        """A path from the spec, resolved against the spec file's folder when relative."""
        return resolve_path(self.root, value)

    def locate(self, path: KeyPath) -> tuple[str, int | None]:
        """The file and line of `path`, or of its nearest ancestor that has one."""
        probe = tuple(path)
        while probe:
            if probe in self.locations:
                return self.locations[probe]
            probe = probe[:-1]
        return (str(self.path.name), None)

    def error(self, reason: str, path: KeyPath) -> SpecError:
        """A `SpecError` pointing at `path` (file, line and key path)."""
        file, line = self.locate(path)
        return SpecError(reason, file=file, line=line, key=format_key_path(path))

    def task(self, name: str) -> TaskSpec:
        """The task called `name`, or `UnknownTask` naming the closest one."""
        try:
            return self.document.tasks[name]
        except KeyError:
            raise UnknownTask(name, list(self.document.tasks)) from None

    def rules_for(self, task: str) -> tuple[RuleSpec, ...]:
        """The baseline's rules, then the task's in its order (every rule when it names none)."""
        spec = self.task(task)
        rules = self.document.rules
        if spec.rules is not None:
            by_id = {r.id: r for r in rules}
            rules = tuple(by_id[r] for r in spec.rules)
        return self.baseline_rules + rules

    def guards_for(self, task: str) -> tuple[GuardSpec, ...]:
        """The baseline's guards, then the task's in its order (every guard when it names none)."""
        spec = self.task(task)
        guards = self.document.guards
        if spec.guards is not None:
            by_id = {g.id: g for g in guards}
            guards = tuple(by_id[g] for g in spec.guards)
        return self.baseline_guards + guards
