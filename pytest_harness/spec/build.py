"""Building a `Spec` from its files: every step of `spec.loader.load_spec` but the cache.

The steps, in order: read the YAML (`yamlio`); deep-merge the chosen environment; load the
baseline and apply its locks (`baseline`); apply `record=`; validate the schema (pydantic,
`where`); check the cross-references (models, tools, rules, guards, providers, stores) and
compile the CEL (`checks`). Each step fails with one `SpecError` naming the file, the line and
the key path.

Locations: `Spec.locations` maps each key path of the effective document to `(file, line)`. A
key an environment sets points into `environments.<env>`; a lock the baseline applies points at
the lock's line in the baseline file; the baseline file's own keys live under a `"baseline"`
prefix (see `spec.where`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pytest_harness.errors import SpecError, did_you_mean
from pytest_harness.spec.baseline import (
    Baseline,
    BaselineDocument,
    apply_locks,
    apply_record,
    load_baseline,
)
from pytest_harness.spec.checks import check_graders, check_references, compile_conditions
from pytest_harness.spec.schema import SpecDocument
from pytest_harness.spec.spec import KeyPath, Spec
from pytest_harness.spec.where import Where, kind, show, validate_at

__all__ = ["build_spec"]


def build_spec(
    spec_path: Path,
    env_name: str | None,
    env_source: str,
    record: bool | None,
    edit: Callable[[dict[str, Any]], None] | None,
) -> tuple[Spec, Baseline | None]:
    """Read, merge and check the spec file; return the `Spec` and the baseline it applied.

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
    spec = Spec(
        document=document,
        path=spec_path,
        env=env_name,
        digest=_digest(document, base),
        locations=MappingProxyType(where.locations),
        rule_programs=MappingProxyType(rule_programs),
        guard_programs=MappingProxyType(guard_programs),
        grader_programs=MappingProxyType(grader_programs),
        baseline_rules=base.rules,
        baseline_guards=base.guards,
        baseline_path=baseline.path if baseline is not None else None,
    )
    return spec, baseline


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
