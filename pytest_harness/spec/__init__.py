"""`harness.yaml`: the schema, the loader (overlays, baseline, checks) and the loaded `Spec`."""

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
