"""What a recording keeps of the models a task may ask: the spec's declaration of each.

A recorded run's `run.started` entry keeps, by model name, the declaration of the task's model
and of its fallbacks (`use`, `model`, `options`): what the spec says, not the provider that
answered (a test's script answers for the declared model). A replay on a spec that swapped a
model or changed its request options then says which requests that changed
(`replay.requests`).

A key the run's environment overlay sets for that model (the shop's `offline` environment sets
`use` and `script`) is left out: it belongs to the environment, not to the agent, and a golden
recorded under one environment is replayed under another (a test marked `env="none"`, a gate
on `offline`) without a false change. A replay compares the keys both declarations hold.

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

__all__ = ["DECLARED", "model_declarations"]

DECLARED = ("use", "model", "options")
"""The keys of a model's declaration a recording keeps, in the order it keeps them."""


def model_declarations(spec: Spec, chain: Iterable[ModelLink]) -> dict[str, dict[str, Any]]:
    """The declaration of each model of a task's `chain`, by name, as a recording keeps it.

    Worked out once per task (`TaskPlan.declared`); what it returns is shared by every run's
    `run.started` payload, so it must not be changed.
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
    set_here = overlay.keys() if isinstance(overlay, Mapping) else ()
    values = {"use": model.use, "model": model.model, "options": dict(model.options)}
    return {key: _json_value(values[key]) for key in DECLARED if key not in set_here}


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
