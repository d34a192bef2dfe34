"""`load_spec`: a `harness.yaml` as a checked `Spec`, from the spec cache when it holds one.

On a miss, `spec.build` reads the YAML, applies the environment and the org baseline and checks
the result (each step fails with one `SpecError` naming the file, the line and the key path),
and the checked spec is written to the cache (`spec.cache`). `spec.build` is imported only on a
miss: a fresh process that finds a valid entry imports none of the checkers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_harness.spec import cache as spec_cache
from pytest_harness.spec.spec import Spec

__all__ = ["load_spec"]


def load_spec(
    path: str | Path,
    *,
    env: str | None = None,
    record: bool | None = None,
    edit: Callable[[dict[str, Any]], None] | None = None,
) -> Spec:
    """Load and check a `harness.yaml`; raise `SpecError` at the first problem.

    `env` picks an environment overlay (default: `$HARNESS_ENV` when set; `""` for none);
    `record`, when given, sets `state.record` unless the baseline locks it otherwise. `edit`,
    when given, changes the document's data in place after the overlay and the baseline and
    before every check (`pytest-harness mutate` loads its mutants this way, so a mutant is
    checked exactly as a spec file would be).
    """
    spec_path = Path(os.path.abspath(path))
    env_name, env_source = _choose_env(env)
    cached = edit is None and spec_cache.enabled()
    spec_sha = None
    if cached:
        hit = spec_cache.read(spec_path, env_name, record)
        if hit is not None:
            return hit
        spec_sha = spec_cache.file_digest(spec_path)
    from pytest_harness.spec.build import build_spec

    spec, baseline, document_digest = build_spec(spec_path, env_name, env_source, record, edit)
    if cached:
        baseline_sha = baseline.sha256 if baseline else None
        spec_cache.write(spec, record, spec_sha, baseline_sha, document_digest)
    return spec


def _choose_env(env: str | None) -> tuple[str | None, str]:
    if env is not None:
        return (env or None, f"env={env!r}")
    value = os.environ.get("HARNESS_ENV", "")
    return (value, f"HARNESS_ENV={value!r}") if value else (None, "")
