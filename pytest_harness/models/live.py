"""Whether live model providers may be called.

Live providers (`openai`, `anthropic`, plugins' providers with `live = True`) call out of the
process and spend money. A normal process may call them; the pytest plugin blocks them unless
`--harness-allow-live` is given, and `HARNESS_ALLOW_LIVE=0` blocks them anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pytest_harness.errors import LiveModelBlocked

if TYPE_CHECKING:
    from pytest_harness.models.base import ModelProvider

__all__ = ["allow_live_models", "check_live", "live_models_allowed", "set_live_models_allowed"]

_allowed: bool | None = None


def live_models_allowed() -> bool:
    """Whether a live provider may be called now."""
    if _allowed is not None:
        return _allowed
    return os.environ.get("HARNESS_ALLOW_LIVE", "1").strip().lower() not in ("0", "false", "no")


@contextmanager
def allow_live_models(allowed: bool = True) -> Iterator[None]:
    """Allow (or block, with `False`) live model calls inside the `with` block."""
    global _allowed
    previous = _allowed
    _allowed = allowed
    try:
        yield
    finally:
        _allowed = previous


def set_live_models_allowed(allowed: bool | None) -> bool | None:
    """Allow (`True`) or block (`False`) live model calls until changed; return the previous value.

    `None` defers to `HARNESS_ALLOW_LIVE` again. The pytest plugin sets it for a whole session.
    """
    global _allowed
    previous = _allowed
    _allowed = allowed
    return previous


def check_live(provider: ModelProvider, model: str) -> None:
    """Raise `LiveModelBlocked` when calling `provider` for `model` is refused now.

    It is refused when the provider is live and live calls are off, or when it refuses live
    calls itself (`refuses_live`: a test's golden-file cassette under record mode `none`, which
    never goes to the network). The error carries the provider's `blocked_hint` when it has one.
    """
    if not provider.live:
        return
    if live_models_allowed() and not getattr(provider, "refuses_live", False):
        return
    raise LiveModelBlocked(provider.name, model, getattr(provider, "blocked_hint", None))
