"""Building a `Spec` from its files: every step of `spec.loader.load_spec` but the cache.

The steps, in order: read the YAML (`yamlio`); deep-merge the chosen environment; load the
baseline and apply its locks (`baseline`); apply `record=`; validate the schema (pydantic,
`where`); check the cross-references (models, tools, rules, guards, providers, stores) and
compile the CEL (`checks`). Each step fails with one `SpecError` naming the file, the line and
the key path.

Then every other environment is checked the same way, as if it had been chosen (a dry run:
its overlay merged into a copy of the file's data, the baseline's locks, the schema, the
cross-references and the CEL), so loading one environment never hides an unknown key or a
locked value in another. A dry run reads no environment variable, opens no connection and
imports no provider: the checks only look names up. Its errors name the environment: a key it
sets is shown at its place in the overlay (`environments.production.models.default.retries`),
anything else says `(with environment 'production')`. A spec loaded with `edit=` (`mutate`'s
mutants) skips the dry runs: the edit changes only the effective document.

Locations: `Spec.locations` maps each key path of the effective document to `(file, line)`. A
key an environment sets points into `environments.<env>`; a lock the baseline applies points at
the lock's line in the baseline file; the baseline file's own keys live under a `"baseline"`
prefix (see `spec.where`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pytest_harness.errors import SpecError, did_you_mean
from pytest_harness.spec import cache as spec_cache
from pytest_harness.spec.baseline import (
    Baseline,
    BaselineDocument,
    apply_locks,
    apply_record,
    load_baseline,
)
from pytest_harness.spec.checks import check_graders, check_references, compile_conditions
from pytest_harness.spec.digest import spec_digest
from pytest_harness.spec.schema import SpecDocument
from pytest_harness.spec.spec import KeyPath, Spec
from pytest_harness.spec.where import BASELINE, Where, kind, show, validate_at

__all__ = ["build_spec"]


def build_spec(
    spec_path: Path,
    env_name: str | None,
    env_source: str,
    record: bool | None,
    edit: Callable[[dict[str, Any]], None] | None,
) -> tuple[Spec, Baseline | None, str]:
    """Read, merge and check the spec file and every environment's overlay.

    Returns the `Spec`, the baseline it applied and the digest of its document alone (what the
    spec cache keeps; `Spec.digest` adds the bytes of the files the spec names).
    `env_source` says where `env_name` came from (for the error naming an unknown one).
    """
    from pytest_harness.spec.yamlio import read_yaml

    doc = read_yaml(spec_path)
    if not isinstance(doc.data, dict):
        raise SpecError(
            "the top level must be a mapping (version, name, models, tools, tasks, …), "
            f"not {kind(doc.data)}",
            file=doc.file,
            line=doc.line(()),
        )
    data: dict[str, Any] = doc.data
    where = Where(doc)
    others = _other_environments(data, env_name) if edit is None else []
    pristine = copy.deepcopy(data) if others else {}
    located = dict(where.locations) if others else {}
    env_paths: set[KeyPath] = set()
    if env_name is not None:
        env_paths = _apply_environment(data, env_name, env_source, where)
    baseline = load_baseline(data, spec_path, where)
    if baseline is not None:
        apply_locks(data, baseline, where, env_name, env_paths)
    if record is not None:
        apply_record(data, record, baseline, where)
    if edit is not None:
        edit(data)
    document = validate_at(SpecDocument, data, where)
    base = baseline.document if baseline is not None else BaselineDocument()
    check_references(document, base, where)
    rule_programs, guard_programs = compile_conditions(document, base, where)
    grader_programs = check_graders(document, where)
    document_digest = _digest(document, base)
    spec = Spec(
        document=document,
        path=spec_path,
        env=env_name,
        digest=spec_digest(
            document_digest, document, base.guards, spec_path.parent, spec_cache.file_digest
        ),
        locations=MappingProxyType(where.locations),
        rule_programs=MappingProxyType(rule_programs),
        guard_programs=MappingProxyType(guard_programs),
        grader_programs=MappingProxyType(grader_programs),
        baseline_rules=base.rules,
        baseline_guards=base.guards,
        baseline_path=baseline.path if baseline is not None else None,
    )
    if others:
        from_baseline = {p: at for p, at in where.locations.items() if p[:1] == BASELINE}
        for other in others:
            dry = _DryRun(where.file, other, {**located, **from_baseline})
            _check_environment(copy.deepcopy(pristine), other, baseline, dry)
    return spec, baseline, document_digest


def _other_environments(data: dict[str, Any], chosen: str | None) -> list[str]:
    """The environments the file defines, but the chosen one (checked as the spec itself)."""
    envs = data.get("environments")
    if not isinstance(envs, dict):  # the schema says what is wrong with it
        return []
    return [name for name in envs if name != chosen]


class _DryRun(Where):
    """The `Where` of one environment's dry run: its errors name the environment.

    A key path the overlay set (or one under it) is shown where the overlay sets it,
    `environments.<env>.…`; any other says `(with environment '<env>')`.
    """

    def __init__(self, file: str, env: str, locations: dict[KeyPath, tuple[str, int]]) -> None:
        self.file = file
        self.locations = locations
        self.env = env
        self.moves: dict[KeyPath, KeyPath] = {}

    def relocate(self, moves: Mapping[KeyPath, KeyPath]) -> None:
        self.moves.update(moves)
        super().relocate(moves)

    def error(self, reason: str, path: KeyPath) -> SpecError:
        for n in range(len(path), 0, -1):
            source = self.moves.get(path[:n])
            if source is not None:
                return super().error(reason, (*source, *path[n:]))
        if path[:2] != ("environments", self.env):
            reason = f"{reason} (with environment {self.env!r})"
        return super().error(reason, path)


def _check_environment(
    data: dict[str, Any], env: str, baseline: Baseline | None, where: _DryRun
) -> None:
    """Check `data` (the file's own, a copy) with `env`'s overlay, as loading it would."""
    env_paths = _apply_environment(data, env, f"env={env!r}", where)
    if baseline is not None:
        apply_locks(data, baseline, where, env, env_paths)
    document = validate_at(SpecDocument, data, where)
    base = baseline.document if baseline is not None else BaselineDocument()
    check_references(document, base, where)
    compile_conditions(document, base, where)
    check_graders(document, where)


def _apply_environment(data: dict[str, Any], env: str, source: str, where: Where) -> set[KeyPath]:
    """Deep-merge `environments[env]` into `data`; return the key paths it replaced."""
    envs = data.get("environments")
    if not isinstance(envs, dict):
        envs = {}
    if env not in envs:
        hint = did_you_mean(env, envs) if envs else "; this file defines no `environments`"
        raise where.error(
            f"unknown environment {env!r}{hint}, chosen by {source}", ("environments",)
        )
    at: KeyPath = ("environments", env)
    overlay = envs[env]
    if not isinstance(overlay, dict):
        raise where.error(
            f"an environment must be a mapping of the keys it overrides, not {show(overlay)}", at
        )
    for key in ("environments", "baseline"):
        if key in overlay:
            raise where.error(f"an environment cannot set `{key}`", (*at, key))
    moves: dict[KeyPath, KeyPath] = {}
    _merge(data, overlay, (), at, moves)
    where.relocate(moves)
    return set(moves)


def _merge(
    base: dict[str, Any],
    overlay: dict[str, Any],
    path: KeyPath,
    source: KeyPath,
    moves: dict[KeyPath, KeyPath],
) -> None:
    """Merge mappings recursively; anything else in `overlay` replaces what `base` holds."""
    for key, value in overlay.items():
        here, there = (*path, key), (*source, key)
        current = base.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            _merge(current, value, here, there, moves)
        else:
            base[key] = copy.deepcopy(value)
            moves[here] = there


def _digest(document: SpecDocument, baseline: BaselineDocument) -> str:
    """sha256 of the effective document (environments and evals left out) and the baseline's items.

    The document's part of the spec digest: `spec.digest.spec_digest` adds the bytes of the
    files the spec names (script files, schema files).

    Values equal to their defaults are left out, so a new optional key (with its default) does
    not change the digest of the specs that do not set it.
    """
    from pytest_harness.spec.validation import dump

    payload = {
        # graders never change what a run does, so editing them does not change the digest
        "document": dump(document, exclude={"environments", "evals"}),
        "baseline": {
            "rules": [dump(r) for r in baseline.rules],
            "guards": [dump(g) for g in baseline.guards],
        },
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
