"""What a recording keeps of the models a task may ask: the spec's declaration of each.

A recorded run's `run.started` entry keeps, by model name, the declaration of the task's model
and of its fallbacks (`use`, `model`, `options`): what the spec says, not the provider that
answered (a test's script answers for the declared model). A replay on a spec that swapped a
model or changed its request options then says which requests that changed
(`replay.requests`).

A value the run's environment overlay sets for that model (the shop's `offline` environment sets
`use` and `script`; a CI environment may pin `options.temperature`) is kept as `ENVIRONMENT`: it
belongs to the environment, not to the agent, and a golden recorded under one environment is
replayed under another (a test marked `env="none"`, a gate on `offline`) without a false change.
A replay compares what both declarations hold, but for values either side has as `ENVIRONMENT`
(for `options`, option by option, and within an option that is a mapping key by key: the
overlay is merged into the spec's mappings, so an environment that sets `reasoning.effort`
leaves the spec's `reasoning.summary` in place, and compared). What a golden file keeps of a
declaration is redacted, with the digest of each option value redaction changed
(`recording.kept`), so an edit inside an option's hidden text is compared too.

`options` are kept as JSON values: YAML can give a date or a non-finite number, which the store
cannot hold, so those are kept as text (`2024-01-01`, `inf`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_harness.runtime.plan import ModelLink
    from pytest_harness.spec.schema import ModelSpec
    from pytest_harness.spec.spec import Spec

__all__ = ["DECLARED", "ENVIRONMENT", "copied", "model_declarations"]

DECLARED = ("use", "model", "options")
"""The keys of a model's declaration a recording keeps, in the order it keeps them."""
ENVIRONMENT = "(environment)"
"""What a declaration holds in place of a value the run's environment overlay set."""


def model_declarations(spec: Spec, chain: Iterable[ModelLink]) -> dict[str, dict[str, Any]]:
    """The declaration of each model of a task's `chain`, by name, as a recording keeps it.

    Worked out once per task (`TaskPlan.declared`); each run's `run.started` payload takes a
    copy of it (`copied`).
    """
    overlay = _overlay_models(spec)
    return {link.name: _declared(link.spec, overlay.get(link.name)) for link in chain}


def _overlay_models(spec: Spec) -> Mapping[str, Any]:
    """The `models` mapping of the run's environment overlay (none: empty)."""
    if not spec.env:
        return {}
    overlay = spec.document.environments.get(spec.env) or {}
    models = overlay.get("models") if isinstance(overlay, Mapping) else None
    return models if isinstance(models, Mapping) else {}


def _declared(model: ModelSpec, overlay: Any) -> dict[str, Any]:
    set_here: Mapping[str, Any] = overlay if isinstance(overlay, Mapping) else {}
    values = {"use": model.use, "model": model.model, "options": _json_value(model.options)}
    declared: dict[str, Any] = {}
    for key in DECLARED:
        value, given = values[key], set_here.get(key)
        if key not in set_here:
            declared[key] = value
        elif key == "options" and isinstance(given, Mapping) and isinstance(value, dict):
            declared[key] = _masked(value, given)
        else:
            declared[key] = ENVIRONMENT
    return declared


def _masked(value: dict[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """`value` with what the overlay `given` set in it as `ENVIRONMENT`.

    The overlay is merged mapping into mapping (`spec.build`): where both are mappings only
    the keys the overlay holds are its own; anything else it holds replaces the value whole.
    """
    masked: dict[str, Any] = {}
    for key, item in value.items():
        if key not in given:
            masked[key] = item
        elif isinstance(item, dict) and isinstance(given[key], Mapping):
            masked[key] = _masked(item, given[key])
        else:
            masked[key] = ENVIRONMENT
    return masked


def copied(value: Any) -> Any:
    """A copy of a JSON value (mappings and lists copied all the way down)."""
    if isinstance(value, dict):
        return {key: copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copied(item) for item in value]
    return value


def _json_value(value: Any) -> Any:
    """`value` as JSON can hold it: mappings, lists, strings, finite numbers, booleans, null."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(key): _json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    return str(value)
