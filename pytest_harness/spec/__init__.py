"""`harness.yaml`: the schema, the loader (overlays, baseline, checks) and the loaded `Spec`.

The names are imported from their modules on first use, so importing `pytest_harness.spec.schema`
(as the run loop does) does not import the loader and YAML.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_harness.spec.loader import load_spec
    from pytest_harness.spec.schema import (
        Effect,
        GuardAction,
        GuardTarget,
        ReplayPolicy,
        SpecDocument,
    )
    from pytest_harness.spec.spec import Spec

__all__ = [
    "Effect",
    "GuardAction",
    "GuardTarget",
    "ReplayPolicy",
    "Spec",
    "SpecDocument",
    "load_spec",
]

_LAZY = {
    "load_spec": "pytest_harness.spec.loader",
    "Spec": "pytest_harness.spec.spec",
    **dict.fromkeys(
        ("Effect", "GuardAction", "GuardTarget", "ReplayPolicy", "SpecDocument"),
        "pytest_harness.spec.schema",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_harness.spec' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
