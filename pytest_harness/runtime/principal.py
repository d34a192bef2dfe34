"""`Principal` and `as_principal`, kept importable here: they live in `pytest_harness.principal`.

A tool's context holds the principal, and tools sit below the run loop, so the type moved to
the lowest layer (beside `errors`); the package imports it from there.
"""

from __future__ import annotations

from pytest_harness.principal import Principal, as_principal

__all__ = ["Principal", "as_principal"]
